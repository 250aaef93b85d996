"""The broker <-> controller RPCs under /rpc/: one codec for both sides of the messages in
`common.rpc_messages` (frozen dataclasses).

    body = encode(BrokerHeartbeatRequest(4, 12, 40, want_fence=False, want_shut_down=False))  # broker
    request = decode_heartbeat_request(body)                                                  # controller
    reply_map = encode_reply(BrokerHeartbeatReply(True, False, False, False))                 # controller
    status, reply = decode_reply(BrokerHeartbeatReply, reply_map)                             # broker

A body is a msgpack map whose keys are the dataclass fields (Kafka's request and response
field names in snake_case: `want_shut_down`, `current_metadata_offset`, `new_isr_with_epochs`).
Every reply carries the `RpcStatus` envelope: `error_code` (Kafka's, 0 for none) and
`error_message`, plus `field` for a bad request and the active controller's id and address
with NOT_CONTROLLER; the other fields only when error_code is 0.

Decoding checks types, ranges and sizes and raises `RpcDecodeError` naming the field: a
controller answers it as INVALID_REQUEST (HTTP 400), a broker treats it as a bad controller.
Limits have names here, next to the messages they bound. Pure: no I/O, no clocks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final, TypeVar

from common.config import default_int
from common.rpc_messages import (
    MAX_FETCH_RECORDS,
    AllocateProducerIdsReply,
    AlterPartitionData,
    AlterPartitionPartitionReply,
    AlterPartitionReply,
    AlterPartitionRequest,
    AlterPartitionTopic,
    AlterPartitionTopicReply,
    BrokerHeartbeatReply,
    BrokerHeartbeatRequest,
    BrokerIdAndEpoch,
    BrokerRegistrationReply,
    BrokerRegistrationRequest,
    IsrMemberData,
    ListenerData,
    MetadataFetchReply,
    MetadataFetchRequest,
    OfflineReplicaTopic,
    RpcStatus,
)
from common.units import INT_MAX, LONG_MAX, MIB

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

# The key table's defaults (common.config), under the names the controller's and the broker's
# shells import.
DEFAULT_BROKER_SESSION_TIMEOUT_MS: Final = default_int("broker.session.timeout.ms")
DEFAULT_BROKER_HEARTBEAT_INTERVAL_MS: Final = default_int("broker.heartbeat.interval.ms")

MAX_RPC_BODY_BYTES: Final = 1 * MIB  # a msgpack request body
MAX_RPC_STRING_CHARS: Final = 1024  # an id, host or rack
MAX_RPC_ARRAY_ITEMS: Final = 10_000  # topics, partitions of one AlterPartition
MAX_RPC_LISTENERS: Final = 16  # listeners of one broker registration
MAX_RPC_ISR: Final = 1024  # new_isr_with_epochs of one partition
LONG_POLL_MAX_WAIT_MS: Final = 5000  # MetadataFetch max_wait_ms above this is refused

NOT_CONTROLLER: Final = 41  # common.errors.ErrorCode.NOT_CONTROLLER; the one code the envelope explains


class RpcDecodeError(ValueError):
    """A body that is not the message it should be; `field` names the culprit (None: the body)."""

    def __init__(self, message: str, field: str | None) -> None:
        super().__init__(message)
        self.field = field


# --- Encoding: one function for every message --------------------------------------------------


# Values msgpack packs as they are, asked first: a metadata-fetch reply's 1,000 (offset, record
# map) pairs went through dataclasses.is_dataclass item by item (1.8 of 2.8 ms per reply).
_LEAVES: Final = frozenset({int, str, bytes, bool, float, type(None), dict})


def _plain(value: Any) -> Any:
    if type(value) in _LEAVES:
        return value
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


def encode(message: Any) -> dict[str, Any]:
    """A request as the msgpack map it travels as."""
    return _plain(message)  # type: ignore[no-any-return]


_OK: Final = RpcStatus()  # the envelope of a reply without error


def encode_reply(message: Any = None, status: RpcStatus = _OK) -> dict[str, Any]:
    """A reply map: the envelope, and the message's fields when error_code is 0."""
    body = {key: value for key, value in _plain(status).items()
            if value is not None or key in ("error_code", "error_message")}
    if status.error_code == 0 and message is not None:
        body.update(_plain(message))
    return body


