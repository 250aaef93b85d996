"""Request-level fault injection (issue 33): which requests a test has asked this broker to break,
and the Kafka answer an injected error takes. Pure: no sockets, no clock, no asyncio.

    spec = parse_fault({"kind": "error", "api": "Produce", "error": "NOT_LEADER_OR_FOLLOWER", "times": 1})
    table = FaultTable()
    fault_id = table.install(spec)                           # ValueError: refused, nothing installed
    fault = table.match(ApiKey.PRODUCE, request, "my-client", topic_name_of)   # counts a firing
    response = error_response(ApiKey.PRODUCE, version, request, ErrorCode.NOT_LEADER_OR_FOLLOWER)

A fault is one of five kinds (`FAULT_KINDS`): answer with a Kafka error instead of serving
(`error`), hold the request `delay_ms` (`delay`), close the connection before serving it
(`drop_before`) or after serving it without sending the answer (`drop_after`: "served but the
answer was lost", the case idempotence exists for), or serve it with `throttle_ms` in the answer's
throttle_time_ms (`throttle`). It matches an API and, optionally, a topic the request names, the
header's client id and a group id; `times` bounds how often it fires (None: until removed). The
first installed fault that matches a request and has firings left is the one applied; an
exhausted fault stays in the table, so its `fired` count can still be read, until removed.

An injected error fills the API's own response shape: per partition for Produce, Fetch,
ListOffsets, OffsetCommit and TxnOffsetCommit, per topic for Metadata, per key for FindCoordinator
v4+, the top-level error_code elsewhere (every other field empty, -1 or null, as Kafka's
`getErrorResponse` does). Errors are applied to the whole request, not only to the partitions of
a filter's topic. An API whose response has no place for an error in some version it serves
(OffsetFetch v8+ answers per group; CreateTopics per topic of its own shape, ...) is refused at
install with ValueError, so a test never believes in a fault that cannot fire.
"""

from __future__ import annotations

import dataclasses
import re
import types
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Union, get_args, get_origin

from common.errors import ErrorCode
from common.protocol import fetch as fetch_wire
from common.protocol import list_offsets as lo
from common.protocol import messages
from common.protocol import metadata as md
from common.protocol import offset_commit as oc
from common.protocol import produce as produce_wire
from common.protocol.api_keys import ApiKey
from common.protocol.api_table import API_SPECS
from common.protocol.messages import FIND_COORDINATOR_BATCHED_VERSION, NO_THROTTLE, build

ERROR: Final = "error"
DELAY: Final = "delay"
DROP_BEFORE: Final = "drop_before"
DROP_AFTER: Final = "drop_after"
THROTTLE: Final = "throttle"
FAULT_KINDS: Final = (ERROR, DELAY, DROP_BEFORE, DROP_AFTER, THROTTLE)

MAX_FAULTS: Final = 64  # faults installed on one broker at once (a test needs a handful)
MAX_DELAY_MS: Final = 10 * 60 * 1000  # ms; longer than any client's request.timeout.ms
MAX_THROTTLE_MS: Final = 10 * 60 * 1000  # ms
MAX_FILTER_CHARS: Final = 255  # a topic, client id or group filter (Kafka's topic name limit is 249)

TopicNameOf = Callable[[uuid.UUID], str | None]  # a Fetch v13+ topic id to its name (the image's)


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """One fault as asked for; validated at construction (ValueError naming the argument)."""

    kind: str
    api: ApiKey
    error: ErrorCode | None = None  # kind "error" only
    times: int | None = None  # None: every matching request until removed
    topic: str | None = None
    client_id: str | None = None
    group: str | None = None
    delay_ms: int = 0  # kind "delay"
    throttle_ms: int = 0  # kind "throttle"

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"kind: {self.kind!r} is not one of {', '.join(FAULT_KINDS)}")
        if self.times is not None and (isinstance(self.times, bool) or self.times <= 0):
            raise ValueError(f"times: must be a positive number of requests or None (unlimited), got {self.times!r}")
        if (self.kind == ERROR) != (self.error is not None):
            raise ValueError("error: an error fault names one Kafka error; other kinds name none")
        if self.error == ErrorCode.NONE:
            raise ValueError("error: NONE is not an error")
        if self.kind == ERROR and self.error is not None:
            _check_expressible(self.api)
        if not 0 <= self.delay_ms <= MAX_DELAY_MS or (self.kind == DELAY) != (self.delay_ms > 0):
            raise ValueError(f"ms: a delay holds a request 1..{MAX_DELAY_MS} ms, got {self.delay_ms}")
        if not 0 <= self.throttle_ms <= MAX_THROTTLE_MS or (self.kind == THROTTLE) != (self.throttle_ms > 0):
            raise ValueError(f"ms: a throttle is 1..{MAX_THROTTLE_MS} ms, got {self.throttle_ms}")
        for name in ("topic", "client_id", "group"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not 0 < len(value) <= MAX_FILTER_CHARS):
                raise ValueError(f"{name}: a filter is a non-empty string of at most {MAX_FILTER_CHARS} "
                                 f"characters, got {value!r}")

    def describe(self) -> str:
        what = {ERROR: f"error {self.error.name if self.error else ''}", DELAY: f"delay {self.delay_ms} ms",
                DROP_BEFORE: "drop the connection before serving", DROP_AFTER: "drop the answer after serving",
                THROTTLE: f"throttle {self.throttle_ms} ms"}[self.kind]
        filters = [f"{k}={v}" for k, v in (("topic", self.topic), ("client_id", self.client_id),
                                          ("group", self.group)) if v is not None]
        return (f"{what} on {api_name(self.api)}" + (f" ({', '.join(filters)})" if filters else "")
                + (f", {self.times} time(s)" if self.times is not None else ", until removed"))


