"""Metadata log records: frozen slotted dataclasses and their versioned msgpack encoding.

A record encodes to a msgpack map `{"type": <Kafka metadata apiKey>, "version": N, ...}`
with the fields under Kafka's names in snake_case. Type ids follow Kafka's
`common/metadata/*Record.json` apiKeys so `dump-log` output reads like Kafka's; BeginEpoch
is tidelog's own (Kafka's KRaft keeps the epoch in the Raft log instead) and takes 128.

Anything that is not a well-formed record of a known type and supported version raises
`MetadataRecordError`; nothing else escapes `decode_record` / `decode_records`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from enum import IntEnum
from types import MappingProxyType
from typing import Any, TypeVar, Union

import msgpack

from common.metadata_version import LEGACY_LEVEL, SHORT_PARTITION_CHANGE_LEVEL
from metadata.codec import (
    BOOL,
    BROKER_ID,
    EPOCH32,
    IDS,
    INT16_MAX,
    INT64,
    LISTENERS,
    MAX_STRING_CHARS,
    NAME,
    OPT_BOOL,
    OPT_IDS,
    OPT_STR,
    PARTITION_ID,
    STR,
    Enum,
    Int,
    Kind,
    Listener,
    MetadataRecordError,
    Nullable,
    check_fields,
    fields_from_map,
    fields_to_map,
    instance_builder,
)

__all__ = [
    "NO_LEADER", "NO_LEADER_CHANGE", "LeaderRecoveryState", "ConfigResourceType", "Listener",
    "MetadataRecordError", "RegisterBroker", "UnregisterBroker", "BrokerRegistrationChange",
    "Topic", "Partition", "PartitionChange", "RemoveTopic", "Config", "FeatureLevel",
    "ProducerIds", "OfflineReplicas", "NoOp", "BeginEpoch", "BeginTransaction", "EndTransaction", "AbortTransaction",
    "AccessControlEntry", "RemoveAccessControlEntry", "ACL_KINDS",
    "UserScramCredential", "RemoveUserScramCredential", "SCRAM_KINDS",
    "TRANSACTION_MARKERS", "Record", "RECORD_TYPES", "encode_record",
    "decode_record", "encode_records", "decode_records", "record_to_map", "record_from_map",
    "check_partition_state",
]

NO_LEADER = -1  # LeaderConstants.NO_LEADER: the partition is offline
NO_LEADER_CHANGE = -2  # PartitionChangeRecord.Leader default: "the leader didn't change"


class LeaderRecoveryState(IntEnum):
    """Kafka's LeaderRecoveryState: RECOVERING after an unclean election until the leader recovers."""

    RECOVERED = 0
    RECOVERING = 1


class ConfigResourceType(IntEnum):
    """Kafka's ConfigResource.Type codes for the resources tidelog configures."""

    TOPIC = 2
    BROKER = 4
    GROUP = 32  # KIP-848's per-group configs (groups/group_configs.py)


LEADER = Int(NO_LEADER, 2**31 - 1)
LEADER_OR_NO_CHANGE = Int(NO_LEADER_CHANGE, 2**31 - 1)
RECOVERY = Enum(LeaderRecoveryState)


class _Record:
    """Base of every record: validates its fields at construction."""

    __slots__ = ()

    def __post_init__(self) -> None:
        name = type(self).__name__
        check_fields(self, _SCHEMAS[type(self)].kinds, name)
        self._invariants(name)

    def _invariants(self, where: str) -> None:
        """Cross-field rules; the default has none."""


@dataclass(frozen=True, slots=True)
class _Schema:
    type_id: int
    version: int
    kinds: Mapping[str, Kind]
    # Fields added after a record type was first written (Kafka's tagged fields): absent on
    # the wire means this default, and the default is left off the wire (below metadata.version
    # SHORT_PARTITION_CHANGE_LEVEL, only for those in `omitted_legacy`).
    optional: Mapping[str, Any]
    omitted_legacy: Mapping[str, Any]


_R = TypeVar("_R")

_SCHEMAS: dict[type, _Schema] = {}
_BY_TYPE_ID: dict[int, type] = {}


