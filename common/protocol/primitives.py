"""Kafka wire primitives: a bounds-checked `Reader` over a memoryview and a chunked `Writer`.

Every malformed input raises `ProtocolError`; lengths are checked against the bytes left
before anything is allocated.

Both know whether the message is flexible (KIP-482): a codec calls `r.string()` /
`w.array(...)` once and gets the classic form (int16/int32 lengths) or the compact form
(unsigned varint of length + 1, 0 for null) from the flag, and ends every struct with
`tagged_fields()`, which reads (skips) or writes an empty tagged-field section when flexible
and does nothing when classic. `api_keys.reader_for` / `writer_for` set the flag from the
API's first flexible version.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol, TypeVar, runtime_checkable

from common.limits import MAX_VARLONG_BYTES

T = TypeVar("T")

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")

MAX_VARINT_BYTES = 5
MAX_TAGGED_FIELDS = 1024  # a bound on a loop driven by the peer; real headers carry 0 or 1


class ProtocolError(Exception):
    """The one error for malformed wire input: the connection that sent it is closed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@runtime_checkable
class RecordsPlaceholder(Protocol):
    """Records sent from elsewhere (a segment `FileSlice`): the encoder writes only the size."""

    @property
    def length(self) -> int: ...


Chunk = bytes | RecordsPlaceholder


