"""Request framing (4-byte size prefix), request header parse, and response framing.

`FrameDecoder` is fed whatever the socket read and hands back whole request frames; a size
prefix over the limit is rejected as soon as its 4 bytes arrive, before any body is kept.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from common.protocol.api_keys import is_flexible, response_header_version
from common.protocol.primitives import Chunk, ProtocolError, Reader
from common.config import default_int

DEFAULT_MAX_REQUEST_BYTES = default_int("socket.request.max.bytes")  # a frame larger closes the connection
SIZE_PREFIX_BYTES = 4

_SIZE = struct.Struct(">i")
_RESPONSE_HEADER = struct.Struct(">ii")  # size, correlation_id
_I16_NULL = struct.pack(">h", -1)


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """Request header v1 (classic) or v2 (flexible: tagged fields follow client_id)."""

    request_api_key: int
    request_api_version: int
    correlation_id: int
    client_id: str | None


class FrameDecoder:
    """Splits a byte stream into request frames (size prefix stripped); sans-IO."""

    __slots__ = ("max_request_bytes", "_buf", "_need", "_broken")

    def __init__(self, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
        if max_request_bytes < 0:
            raise ValueError("max_request_bytes must be >= 0")
        self.max_request_bytes = max_request_bytes
        self._buf = bytearray()
        self._need: int | None = None  # body size of the frame being read, once known
        self._broken = False

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add bytes; return every frame now complete. Raises ProtocolError for a bad size."""
        if self._broken:
            raise ProtocolError("decoder already failed; close the connection")
        buf = self._buf
        buf += data
        frames: list[bytes] = []
        pos = 0
        # Bounded by len(buf) / 4: each pass consumes at least the 4-byte prefix.
        while True:
            if self._need is None:
                if len(buf) - pos < SIZE_PREFIX_BYTES:
                    break
                size = _SIZE.unpack_from(buf, pos)[0]
                if size < 0 or size > self.max_request_bytes:
                    self._broken = True
                    buf.clear()
                    raise ProtocolError(
                        f"request size {size} outside 0..{self.max_request_bytes} bytes")
                self._need = size
                pos += SIZE_PREFIX_BYTES
            need = self._need
            if len(buf) - pos < need:
                break
            with memoryview(buf) as view:
                frames.append(bytes(view[pos:pos + need]))
            pos += need
            self._need = None
        if pos:
            del buf[:pos]
        return frames


def parse_request_header(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, memoryview]:
    """Parse the header of one frame; return it and the body that follows as a view."""
    r = Reader(frame)
    api_key = r.int16()
    api_version = r.int16()
    correlation_id = r.int32()
    client_id = r.nullable_string()
    if is_flexible(api_key, api_version):
        r.skip_tagged_fields()
    return RequestHeader(api_key, api_version, correlation_id, client_id), r.rest()


def encode_request_header(header: RequestHeader) -> bytes:
    """Header v1/v2 bytes (tidelog's follower fetcher is a client too; tests use it)."""
    client_id = header.client_id
    parts = [struct.pack(">hhi", header.request_api_key, header.request_api_version,
                         header.correlation_id)]
    if client_id is None:
        parts.append(_I16_NULL)
    else:
        data = client_id.encode("utf-8")
        parts.append(struct.pack(">h", len(data)) + data)
    if is_flexible(header.request_api_key, header.request_api_version):
        parts.append(b"\x00")  # no tagged fields
    return b"".join(parts)


def frame_request(header: RequestHeader, body: list[Chunk]) -> list[Chunk]:
    """A whole request: size prefix, header, body chunks."""
    head = encode_request_header(header)
    size = len(head) + _chunks_size(body)
    return _merge_first(_SIZE.pack(size) + head, body)


class ClientFraming:
    """A client's side of framing (sans-IO): numbered requests and checked response heads.

    One request in flight at a time: each answer must carry the last request's correlation id.
    """

    HEAD_BYTES = _RESPONSE_HEADER.size  # size prefix + correlation id

    def __init__(self, client_id: str | None, max_response_bytes: int) -> None:
        self.client_id, self.max_response_bytes = client_id, max_response_bytes
        self.correlation_id = 0

    def request(self, api_key: int, version: int, body: list[Chunk]) -> bytes:
        """The next request's bytes, with a new correlation id."""
        self.correlation_id = (self.correlation_id + 1) & 0x7FFFFFFF
        return join_chunks(frame_request(RequestHeader(api_key, version, self.correlation_id, self.client_id),
                                         body))

    def body_size(self, head: bytes | bytearray) -> int:
        """Bytes of response body after the 8-byte head; ProtocolError for a bad size or id."""
        size, correlation_id = _RESPONSE_HEADER.unpack(head)
        if not 4 <= size <= self.max_response_bytes:
            raise ProtocolError(f"response size {size} outside 4..{self.max_response_bytes}")
        if correlation_id != self.correlation_id:
            raise ProtocolError(f"response to correlation id {correlation_id}, expected {self.correlation_id}")
        return int(size) - 4


def frame_response(correlation_id: int, body: list[Chunk], header_version: int = 0) -> list[Chunk]:
    """A whole response: size prefix, correlation_id, (header v1) an empty tagged-field
    section, then the body chunks. `api_keys.response_header_version` picks the version."""
    tags = b"\x00" if header_version >= 1 else b""
    head = _RESPONSE_HEADER.pack(4 + len(tags) + _chunks_size(body), correlation_id) + tags
    return _merge_first(head, body)


def frame_response_for(header: RequestHeader, body: list[Chunk]) -> list[Chunk]:
    """The response to `header`, with the response header version its API and version use."""
    return frame_response(header.correlation_id, body,
                          response_header_version(header.request_api_key, header.request_api_version))


def strip_response_header(api_key: int, api_version: int, body: memoryview) -> memoryview:
    """Client side: the body after the correlation id, past header v1's tagged fields."""
    if response_header_version(api_key, api_version) == 0:
        return body
    r = Reader(body)
    r.skip_tagged_fields()
    return r.rest()


def _chunks_size(chunks: list[Chunk]) -> int:
    return sum(len(c) if isinstance(c, bytes) else c.length for c in chunks)


def _merge_first(head: bytes, body: list[Chunk]) -> list[Chunk]:
    if body and isinstance(body[0], bytes):
        return [head + body[0], *body[1:]]
    return [head, *body]


def join_chunks(chunks: list[Chunk]) -> bytes:
    """All chunks as one bytes object; raises if a records placeholder is among them."""
    if any(not isinstance(c, bytes) for c in chunks):
        raise ValueError("chunks hold a records placeholder: send it from its file")
    return b"".join(chunks)  # type: ignore[arg-type]
