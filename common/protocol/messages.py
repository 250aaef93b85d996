"""Kafka messages generated from Kafka's own JSON schemas (kio), bridged to our frames.

kio (Aiven, Apache-2.0) ships one frozen dataclass per API, version and direction, generated
from `clients/src/main/resources/common/message/*.json`, with a native reader and
pure-Python writers. An API served on these messages needs no codec of ours: its row in
`api_table` names `kio_codec(api_key)`, and its handler reads the request dataclass of the
version the client sent and answers with the response dataclass of that version:

    m = response_module(ApiKey.ALTER_REPLICA_LOG_DIRS, version)
    build(m.AlterReplicaLogDirsResponse, throttle_time=NO_THROTTLE, results=(...))

Decoding ignores trailing bytes after the message (librdkafka pads some requests), and any
decode failure becomes our one `ProtocolError` (the connection that sent it is closed).
Error codes in our responses are `common.errors.ErrorCode` members: kio's writer reads
`.value`, which both IntEnums have.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields, is_dataclass
from datetime import timedelta
from functools import cache
from types import ModuleType, UnionType
from typing import Any, Final, TypeVar, get_args, get_origin

from kio.index import KioIndexError, load_payload_module, load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from common.errors import ErrorCode
from common.protocol.dispatch import Codec
from common.protocol.primitives import Chunk, ProtocolError
from common.protocol.unknown_tags import checked_message

NO_THROTTLE: Final = timedelta(0)  # every throttle_time we send: tidelog has no quotas yet
# FindCoordinator's key_type (v1+; kio keeps it an int8): Kafka's CoordinatorType. Kafka 4's
# SHARE (2) is a coordinator tidelog does not have.
KEY_TYPE_GROUP: Final = 0
KEY_TYPE_TRANSACTION: Final = 1
FIND_COORDINATOR_BATCHED_VERSION: Final = 4  # v4+ (KIP-699): coordinator_keys, one answer per key

# kio's classes are generated from Kafka 4's schemas, which dropped versions Kafka 3.9 still
# answers (KIP-896). Where a dropped version's bytes are exactly a kept version's (the bump
# only changed broker behaviour), that version's classes serve it.
SAME_WIRE_AS: Final[Mapping[tuple[int, int], int]] = {
    (35, 0): 1,  # DescribeLogDirs: "Version 1 is the same as version 0"
    (9, 0): 1,  # OffsetFetch: v1 only moved the offsets from ZooKeeper to Kafka
}


def schema_version(api_key: int, version: int) -> int:
    """The version whose generated classes carry (api_key, version) on the wire."""
    return SAME_WIRE_AS.get((api_key, version), version)


E = TypeVar("E")



def milliseconds(delta: timedelta) -> int:
    """A duration field (kio reads Kafka's int32/int64 ms as timedelta) back in whole ms."""
    return round(delta / timedelta(milliseconds=1))


def error_code(code: int) -> ErrorCode:
    """The enum member kio's writer needs for a code held as an int (from the controller,
    a rule); a code our enum lacks is UNKNOWN_SERVER_ERROR, as Kafka maps unknown errors."""
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


@cache
def request_type(api_key: int, version: int) -> type[Any]:
    """kio's request dataclass for this API and version; KeyError when kio has none."""
    try:
        return load_request_schema(api_key, schema_version(api_key, version))
    except KioIndexError as e:  # UnknownAPIKey / UnknownEntity
        raise KeyError(f"no request schema for API {api_key} v{version}") from e


@cache
def response_type(api_key: int, version: int) -> type[Any]:
    """kio's response dataclass for this API and version; KeyError when kio has none."""
    try:
        return load_response_schema(api_key, schema_version(api_key, version))
    except KioIndexError as e:
        raise KeyError(f"no response schema for API {api_key} v{version}") from e


@cache  # bounded: one entry per (API, version) kio has; a missing one raises and is not kept
def request_module(api_key: int, version: int) -> ModuleType:
    """The module holding this version's request and its nested types."""
    return load_payload_module(api_key, schema_version(api_key, version), EntityType.request)


@cache
def response_module(api_key: int, version: int) -> ModuleType:
    """The module holding this version's response and its nested types (results, ...)."""
    return load_payload_module(api_key, schema_version(api_key, version), EntityType.response)


def first_flexible_version(api_key: int, versions: tuple[int, int]) -> int | None:
    """The first version in `versions` whose request is flexible (header v2, tagged
    fields): Kafka's "flexibleVersions", read from the generated classes."""
    low, high = versions
    for version in range(low, high + 1):
        if request_type(api_key, version).__flexible__:
            return version
    return None


_FIELD_NAMES: dict[type[Any], frozenset[str]] = {}  # bounded by kio's classes
_READERS: dict[type[Any], Any] = {}


def _field_names(entity_type: type[Any]) -> frozenset[str]:
    names = _FIELD_NAMES.get(entity_type)
    if names is None:
        names = _FIELD_NAMES[entity_type] = frozenset(f.name for f in fields(entity_type))
    return names


def build(entity_type: type[E], **values: Any) -> E:
    """An entity of one version from values a handler computes for every version: a field
    this version does not have is dropped, as Kafka's generated Java ignores a field its
    version lacks (a handler need not branch on versions for added fields)."""
    names = _field_names(entity_type)
    return entity_type(**{k: v for k, v in values.items() if k in names})


def _reader(entity_type: type[Any]) -> Any:
    reader = _READERS.get(entity_type)
    if reader is None:
        reader = _READERS[entity_type] = entity_reader(entity_type)
    return reader


def preload(versions: Mapping[Any, tuple[int, int]]) -> int:
    """Import and build kio's classes, readers and writers for every (API, version) in
    `versions` that kio has; the number of versions loaded. A broker does this before it
    freezes its start-up heap (broker.startup_heap): loaded lazily, on the first request of
    each kind, they were ~58,000 long-lived objects that every full collection walked again
    (13 ms a pass for all of them), a stall of every request in flight."""
    loaded = 0
    for api_key, (low, high) in versions.items():
        for version in range(low, high + 1):
            try:
                request, response = request_type(api_key, version), response_type(api_key, version)
                request_module(api_key, version), response_module(api_key, version)
            except KeyError:  # served by a hand codec at this version
                continue
            _reader(request)  # what a server reads and writes; a client's side stays lazy
            entity_writer(response)
            loaded += 1
    return loaded


def decode(entity_type: type[E], body: bytes | bytearray | memoryview) -> E:
    """One message from the start of `body`; bytes after it are ignored. ProtocolError
    for anything that is not a whole message.

    The bytes are first walked in Python (`unknown_tags.checked_message`), which refuses an
    array count larger than the bytes left and drops a newer peer's unknown tagged fields
    (Kafka skips them, kio refuses them): kio's native reader allocates an array's count
    before reading it, and a client sending a count near 2**32 made it abort the whole
    process ("memory allocation of 68278825040 bytes failed", found by test_protocol_fuzz on
    AlterReplicaLogDirs v2). Only the walked message reaches the native reader."""
    reader = _reader(entity_type)
    checked = checked_message(entity_type, body)  # ProtocolError for what is not a message
    try:
        value, _size = reader(checked, 0)
    # The native reader raises kio's DecodeError family, KeyError, and ValueError/TypeError for
    # out-of-range values; whatever it raises, the bytes were not a message.
    except Exception as e:  # noqa: BLE001
        raise _malformed(entity_type, e) from None
    _refuse_nulls(entity_type, value)
    return value  # type: ignore[no-any-return]


NullCheck = tuple[str, bool, type[Any] | None]  # (field, nullable, entity type of its value or elements)


@cache  # bounded: one entry per kio class
def _null_checks(entity_type: Any) -> tuple[NullCheck, ...]:
    """The fields of `entity_type` that are arrays or structs, which kio's reader lets be null
    whatever the schema says (it checks strings only)."""
    checks: list[NullCheck] = []
    for f in fields(entity_type):
        annotation, nullable = f.type, False
        if isinstance(annotation, UnionType):
            args = [a for a in get_args(annotation) if a is not type(None)]
            annotation, nullable = args[0], len(args) < len(get_args(annotation))
        if get_origin(annotation) is tuple:
            checks.append((f.name, nullable, _entity(get_args(annotation)[0])))
        elif (entity := _entity(annotation)) is not None:
            checks.append((f.name, nullable, entity))
    return tuple(checks)


def _entity(annotation: Any) -> type[Any] | None:
    """The kio class an annotation names, or None for a primitive."""
    return annotation if isinstance(annotation, type) and is_dataclass(annotation) else None


def _refuse_nulls(entity_type: Any, value: Any) -> None:
    """Kafka's generated readers refuse a null array or struct where the schema has no
    nullableVersions ("non-nullable field X was serialized as null"); so does this bridge."""
    for name, nullable, nested in _null_checks(entity_type):
        field_value = getattr(value, name)
        if field_value is None:
            if not nullable:
                raise ProtocolError(f"malformed {entity_type.__name__}: non-nullable field {name}"
                                    " was serialized as null")
        elif nested is not None:
            for item in field_value if isinstance(field_value, tuple) else (field_value,):
                _refuse_nulls(nested, item)


def _malformed(entity_type: type[Any], e: Exception) -> ProtocolError:
    return ProtocolError(f"malformed {entity_type.__name__} v{getattr(entity_type, '__version__', '?')}:"
                         f" {type(e).__name__}: {e}")


class _Sink:
    """What kio's writers write to (`write(bytes)`), gathered into one bytes at the end."""

    __slots__ = ("parts",)

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.parts.append(data)
        return len(data)


def encode(entity: Any) -> bytes:
    """The bytes of one message (kio's writer for its class)."""
    sink = _Sink()
    entity_writer(type(entity))(sink, entity)  # type: ignore[arg-type]
    return b"".join(sink.parts)


def decode_request(api_key: int, version: int, body: bytes | bytearray | memoryview) -> Any:
    """The request dataclass for (api_key, version); ProtocolError when kio has no such
    version or the body is not one."""
    try:
        entity_type = request_type(api_key, version)
    except KeyError as e:
        raise ProtocolError(str(e)) from None
    return decode(entity_type, body)


def decode_response(api_key: int, version: int, body: bytes | bytearray | memoryview) -> Any:
    """Client side: the response dataclass for (api_key, version)."""
    try:
        entity_type = response_type(api_key, version)
    except KeyError as e:
        raise ProtocolError(str(e)) from None
    return decode(entity_type, body)


def encode_request(request: Any, version: int) -> list[Chunk]:
    """Client side: a request dataclass as the body chunks a client frames with `version`
    (`ClientFraming.request`, `KafkaClient.call`'s `encode`); the dataclass must be of that
    version, as `kio_codec` checks a handler's response."""
    if schema_version(request.__api_key__, version) != request.__version__:
        raise ValueError(f"{type(request).__name__} v{request.__version__} is not API"
                         f" {request.__api_key__} v{version}")
    return [encode(request)]


def response_decoder(api_key: int) -> Callable[[bytes | bytearray | memoryview, int], Any]:
    """Client side: `decode(body, version)` for this API's responses (`KafkaClient.call`'s
    `decode`), the other half of `encode_request`."""

    def decode_body(body: bytes | bytearray | memoryview, version: int) -> Any:
        return decode_response(api_key, version, body)

    return decode_body


def kio_codec(api_key: int) -> Codec:
    """The `Codec` of an API served on kio's messages: decode by the version sent, encode
    the response dataclass, which must be of that version (a handler bug otherwise)."""

    def decode_body(body: memoryview, version: int) -> Any:
        return decode_request(api_key, version, body)

    def encode_body(response: Any, version: int) -> list[Chunk]:
        if response.__api_key__ != api_key or response.__version__ != schema_version(api_key, version):
            raise ValueError(f"{type(response).__name__} v{response.__version__} answers"
                             f" API {response.__api_key__}, not API {api_key} v{version}")
        return [encode(response)]

    return Codec(decode_body, encode_body)
