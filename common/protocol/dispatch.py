"""The codec of one API: how a server decodes its requests and encodes its responses.

The broker's dispatch table (`broker.request_handler.API_TABLE`) pairs each API key with
its versions, a `Codec` and a handler, so a new API is one row there; this module stays
free of the broker (common/ imports none of the other packages).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common.protocol.primitives import Chunk

Decoder = Callable[[memoryview, int], Any]  # (body, version) -> request; ProtocolError if bad
Encoder = Callable[[Any, int], list[Chunk]]  # (response, version) -> body chunks


@dataclass(frozen=True, slots=True)
class Codec:
    """An API's request decoder and response encoder. Each checks the version itself, except
    where only the broker's RequestHandler calls it: that checks the version against the row's
    range first (`request_handler.row_for`), and a hot codec (Fetch's) skips a second check."""

    decode: Decoder
    encode: Encoder