def _record(type_id: int, version: int = 0, optional: Mapping[str, Any] | None = None,
            written: frozenset[str] = frozenset(), **kinds: Kind) -> Callable[[type[_R]], type[_R]]:
    """Register a record class under its type id; its field kinds must match its fields.
    `written`: optional fields still written at their default below metadata.version
    SHORT_PARTITION_CHANGE_LEVEL, because a node of an earlier build, which required them, may
    read the log; from that level every node reads them absent."""

    def register(cls: type[_R]) -> type[_R]:
        names = [f.name for f in fields(cls)]  # type: ignore[arg-type]  # every record is a dataclass
        if names != list(kinds):
            raise TypeError(f"{cls.__name__}: kinds {list(kinds)} do not match fields {names}")
        read = MappingProxyType(dict(optional or {}))
        _SCHEMAS[cls] = _Schema(type_id, version, MappingProxyType(kinds), read,
                                MappingProxyType({k: v for k, v in read.items() if k not in written}))
        _BY_TYPE_ID[type_id] = cls
        return cls

    return register


def check_partition_state(replicas: tuple[int, ...], isr: tuple[int, ...],
                          elr: tuple[int, ...], leader: int, where: str,
                          adding: tuple[int, ...] = (), removing: tuple[int, ...] = ()) -> None:
    """Kafka's structural partition rules: ISR and ELR are disjoint subsets of the replicas;
    a reassignment's adding and removing replicas are disjoint subsets of the replicas."""
    assigned = set(replicas)
    if replicas and not elr and not adding and not removing and assigned.issuperset(isr) \
            and (leader == NO_LEADER or leader in assigned):
        return  # the usual shape, without the sets the rules below build (once per record replayed)
    if not replicas:
        raise MetadataRecordError(f"{where}: replicas must not be empty")
    if not assigned.issuperset(isr):
        raise MetadataRecordError(f"{where}: isr {list(isr)} is not a subset of replicas {list(replicas)}")
    if not assigned.issuperset(elr):
        raise MetadataRecordError(f"{where}: elr {list(elr)} is not a subset of replicas {list(replicas)}")
    if set(isr) & set(elr):
        raise MetadataRecordError(f"{where}: isr {list(isr)} and elr {list(elr)} overlap")
    if leader != NO_LEADER and leader not in assigned:
        raise MetadataRecordError(f"{where}: leader {leader} is not one of replicas {list(replicas)}")
    if not assigned.issuperset(adding) or not assigned.issuperset(removing) or set(adding) & set(removing):
        raise MetadataRecordError(f"{where}: adding {list(adding)} and removing {list(removing)} must be "
                                  f"disjoint subsets of replicas {list(replicas)}")
    if removing and len(removing) >= len(replicas):
        raise MetadataRecordError(f"{where}: removing {list(removing)} would leave no replica")


@_record(0, broker_id=BROKER_ID, incarnation_id=NAME, listeners=LISTENERS, rack=OPT_STR, fenced=BOOL)
@dataclass(frozen=True, slots=True)
class RegisterBroker(_Record):
    """A broker (re)registers; its broker_epoch becomes this record's offset."""

    broker_id: int
    incarnation_id: str
    listeners: tuple[Listener, ...]
    rack: str | None = None
    fenced: bool = True


@_record(1, broker_id=BROKER_ID, broker_epoch=INT64)
@dataclass(frozen=True, slots=True)
class UnregisterBroker(_Record):
    """A broker's registration (of the given broker_epoch) is removed."""

    broker_id: int
    broker_epoch: int


@_record(17, broker_id=BROKER_ID, broker_epoch=INT64, fenced=OPT_BOOL, in_controlled_shutdown=OPT_BOOL)
@dataclass(frozen=True, slots=True)
class BrokerRegistrationChange(_Record):
    """Fence/unfence a broker or mark it in controlled shutdown; None means unchanged."""

    broker_id: int
    broker_epoch: int
    fenced: bool | None = None
    in_controlled_shutdown: bool | None = None


@_record(2, name=NAME, topic_id=NAME)
@dataclass(frozen=True, slots=True)
class Topic(_Record):
    """A topic is created; its partitions follow as Partition records."""

    name: str
    topic_id: str


