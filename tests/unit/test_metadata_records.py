"""metadata/records.py: one table drives the encoder and the decoder; errors and fuzz."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.metadata_version import LEGACY_LEVEL, SHORT_PARTITION_CHANGE_LEVEL
from metadata.codec import fields_from_map
from metadata.records import (
    _SCHEMAS,
    NO_LEADER,
    NO_LEADER_CHANGE,
    RECORD_TYPES,
    BeginEpoch,
    BrokerRegistrationChange,
    Config,
    ConfigResourceType,
    FeatureLevel,
    LeaderRecoveryState,
    Listener,
    MetadataRecordError,
    AbortTransaction,
    AccessControlEntry,
    BeginTransaction,
    EndTransaction,
    NoOp,
    OfflineReplicas,
    Partition,
    PartitionChange,
    ProducerIds,
    RegisterBroker,
    RemoveAccessControlEntry,
    RemoveUserScramCredential,
    UserScramCredential,
    RemoveTopic,
    Topic,
    UnregisterBroker,
    decode_record,
    decode_records,
    encode_record,
    encode_records,
    new_partition_change,
    record_from_map,
    record_to_map,
)

TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"
PLAINTEXT = Listener("PLAINTEXT", "127.0.0.1", 9092)

# (record, its wire map): the encoder must produce the map, the decoder must read it back.
CASES = [
    (RegisterBroker(1, "inc-1", (PLAINTEXT,), "rack-a", fenced=True),
     {"type": 0, "version": 0, "broker_id": 1, "incarnation_id": "inc-1",
      "listeners": [["PLAINTEXT", "127.0.0.1", 9092]], "rack": "rack-a", "fenced": True}),
    (RegisterBroker(2, "inc-2", (), None, fenced=False),
     {"type": 0, "version": 0, "broker_id": 2, "incarnation_id": "inc-2", "listeners": [],
      "rack": None, "fenced": False}),
    (UnregisterBroker(1, 42),
     {"type": 1, "version": 0, "broker_id": 1, "broker_epoch": 42}),
    (BrokerRegistrationChange(1, 42, fenced=False, in_controlled_shutdown=None),
     {"type": 17, "version": 0, "broker_id": 1, "broker_epoch": 42, "fenced": False,
      "in_controlled_shutdown": None}),
    (BrokerRegistrationChange(1, 42, fenced=None, in_controlled_shutdown=True),
     {"type": 17, "version": 0, "broker_id": 1, "broker_epoch": 42, "fenced": None,
      "in_controlled_shutdown": True}),
    (Topic("orders", TOPIC_ID),
     {"type": 2, "version": 0, "name": "orders", "topic_id": TOPIC_ID}),
    (Partition(TOPIC_ID, 0, (1, 2, 3), (1, 2), (3,), leader=1, leader_epoch=4, partition_epoch=9,
               leader_recovery_state=LeaderRecoveryState.RECOVERED),
     {"type": 3, "version": 0, "topic_id": TOPIC_ID, "partition_id": 0, "replicas": [1, 2, 3],
      "isr": [1, 2], "elr": [3], "leader": 1, "leader_epoch": 4, "partition_epoch": 9,
      "leader_recovery_state": 0}),
    (Partition(TOPIC_ID, 7, (2,), (2,), leader=NO_LEADER, leader_recovery_state=LeaderRecoveryState.RECOVERING),
     {"type": 3, "version": 0, "topic_id": TOPIC_ID, "partition_id": 7, "replicas": [2], "isr": [2],
      "elr": [], "leader": -1, "leader_epoch": 0, "partition_epoch": 0, "leader_recovery_state": 1}),
    (PartitionChange(TOPIC_ID, 0),  # every field "unchanged": still written, as earlier builds require
     {"type": 5, "version": 0, "topic_id": TOPIC_ID, "partition_id": 0, "isr": None, "elr": None,
      "leader": NO_LEADER_CHANGE, "replicas": None, "leader_recovery_state": None}),
    (PartitionChange(TOPIC_ID, 3, isr=(2,), elr=(), leader=2, replicas=(2, 1),
                     leader_recovery_state=LeaderRecoveryState.RECOVERING),
     {"type": 5, "version": 0, "topic_id": TOPIC_ID, "partition_id": 3, "isr": [2], "elr": [],
      "leader": 2, "replicas": [2, 1], "leader_recovery_state": 1}),
    (RemoveTopic(TOPIC_ID), {"type": 9, "version": 0, "topic_id": TOPIC_ID}),
    (Config(ConfigResourceType.TOPIC, "orders", "retention.ms", "1000"),
     {"type": 4, "version": 0, "resource_type": 2, "resource_name": "orders", "name": "retention.ms",
      "value": "1000"}),
    (Config(ConfigResourceType.BROKER, "", "log.retention.hours", None),
     {"type": 4, "version": 0, "resource_type": 4, "resource_name": "", "name": "log.retention.hours",
      "value": None}),
    (FeatureLevel("metadata.version", 7),
     {"type": 12, "version": 0, "name": "metadata.version", "level": 7}),
    (ProducerIds(1, 42, 2000),
     {"type": 15, "version": 0, "broker_id": 1, "broker_epoch": 42, "next_producer_id_block_start": 2000}),
    (NoOp(), {"type": 20, "version": 0}),
    (BeginEpoch(3), {"type": 128, "version": 0, "epoch": 3}),
    (BeginTransaction("create topic orders"), {"type": 23, "version": 0, "name": "create topic orders"}),
    (BeginTransaction(), {"type": 23, "version": 0, "name": None}),
    (EndTransaction(), {"type": 24, "version": 0}),
    (AbortTransaction("controller failover"), {"type": 25, "version": 0, "reason": "controller failover"}),
    (OfflineReplicas(4, 42, TOPIC_ID, (0, 3)),
     {"type": 129, "version": 0, "broker_id": 4, "broker_epoch": 42, "topic_id": TOPIC_ID, "partition_ids": [0, 3]}),
    (AccessControlEntry(TOPIC_ID, 2, "orders", 4, "User:*", "*", 3, 3),
     {"type": 6, "version": 0, "id": TOPIC_ID, "resource_type": 2, "resource_name": "orders", "pattern_type": 4,
      "principal": "User:*", "host": "*", "operation": 3, "permission_type": 3}),
    (RemoveAccessControlEntry(TOPIC_ID), {"type": 7, "version": 0, "id": TOPIC_ID}),
    (UserScramCredential("alice", 2, "c2FsdA==", "c3RvcmVk", "c2VydmVy", 4096),
     {"type": 11, "version": 0, "name": "alice", "mechanism": 2, "salt": "c2FsdA==", "stored_key": "c3RvcmVk",
      "server_key": "c2VydmVy", "iterations": 4096}),
    (RemoveUserScramCredential("alice", 1), {"type": 22, "version": 0, "name": "alice", "mechanism": 1}),
]
CASE_IDS = [f"{type(r).__name__}-{i}" for i, (r, _) in enumerate(CASES)]


@pytest.mark.parametrize("record", [PartitionChange(TOPIC_ID, 7, isr=(5, 6), leader=5),
                                    PartitionChange(TOPIC_ID, 3, isr=(2,), elr=(), leader=2, replicas=(2, 1))])
def test_a_change_reads_with_its_unchanged_fields_left_off_and_is_written_in_full(record):
    """Kafka's PartitionChangeRecord has every field but the key as a tagged field: this build reads
    a map that leaves the "unchanged" ones off (the short form a later metadata.version may write:
    77 bytes a moved leadership, not 115) as the same record, and still writes every one of them,
    since a node of an earlier build, which requires them, may read the log."""
    kinds = _SCHEMAS[PartitionChange].kinds
    written = record_to_map(record)
    assert set(written) == {"type", "version", "topic_id", "partition_id", "isr", "elr", "leader",
                            "replicas", "leader_recovery_state"}
    short = {k: v for k, v in written.items()
             if k in ("type", "version", "topic_id", "partition_id") or getattr(record, k) is not None
             and not (k == "leader" and v == NO_LEADER_CHANGE)}
    assert len(short) < len(written)
    assert record_from_map(short) == record == decode_record(msgpack.packb(short))
    assert {name for name in kinds if name not in short} <= set(_SCHEMAS[PartitionChange].optional)


@pytest.mark.parametrize("record", [PartitionChange(TOPIC_ID, 7, isr=(5, 6), leader=5),
                                    PartitionChange(TOPIC_ID, 3, isr=(2,), elr=(), leader=2, replicas=(2, 1)),
                                    PartitionChange(TOPIC_ID, 0, removing_replicas=(), adding_replicas=())])
def test_metadata_version_2_writes_a_change_short(record):
    """From metadata.version 2 the unchanged fields are left off (every node reads them absent):
    the map is the record's changed fields only, this build reads it as the same record, and a
    moved leadership (leader and ISR) is 77 bytes, not 115. Below 2 the writer is unchanged."""
    short = record_to_map(record, SHORT_PARTITION_CHANGE_LEVEL)
    changed = {k for k in _SCHEMAS[PartitionChange].optional if getattr(record, k) != _SCHEMAS[
        PartitionChange].optional[k]}
    assert set(short) == {"type", "version", "topic_id", "partition_id", *changed}
    assert record_from_map(short) == record == decode_record(encode_record(record, SHORT_PARTITION_CHANGE_LEVEL))
    assert decode_records(encode_records([record, record], SHORT_PARTITION_CHANGE_LEVEL)) == (record, record)
    assert record_to_map(record, LEGACY_LEVEL) == record_to_map(record)  # the default: what any build reads
    if record.partition_id == 7:
        assert (len(encode_record(record, SHORT_PARTITION_CHANGE_LEVEL)), len(encode_record(record))) == (77, 115)


@pytest.mark.parametrize(("record", "wire"), CASES, ids=CASE_IDS)
def test_metadata_version_2_changes_only_partition_change(record, wire):
    if type(record) is not PartitionChange:
        assert record_to_map(record, SHORT_PARTITION_CHANGE_LEVEL) == wire


def test_table_covers_every_record_type():
    assert {type(r) for r, _ in CASES} == set(RECORD_TYPES.values())


@pytest.mark.parametrize(("record", "wire"), CASES, ids=CASE_IDS)
def test_encoder_writes_the_wire_map(record, wire):
    assert record_to_map(record) == wire
    assert msgpack.unpackb(encode_record(record)) == wire


@pytest.mark.parametrize(("record", "wire"), CASES, ids=CASE_IDS)
def test_decoder_reads_the_wire_map(record, wire):
    assert record_from_map(wire) == record
    assert decode_record(msgpack.packb(wire)) == record
    assert decode_record(encode_record(record)) == record


@pytest.mark.parametrize(("record", "wire"), CASES, ids=CASE_IDS)
def test_decoder_rejects_every_prefix_and_trailing_bytes(record, wire):
    data = encode_record(record)
    for cut in range(len(data)):
        with pytest.raises(MetadataRecordError):
            decode_record(data[:cut])
    with pytest.raises(MetadataRecordError, match="ExtraData"):
        decode_record(data + b"\x00")


def test_constructor_normalises_lists_and_ints():
    record = Partition(TOPIC_ID, 0, [1, 2], [1], leader=1, leader_recovery_state=1)
    assert record.replicas == (1, 2) and record.isr == (1,)
    assert record.leader_recovery_state is LeaderRecoveryState.RECOVERING
    broker = RegisterBroker(1, "inc", [["PLAINTEXT", "h", 1]])
    assert broker.listeners == (Listener("PLAINTEXT", "h", 1),)


def _with(wire: dict, **changes) -> dict:
    out = {**wire, **changes}
    return {k: v for k, v in out.items() if v is not _DROP}


_DROP = object()
PARTITION_WIRE = CASES[6][1]
BROKER_WIRE = CASES[0][1]

# (bad wire map, part of the error message)
BAD_MAPS = [
    ([], "must be a map"),
    ({"version": 0}, "record type must be an integer"),
    ({"type": "Topic", "version": 0}, "record type must be an integer"),
    ({"type": 99, "version": 0}, "unknown metadata record type 99"),
    (_with(BROKER_WIRE, version=1), "RegisterBroker record version 1 is not supported"),
    (_with(BROKER_WIRE, version=_DROP), "version None is not supported"),
    (_with(BROKER_WIRE, version=True), "version True is not supported"),
    (_with(BROKER_WIRE, rack=_DROP), "missing field(s) rack"),
    (_with(BROKER_WIRE, colour="red"), "unknown field(s) colour"),
    (_with(BROKER_WIRE, broker_id="1"), "RegisterBroker.broker_id: expected an integer"),
    (_with(BROKER_WIRE, broker_id=-1), "RegisterBroker.broker_id: expected an integer"),
    (_with(BROKER_WIRE, broker_id=True), "RegisterBroker.broker_id: expected an integer"),
    (_with(BROKER_WIRE, broker_id=2**31), "RegisterBroker.broker_id: expected an integer"),
    (_with(BROKER_WIRE, fenced=1), "RegisterBroker.fenced: expected a boolean"),
    (_with(BROKER_WIRE, incarnation_id=""), "expected a non-empty string"),
    (_with(BROKER_WIRE, incarnation_id=b"inc"), "expected a string"),
    (_with(BROKER_WIRE, listeners=[["PLAINTEXT", "h"]]), "listeners[0]: expected a (name, host, port)"),
    (_with(BROKER_WIRE, listeners=[["PLAINTEXT", "h", 70000]]), "listeners[0].port"),
    (_with(BROKER_WIRE, listeners=[["A", "h", 1], ["A", "i", 2]]), "distinct names"),
    (_with(BROKER_WIRE, listeners="PLAINTEXT://h:1"), "a list of (name, host, port)"),
    (_with(PARTITION_WIRE, replicas=[1, 1, 2]), "replicas: expected distinct integers"),
    (_with(PARTITION_WIRE, replicas=[]), "replicas must not be empty"),
    (_with(PARTITION_WIRE, isr=[4]), "isr [4] is not a subset of replicas"),
    (_with(PARTITION_WIRE, elr=[5]), "elr [5] is not a subset of replicas"),
    (_with(PARTITION_WIRE, elr=[2]), "isr [1, 2] and elr [2] overlap"),
    (_with(PARTITION_WIRE, leader=7), "leader 7 is not one of replicas"),
    (_with(PARTITION_WIRE, leader=-2), "Partition.leader: expected an integer in [-1"),
    (_with(PARTITION_WIRE, leader_recovery_state=5), "one of RECOVERED=0, RECOVERING=1"),
    (_with(PARTITION_WIRE, leader_epoch=-1), "Partition.leader_epoch"),
    (_with(PARTITION_WIRE, isr=None), "Partition.isr: expected a list of integers"),
    (_with(CASES[8][1], replicas=[]), "PartitionChange: replicas must not be empty"),
    (_with(CASES[8][1], leader=-3), "PartitionChange.leader"),
    (_with(CASES[11][1], resource_type=3), "Config.resource_type: expected one of TOPIC=2, BROKER=4"),
    (_with(CASES[11][1], resource_type="TOPIC"), "Config.resource_type: expected a ConfigResourceType value"),
    (_with(BROKER_WIRE, rack=["x" * 100]), "RegisterBroker.rack: expected a string, got ['xxxxxxxx"),
    (_with(CASES[13][1], level=-1), "FeatureLevel.level"),
    (_with(CASES[16][1], epoch=-1), "BeginEpoch.epoch"),
    (_with(CASES[21][1], partition_ids=[]), "OfflineReplicas: partition_ids must not be empty"),
    (_with(CASES[21][1], partition_ids=[1, 1]), "OfflineReplicas.partition_ids: expected distinct integers"),
]


@pytest.mark.parametrize(("wire", "message"), BAD_MAPS, ids=[m for _, m in BAD_MAPS])
def test_bad_maps_raise_a_clear_error(wire, message):
    with pytest.raises(MetadataRecordError) as info:
        record_from_map(wire)
    assert message in str(info.value)
    with pytest.raises(MetadataRecordError):
        decode_record(msgpack.packb(wire))


BAD_BYTES = [
    (b"", "not valid msgpack"),
    (b"\xc1", "not valid msgpack (FormatError)"),
    (b"\x81\x01\x02", "not valid msgpack"),  # integer map key
    (b"\x81\xa1\xff\x00", "not valid msgpack"),  # invalid UTF-8 in a key
    (b"\x91" * 2000, "not valid msgpack"),  # nesting deeper than the unpacker allows
    (msgpack.packb(3), "a record must be a map, got int"),
    ("not bytes", "expected bytes, got str"),
]


@pytest.mark.parametrize(("data", "message"), BAD_BYTES, ids=[repr(d)[:20] for d, _ in BAD_BYTES])
def test_bad_bytes_raise_a_clear_error(data, message):
    with pytest.raises(MetadataRecordError) as info:
        decode_record(data)
    assert message in str(info.value)


def test_encoding_a_non_record_is_an_error():
    with pytest.raises(MetadataRecordError, match="not a metadata record: dict"):
        encode_record({"type": 20})


def test_batch_round_trip():
    records = [r for r, _ in CASES]
    assert decode_records(encode_records(records)) == tuple(records)
    assert decode_records(encode_records([])) == ()


@pytest.mark.parametrize(("data", "message"), [
    (msgpack.packb({"type": 20, "version": 0}), "a record batch must be an array, got dict"),
    (msgpack.packb([{"type": 20, "version": 0}, {"type": 99, "version": 0}]),
     "record 1 of batch: unknown metadata record type 99"),
    (encode_records([NoOp()]) + b"\x90", "ExtraData"),
])
def test_bad_batches_raise_a_clear_error(data, message):
    with pytest.raises(MetadataRecordError) as info:
        decode_records(data)
    assert message in str(info.value)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=64))
def test_fuzz_any_bytes_decode_or_raise_metadata_record_error(data):
    for decode in (decode_record, decode_records):
        try:
            decode(data)
        except MetadataRecordError:
            pass


msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=8) | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([w for _, w in CASES]), st.text(max_size=24), msgpack_values)
def test_fuzz_mutated_maps_decode_or_raise_metadata_record_error(wire, key, value):
    # Replace (or add) one field with an arbitrary msgpack value.
    mutated = {**wire, key: value} if key not in ("", "*") else {k: value for k in wire}
    try:
        record = decode_record(msgpack.packb(mutated, use_bin_type=True))
    except MetadataRecordError:
        return
    assert decode_record(encode_record(record)) == record


# Partition maps of the usual shapes take records.plain_partition_fields; every other map, and
# every value it declines, the general path. Both must build the same record or both refuse.
PARTITION_SCHEMA = _SCHEMAS[Partition]
PARTITION_SHAPES = [
    record_to_map(Partition(TOPIC_ID, 0, (1, 2, 3), (1, 2, 3), leader=1)),
    record_to_map(Partition(TOPIC_ID, 1, (1, 2), (1,), elr=(2,), leader=-1, leader_epoch=3, partition_epoch=5,
                            leader_recovery_state=LeaderRecoveryState.RECOVERING)),
    record_to_map(Partition(TOPIC_ID, 2, (1, 2, 3), (1, 2), leader=1, removing_replicas=(3,), adding_replicas=(2,))),
]
# Each value a field's check or check_partition_state draws a line at, and each of another type.
EDGE_VALUES = [-(2**31), -3, -2, -1, 0, 1, 2, 3, 4, 2**31 - 1, 2**31, True, False, None, "", "x", 1.0,
               [], [1], [1, 1], [1, 2], [2, 1], [1, 2, 3], [3, 2, 1], [4], [-1], [True], [2**31], (1, 2, 3), {}]


def _general(cls, wire):
    schema = _SCHEMAS[cls]
    return fields_from_map(cls, wire, schema.kinds, cls.__name__, ignore=("type", "version"),
                           optional=schema.optional)


def _decoded(decode, wire):
    try:
        return decode(wire)
    except MetadataRecordError:
        return None


# PartitionChange maps take records.partition_change_fields the same way (a controlled shutdown
# replays one per leadership and ISR seat moved).
CHANGE_SCHEMA = _SCHEMAS[PartitionChange]
CHANGE_SHAPES = [
    record_to_map(PartitionChange(TOPIC_ID, 0)),
    record_to_map(PartitionChange(TOPIC_ID, 1, isr=(5, 6), leader=5)),
    record_to_map(PartitionChange(TOPIC_ID, 2, isr=(1,), elr=(2,), leader=-1,
                                  leader_recovery_state=LeaderRecoveryState.RECOVERING)),
    record_to_map(PartitionChange(TOPIC_ID, 3, replicas=(1, 2, 3), removing_replicas=(3,), adding_replicas=(2,))),
]
FAST_PATH_SHAPES = [
    *(pytest.param(Partition, w, id=f"partition-{n}") for n, w in zip(["plain", "recovering", "reassigning"],
                                                                       PARTITION_SHAPES)),
    *(pytest.param(PartitionChange, w, id=f"change-{n}") for n, w in zip(
        ["nothing", "leader-and-isr", "recovering", "reassigning"], CHANGE_SHAPES)),
]


@pytest.mark.parametrize(("cls", "wire"), FAST_PATH_SHAPES)
def test_the_fast_paths_decode_as_the_general_path_does(cls, wire):
    """Every field of every shape set to every edge value, or left out: the same record (its
    fields of the same types: tuples, None, the IntEnum), or both refuse."""
    kinds = _SCHEMAS[cls].kinds
    mutations = [{k: v for k, v in wire.items() if k != key} for key in kinds]
    mutations += [{**wire, key: value} for key in [*kinds, "other"] for value in EDGE_VALUES]
    for mutated in mutations:  # ~400 maps
        got, expected = _decoded(record_from_map, mutated), _decoded(lambda m: _general(cls, m), mutated)
        assert got == expected, mutated
        if got is not None:
            assert [type(getattr(got, f)) for f in kinds] == [type(getattr(expected, f)) for f in kinds], mutated


def test_a_refused_partition_change_map_names_its_field():
    # the fast path declines; the general path raises and names the field
    with pytest.raises(MetadataRecordError, match=r"PartitionChange\.isr\[1\]"):
        record_from_map({**CHANGE_SHAPES[1], "isr": [5, "6"]})


def _built(build, fields):
    try:
        return build(**fields)
    except (MetadataRecordError, TypeError) as exc:
        return type(exc)


@pytest.mark.parametrize("wire", CHANGE_SHAPES, ids=["nothing", "leader-and-isr", "recovering", "reassigning"])
def test_new_partition_change_builds_what_the_constructor_builds(wire):
    """The rules' builder: every field set to every edge value (as a tuple too), or left out, or
    an unknown one: the same record (of the same field types), or the same kind of refusal."""
    fields = {k: v for k, v in wire.items() if k not in ("type", "version")}
    if fields.get("leader_recovery_state") is not None:  # left off the wire when unchanged
        fields["leader_recovery_state"] = LeaderRecoveryState(fields["leader_recovery_state"])
    values = [*EDGE_VALUES, *(tuple(v) for v in EDGE_VALUES if isinstance(v, list)), LeaderRecoveryState.RECOVERING]
    mutations = [{k: v for k, v in fields.items() if k != key} for key in CHANGE_SCHEMA.kinds]
    mutations += [{**fields, key: value} for key in [*CHANGE_SCHEMA.kinds, "other"] for value in values]
    for mutated in mutations:  # ~400 field sets
        got, expected = _built(new_partition_change, mutated), _built(PartitionChange, mutated)
        assert got == expected, mutated
        if isinstance(got, PartitionChange):
            assert [type(getattr(got, f)) for f in CHANGE_SCHEMA.kinds] == \
                [type(getattr(expected, f)) for f in CHANGE_SCHEMA.kinds], mutated
