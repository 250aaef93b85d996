"""Dropping the tagged fields a message's schema does not know, before kio's native reader.

Kafka's generated readers keep a newer peer's unknown tagged fields aside (KIP-482: a tag a
reader does not know is skipped by its size), so a client built on a newer schema still talks
to an older broker. kio's native reader refuses them instead ("Unknown tagged field tag").
`drop_unknown_tags(entity_type, body)` walks the message as kio's dataclass describes it and
copies its bytes without the unknown tags, fixing each section's count. messages.py runs every
message through `checked_message` before kio's native reader (which would abort the process
allocating a huge array count): a check-only walk, and the copy only when an unknown tag is
there.

Pure: bytes in, bytes out; malformed input raises ProtocolError. Every loop is bounded by the
body: a count larger than the bytes left is refused before it is walked.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from functools import cache
from types import NoneType, UnionType
from typing import Any, Final, Union, get_args, get_origin

from common.protocol.primitives import ProtocolError, Writer

MAX_UVARINT_BYTES: Final = 5  # Kafka's unsigned varints are 32-bit

_FIXED_BYTES: Final = {
    "int8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "timedelta_i32": 4,
    "int64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16,
}


def drop_unknown_tags(entity_type: type[Any], body: bytes | bytearray | memoryview) -> bytes:
    """The message at the start of `body`, without tagged fields `entity_type` does not
    declare (bytes after the message are left out)."""
    walker = _Walker(memoryview(body).cast("B"), copying=True)
    walker.entity(entity_type)
    return bytes(walker.out)


def checked_message(entity_type: type[Any], body: bytes | bytearray | memoryview) -> bytes | memoryview:
    """`body` walked (ProtocolError for what is not a whole message of `entity_type`, or for an
    array count beyond the bytes left), read-only, and without unknown tagged fields. The
    first walk only checks; the bytes are copied only when it met an unknown tag."""
    view = memoryview(body).cast("B")
    walker = _Walker(view, copying=False)
    walker.entity(entity_type)
    if walker.unknown_tags:
        return drop_unknown_tags(entity_type, view)
    return view if view.readonly else view.toreadonly()


class _Walker:
    __slots__ = ("buf", "pos", "out", "copying", "unknown_tags")

    def __init__(self, buf: memoryview, *, copying: bool) -> None:
        self.buf, self.pos, self.out = buf, 0, bytearray()
        self.copying, self.unknown_tags = copying, False

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise ProtocolError(f"message ends {self.pos + n - len(self.buf)} bytes early")
        chunk = self.buf[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def copy(self, n: int) -> None:
        if self.copying:
            self.out += self.take(n)
        else:
            self.take(n)

    def uvarint(self) -> int:
        value = 0
        for i in range(MAX_UVARINT_BYTES):
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << (7 * i)
            if not byte & 0x80:
                return value
        raise ProtocolError("unsigned varint longer than 5 bytes")

    def copy_uvarint(self) -> int:
        start = self.pos
        value = self.uvarint()
        if self.copying:
            self.out += self.buf[start:self.pos]
        return value

    def copy_signed(self, size: int) -> int:
        value = int.from_bytes(self.take(size), "big", signed=True)
        if self.copying:
            self.out += value.to_bytes(size, "big", signed=True)
        return value

    def count(self, flexible: bool) -> int:
        """An array's element count, copied (-1: null); never more than the bytes left."""
        n = self.copy_uvarint() - 1 if flexible else self.copy_signed(4)
        if n > len(self.buf) - self.pos:
            raise ProtocolError(f"array of {n} elements in {len(self.buf) - self.pos} bytes")
        return n

    def primitive(self, kafka_type: str, flexible: bool) -> None:
        fixed = _FIXED_BYTES.get(kafka_type)
        if fixed is not None:
            self.copy(fixed)
        elif kafka_type == "string":
            n = self.copy_uvarint() - 1 if flexible else self.copy_signed(2)
            self.copy(max(n, 0))
        elif kafka_type in ("bytes", "records"):
            n = self.copy_uvarint() - 1 if flexible else self.copy_signed(4)
            self.copy(max(n, 0))
        else:
            raise ProtocolError(f"unknown field type {kafka_type}")

    def entity(self, entity_type: Any) -> None:
        flexible, known_tags, steps = _plan(entity_type)
        for kind, what, optional in steps:
            if kind is _ARRAY:
                for _ in range(self.count(flexible)):
                    if isinstance(what, str):
                        self.primitive(what, flexible)
                    else:
                        self.entity(what)
            elif kind is _STRUCT:
                if optional and self.copy_signed(1) < 0:  # KIP-893's nullable struct marker
                    continue
                self.entity(what)
            else:
                self.primitive(what, flexible)
        if flexible:
            self.tags(known_tags)

    def tags(self, known: set[int]) -> None:
        count = self.uvarint()
        if count > len(self.buf) - self.pos:
            raise ProtocolError(f"{count} tagged fields in {len(self.buf) - self.pos} bytes")
        kept = bytearray()
        n_kept = 0
        previous = -1
        for _ in range(count):
            start = self.pos
            tag = self.uvarint()
            if tag <= previous:  # Kafka writes tags in ascending order, each once
                raise ProtocolError(f"tagged field {tag} after {previous}")
            previous = tag
            size = self.uvarint()
            self.take(size)
            if tag in known:
                kept += self.buf[start:self.pos]
                n_kept += 1
            else:
                self.unknown_tags = True
        if self.copying:
            kept_count = Writer()
            kept_count.uvarint(n_kept)
            self.out += kept_count.to_bytes() + kept


_ARRAY: Final = "array"
_STRUCT: Final = "struct"
_PRIMITIVE: Final = "primitive"
Step = tuple[str, Any, bool]  # (kind, element entity type or kafka_type, nullable)


@cache  # bounded: one entry per kio class
def _plan(entity_type: Any) -> tuple[bool, set[int], tuple[Step, ...]]:
    """How to walk one kio class: flexible or not, its known tags, and its untagged fields in
    order, read from the dataclass once (the walk runs on every message)."""
    known_tags: set[int] = set()
    steps: list[Step] = []
    for field in fields(entity_type):
        if "tag" in field.metadata:
            known_tags.add(int(field.metadata["tag"]))
            continue
        inner, optional = _unwrap(field.type)
        if get_origin(inner) is tuple:
            element, _ = _unwrap(get_args(inner)[0])
            steps.append((_ARRAY, element if is_dataclass(element) else field.metadata["kafka_type"], optional))
        elif is_dataclass(inner):
            steps.append((_STRUCT, inner, optional))
        else:
            steps.append((_PRIMITIVE, field.metadata["kafka_type"], optional))
    return bool(entity_type.__flexible__), known_tags, tuple(steps)


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """(the type inside `X | None`, whether None was allowed)."""
    if get_origin(annotation) in (UnionType, Union):
        args = [a for a in get_args(annotation) if a is not NoneType]
        if len(args) == 1:
            return args[0], True
    return annotation, False