@_record(3, optional={"removing_replicas": (), "adding_replicas": ()},
         topic_id=NAME, partition_id=PARTITION_ID, replicas=IDS, isr=IDS, elr=IDS, leader=LEADER,
         leader_epoch=EPOCH32, partition_epoch=EPOCH32, leader_recovery_state=RECOVERY,
         removing_replicas=IDS, adding_replicas=IDS)
@dataclass(frozen=True, slots=True)
class Partition(_Record):
    """The full state of one partition (creation, or a snapshot of it)."""

    topic_id: str
    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    elr: tuple[int, ...] = ()
    leader: int = NO_LEADER
    leader_epoch: int = 0
    partition_epoch: int = 0
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED
    # KIP-455: set while a reassignment moves the partition (PartitionRecord's RemovingReplicas/AddingReplicas)
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()

    def _invariants(self, where: str) -> None:
        check_partition_state(self.replicas, self.isr, self.elr, self.leader, where,
                              self.adding_replicas, self.removing_replicas)


# Every field but the partition's key is one of Kafka's tagged fields (PartitionChangeRecord.json:
# Isr, Leader, Replicas, LeaderRecoveryState, Elr... each with its "unchanged" default), and this
# build reads any of them absent as that default. The builds before it require them, so they are
# written until the cluster finalizes metadata.version 2 (common.metadata_version), which every
# node that reads the log then supports: left off, a moved leadership is 77 bytes, not 115, and
# a controlled shutdown's batch of 5,000 a third fewer Raft entries.
@_record(5, optional={"isr": None, "elr": None, "leader": NO_LEADER_CHANGE, "replicas": None,
                      "leader_recovery_state": None, "removing_replicas": None, "adding_replicas": None},
         written=frozenset({"isr", "elr", "leader", "replicas", "leader_recovery_state"}),
         topic_id=NAME, partition_id=PARTITION_ID, isr=OPT_IDS, elr=OPT_IDS,
         leader=LEADER_OR_NO_CHANGE, replicas=OPT_IDS, leader_recovery_state=Nullable(RECOVERY),
         removing_replicas=OPT_IDS, adding_replicas=OPT_IDS)
@dataclass(frozen=True, slots=True)
class PartitionChange(_Record):
    """A change to one partition: None (or NO_LEADER_CHANGE for leader) means unchanged."""

    topic_id: str
    partition_id: int
    isr: tuple[int, ...] | None = None
    elr: tuple[int, ...] | None = None
    leader: int = NO_LEADER_CHANGE
    replicas: tuple[int, ...] | None = None
    leader_recovery_state: LeaderRecoveryState | None = None
    # KIP-455 (PartitionChangeRecord's RemovingReplicas/AddingReplicas); None means unchanged
    removing_replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None

    def _invariants(self, where: str) -> None:
        if self.replicas == ():
            raise MetadataRecordError(f"{where}: replicas must not be empty")


@_record(9, topic_id=NAME)
@dataclass(frozen=True, slots=True)
class RemoveTopic(_Record):
    """A topic, its partitions and its configs are removed."""

    topic_id: str


@_record(4, resource_type=Enum(ConfigResourceType), resource_name=STR, name=NAME, value=OPT_STR)
@dataclass(frozen=True, slots=True)
class Config(_Record):
    """Set one config key of a topic or broker; value None deletes it. Broker "" is the cluster default."""

    resource_type: ConfigResourceType
    resource_name: str
    name: str
    value: str | None


@_record(12, name=NAME, level=Int(0, INT16_MAX))
@dataclass(frozen=True, slots=True)
class FeatureLevel(_Record):
    """Finalise a feature at a level; level 0 removes the feature, as in Kafka."""

    name: str
    level: int


@_record(15, broker_id=BROKER_ID, broker_epoch=INT64, next_producer_id_block_start=Int(0, 2**63 - 1))
@dataclass(frozen=True, slots=True)
class ProducerIds(_Record):
    """A block of producer ids was handed to a broker; the next block starts here."""

    broker_id: int
    broker_epoch: int
    next_producer_id_block_start: int


