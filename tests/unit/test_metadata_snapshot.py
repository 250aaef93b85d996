"""metadata/snapshot.py: snapshot at k + records after k == every record; any batch split agrees."""

from __future__ import annotations

import random

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata.codec import fields_from_map
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE, PARTITION_KINDS, PARTITION_OPTIONAL, MetadataImage, PartitionRegistration
from metadata.partition_change import (
    AlterPartitionRejected,
    alter_partition,
    elect_leader,
    remove_from_isr,
)
from metadata.placement import PlacementError, place_replicas
from metadata.records import (
    BeginEpoch,
    BrokerRegistrationChange,
    Config,
    ConfigResourceType,
    FeatureLevel,
    Listener,
    MetadataRecordError,
    NoOp,
    Partition,
    ProducerIds,
    Record,
    RegisterBroker,
    RemoveTopic,
    Topic,
    UnregisterBroker,
)
from metadata.snapshot import decode_snapshot, encode_snapshot


def _leave(image: MetadataImage, broker_id: int) -> list[Record]:
    """Controller-style records for a broker leaving: ISR removal and leader moves (KIP-841)."""
    records: list[Record] = []
    for topic in image.topics.by_id.values():
        for partition in topic.partitions.values():
            if broker_id in partition.isr or partition.leader == broker_id:
                change = remove_from_isr(partition, broker_id, is_acceptable=lambda b: _active(image, b),
                                         unclean_allowed=topic.name.endswith("u"))
                records += [change] if change else []
    return records


def _active(image: MetadataImage, broker_id: int) -> bool:
    broker = image.broker(broker_id)
    return broker is not None and broker.is_active


def _step(rng: random.Random, image: MetadataImage, n: int) -> list[Record]:
    """One random controller decision as valid records (possibly none)."""
    brokers = sorted(image.cluster.brokers.values(), key=lambda b: b.broker_id)
    active = [b for b in brokers if b.is_active]
    partitions = [p for t in image.topics.by_id.values() for p in t.partitions.values()]
    action = rng.choices(range(12), weights=(2, 2, 4, 2, 1, 4, 4, 1, 1, 1, 1, 1))[0]
    if action in (0, 1) or not brokers:
        b = rng.randint(1, 5)
        return [RegisterBroker(b, f"inc-{n}", (Listener("PLAINTEXT", f"127.0.0.{b}", 9092),),
                               rng.choice([None, "r1", "r2"]), fenced=rng.random() < 0.5)]
    broker = rng.choice(brokers)
    if action == 2:
        unfenced = BrokerRegistrationChange(broker.broker_id, broker.broker_epoch, fenced=False)
        after = apply(image, [(image.offset + 1, unfenced)])
        return [unfenced] + [c for p in partitions if not p.has_leader and
                             (c := elect_leader(p, is_acceptable=lambda b: _active(after, b)))]
    if action == 3:
        change = BrokerRegistrationChange(broker.broker_id, broker.broker_epoch, fenced=True,
                                          in_controlled_shutdown=rng.choice([None, True]))
        return [change] + _leave(apply(image, [(image.offset + 1, change)]), broker.broker_id)
    if action == 4:
        return _leave(image, broker.broker_id) + [UnregisterBroker(broker.broker_id, broker.broker_epoch)]
    if action == 5:
        try:
            assignment = place_replicas(brokers, partitions=rng.randint(1, 4),
                                        replication_factor=rng.randint(1, 3), rng=rng)
        except PlacementError:
            return []
        topic_id = f"T{n}"
        return [Topic(f"t{n}{rng.choice('cu')}", topic_id)] + [
            Partition(topic_id, p, r, r, leader=r[0]) for p, r in assignment.items()]
    led = [p for p in partitions if p.has_leader]
    if action == 6 and led:
        p = rng.choice(led)
        isr = [p.leader] + [b.broker_id for b in active if b.broker_id in p.replicas and rng.random() < 0.5]
        if p.leader_recovery_state and rng.random() < 0.5:
            isr = [p.leader]  # the leader has recovered
        result = alter_partition(p, leader_id=p.leader, leader_epoch=p.leader_epoch,
                                 partition_epoch=p.partition_epoch, new_isr=list(dict.fromkeys(isr)),
                                 broker_lookup=image.broker)
        return [] if result is None or isinstance(result, AlterPartitionRejected) else [result]
    if action == 7 and image.topics.by_id:
        return [RemoveTopic(rng.choice(sorted(image.topics.by_id)))]
    if action == 8:
        name = rng.choice(["t1c", "t2u", ""])
        kind = ConfigResourceType.BROKER if not name else ConfigResourceType.TOPIC
        return [Config(kind, name, rng.choice(["a", "b"]), rng.choice([None, "1", "2"]))]
    if action == 9:
        return [FeatureLevel(rng.choice(["x", "y"]), rng.randint(0, 3))]
    if action == 10:
        return [ProducerIds(broker.broker_id, broker.broker_epoch,
                            image.producer_ids.next_producer_id_block_start + 1000)]
    return [rng.choice([NoOp(), BeginEpoch(image.controller_epoch + 1)])]