class Reader:
    """Reads big-endian Kafka types from a memoryview; every read is bounds-checked."""

    __slots__ = ("_buf", "_pos", "_end", "flexible")

    def __init__(self, data: bytes | bytearray | memoryview, pos: int = 0, *,
                 flexible: bool = False) -> None:
        view = memoryview(data)
        self._buf = view if view.format == "B" and view.ndim == 1 else view.cast("B")
        self._pos = pos
        self._end = len(self._buf)
        self.flexible = flexible

    @property
    def pos(self) -> int:
        return self._pos

    @property
    def remaining(self) -> int:
        return self._end - self._pos

    def rest(self) -> memoryview:
        """Everything not read yet, as a view (the body after a header)."""
        return self._buf[self._pos:]

    def _take(self, n: int, what: str) -> int:
        pos = self._pos
        if n < 0 or n > self._end - pos:
            raise ProtocolError(f"truncated {what}: need {n} bytes, have {self._end - pos}")
        self._pos = pos + n
        return pos

    def _fixed(self, s: struct.Struct, what: str) -> int:
        # One call per field, not three (int32 -> _fixed -> _take): a Fetch decodes a dozen
        # fixed fields per partition, and every request's codec reads through here.
        pos = self._pos
        end = pos + s.size
        if end > self._end:
            raise ProtocolError(f"truncated {what}: need {s.size} bytes, have {self._end - pos}")
        self._pos = end
        value: int = s.unpack_from(self._buf, pos)[0]
        return value

    def int8(self) -> int:
        return self._fixed(_I8, "int8")

    def int16(self) -> int:
        pos = self._pos  # _fixed, inlined: the most read fields
        if pos + 2 > self._end:
            raise ProtocolError(f"truncated int16: need 2 bytes, have {self._end - pos}")
        self._pos = pos + 2
        value: int = _I16.unpack_from(self._buf, pos)[0]
        return value

    def int32(self) -> int:
        pos = self._pos
        if pos + 4 > self._end:
            raise ProtocolError(f"truncated int32: need 4 bytes, have {self._end - pos}")
        self._pos = pos + 4
        value: int = _I32.unpack_from(self._buf, pos)[0]
        return value

    def int64(self) -> int:
        pos = self._pos
        if pos + 8 > self._end:
            raise ProtocolError(f"truncated int64: need 8 bytes, have {self._end - pos}")
        self._pos = pos + 8
        value: int = _I64.unpack_from(self._buf, pos)[0]
        return value

    def uint32(self) -> int:
        return self._fixed(_U32, "uint32")

    def boolean(self) -> bool:
        return self._fixed(_I8, "boolean") != 0

    def uvarint(self, max_bytes: int = MAX_VARINT_BYTES) -> int:
        """Unsigned LEB128 varint of at most `max_bytes` bytes."""
        pos = self._pos
        if pos < self._end and self._buf[pos] < 0x80:  # one byte: compact lengths, tag counts
            self._pos = pos + 1
            return self._buf[pos]
        value = 0
        for i in range(max_bytes):
            b = self._buf[self._take(1, "varint")]
            value |= (b & 0x7F) << (7 * i)
            if not b & 0x80:
                return value
        raise ProtocolError("varint too long")

    def varint(self) -> int:
        """Zigzag-encoded signed 32-bit varint."""
        v = self.uvarint(MAX_VARINT_BYTES)
        if v > 0xFFFFFFFF:
            raise ProtocolError("varint out of range")
        return (v >> 1) ^ -(v & 1)

    def varlong(self) -> int:
        """Zigzag-encoded signed 64-bit varint."""
        v = self.uvarint(MAX_VARLONG_BYTES)
        if v > 0xFFFFFFFFFFFFFFFF:
            raise ProtocolError("varlong out of range")
        return (v >> 1) ^ -(v & 1)

    def raw(self, n: int) -> memoryview:
        """The next `n` bytes as a view (no copy)."""
        start = self._take(n, "bytes")
        return self._buf[start:start + n]

    def _decode(self, n: int) -> str:
        pos = self._pos  # raw(n), inlined (n >= 0: the callers took null out)
        if n > self._end - pos:
            raise ProtocolError(f"truncated bytes: need {n} bytes, have {self._end - pos}")
        self._pos = pos + n
        try:
            return str(self._buf[pos:pos + n], "utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("string is not valid UTF-8") from None

    def _length(self, classic: Callable[[], int], what: str) -> int:
        """A length prefix: -1 for null; compact lengths are stored as length + 1."""
        if self.flexible:
            n = self.uvarint() - 1
            if n > self._end - self._pos:
                raise ProtocolError(f"{what} of {n} bytes past the end ({self.remaining} left)")
            return n
        n = classic()
        if n < -1:
            raise ProtocolError(f"invalid {what} length {n}")
        return n

    def string(self) -> str:
        n = self._length(self.int16, "string")
        if n < 0:
            raise ProtocolError("null string where a string is required")
        return self._decode(n)

    def nullable_string(self) -> str | None:
        n = self._length(self.int16, "string")
        return None if n < 0 else self._decode(n)

    def bytes_(self) -> memoryview:
        n = self._length(self.int32, "bytes")
        if n < 0:
            raise ProtocolError("null bytes where bytes are required")
        return self.raw(n)

    def nullable_bytes(self) -> memoryview | None:
        n = self._length(self.int32, "bytes")
        return None if n < 0 else self.raw(n)

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self.raw(16)))

    def _count(self, min_size: int, nullable: bool) -> int | None:
        n = self.uvarint() - 1 if self.flexible else self.int32()
        if n == -1 and nullable:
            return None
        if n < 0:
            raise ProtocolError(f"invalid array length {n}")
        if n * min_size > self._end - self._pos:
            raise ProtocolError(f"array of {n} items cannot fit in {self.remaining} bytes")
        return n

    def array(self, item: Callable[[Reader], T], min_size: int) -> tuple[T, ...]:
        """An int32-counted array; `min_size` (>= 1) is the smallest encoding of one item."""
        n = self._count(min_size, nullable=False)
        assert n is not None
        return tuple(item(self) for _ in range(n))

    def nullable_array(self, item: Callable[[Reader], T], min_size: int) -> tuple[T, ...] | None:
        n = self._count(min_size, nullable=True)
        return None if n is None else tuple(item(self) for _ in range(n))

    def int32_array(self) -> tuple[int, ...]:
        n = self._count(4, nullable=False)
        assert n is not None
        start = self._take(4 * n, "int32 array")
        return struct.unpack_from(f">{n}i", self._buf, start)

    def tagged_fields(self) -> None:
        """End of a struct: skip its tagged fields when flexible (we know none we keep)."""
        if self.flexible:
            self.skip_tagged_fields()

    def skip_tagged_fields(self) -> None:
        """Skip a tagged-field section (also request header v2, whose client_id stays classic);
        tags must be strictly ascending and each size must fit."""
        for _tag, _data in self.tagged_field_items():
            pass

    def tagged_field_items(self) -> Iterator[tuple[int, memoryview]]:
        """Each field of a tagged-field section as (tag, its bytes), checked as Kafka does:
        at most MAX_TAGGED_FIELDS, strictly ascending, each size within the buffer."""
        count = self.uvarint()
        if count > MAX_TAGGED_FIELDS:
            raise ProtocolError(f"too many tagged fields: {count}")
        last = -1
        for _ in range(count):
            tag = self.uvarint()
            if tag <= last:
                raise ProtocolError("tagged fields out of order")
            last = tag
            yield tag, self.raw(self.uvarint())