@_record(129, broker_id=BROKER_ID, broker_epoch=INT64, topic_id=NAME, partition_ids=IDS)
@dataclass(frozen=True, slots=True)
class OfflineReplicas(_Record):
    """Broker `broker_id` (of `broker_epoch`) could not open these replicas of one topic (an
    OSError: EMFILE, ENOSPC, EACCES...): they are offline there until it registers again.

    tidelog's own type (129): Kafka's KRaft broker reports a whole failed log dir
    (BrokerHeartbeatRequest.OfflineLogDirs) and the controller marks the partitions of that
    dir (handleDirectoriesOffline); tidelog fails one replica, not its log dir, so the record
    names replicas. Its partition changes (ISR, leader) follow as PartitionChange records."""

    broker_id: int
    broker_epoch: int
    topic_id: str
    partition_ids: tuple[int, ...]

    def _invariants(self, where: str) -> None:
        if not self.partition_ids:
            raise MetadataRecordError(f"{where}: partition_ids must not be empty")


@_record(20)
@dataclass(frozen=True, slots=True)
class NoOp(_Record):
    """Advances the committed offset (liveness, fencing of lagging readers); changes nothing else."""


@_record(128, epoch=Int(0, 2**63 - 1))
@dataclass(frozen=True, slots=True)
class BeginEpoch(_Record):
    """First record of a new active controller: epoch is its Raft term."""

    epoch: int


# KIP-868 metadata transactions: a change too large for one chunk is framed by these, and
# replay (metadata.transactions) publishes its records only at EndTransaction. Kafka's apiKeys.
@_record(23, name=OPT_STR)
@dataclass(frozen=True, slots=True)
class BeginTransaction(_Record):
    """Opens a metadata transaction: what follows is buffered until End or Abort."""

    name: str | None = None


@_record(24)
@dataclass(frozen=True, slots=True)
class EndTransaction(_Record):
    """Closes the open transaction: its records apply now, together."""


@_record(25, reason=OPT_STR)
@dataclass(frozen=True, slots=True)
class AbortTransaction(_Record):
    """Discards the open transaction's records (a new active controller found it unfinished)."""

    reason: str | None = None


# ACLs (issue 29): Kafka's AccessControlEntryRecord (apiKey 6) and RemoveAccessControlEntryRecord
# (apiKey 7), each ACL named by a UUID the controller gives it. Codes are Kafka's ResourceType,
# PatternType, AclOperation and AclPermissionType (security.acl); the rules allow only a complete
# binding (security.acl.creation_error), the kinds here keep garbage out of replay.
ACL_CODE = Int(0, 127)  # an int8 enum code


@_record(6, id=NAME, resource_type=ACL_CODE, resource_name=NAME, pattern_type=ACL_CODE, principal=NAME,
         host=NAME, operation=ACL_CODE, permission_type=ACL_CODE)
@dataclass(frozen=True, slots=True)
class AccessControlEntry(_Record):
    """An ACL is created under `id`."""

    id: str
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@_record(7, id=NAME)
@dataclass(frozen=True, slots=True)
class RemoveAccessControlEntry(_Record):
    """The ACL `id` is deleted."""

    id: str


ACL_KINDS: Mapping[str, Kind] = _SCHEMAS[AccessControlEntry].kinds  # an ACL in a snapshot: the record's fields


# SCRAM credentials (issue 29, KIP-554): Kafka's UserScramCredentialRecord (apiKey 11) and
# RemoveUserScramCredentialRecord (apiKey 22). Mechanism codes are Kafka's ScramMechanism types
# (1 SCRAM-SHA-256, 2 SCRAM-SHA-512). The salt and keys are Kafka's bytes fields, kept here as
# base64 text: the metadata fetch RPC carries records as JSON. Never the password.
SCRAM_MECHANISM = Int(1, 2)
SCRAM_ITERATIONS = Int(1, 2**31 - 1)


@_record(11, name=NAME, mechanism=SCRAM_MECHANISM, salt=NAME, stored_key=NAME, server_key=NAME,
         iterations=SCRAM_ITERATIONS)
@dataclass(frozen=True, slots=True)
class UserScramCredential(_Record):
    """User `name`'s credential for one mechanism is created or replaced."""

    name: str
    mechanism: int
    salt: str  # base64
    stored_key: str  # base64
    server_key: str  # base64
    iterations: int