def random_log(rng: random.Random, steps: int) -> list[tuple[int, Record]]:
    """A valid metadata log of dense offsets, as a controller could have written it."""
    image, log = EMPTY_IMAGE, []
    for n in range(steps):
        records = _step(rng, image, n)
        batch = list(enumerate(records, image.offset + 1))
        image = apply(image, batch)
        log += batch
    return log


@settings(max_examples=120, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(0, 40), st.data())
def test_snapshot_at_k_plus_records_after_k_equals_replaying_everything(rng, steps, data):
    log = random_log(rng, steps)
    everything = apply(EMPTY_IMAGE, log)
    k = data.draw(st.integers(0, len(log)), label="k")
    snapshot = encode_snapshot(apply(EMPTY_IMAGE, log[:k]))
    assert apply(decode_snapshot(snapshot), log[k:]) == everything
    assert encode_snapshot(decode_snapshot(snapshot)) == snapshot  # canonical bytes


@settings(max_examples=120, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(0, 40), st.data())
def test_any_split_into_batches_reaches_the_same_image(rng, steps, data):
    log = random_log(rng, steps)
    cuts = sorted(data.draw(st.sets(st.integers(0, len(log)), max_size=8), label="cuts"))
    image = EMPTY_IMAGE
    for start, end in zip([0, *cuts], [*cuts, len(log)]):
        image = apply(image, log[start:end])
    assert image == apply(EMPTY_IMAGE, log)


def test_round_trip_of_the_empty_image():
    assert decode_snapshot(encode_snapshot(EMPTY_IMAGE)) == EMPTY_IMAGE


def test_round_trip_of_a_busy_image():
    image = apply(EMPTY_IMAGE, random_log(random.Random(7), 80))
    assert image.topics.by_id and image.cluster.brokers  # the fixture exercises something
    assert decode_snapshot(encode_snapshot(image)) == image


GOOD = msgpack.unpackb(encode_snapshot(apply(EMPTY_IMAGE, random_log(random.Random(3), 60))))
assert GOOD["topics"] and GOOD["brokers"] and GOOD["configs"], "fixture must have every section"
TOPIC0, BROKER0, CONFIG0 = GOOD["topics"][0], GOOD["brokers"][0], GOOD["configs"][0]


def _with(**changes):
    return msgpack.packb({**GOOD, **changes})