class Writer:
    """Builds a message as byte chunks; records placeholders become chunks of their own."""

    __slots__ = ("_buf", "_chunks", "flexible")

    def __init__(self, *, flexible: bool = False) -> None:
        self._buf = bytearray()
        self._chunks: list[Chunk] = []
        self.flexible = flexible

    def _length(self, n: int, classic: Callable[[int], None]) -> None:
        """A length prefix (-1: null): compact as length + 1 when flexible."""
        if self.flexible:
            self.uvarint(n + 1)
        else:
            classic(n)

    def int8(self, v: int) -> None:
        self._buf += _I8.pack(v)

    def int16(self, v: int) -> None:
        self._buf += _I16.pack(v)

    def int32(self, v: int) -> None:
        self._buf += _I32.pack(v)

    def int64(self, v: int) -> None:
        self._buf += _I64.pack(v)

    def uint32(self, v: int) -> None:
        self._buf += _U32.pack(v)

    def boolean(self, v: bool) -> None:
        self._buf.append(1 if v else 0)

    def uvarint(self, v: int) -> None:
        if v < 0:
            raise ValueError("uvarint must be >= 0")
        while v >= 0x80:
            self._buf.append((v & 0x7F) | 0x80)
            v >>= 7
        self._buf.append(v)

    def varint(self, v: int) -> None:
        self.uvarint(((v << 1) ^ (v >> 31)) & 0xFFFFFFFF)

    def varlong(self, v: int) -> None:
        self.uvarint(((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF)

    def raw(self, data: bytes | bytearray | memoryview) -> None:
        self._buf += data

    def string(self, v: str) -> None:
        data = v.encode("utf-8")
        if len(data) > 0x7FFF:  # Kafka's limit for compact strings too
            raise ValueError("string longer than 32767 bytes")
        self._length(len(data), self.int16)
        self._buf += data

    def nullable_string(self, v: str | None) -> None:
        if v is None:
            self._length(-1, self.int16)
        else:
            self.string(v)

    def bytes_(self, v: bytes | bytearray | memoryview) -> None:
        self._length(len(v), self.int32)
        self._buf += v

    def nullable_bytes(self, v: bytes | bytearray | memoryview | None) -> None:
        if v is None:
            self._length(-1, self.int32)
        else:
            self.bytes_(v)

    def records(self, v: bytes | bytearray | memoryview | RecordsPlaceholder | None) -> None:
        """A nullable records field; a placeholder is written as its size then its own chunk."""
        if v is None or isinstance(v, bytes | bytearray | memoryview):
            self.nullable_bytes(v)
            return
        self._length(v.length, self.int32)
        if self._buf:
            self._chunks.append(bytes(self._buf))
            self._buf = bytearray()
        self._chunks.append(v)

    def uuid(self, v: uuid.UUID) -> None:
        self._buf += v.bytes

    def array(self, items: Sequence[T], item: Callable[[Writer, T], None]) -> None:
        self._length(len(items), self.int32)
        for x in items:
            item(self, x)

    def nullable_array(self, items: Sequence[T] | None, item: Callable[[Writer, T], None]) -> None:
        if items is None:
            self._length(-1, self.int32)
        else:
            self.array(items, item)

    def int32_array(self, items: Iterable[int]) -> None:
        values = tuple(items)
        self._length(len(values), self.int32)
        self._buf += struct.pack(f">{len(values)}i", *values)

    def tagged_fields(self) -> None:
        """End of a struct: an empty tagged-field section when flexible (we send no tags)."""
        if self.flexible:
            self._buf.append(0)

    def string_array(self, items: Sequence[str]) -> None:
        self.array(items, Writer.string)

    def chunks(self) -> list[Chunk]:
        """The message so far: bytes, with any records placeholders in place."""
        return [*self._chunks, bytes(self._buf)] if self._buf else list(self._chunks)

    def size(self) -> int:
        """Total encoded size, placeholders counted by their length."""
        return len(self._buf) + sum(c.length if not isinstance(c, bytes) else len(c)
                                    for c in self._chunks)

    def to_bytes(self) -> bytes:
        """The whole message; only valid when no placeholder was written."""
        if self._chunks:
            if any(not isinstance(c, bytes) for c in self._chunks):
                raise ValueError("message holds records placeholders; use chunks()")
            return b"".join([*self._chunks, bytes(self._buf)])  # type: ignore[list-item]
        return bytes(self._buf)