@_record(22, name=NAME, mechanism=SCRAM_MECHANISM)
@dataclass(frozen=True, slots=True)
class RemoveUserScramCredential(_Record):
    """User `name`'s credential for one mechanism is deleted."""

    name: str
    mechanism: int


SCRAM_KINDS: Mapping[str, Kind] = _SCHEMAS[UserScramCredential].kinds  # a credential in a snapshot


Record = Union[RegisterBroker, UnregisterBroker, BrokerRegistrationChange, Topic, Partition,
               PartitionChange, RemoveTopic, Config, FeatureLevel, ProducerIds, OfflineReplicas, NoOp, BeginEpoch,
               BeginTransaction, EndTransaction, AbortTransaction, AccessControlEntry,
               RemoveAccessControlEntry, UserScramCredential, RemoveUserScramCredential]
TRANSACTION_MARKERS: tuple[type, ...] = (BeginTransaction, EndTransaction, AbortTransaction)

RECORD_TYPES: Mapping[int, type] = MappingProxyType(_BY_TYPE_ID)
_ENVELOPE = ("type", "version")

# Partition maps are nearly all of one shape (a creation's records, a snapshot's partitions):
# no reassignment running (its two lists left out), or one running (both present). Those are
# checked here without the per-field bookkeeping of `check_fields`: a broker catching up with
# 100,000 partitions spent more than half its CPU (1.7 of 3.1 s) decoding them the general way.
PARTITION_FIELDS: tuple[str, ...] = tuple(_SCHEMAS[Partition].kinds)
_PARTITION_OPTIONAL = frozenset(_SCHEMAS[Partition].optional)
PLAIN_PARTITION_KEYS = frozenset(PARTITION_FIELDS) - _PARTITION_OPTIONAL  # (snapshots add no envelope)
REASSIGNING_PARTITION_KEYS = frozenset(PARTITION_FIELDS)
_PLAIN_PARTITION_RECORD_KEYS = PLAIN_PARTITION_KEYS | frozenset(_ENVELOPE)
_REASSIGNING_PARTITION_RECORD_KEYS = REASSIGNING_PARTITION_KEYS | frozenset(_ENVELOPE)
_ID_LO, _ID_HI = IDS.item.lo, IDS.item.hi
_EPOCH_HI = EPOCH32.hi
_RECOVERY_STATES = {int(state): state for state in LeaderRecoveryState}
_new_partition = instance_builder(Partition, PARTITION_FIELDS)


def _ids(value: Any) -> tuple[int, ...] | None:
    """IDS's check, without building an error: None when the value is not a list (or tuple) of distinct ids."""
    if type(value) is not list and type(value) is not tuple:
        return None
    for v in value:  # bounded by the list (a few replicas)
        if type(v) is not int or not _ID_LO <= v <= _ID_HI:
            return None
    items = tuple(value)
    return items if len(set(items)) == len(items) else None


def plain_partition_fields(m: Mapping[str, Any], topic_id: Any) -> tuple[Any, ...] | None:
    """A partition map's field values in PARTITION_FIELDS order, checked and normalised exactly as
    Partition's kinds and `check_partition_state` do it, or None when any is not of the usual
    shape: the general path then decodes the map and, when it is wrong, names what is wrong. The
    caller has checked the map's keys (PLAIN_PARTITION_KEYS or REASSIGNING_PARTITION_KEYS);
    `topic_id` is the map's own, or its topic's in a snapshot."""
    replicas, isr, elr = _ids(m["replicas"]), _ids(m["isr"]), _ids(m["elr"])
    adding, removing = _ids(m.get("adding_replicas", [])), _ids(m.get("removing_replicas", []))
    partition_id, leader = m["partition_id"], m["leader"]
    leader_epoch, partition_epoch = m["leader_epoch"], m["partition_epoch"]
    state = m["leader_recovery_state"]
    recovery = _RECOVERY_STATES.get(state) if type(state) is int else None
    if replicas is None or isr is None or elr is None or adding is None or removing is None or recovery is None \
            or type(topic_id) is not str or not 0 < len(topic_id) <= MAX_STRING_CHARS \
            or type(partition_id) is not int or not 0 <= partition_id <= PARTITION_ID.hi \
            or type(leader) is not int or not NO_LEADER <= leader <= LEADER.hi \
            or type(leader_epoch) is not int or not 0 <= leader_epoch <= _EPOCH_HI \
            or type(partition_epoch) is not int or not 0 <= partition_epoch <= _EPOCH_HI:
        return None
    try:
        check_partition_state(replicas, isr, elr, leader, "", adding, removing)
    except MetadataRecordError:
        return None
    return (topic_id, partition_id, replicas, isr, elr, leader, leader_epoch, partition_epoch, recovery,
            removing, adding)


