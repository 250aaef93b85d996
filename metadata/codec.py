"""Field kinds: how one field of a record or image is checked, normalised and put on the wire.

Records (`metadata.records`) and image entities (`metadata.image`) declare a kind per
field; their `__post_init__` runs `check_fields`, so a value is validated the same way
whether it was built in Python or decoded from msgpack. Every failure is a
`MetadataRecordError` naming the field, never a TypeError or KeyError.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from enum import IntEnum
from typing import Any, NamedTuple, TypeVar
from common.limits import PORT_MAX
from common.slotted import instance_builder as instance_builder  # its home is common/ (wire decoders use it too)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT16_MAX = 2**15 - 1
# Generous bound on identifier strings (topic names are <= 249 chars in Kafka); a decoded
# record never allocates more than its own size anyway, this only keeps garbage out.
MAX_STRING_CHARS = 32 * 1024

T = TypeVar("T")


class MetadataRecordError(Exception):
    """A metadata record or snapshot is malformed, or contradicts the image it is applied to."""


class Listener(NamedTuple):
    """One endpoint a broker listens on, as in RegisterBrokerRecord.EndPoints."""

    name: str
    host: str
    port: int


class Kind(ABC):
    """Checks and normalises one field value; `to_wire` gives what msgpack packs."""

    @abstractmethod
    def check(self, value: Any, where: str) -> Any:
        """The normalised value, or MetadataRecordError naming `where`."""

    def to_wire(self, value: Any) -> Any:
        return value


def _fail(where: str, expected: str, value: Any) -> MetadataRecordError:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return MetadataRecordError(f"{where}: expected {expected}, got {shown}")


class Int(Kind):
    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi

    def check(self, value: Any, where: str) -> int:
        if type(value) is int and self.lo <= value <= self.hi:  # the common case first
            return value
        # bool is an int subclass; True is never a valid broker id or epoch.
        if type(value) is bool or not isinstance(value, int) or not self.lo <= value <= self.hi:
            raise _fail(where, f"an integer in [{self.lo}, {self.hi}]", value)
        return int(value)


class Bool(Kind):
    def check(self, value: Any, where: str) -> bool:
        if type(value) is not bool:
            raise _fail(where, "a boolean", value)
        return value


class Str(Kind):
    def __init__(self, *, non_empty: bool = False) -> None:
        self.non_empty = non_empty

    def check(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or len(value) > MAX_STRING_CHARS:
            raise _fail(where, "a string", value)
        if self.non_empty and not value:
            raise _fail(where, "a non-empty string", value)
        return value


class Enum(Kind):
    def __init__(self, cls: type[IntEnum]) -> None:
        self.cls = cls

    def check(self, value: Any, where: str) -> IntEnum:
        if type(value) is bool or not isinstance(value, int):
            raise _fail(where, f"a {self.cls.__name__} value", value)
        try:
            return self.cls(value)
        except ValueError:
            names = ", ".join(f"{m.name}={m.value}" for m in self.cls)
            raise _fail(where, f"one of {names}", value) from None

    def to_wire(self, value: IntEnum) -> int:
        return int(value)


class IntList(Kind):
    """A list of distinct ids (replicas, isr, elr); normalised to a tuple."""

    def __init__(self, lo: int = 0, hi: int = INT32_MAX) -> None:
        self.item = Int(lo, hi)

    def check(self, value: Any, where: str) -> tuple[int, ...]:
        if not isinstance(value, (list, tuple)):
            raise _fail(where, "a list of integers", value)
        lo, hi = self.item.lo, self.item.hi
        if all(type(v) is int and lo <= v <= hi for v in value):  # the common case, no message built
            items = tuple(value)
        else:
            items = tuple(self.item.check(v, f"{where}[{i}]") for i, v in enumerate(value))
        if len(set(items)) != len(items):
            raise _fail(where, "distinct integers", value)
        return items

    def to_wire(self, value: tuple[int, ...]) -> list[int]:
        return list(value)


class Listeners(Kind):
    """RegisterBroker listeners: (name, host, port) triples with distinct names."""

    def check(self, value: Any, where: str) -> tuple[Listener, ...]:
        if not isinstance(value, (list, tuple)):
            raise _fail(where, "a list of (name, host, port)", value)
        out = []
        for i, item in enumerate(value):
            at = f"{where}[{i}]"
            if not isinstance(item, (list, tuple)) or len(item) != 3:
                raise _fail(at, "a (name, host, port) triple", item)
            name = Str(non_empty=True).check(item[0], f"{at}.name")
            host = Str().check(item[1], f"{at}.host")
            port = Int(0, PORT_MAX).check(item[2], f"{at}.port")
            out.append(Listener(name, host, port))
        if len({listener.name for listener in out}) != len(out):
            raise _fail(where, "listeners with distinct names", value)
        return tuple(out)

    def to_wire(self, value: tuple[Listener, ...]) -> list[list[Any]]:
        return [list(listener) for listener in value]


class ReplicaKeys(Kind):
    """(topic_id, partition_id) pairs with no repeats: a broker's offline replicas. Normalised to a
    frozenset (membership is asked per replica of every partition a Metadata answer lists); on
    the wire a sorted list of [topic_id, partition_id], so encodings are canonical."""

    def check(self, value: Any, where: str) -> frozenset[tuple[str, int]]:
        if isinstance(value, frozenset) and all(type(item) is tuple for item in value):
            items = list(value)  # already normalised (replay copies a registration's set)
        elif isinstance(value, (list, tuple)):
            items = list(value)
        else:
            raise _fail(where, "a list of (topic_id, partition_id)", value)
        out = set()
        for i, item in enumerate(items):
            at = f"{where}[{i}]"
            if not isinstance(item, (list, tuple)) or len(item) != 2:
                raise _fail(at, "a (topic_id, partition_id) pair", item)
            out.add((NAME.check(item[0], f"{at}.topic_id"), PARTITION_ID.check(item[1], f"{at}.partition_id")))
        if len(out) != len(items):
            raise _fail(where, "distinct (topic_id, partition_id) pairs", value)
        return frozenset(out)

    def to_wire(self, value: frozenset[tuple[str, int]]) -> list[list[Any]]:
        return [list(pair) for pair in sorted(value)]


class Nullable(Kind):
    """None, or a value of the inner kind."""

    def __init__(self, inner: Kind) -> None:
        self.inner = inner

    def check(self, value: Any, where: str) -> Any:
        return None if value is None else self.inner.check(value, where)

    def to_wire(self, value: Any) -> Any:
        return None if value is None else self.inner.to_wire(value)


INT32 = Int(INT32_MIN, INT32_MAX)
INT64 = Int(INT64_MIN, INT64_MAX)
BROKER_ID = Int(0, INT32_MAX)
PARTITION_ID = Int(0, INT32_MAX)
EPOCH32 = Int(0, INT32_MAX)
OFFSET = Int(-1, INT64_MAX)
BOOL = Bool()
STR = Str()
NAME = Str(non_empty=True)
OPT_STR = Nullable(STR)
OPT_BOOL = Nullable(BOOL)
IDS = IntList()
OPT_IDS = Nullable(IDS)
LISTENERS = Listeners()
REPLICA_KEYS = ReplicaKeys()


def check_fields(obj: Any, kinds: Mapping[str, Kind], where: str) -> None:
    """Validate and normalise every field of a frozen dataclass in place (from __post_init__).

    A field is checked under `where` alone and, only when it fails, again under its full name
    for the error: formatting every field's name (and every list item's index) up front was
    most of the cost of replaying a 10,000-partition topic, on every controller and broker."""
    setter = object.__setattr__
    for name, kind in kinds.items():
        value = getattr(obj, name)
        try:
            setter(obj, name, kind.check(value, where))
        except MetadataRecordError:
            kind.check(value, f"{where}.{name}")  # raises again, naming the field
            raise


def fields_to_map(obj: Any, kinds: Mapping[str, Kind],
                  optional: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The msgpack-ready map of an object's fields; an `optional` field at its default is left
    out, as Kafka leaves a tagged field at its default off the wire, so logs and snapshots
    written without it read the same."""
    out = {}
    for name, kind in kinds.items():
        value = getattr(obj, name)
        if optional is not None and name in optional and value == optional[name]:
            continue
        out[name] = kind.to_wire(value)
    return out


def fields_from_map(cls: type[T], m: Any, kinds: Mapping[str, Kind], where: str,
                    ignore: tuple[str, ...] = (), optional: Mapping[str, Any] | None = None) -> T:
    """Build `cls` from a decoded map: every field present (an `optional` one absent takes its
    default), no unknown key, values checked."""
    if not isinstance(m, dict):
        raise _fail(where, "a map", m)
    unknown = sorted(str(k) for k in m if k not in kinds and k not in ignore)
    if unknown:
        raise MetadataRecordError(f"{where}: unknown field(s) {', '.join(unknown)}")
    defaults = optional or {}
    missing = [name for name in kinds if name not in m and name not in defaults]
    if missing:
        raise MetadataRecordError(f"{where}: missing field(s) {', '.join(missing)}")
    return cls(**{name: m[name] if name in m else defaults[name] for name in kinds})
