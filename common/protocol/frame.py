"""Request framing (4-byte size prefix), request header parse, and response framing.

`FrameDecoder` is fed whatever the socket read (or lends the socket its buffer to read into)
and hands back whole request frames; a size prefix over the limit is rejected as soon as its
4 bytes arrive, before any body is kept. `FrameBuffers` lends large frames buffers that an
earlier frame left, once nothing refers to it any more.
"""

from __future__ import annotations

import struct
from sys import getrefcount
from typing import Final, NamedTuple

from common.protocol.api_keys import (
    FIRST_FLEXIBLE_RESPONSE,
    FIRST_FLEXIBLE_VERSION,
    NEVER_FLEXIBLE,
    is_flexible,
    response_header_version,
)
from common.protocol.primitives import Chunk, ProtocolError, Reader
from common.config import default_int
from common.units import KIB, MIB

DEFAULT_MAX_REQUEST_BYTES = default_int("socket.request.max.bytes")  # a frame larger closes the connection
SIZE_PREFIX_BYTES = 4
# A connection's receive buffer, allocated at its first read: frames up to this size are split
# out of it, larger ones are received in a buffer of their own. Small, because an idle client
# connection keeps it (16 KiB: a few hundred pipelined small requests per read).
RECEIVE_BUFFER_BYTES: Final = 16 * KIB
# FrameBuffers: a pool keeps buffers of at most POOLED_FRAME_BYTES (a larger frame gets one of
# its own, freed after it, as before), and at most POOL_BYTES of them together; both per pool
# (one per event loop thread: broker.frame_receiver). A bulk producer's requests are ~1 MB
# (librdkafka's message.max.bytes, Java's max.request.size), a follower's fetch responses up to
# a few MiB.
POOLED_FRAME_BYTES: Final = 8 * MIB
POOL_BYTES: Final = 32 * MIB

_SIZE = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_HEADER_FIXED_BYTES: Final = _HEADER_FIXED.size
_unpack_header_fixed = _HEADER_FIXED.unpack_from
_RESPONSE_HEADER = struct.Struct(">ii")  # size, correlation_id
_REQUEST_HEAD = struct.Struct(">ihhi")  # size, api key, api version, correlation id
_RESPONSE_HEADER_V1 = struct.Struct(">iiB")  # size, correlation_id, an empty tagged-field section
_I16_NULL = struct.pack(">h", -1)


class RequestHeader(NamedTuple):
    """Request header v1 (classic) or v2 (flexible: tagged fields follow client_id).

    A NamedTuple, not a frozen dataclass: as immutable, and every request builds one (a
    frozen dataclass sets each field through object.__setattr__, several times a tuple's cost)."""

    request_api_key: int
    request_api_version: int
    correlation_id: int
    client_id: str | None


_new_tuple = tuple.__new__
_first_flexible = FIRST_FLEXIBLE_VERSION.get  # api key -> its first flexible (header v2) version


def _refcounts(buffers: list[bytearray]) -> list[int]:
    """Each buffer's reference count as this one expression sees it."""
    return [getrefcount(buf) for buf in buffers]


# The count `_refcounts` sees for a buffer that only its list holds: any frame or memoryview of
# a buffer adds to its count (a memoryview holds its object), so a higher count is in use.
# Calibrated by the same expression, not assumed, since interpreter versions count differently.
_UNREFERENCED: Final = _refcounts([bytearray()])[0]