# --- Decoding ----------------------------------------------------------------------------------


def _bad(message: str, field: str | None) -> RpcDecodeError:
    return RpcDecodeError(message, field)


def _map(body: Any, required: tuple[str, ...], optional: tuple[str, ...] = (), where: str = "", *,
         strict: bool = True) -> dict[str, Any]:
    """`strict` (requests): unknown fields are refused. Replies may carry fields a newer peer added."""
    if not isinstance(body, dict):
        what = where.rstrip(".") or "the body"
        raise _bad(f"{what} must be a map, got {type(body).__name__}", where.rstrip(".") or None)
    if strict:
        for key in body:
            if key not in required and key not in optional:
                raise _bad(f"unknown field {key!r}", where + str(key))
    for key in required:
        if key not in body:
            raise _bad(f"missing field {key!r}", where + key)
    return body


def _int(body: dict[str, Any], key: str, low: int, high: int, where: str = "", default: int | None = None,
         *, nullable: bool = False) -> Any:
    value = body.get(key, default)
    if value is None and nullable:
        return None
    if type(value) is not int or not low <= value <= high:
        raise _bad(f"{where}{key} must be an integer in [{low}, {high}], got {value!r:.40}", where + key)
    return value


def _str(body: dict[str, Any], key: str, where: str = "", *, nullable: bool = False) -> Any:
    value = body.get(key)
    if (value is None and nullable) or (isinstance(value, str) and 0 < len(value) <= MAX_RPC_STRING_CHARS):
        return value
    raise _bad(f"{where}{key} must be a non-empty string{' or nil' if nullable else ''}", where + key)


def _bool(body: dict[str, Any], key: str, default: bool | None = False) -> bool:
    value = body.get(key, default)
    if type(value) is not bool:
        raise _bad(f"{key} must be a boolean, got {value!r:.40}", key)
    return value


def _list(body: dict[str, Any], key: str, where: str = "", limit: int = MAX_RPC_ARRAY_ITEMS) -> list[Any]:
    value = body.get(key)
    if not isinstance(value, list) or len(value) > limit:
        raise _bad(f"{where}{key} must be an array of at most {limit} items", where + key)
    return value


def decode_registration_request(body: Any) -> BrokerRegistrationRequest:
    m = _map(body, ("broker_id", "incarnation_id", "listeners"), ("rack", "cluster_id"))
    listeners = []
    for i, item in enumerate(_list(m, "listeners", limit=MAX_RPC_LISTENERS)):
        at = f"listeners[{i}]."
        lm = _map(item, ("name", "host", "port"), (), at)
        listeners.append(ListenerData(_str(lm, "name", at), _str(lm, "host", at), _int(lm, "port", 1, 65535, at)))
    return BrokerRegistrationRequest(_int(m, "broker_id", 0, INT_MAX), _str(m, "incarnation_id"), tuple(listeners),
                                     _str(m, "rack", nullable=True), _str(m, "cluster_id", nullable=True))


def decode_heartbeat_request(body: Any) -> BrokerHeartbeatRequest:
    m = _map(body, ("broker_id", "broker_epoch", "current_metadata_offset"),
             ("want_fence", "want_shut_down", "offline_replicas"))
    offline = []
    for i, item in enumerate(_list({"offline_replicas": m.get("offline_replicas", [])}, "offline_replicas")):
        at = f"offline_replicas[{i}]."
        tm = _map(item, ("topic_id", "partitions"), (), at)
        parts = tuple(_list(tm, "partitions", at))
        if not all(type(p) is int and 0 <= p <= INT_MAX for p in parts):
            raise _bad(f"{at}partitions must be partition ids in [0, {INT_MAX}]", at + "partitions")
        offline.append(OfflineReplicaTopic(_str(tm, "topic_id", at), parts))
    return BrokerHeartbeatRequest(_int(m, "broker_id", 0, INT_MAX), _int(m, "broker_epoch", -1, LONG_MAX),
                                  _int(m, "current_metadata_offset", -1, LONG_MAX), _bool(m, "want_fence"),
                                  _bool(m, "want_shut_down"), tuple(offline))