# PartitionChange maps: a controlled shutdown at 100,000 partitions replays ~100,000 of them on
# every controller and broker, and checking one the general way (a dataclass built from keyword
# arguments, then `check_fields` over nine kinds) was 10 of the ~20 us each cost from wire to image.
CHANGE_FIELDS: tuple[str, ...] = tuple(_SCHEMAS[PartitionChange].kinds)
_CHANGE_RECORD_KEYS = frozenset(CHANGE_FIELDS) | frozenset(_ENVELOPE)  # any subset: the rest are optional
_new_partition_change = instance_builder(PartitionChange, CHANGE_FIELDS)
_BAD: Any = object()  # not a valid value of the field: the general path names what is wrong


def _opt_ids(value: Any) -> Any:
    """OPT_IDS's check without building an error: the normalised value, or _BAD."""
    if value is None:
        return None
    items = _ids(value)
    return _BAD if items is None else items


def partition_change_fields(m: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """A PartitionChange map's field values in CHANGE_FIELDS order, checked and normalised exactly
    as PartitionChange's kinds and invariants do it, or None when any is not of the usual shape
    (the general path then names what is wrong). The caller has checked that the map has no other
    keys; an absent one takes its default (the schema's optional fields: every one but the key)."""
    topic_id, partition_id = m.get("topic_id"), m.get("partition_id")
    leader, state = m.get("leader", NO_LEADER_CHANGE), m.get("leader_recovery_state")
    isr, elr, replicas = _opt_ids(m.get("isr")), _opt_ids(m.get("elr")), _opt_ids(m.get("replicas"))
    removing, adding = _opt_ids(m.get("removing_replicas")), _opt_ids(m.get("adding_replicas"))
    recovery = state if state is None or type(state) is LeaderRecoveryState \
        else _RECOVERY_STATES.get(state, _BAD) if type(state) is int else _BAD
    if isr is _BAD or elr is _BAD or replicas is _BAD or removing is _BAD or adding is _BAD or recovery is _BAD \
            or replicas == () \
            or type(topic_id) is not str or not 0 < len(topic_id) <= MAX_STRING_CHARS \
            or type(partition_id) is not int or not 0 <= partition_id <= PARTITION_ID.hi \
            or type(leader) is not int or not NO_LEADER_CHANGE <= leader <= LEADER_OR_NO_CHANGE.hi:
        return None
    return (topic_id, partition_id, isr, elr, leader, replicas, recovery, removing, adding)


_CHANGE_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {"isr": None, "elr": None, "leader": NO_LEADER_CHANGE, "replicas": None, "leader_recovery_state": None})
_CHANGE_NAMES = frozenset(CHANGE_FIELDS)


def new_partition_change(topic_id: str, partition_id: int, **fields: Any) -> PartitionChange:
    """PartitionChange(topic_id, partition_id, **fields), checked exactly as its constructor checks
    it (which raises when this does not apply), through `partition_change_fields`: the election
    and ISR rules build one per leadership or ISR seat they move, and the constructor's
    check_fields was half the active controller's rule CPU in a controlled shutdown."""
    m = {**_CHANGE_DEFAULTS, "topic_id": topic_id, "partition_id": partition_id, **fields}
    values = partition_change_fields(m) if m.keys() <= _CHANGE_NAMES else None
    if values is None:
        return PartitionChange(topic_id, partition_id, **fields)
    return _new_partition_change(values)