class FrameBuffers:
    """Buffers for large frames, lent again once no frame refers to them (sans-IO, one thread).

    `bytearray(n)` zero-fills its n bytes, and a fresh allocation of a MiB may be fresh pages
    too: for a bulk producer's 1 MB requests, a memset of every request beside the receive's own
    copy (issue 35). A buffer here is lent to a frame, and to a later one only when nothing but
    the pool holds it: the frame handed out, any memoryview of it (a Produce's records, a request
    parked in a purgatory, a decoded fetch response's records) counts as a reference, so a
    buffer's bytes never change under anyone still reading them. Sizes are powers of two (a
    frame's buffer may be longer than the frame; the decoder hands out a view of its length).
    Bounded: POOLED_FRAME_BYTES per buffer and `max_bytes` in all; past them a frame gets a
    buffer of its own, as without a pool. Not thread-safe: one pool per thread.
    """

    __slots__ = ("max_bytes", "_buffers", "_bytes")

    def __init__(self, max_bytes: int = POOL_BYTES) -> None:
        self.max_bytes = max_bytes
        self._buffers: list[bytearray] = []  # at most max_bytes in all
        self._bytes = 0

    @property
    def pooled_bytes(self) -> int:
        return self._bytes

    def take(self, size: int) -> bytearray:
        """A buffer of at least `size` bytes that nothing else refers to."""
        capacity = 1 << max(size - 1, 0).bit_length()  # the power of two at or above size
        if capacity > POOLED_FRAME_BYTES:
            return bytearray(size)
        buffers = self._buffers
        counts = _refcounts(buffers)
        for i, buf in enumerate(buffers):  # bounded by max_bytes / the smallest buffer
            if counts[i] == _UNREFERENCED and len(buf) == capacity:
                return buf
        # Bounded by the pool's buffers: each pass drops one that nobody holds, to make room.
        for i in range(len(buffers) - 1, -1, -1):
            if self._bytes + capacity <= self.max_bytes:
                break
            if counts[i] == _UNREFERENCED:
                self._bytes -= len(buffers.pop(i))
        if self._bytes + capacity > self.max_bytes:
            return bytearray(size)  # every pooled buffer is in use: one of its own
        buf = bytearray(capacity)
        buffers.append(buf)
        self._bytes += capacity
        return buf