def decode_broker_id_and_epoch(body: Any) -> BrokerIdAndEpoch:
    m = _map(body, ("broker_id", "broker_epoch"))
    return BrokerIdAndEpoch(_int(m, "broker_id", 0, INT_MAX), _int(m, "broker_epoch", -1, LONG_MAX))


def decode_alter_partition_request(body: Any) -> AlterPartitionRequest:
    m = _map(body, ("broker_id", "broker_epoch", "topics"))
    topics: list[AlterPartitionTopic] = []
    seen: set[tuple[str, int]] = set()
    for i, item in enumerate(_list(m, "topics")):
        at = f"topics[{i}]."
        tm = _map(item, ("topic_id", "partitions"), (), at)
        topic_id, parts = _str(tm, "topic_id", at), []
        for j, p in enumerate(_list(tm, "partitions", at)):
            pat = f"{at}partitions[{j}]."
            pm = _map(p, ("partition_index", "leader_epoch", "partition_epoch", "new_isr_with_epochs"),
                      ("leader_recovery_state",), pat)
            index = _int(pm, "partition_index", 0, INT_MAX, pat)
            if (topic_id, index) in seen:  # two changes from one image would contradict each other
                raise _bad(f"partition {index} of topic id {topic_id} appears twice", pat + "partition_index")
            seen.add((topic_id, index))
            isr = []
            for k, e in enumerate(_list(pm, "new_isr_with_epochs", pat, limit=MAX_RPC_ISR)):
                em = _map(e, ("broker_id", "broker_epoch"), (), f"{pat}new_isr_with_epochs[{k}].")
                isr.append(IsrMemberData(_int(em, "broker_id", 0, INT_MAX, pat),
                                         _int(em, "broker_epoch", -1, LONG_MAX, pat)))
            parts.append(AlterPartitionData(index, _int(pm, "leader_epoch", 0, INT_MAX, pat),
                                            _int(pm, "partition_epoch", 0, INT_MAX, pat), tuple(isr),
                                            _int(pm, "leader_recovery_state", 0, 1, pat, default=0)))
        topics.append(AlterPartitionTopic(topic_id, tuple(parts)))
    ids = decode_broker_id_and_epoch({"broker_id": m["broker_id"], "broker_epoch": m["broker_epoch"]})
    return AlterPartitionRequest(ids.broker_id, ids.broker_epoch, tuple(topics))


def decode_fetch_request(body: Any) -> MetadataFetchRequest:
    m = _map(body, ("offset",), ("max_wait_ms", "max_records", "broker_id"))
    return MetadataFetchRequest(_int(m, "offset", 0, LONG_MAX),
                                _int(m, "max_wait_ms", 0, LONG_POLL_MAX_WAIT_MS, default=0),
                                _int(m, "max_records", 1, MAX_FETCH_RECORDS, default=MAX_FETCH_RECORDS),
                                _int(m, "broker_id", -1, INT_MAX, default=-1))


def decode_status(body: Any) -> RpcStatus:
    """The envelope of any reply."""
    m = _map(body, ("error_code",), strict=False)
    code, message = _int(m, "error_code", -(2**15), 2**15 - 1), m.get("error_message")
    field, address = m.get("field"), m.get("controller_address")
    redirect = code == NOT_CONTROLLER  # a MetadataFetch reply names the controller too, as its own field
    return RpcStatus(code, message if isinstance(message, str) else None, field if isinstance(field, str) else None,
                     _int(m, "controller_id", -1, INT_MAX, nullable=True) if redirect else None,
                     address if redirect and isinstance(address, str) else None)