@dataclass(slots=True)
class ActiveFault:
    """An installed fault and how often it fired (a request it changed)."""

    fault_id: int
    spec: FaultSpec
    fired: int = 0

    @property
    def exhausted(self) -> bool:
        return self.spec.times is not None and self.fired >= self.spec.times

    def to_json(self) -> dict[str, Any]:
        s = self.spec
        return {"id": self.fault_id, "kind": s.kind, "api": api_name(s.api),
                "error": None if s.error is None else s.error.name, "times": s.times, "topic": s.topic,
                "client_id": s.client_id, "group": s.group, "delay_ms": s.delay_ms, "throttle_ms": s.throttle_ms,
                "fired": self.fired}


@dataclass(slots=True)
class FaultTable:
    """The faults installed on one broker. `installed` is the hot path's one test."""

    faults: dict[int, ActiveFault] = field(default_factory=dict)  # by id, in install order
    next_id: int = 1
    installed: bool = False

    def install(self, spec: FaultSpec) -> ActiveFault:
        if len(self.faults) >= MAX_FAULTS:
            raise ValueError(f"this broker already holds {MAX_FAULTS} faults (MAX_FAULTS): remove some first")
        fault = self.faults[self.next_id] = ActiveFault(self.next_id, spec)
        self.next_id += 1
        self.installed = True
        return fault

    def remove(self, fault_id: int) -> ActiveFault | None:
        fault = self.faults.pop(fault_id, None)
        self.installed = bool(self.faults)
        return fault

    def clear(self) -> list[ActiveFault]:
        removed = list(self.faults.values())
        self.faults.clear()
        self.installed = False
        return removed

    def match(self, api_key: ApiKey, request: Any, client_id: str | None,
              topic_name_of: TopicNameOf) -> ActiveFault | None:
        """The fault to apply to this request, its `fired` already counted; None: serve it as is."""
        for fault in self.faults.values():  # bounded by MAX_FAULTS
            spec = fault.spec
            if spec.api != api_key or fault.exhausted:
                continue
            if spec.client_id is not None and spec.client_id != client_id:
                continue
            if spec.topic is not None and spec.topic not in request_topics(api_key, request, topic_name_of):
                continue
            if spec.group is not None and spec.group not in request_groups(request):
                continue
            fault.fired += 1
            return fault
        return None


# ---- names in, names out --------------------------------------------------------------------

def api_name(api_key: ApiKey) -> str:
    """Kafka's message name: PRODUCE -> "Produce", LIST_OFFSETS -> "ListOffsets"."""
    return "".join(part.capitalize() for part in api_key.name.split("_"))


def parse_api(name: object) -> ApiKey:
    """An API by Kafka's message name ("ListOffsets"), ApiKeys name ("LIST_OFFSETS") or key (2)."""
    if isinstance(name, int) and not isinstance(name, bool):
        try:
            key = ApiKey(name)
        except ValueError:
            raise ValueError(f"api: no API with key {name}") from None
    elif isinstance(name, str):
        upper = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name.strip()).upper()
        try:
            key = ApiKey[upper]
        except KeyError:
            raise ValueError(f"api: unknown Kafka API {name!r} (e.g. Produce, Fetch, ListOffsets, OffsetCommit)") \
                from None
    else:
        raise ValueError(f"api: a Kafka API name, got {name!r}")
    if key not in API_SPECS:
        raise ValueError(f"api: this broker does not serve {api_name(key)}")
    return key


