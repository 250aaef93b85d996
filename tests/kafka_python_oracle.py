"""kafka-python's generated protocol classes as a byte-exactness oracle for our codecs.

Its message classes follow Kafka's JSON schemas (flexible versions included); a body it
encodes from plain tuples must equal ours (bodies only: headers are the frame's).
"""

from __future__ import annotations

from typing import Any

from common.protocol.primitives import ProtocolError


def kafka_python_body(message_class: Any, version: int, **fields: Any) -> bytes:
    return bytes(message_class(**fields).encode(version=version))


def every_truncation_fails(decode: Any, body: bytes, version: int) -> None:
    """Every strict prefix of `body` raises ProtocolError (h11's invariant, byte by byte)."""
    for end in range(len(body)):
        try:
            decode(memoryview(body[:end]), version)
        except ProtocolError:
            continue
        raise AssertionError(f"a body cut at {end} of {len(body)} bytes decoded")