class FrameDecoder:
    """Splits a byte stream into request frames (size prefix stripped); sans-IO.

    Two ways in: `feed(data)` copies bytes in; `get_buffer()` / `buffer_updated(n, out)` let
    the socket read straight into the decoder (asyncio's BufferedProtocol), so that the body
    of a large frame (a bulk Produce) is received in place and never copied in Python: it gets
    its own buffer, sized from its prefix, as Kafka's NetworkReceive allocates one per
    request. Small frames are read into one receive buffer of `receive_bytes` and copied out
    whole (one copy of a few bytes, and pipelined requests still take one read for many).
    Neither buffer is ever resized while a view of it is out: the receive buffer has a fixed
    size, and a frame's buffer is handed over complete and never touched again, so a view of
    a frame (a Produce's records) stays valid as long as anyone holds it.

    A large frame's buffer is taken whole when its prefix arrives, as Kafka's NetworkReceive
    allocates one: a prefix that promises many bytes and sends few holds that much memory, up
    to max_request_bytes (socket.request.max.bytes) per connection, until the connection
    closes. With `buffers` (a `FrameBuffers`) it is one an earlier frame left and nothing refers
    to any more, and the frame is handed out as a memoryview of its length; without, a new
    bytearray (zero-filled by Python) of the frame's size.
    """

    __slots__ = ("max_request_bytes", "buffers", "_receive_bytes", "_view", "_end", "_frame", "_size",
                 "_filled", "_broken")

    def __init__(self, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
                 receive_bytes: int = RECEIVE_BUFFER_BYTES, buffers: FrameBuffers | None = None) -> None:
        if max_request_bytes < 0:
            raise ValueError("max_request_bytes must be >= 0")
        if receive_bytes <= SIZE_PREFIX_BYTES:
            raise ValueError(f"receive_bytes must be over {SIZE_PREFIX_BYTES}")
        self.max_request_bytes = max_request_bytes
        self.buffers = buffers  # where large frames' buffers come from (None: a new one each)
        self._receive_bytes = receive_bytes
        # the receive buffer, [0, _end): bytes of frames not yet complete. One view of it for the
        # decoder's life, not one per read and per split: the buffer is never resized
        self._view: memoryview | None = None
        self._end = 0
        self._frame: bytearray | None = None  # a large frame's body, filled in place up to _filled
        self._size = 0  # ... of this many bytes (its buffer may be longer)
        self._filled = 0
        self._broken = False

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame (its size prefix included)."""
        return self._end if self._frame is None else SIZE_PREFIX_BYTES + self._filled

    def get_buffer(self) -> memoryview:
        """Where the next bytes read should go (never empty); ProtocolError once failed."""
        if self._broken:
            raise ProtocolError("decoder already failed; close the connection")
        if self._frame is not None:
            return memoryview(self._frame)[self._filled:self._size]
        view = self._view
        if view is None:  # a connection that never sends costs no buffer
            view = self._view = memoryview(bytearray(self._receive_bytes))
        return view[self._end:]

    def buffer_updated(self, nbytes: int, out: list[bytes | bytearray | memoryview]) -> None:
        """`nbytes` were written at the start of the last `get_buffer()`: append every frame now
        complete to `out`. Raises ProtocolError for a bad size prefix, after appending the frames
        before it."""
        frame = self._frame
        if frame is not None:
            self._filled += nbytes
            if self._filled == self._size:
                out.append(frame if len(frame) == self._size else memoryview(frame)[:self._size])
                self._frame, self._filled = None, 0
            return
        if not self._end and nbytes >= SIZE_PREFIX_BYTES:
            # The usual small request: the read holds exactly one whole frame, from the buffer's
            # front. Taken here as `_split` would take it, without its call and loop.
            view = self._view
            assert view is not None  # get_buffer gave it out
            size = _SIZE.unpack_from(view)[0]
            if nbytes - SIZE_PREFIX_BYTES == size and 0 <= size <= self.max_request_bytes:
                out.append(bytes(view[SIZE_PREFIX_BYTES:nbytes]))
                return
        self._end += nbytes
        self._split(out)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes | bytearray | memoryview]:
        """Add bytes; return every frame now complete. Raises ProtocolError for a bad size."""
        frames: list[bytes | bytearray | memoryview] = []
        with memoryview(data) as source:
            flat = source.cast("B") if source.format != "B" or source.ndim != 1 else source
            pos, end = 0, flat.nbytes
            while pos < end:  # bounded: each pass takes at least one byte (get_buffer is never empty)
                target = self.get_buffer()
                n = min(len(target), end - pos)
                target[:n] = flat[pos:pos + n]
                pos += n
                self.buffer_updated(n, frames)
        return frames

    def _split(self, out: list[bytes | bytearray | memoryview]) -> None:
        """Take the complete frames out of the receive buffer; keep the incomplete rest at its
        start, or move a frame too large for it to a buffer of its own."""
        view, end, pos = self._view, self._end, 0
        assert view is not None  # get_buffer gave it out
        # Bounded by end / 4: each pass consumes at least the 4-byte prefix, or stops.
        while end - pos >= SIZE_PREFIX_BYTES:
            size = _SIZE.unpack_from(view, pos)[0]
            if size < 0 or size > self.max_request_bytes:
                self._broken = True
                self._end = 0
                raise ProtocolError(f"request size {size} outside 0..{self.max_request_bytes} bytes")
            body = pos + SIZE_PREFIX_BYTES
            if end - body >= size:
                out.append(bytes(view[body:body + size]))
                pos = body + size
                continue
            if SIZE_PREFIX_BYTES + size > len(view):  # received in place from here on
                frame = bytearray(size) if self.buffers is None else self.buffers.take(size)
                frame[:end - body] = view[body:end]
                self._frame, self._size, self._filled = frame, size, end - body
                pos = end
            break
        if pos and pos < end:  # the incomplete frame moves to the front (it fits there);
            view[:end - pos] = view[pos:end]  # a memoryview copies overlapping bytes with memmove
        self._end = end - pos


def parse_request_header(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, memoryview]:
    """Parse the header of one frame; return it and the body that follows as a view.

    The usual header (a client id, no tagged fields) in one unpack, not a Reader call per
    field: every request pays this. Anything else (a null or truncated client id, tagged
    fields present, a short frame) goes through the Reader and its checks and messages."""
    view = memoryview(frame)
    end = len(view)
    if end >= _HEADER_FIXED_BYTES and view.format == "B":
        api_key, api_version, correlation_id, n = _unpack_header_fixed(view)
        pos = _HEADER_FIXED_BYTES + n
        if 0 <= n and pos <= end:
            flexible = api_version >= _first_flexible(api_key, NEVER_FLEXIBLE)  # is_flexible, without its call
            if not flexible or (pos < end and view[pos] == 0):
                try:
                    client_id: str | None = str(view[_HEADER_FIXED_BYTES:pos], "utf-8")
                except UnicodeDecodeError:
                    raise ProtocolError("string is not valid UTF-8") from None
                # tuple.__new__ as NamedTuple's own generated __new__ does, without that Python call
                return _new_tuple(RequestHeader, (api_key, api_version, correlation_id, client_id)), \
                    view[pos + flexible:]
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
        # The header's bytes after the correlation id (client id, a flexible version's empty
        # tagged fields) per (API key, version): the same in every request; one entry per API
        # version this client sends (a follower's fetcher: a handful).
        self._header_tails: dict[tuple[int, int], bytes] = {}

    def request(self, api_key: int, version: int, body: list[Chunk]) -> bytes:
        """The next request's bytes, with a new correlation id: size prefix, header and body in
        one pack and one join (a follower sends one per fetch round)."""
        self.correlation_id = correlation_id = (self.correlation_id + 1) & 0x7FFFFFFF
        tail = self._header_tails.get((api_key, version))
        if tail is None:
            head = encode_request_header(RequestHeader(api_key, version, 0, self.client_id))
            tail = self._header_tails[(api_key, version)] = head[_REQUEST_HEAD.size - SIZE_PREFIX_BYTES:]
        size = _REQUEST_HEAD.size - SIZE_PREFIX_BYTES + len(tail)
        for chunk in body:  # bounded by the body's chunks
            if not isinstance(chunk, bytes):
                raise ValueError("chunks hold a records placeholder: send it from its file")
            size += len(chunk)
        return b"".join((_REQUEST_HEAD.pack(size, api_key, version, correlation_id), tail,
                         *body))  # type: ignore[arg-type]  # every chunk is bytes: checked above

    def body_size(self, head: bytes | bytearray) -> int:
        """Bytes of response body after the 8-byte head; ProtocolError for a bad size or id."""
        size, correlation_id = _RESPONSE_HEADER.unpack(head)
        if not 4 <= size <= self.max_response_bytes:
            raise ProtocolError(f"response size {size} outside 4..{self.max_response_bytes}")
        self._check_id(correlation_id)
        return int(size) - 4

    def response_body(self, frame: bytes | bytearray | memoryview) -> memoryview:
        """A whole response frame whose size prefix a `FrameDecoder` checked and stripped, as a
        view of its body after the correlation id; ProtocolError for a short frame or another id."""
        if len(frame) < _SIZE.size:
            raise ProtocolError(f"a {len(frame)}-byte response has no correlation id")
        self._check_id(_SIZE.unpack_from(frame)[0])
        return memoryview(frame)[_SIZE.size:]

    def _check_id(self, correlation_id: int) -> None:
        if correlation_id != self.correlation_id:
            raise ProtocolError(f"response to correlation id {correlation_id}, expected {self.correlation_id}")


def frame_response(correlation_id: int, body: list[Chunk], header_version: int = 0) -> list[Chunk]:
    """A whole response: size prefix, correlation_id, (header v1) an empty tagged-field
    section, then the body chunks. `api_keys.response_header_version` picks the version."""
    tags = b"\x00" if header_version >= 1 else b""
    size = 4 + len(tags)
    for chunk in body:  # a plain loop, not _chunks_size's generator: every answer is framed here
        size += len(chunk) if isinstance(chunk, bytes) else chunk.length
    head = _RESPONSE_HEADER.pack(size, correlation_id) + tags
    return _merge_first(head, body)


def frame_response_for(header: RequestHeader, body: list[Chunk]) -> list[Chunk]:
    """The response to `header`, with the response header version its API and version use."""
    return _merge_first(response_head(header, body), body)


def response_head(header: RequestHeader, body: list[Chunk]) -> bytes:
    """The size prefix and response header that go before `body` in the answer to `header`
    (one pack: the broker's server writes it, then the body chunks, in one transport write)."""
    size = 0
    for chunk in body:  # a plain loop, not _chunks_size's generator: every answer is framed here
        size += len(chunk) if isinstance(chunk, bytes) else chunk.length
    api_key, api_version, correlation_id, _ = header
    # response_header_version's rule, without its call
    if api_version >= FIRST_FLEXIBLE_RESPONSE.get(api_key, NEVER_FLEXIBLE):
        return _RESPONSE_HEADER_V1.pack(size + 5, correlation_id, 0)
    return _RESPONSE_HEADER.pack(size + 4, correlation_id)


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