def parse_error(name: object) -> ErrorCode:
    """A Kafka error by its Errors name ("NOT_LEADER_OR_FOLLOWER") or code (6)."""
    try:
        if isinstance(name, int) and not isinstance(name, bool):
            return ErrorCode(name)
        if isinstance(name, str):
            return ErrorCode[name.strip().upper()]
    except (KeyError, ValueError):
        pass
    raise ValueError(f"error: unknown Kafka error {name!r} (a name of org.apache.kafka.common.protocol.Errors, "
                     "e.g. NOT_LEADER_OR_FOLLOWER)")


def _int(body: Mapping[str, Any], key: str, default: int | None) -> int | None:
    value = body.get(key, default)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ValueError(f"{key}: a whole number, got {value!r}")


def parse_fault(body: Mapping[str, Any]) -> FaultSpec:
    """A FaultSpec from its JSON form (the control endpoint's body); ValueError naming the field."""
    known = {"kind", "api", "error", "times", "topic", "client_id", "group", "delay_ms", "throttle_ms"}
    unknown = sorted(set(body) - known)
    if unknown:
        raise ValueError(f"{unknown[0]}: not a fault field (fields: {', '.join(sorted(known))})")
    kind = body.get("kind")
    error = body.get("error")
    return FaultSpec(kind=str(kind), api=parse_api(body.get("api")),
                     error=None if error is None else parse_error(error), times=_int(body, "times", None),
                     topic=body.get("topic"), client_id=body.get("client_id"), group=body.get("group"),
                     delay_ms=_int(body, "delay_ms", 0) or 0, throttle_ms=_int(body, "throttle_ms", 0) or 0)


# ---- what a request names ---------------------------------------------------------------------

def request_topics(api_key: ApiKey, request: Any, topic_name_of: TopicNameOf) -> set[str]:
    """The topics a request names (none for a Metadata request of every topic)."""
    if api_key == ApiKey.PRODUCE:
        return {t.name for t in request.topic_data}
    if api_key == ApiKey.FETCH:
        return {t.topic or (topic_name_of(t.topic_id) or "") for t in request.topics}
    if api_key == ApiKey.METADATA:
        return set(request.topics or ())
    names: set[str] = set()
    for t in getattr(request, "topics", None) or ():  # kio's requests: entries with a name
        name = t if isinstance(t, str) else getattr(t, "name", None)
        if isinstance(name, str):
            names.add(name)
    return names


def request_groups(request: Any) -> set[str]:
    """The group ids a request names (group APIs, FindCoordinator of groups)."""
    group = getattr(request, "group_id", None)
    if isinstance(group, str):
        return {group}
    if getattr(request, "key_type", 0) == messages.KEY_TYPE_GROUP:
        keys = getattr(request, "coordinator_keys", None) or ()
        key = getattr(request, "key", None)
        return set(keys) | ({key} if isinstance(key, str) else set())
    return {g if isinstance(g, str) else str(getattr(g, "group_id", "")) for g in getattr(request, "groups", ()) or ()}


# ---- an error in the API's own answer ------------------------------------------------------------

_PER_ITEM: Final = frozenset({ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA, ApiKey.LIST_OFFSETS,
                              ApiKey.OFFSET_COMMIT, ApiKey.TXN_OFFSET_COMMIT})


def _check_expressible(api_key: ApiKey) -> None:
    if api_key in _PER_ITEM:
        return
    low, high = API_SPECS[api_key].versions
    for version in range(low, high + 1):
        if api_key == ApiKey.FIND_COORDINATOR and version >= FIND_COORDINATOR_BATCHED_VERSION:
            continue
        if _top_level(api_key, version, ErrorCode.UNKNOWN_SERVER_ERROR) is None:
            raise ValueError(f"api: {api_name(api_key)} v{version} has no error field tidelog can set "
                             "(its answer is per item of a shape this module does not build)")


def error_response(api_key: ApiKey, version: int, request: Any, code: ErrorCode) -> Any | None:
    """The API's response of `version` carrying `code` where Kafka puts errors; None for a Produce
    with acks=0 (no answer is sent) or an API/version without a place for it (refused at install)."""
    if api_key == ApiKey.PRODUCE:
        if request.acks == 0:
            return None
        return produce_wire.ProduceResponse(tuple(produce_wire.TopicProduceResponse(t.name, tuple(
            produce_wire.PartitionProduceResponse(p.index, int(code), -1) for p in t.partition_data))
            for t in request.topic_data))
    if api_key == ApiKey.FETCH:
        return fetch_wire.FetchResponse(0, tuple(fetch_wire.FetchTopicResponse(t.topic, tuple(
            fetch_wire.FetchPartitionResponse(p.partition, int(code), -1, None) for p in t.partitions), t.topic_id)
            for t in request.topics), session_id=request.session_id)
    if api_key == ApiKey.METADATA:
        return md.MetadataResponse(0, (), None, -1, tuple(
            md.MetadataResponseTopic(int(code), name, False, ()) for name in request.topics or ()))
    if api_key == ApiKey.FIND_COORDINATOR and version >= FIND_COORDINATOR_BATCHED_VERSION:
        m = messages.response_module(api_key, version)
        return build(m.FindCoordinatorResponse, throttle_time=NO_THROTTLE, coordinators=tuple(
            build(m.Coordinator, key=key, node_id=-1, host="", port=-1, error_code=code, error_message=None)
            for key in request.coordinator_keys))
    if api_key == ApiKey.LIST_OFFSETS and version == 0:  # a hand codec (common/protocol/list_offsets.py)
        return lo.V0Response(tuple(lo.V0TopicResponse(t.name, tuple(
            lo.V0PartitionResponse(p.partition_index, int(code), ()) for p in t.partitions)) for t in request.topics))
    if api_key in _PER_ITEM:
        return _per_partition(api_key, version, request, code)
    return _top_level(api_key, version, code)