BAD_SNAPSHOTS = [
    (b"\xc1", "not valid msgpack"),
    ("text", "expected bytes, got str"),
    (msgpack.packb([1]), "snapshot: expected a map, got list"),
    (_with(format="kafka"), "format 'kafka' is not 'tidelog-metadata-snapshot'"),
    (_with(version=1), "version 1 is not supported"),
    (_with(version=False), "version False is not supported"),
    (msgpack.packb({k: v for k, v in GOOD.items() if k != "features"}), "missing field(s) ['features']"),
    (_with(extra=1), "unknown field(s) ['extra']"),
    (_with(offset=-2), "offset: expected an integer"),
    (_with(brokers={}), "brokers: expected a list"),
    (_with(brokers=[BROKER0, BROKER0]), "duplicate broker id"),
    (_with(brokers=[{**BROKER0, "fenced": "yes"}]), "BrokerRegistration.fenced: expected a boolean"),
    (_with(topics=[TOPIC0, TOPIC0]), "duplicate topic id"),
    (_with(topics=[TOPIC0, {**TOPIC0, "topic_id": "other"}]), "two topics share a name"),
    (_with(topics=[{**TOPIC0, "partitions": [TOPIC0["partitions"][0]] * 2}]), "duplicate partition id"),
    (_with(topics=[{**TOPIC0, "partitions": [{**TOPIC0["partitions"][0], "topic_id": "x"}]}]),
     "unknown field(s) ['topic_id']"),
    (_with(topics=[{**TOPIC0, "partitions": [{**TOPIC0["partitions"][0], "isr": [99]}]}]),
     "is not a subset of replicas"),
    # A partition the fast path (snapshot._plain_partition) declines: the general path names the fault.
    (_with(topics=[{**TOPIC0, "partitions": [{**TOPIC0["partitions"][0], "isr": [1, 1]}]}]),
     "isr: expected distinct integers"),
    (_with(topics=[{**TOPIC0, "partitions": [{**TOPIC0["partitions"][0], "replicas": True}]}]),
     "replicas: expected a list of integers"),
    (_with(topics=[{**TOPIC0, "partitions": [{**TOPIC0["partitions"][0], "leader_epoch": -1}]}]),
     "leader_epoch: expected an integer"),
    (_with(topics=[{**TOPIC0, "partitions": [{**TOPIC0["partitions"][0], "partition_id": False}]}]),
     "partition_id: expected an integer"),
    (_with(topics=[{**TOPIC0, "partitions": [{**TOPIC0["partitions"][0], "leader_recovery_state": 7}]}]),
     "leader_recovery_state: expected one of RECOVERED=0, RECOVERING=1"),
    (_with(topics=[{**TOPIC0, "partitions": [{**TOPIC0["partitions"][0], "adding_replicas": [42]}]}]),
     "must be disjoint subsets of replicas"),
    (_with(configs=[CONFIG0, CONFIG0]), "duplicate config resource"),
    (_with(configs=[{**CONFIG0, "configs": {}}]), "a config resource with no configs"),
    (_with(configs=[{**CONFIG0, "configs": {"a": 1}}]), "expected a string"),
    (_with(features={"x": 0}), "features['x']: expected an integer in [1"),
    (_with(features=[]), "features: expected a map, got list"),
    (_with(next_producer_id_block_start=-5), "next_producer_id_block_start"),
]


REASSIGNING = {**TOPIC0["partitions"][0], "replicas": [1, 2, 3, 4], "isr": [1, 2],
               "adding_replicas": [4], "removing_replicas": [1]}


@pytest.mark.parametrize("partition", [
    TOPIC0["partitions"][0],
    {**TOPIC0["partitions"][0], "elr": [], "leader_recovery_state": 1},
    REASSIGNING,
    {k: v for k, v in REASSIGNING.items() if k != "removing_replicas"},  # one list alone: the general path
], ids=["plain", "recovering", "reassigning", "adding-only"])
def test_every_partition_shape_decodes_as_the_general_path_does(partition):
    """The fast path builds exactly what PartitionRegistration's own checks build."""
    topic = decode_snapshot(_with(topics=[{**TOPIC0, "partitions": [partition]}])).topics.by_id[TOPIC0["topic_id"]]
    expected = fields_from_map(PartitionRegistration, {**partition, "topic_id": TOPIC0["topic_id"]},
                               PARTITION_KINDS, "p", optional=PARTITION_OPTIONAL)
    assert topic.partitions[partition["partition_id"]] == expected
    assert type(expected.leader_recovery_state) is type(topic.partitions[partition["partition_id"]].leader_recovery_state)


@pytest.mark.parametrize(("data", "message"), BAD_SNAPSHOTS, ids=[m for _, m in BAD_SNAPSHOTS])
def test_bad_snapshots_raise_a_clear_error(data, message):
    with pytest.raises(MetadataRecordError) as info:
        decode_snapshot(data)
    assert str(info.value).startswith("snapshot: ")
    assert message in str(info.value)


def test_every_prefix_and_trailing_bytes_are_rejected():
    data = encode_snapshot(apply(EMPTY_IMAGE, random_log(random.Random(11), 12)))
    for cut in range(len(data)):
        with pytest.raises(MetadataRecordError):
            decode_snapshot(data[:cut])
    with pytest.raises(MetadataRecordError):
        decode_snapshot(data + b"\x00")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=96))
def test_fuzz_any_bytes_decode_or_raise_metadata_record_error(data):
    try:
        decode_snapshot(data)
    except MetadataRecordError:
        pass