def record_to_map(record: Record, metadata_version: int = LEGACY_LEVEL) -> dict[str, Any]:
    """The msgpack map of a record: type id, version and fields, in the form the cluster's finalized
    `metadata_version` (common.metadata_version) lets every node read; the default, the oldest
    form, any build reads."""
    schema = _SCHEMAS.get(type(record))
    if schema is None:
        raise MetadataRecordError(f"not a metadata record: {type(record).__name__}")
    omitted = schema.optional if metadata_version >= SHORT_PARTITION_CHANGE_LEVEL else schema.omitted_legacy
    return {"type": schema.type_id, "version": schema.version, **fields_to_map(record, schema.kinds, omitted)}


def record_from_map(m: Any) -> Record:
    """Build a record from its decoded map, checking type, version and every field."""
    if not isinstance(m, dict):
        raise MetadataRecordError(f"a record must be a map, got {type(m).__name__}")
    type_id, version = m.get("type"), m.get("version")
    if type(type_id) is not int:
        raise MetadataRecordError(f"record type must be an integer, got {type_id!r:.40}")
    cls = _BY_TYPE_ID.get(type_id)
    if cls is None:
        raise MetadataRecordError(f"unknown metadata record type {type_id}")
    schema = _SCHEMAS[cls]
    if type(version) is not int or version != schema.version:
        raise MetadataRecordError(
            f"{cls.__name__} record version {version!r:.40} is not supported "
            f"(this build reads version {schema.version})")
    if cls is PartitionChange and m.keys() <= _CHANGE_RECORD_KEYS:
        change = partition_change_fields(m)
        if change is not None:
            return _new_partition_change(change)
    if cls is Partition and (m.keys() == _PLAIN_PARTITION_RECORD_KEYS or m.keys() == _REASSIGNING_PARTITION_RECORD_KEYS):
        values = plain_partition_fields(m, m["topic_id"])
        if values is not None:
            return _new_partition(values)
    return fields_from_map(cls, m, schema.kinds, cls.__name__, ignore=_ENVELOPE, optional=schema.optional)


def encode_record(record: Record, metadata_version: int = LEGACY_LEVEL) -> bytes:
    """One record as msgpack bytes (`record_to_map`'s form for `metadata_version`)."""
    packed: bytes = msgpack.packb(record_to_map(record, metadata_version), use_bin_type=True)
    return packed


def _unpack(data: bytes) -> Any:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise MetadataRecordError(f"expected bytes, got {type(data).__name__}")
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=True)
    except (msgpack.UnpackException, ValueError, TypeError) as exc:
        # ExtraData (trailing bytes), OutOfData, FormatError, StackError, bad UTF-8,
        # unhashable or non-string map keys: all are "not a record".
        detail = f": {exc}" if str(exc) else ""
        raise MetadataRecordError(f"not valid msgpack ({type(exc).__name__}{detail})"[:200]) from None


def decode_record(data: bytes) -> Record:
    """One record from msgpack bytes; anything else raises MetadataRecordError."""
    return record_from_map(_unpack(data))


def encode_records(records: Iterable[Record], metadata_version: int = LEGACY_LEVEL) -> bytes:
    """A batch of records as one msgpack array of record maps (`record_to_map`'s form)."""
    packed: bytes = msgpack.packb([record_to_map(r, metadata_version) for r in records], use_bin_type=True)
    return packed


def decode_record_maps(data: bytes) -> list[dict[str, Any]]:
    """A batch encoded by `encode_records`, as its record maps, unchecked: for serving records
    a controller already applied (and so checked) to brokers, which check them on replay."""
    items = _unpack(data)
    if not isinstance(items, list):
        raise MetadataRecordError(f"a record batch must be an array, got {type(items).__name__}")
    return items


def decode_records(data: bytes) -> tuple[Record, ...]:
    """A batch encoded by `encode_records`; anything else raises MetadataRecordError."""
    items = _unpack(data)
    if not isinstance(items, list):
        raise MetadataRecordError(f"a record batch must be an array, got {type(items).__name__}")
    out = []
    for i, m in enumerate(items):
        try:
            out.append(record_from_map(m))
        except MetadataRecordError as exc:
            raise MetadataRecordError(f"record {i} of batch: {exc}") from None
    return tuple(out)