def _per_partition(api_key: ApiKey, version: int, request: Any, code: ErrorCode) -> Any:
    """ListOffsets, OffsetCommit, TxnOffsetCommit: topics -> partitions, each with the error."""
    # OffsetCommit v0/v1 are written from v2's classes (common/protocol/offset_commit.py)
    schema = oc.schema_version(version) if api_key == ApiKey.OFFSET_COMMIT else version
    response = messages.response_type(api_key, schema)
    topic_type, partition_type = _nested(response, "topics")

    def index(p: Any) -> int:
        return int(p.partition_index)

    topics = tuple(build(topic_type, name=t.name, partitions=tuple(
        _filled(partition_type, code, partition_index=index(p)) for p in t.partitions)) for t in request.topics)
    return _filled(response, code, topics=topics)


def _nested(entity: type[Any], name: str) -> tuple[type[Any], type[Any]]:
    """The element type of `entity.name` (a tuple) and of that element's `partitions`."""
    fields = {f.name: f for f in dataclasses.fields(entity)}
    topic_type = get_args(fields[name].type)[0]
    partition_fields = {f.name: f for f in dataclasses.fields(topic_type)}
    return topic_type, get_args(partition_fields["partitions"].type)[0]


def _top_level(api_key: ApiKey, version: int, code: ErrorCode) -> Any | None:
    try:
        cls = messages.response_type(api_key, version)
    except KeyError:  # a hand codec's version
        return None
    if "error_code" not in {f.name for f in dataclasses.fields(cls)}:
        return None
    try:
        return _filled(cls, code)
    except TypeError:  # a required field of a type with no "nothing" value
        return None


def _filled(cls: type[Any], code: ErrorCode, **given: Any) -> Any:
    """`cls` with `given`, `code` in error_code, and every other required field at Kafka's value
    for "nothing": -1 for numbers (ids, epochs, offsets), "" or null for strings, empty lists."""
    values: dict[str, Any] = dict(given)
    for f in dataclasses.fields(cls):
        if f.name in values:
            continue
        if f.name == "error_code":
            values[f.name] = code
        elif f.name == "throttle_time":
            values[f.name] = NO_THROTTLE
        elif f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        else:
            values[f.name] = _nothing(f.type)
    return cls(**values)


def _nothing(annotation: Any) -> Any:
    if isinstance(annotation, str):  # kio writes unions and tuples as strings
        if annotation.endswith("| None"):
            return None
        if annotation.startswith("tuple"):
            return ()
        raise TypeError(f"no empty value for {annotation}")
    origin = get_origin(annotation)
    if origin is tuple:
        return ()
    if origin in (Union, types.UnionType) and type(None) in get_args(annotation):
        return None
    if isinstance(annotation, type):
        if issubclass(annotation, bool):
            return False
        if issubclass(annotation, int):
            return annotation(-1)
        if issubclass(annotation, str):
            return annotation("")
        if issubclass(annotation, bytes):
            return b""
        if issubclass(annotation, uuid.UUID):
            return uuid.UUID(int=0)
    raise TypeError(f"no empty value for {annotation}")


def with_throttle(response: Any, throttle_ms: int) -> Any:
    """`response` with its throttle time set (hand codecs: throttle_time_ms; kio: throttle_time)."""
    from datetime import timedelta

    names = {f.name for f in dataclasses.fields(response)}
    if "throttle_time_ms" in names:
        return dataclasses.replace(response, throttle_time_ms=throttle_ms)
    if "throttle_time" in names:
        return dataclasses.replace(response, throttle_time=timedelta(milliseconds=throttle_ms))
    return response


def installed_json(faults: Iterable[ActiveFault]) -> list[dict[str, Any]]:
    return [f.to_json() for f in faults]