def _registration_reply(m: dict[str, Any]) -> BrokerRegistrationReply:
    return BrokerRegistrationReply(_int(m, "broker_epoch", 0, LONG_MAX))


def _heartbeat_reply(m: dict[str, Any]) -> BrokerHeartbeatReply:
    return BrokerHeartbeatReply(_bool(m, "is_caught_up", None), _bool(m, "is_fenced", None),
                                _bool(m, "should_shut_down", None), _bool(m, "shutdown_requested"))


def _producer_ids_reply(m: dict[str, Any]) -> AllocateProducerIdsReply:
    return AllocateProducerIdsReply(_int(m, "producer_id_start", 0, LONG_MAX), _int(m, "producer_id_len", 1, INT_MAX))


def _fetch_reply(m: dict[str, Any]) -> MetadataFetchReply:
    records = []
    for i, item in enumerate(_list(m, "records", limit=MAX_FETCH_RECORDS)):
        if not isinstance(item, list) or len(item) != 2 or type(item[0]) is not int or not isinstance(item[1], dict):
            raise _bad(f"records[{i}] must be [offset, record map], got {item!r:.60}", f"records[{i}]")
        records.append((item[0], item[1]))
    snapshot = m.get("snapshot")
    if snapshot is not None and not isinstance(snapshot, bytes):
        raise _bad(f"snapshot must be bytes or nil, got {type(snapshot).__name__}", "snapshot")
    address = m.get("controller_address")
    return MetadataFetchReply(tuple(records), _int(m, "last_offset", -1, LONG_MAX),
                              _int(m, "log_start_offset", 0, LONG_MAX), snapshot,
                              _int(m, "snapshot_offset", -1, LONG_MAX, nullable=True),
                              _int(m, "controller_id", -1, INT_MAX, nullable=True),
                              address if isinstance(address, str) else None,
                              _int(m, "raft_term", -1, LONG_MAX, default=-1))


def _alter_partition_reply(m: dict[str, Any]) -> AlterPartitionReply:
    topics = []
    for i, item in enumerate(_list(m, "topics")):
        at = f"topics[{i}]."
        tm = _map(item, ("topic_id", "partitions"), (), at, strict=False)
        parts = []
        for j, p in enumerate(_list(tm, "partitions", at)):
            pat = f"{at}partitions[{j}]."
            pm = _map(p, ("partition_index", "error_code"), (), pat, strict=False)
            isr = pm.get("isr")
            if isr is not None and (not isinstance(isr, list) or not all(type(b) is int for b in isr)):
                raise _bad(f"{pat}isr must be a list of broker ids", pat + "isr")
            message = pm.get("error_message")
            parts.append(AlterPartitionPartitionReply(
                _int(pm, "partition_index", 0, INT_MAX, pat), _int(pm, "error_code", -(2**15), 2**15 - 1, pat),
                message if isinstance(message, str) else None, _int(pm, "leader_id", -1, INT_MAX, pat, nullable=True),
                _int(pm, "leader_epoch", -1, INT_MAX, pat, nullable=True), None if isr is None else tuple(isr),
                _int(pm, "partition_epoch", -1, INT_MAX, pat, nullable=True),
                _int(pm, "leader_recovery_state", 0, 1, pat, nullable=True)))
        topics.append(AlterPartitionTopicReply(_str(tm, "topic_id", at), tuple(parts)))
    return AlterPartitionReply(tuple(topics))


M = TypeVar("M")
_REPLY_DECODERS: Final[Mapping[type, Any]] = {
    BrokerRegistrationReply: _registration_reply, BrokerHeartbeatReply: _heartbeat_reply,
    AllocateProducerIdsReply: _producer_ids_reply, MetadataFetchReply: _fetch_reply,
    AlterPartitionReply: _alter_partition_reply,
}


def decode_reply(kind: type[M], body: Any) -> tuple[RpcStatus, M | None]:
    """(the envelope, the reply) — the reply is None when error_code is not 0."""
    status = decode_status(body)
    if status.error_code != 0:
        return status, None
    return status, _REPLY_DECODERS[kind](body)
