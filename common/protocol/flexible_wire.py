"""Classic-or-flexible field access for the log admin codecs (DeleteRecords, DescribeLogDirs,
DescribeProducers): one call per field, the `flexible` switch picks the encoding.

    r = WireReader(body, flexible=version >= 2)
    name = r.string(); parts = r.array(read_part, 12); r.tags()

Flexible versions (KIP-482) write strings and arrays with an unsigned-varint length + 1
(0 meaning null) and end every struct with a tagged-field section. The shared
`common.protocol.primitives` has only the classic types and the header's tagged fields;
this module is the minimal flexible reader/writer these codecs need until the shared one
grows them (then it folds into it and these calls map one to one).

These are body codecs: a flexible response's header v1 (correlation id, then an empty
tagged-field section, `RESPONSE_HEADER_V1_TAGS`) is framing, added by the broker's
`RequestHandler.handle` until `frame.frame_response` knows header v1; a client reading a
flexible response skips that section before handing the body to a decoder here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from common.protocol.primitives import ProtocolError, Reader, Writer

T = TypeVar("T")

# Response header v1's tagged-field section, empty (see the module docstring).
RESPONSE_HEADER_V1_TAGS = b"\x00"
MAX_STRING_BYTES = 0x7FFF  # Kafka's limit for a (compact) string, as for classic strings


class WireReader:
    """Reads a classic or flexible body: lengths are int16/int32 or uvarint + 1."""

    __slots__ = ("flexible", "r")

    def __init__(self, body: bytes | bytearray | memoryview, *, flexible: bool) -> None:
        self.r = Reader(body)
        self.flexible = flexible

    def int16(self) -> int:
        return self.r.int16()

    def int32(self) -> int:
        return self.r.int32()

    def int64(self) -> int:
        return self.r.int64()

    def boolean(self) -> bool:
        return self.r.boolean()

    def _compact_length(self, what: str) -> int:
        """uvarint N+1 -> N (-1 for null)."""
        n = self.r.uvarint() - 1
        if n > self.r.remaining:
            raise ProtocolError(f"{what} of length {n} cannot fit in {self.r.remaining} bytes")
        return n

    def nullable_string(self) -> str | None:
        if not self.flexible:
            return self.r.nullable_string()
        n = self._compact_length("string")
        if n < 0:
            return None
        if n > MAX_STRING_BYTES:
            raise ProtocolError(f"string of {n} bytes is longer than {MAX_STRING_BYTES}")
        try:
            return str(self.r.raw(n), "utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("string is not valid UTF-8") from None

    def string(self) -> str:
        if not self.flexible:
            return self.r.string()
        value = self.nullable_string()
        if value is None:
            raise ProtocolError("null where a string is required")
        return value

    def _count(self, min_size: int, nullable: bool) -> int | None:
        if not self.flexible:
            n = self.r.int32()
            if n == -1 and nullable:
                return None
            if n < 0:
                raise ProtocolError(f"invalid array length {n}")
        else:
            n = self.r.uvarint() - 1
            if n == -1:
                if nullable:
                    return None
                raise ProtocolError("null where an array is required")
        if n * min_size > self.r.remaining:
            raise ProtocolError(f"array of {n} items cannot fit in {self.r.remaining} bytes")
        return n

    def array(self, item: Callable[[WireReader], T], min_size: int) -> tuple[T, ...]:
        """An array whose items take at least `min_size` (>= 1) bytes each."""
        n = self._count(min_size, nullable=False)
        assert n is not None
        return tuple(item(self) for _ in range(n))

    def nullable_array(self, item: Callable[[WireReader], T], min_size: int) -> tuple[T, ...] | None:
        n = self._count(min_size, nullable=True)
        return None if n is None else tuple(item(self) for _ in range(n))

    def int32_array(self) -> tuple[int, ...]:
        return self.array(WireReader.int32, 4)

    def tags(self) -> None:
        """The tagged-field section ending a flexible struct (unknown tags are skipped)."""
        if self.flexible:
            self.r.tagged_fields()


class WireWriter:
    """Writes a classic or flexible body (the mirror of `WireReader`)."""

    __slots__ = ("flexible", "w")

    def __init__(self, *, flexible: bool) -> None:
        self.w = Writer()
        self.flexible = flexible

    def int16(self, v: int) -> None:
        self.w.int16(v)

    def int32(self, v: int) -> None:
        self.w.int32(v)

    def int64(self, v: int) -> None:
        self.w.int64(v)

    def boolean(self, v: bool) -> None:
        self.w.boolean(v)

    def nullable_string(self, v: str | None) -> None:
        if not self.flexible:
            self.w.nullable_string(v)
            return
        if v is None:
            self.w.uvarint(0)
            return
        data = v.encode("utf-8")
        if len(data) > MAX_STRING_BYTES:
            raise ValueError(f"string longer than {MAX_STRING_BYTES} bytes")
        self.w.uvarint(len(data) + 1)
        self.w.raw(data)

    def string(self, v: str) -> None:
        if self.flexible:
            self.nullable_string(v)
        else:
            self.w.string(v)

    def array(self, items: Sequence[T], item: Callable[[WireWriter, T], None]) -> None:
        if self.flexible:
            self.w.uvarint(len(items) + 1)
        else:
            self.w.int32(len(items))
        for x in items:
            item(self, x)

    def nullable_array(self, items: Sequence[T] | None, item: Callable[[WireWriter, T], None]) -> None:
        if items is not None:
            self.array(items, item)
        elif self.flexible:
            self.w.uvarint(0)
        else:
            self.w.int32(-1)

    def int32_array(self, items: Sequence[int]) -> None:
        self.array(items, WireWriter.int32)

    def tags(self) -> None:
        """An empty tagged-field section (we write no tagged fields)."""
        if self.flexible:
            self.w.uvarint(0)

    def to_bytes(self) -> bytes:
        return self.w.to_bytes()

