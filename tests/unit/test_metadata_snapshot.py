"""metadata/snapshot.py: snapshot at k + records after k == every record; any batch split agrees."""

from __future__ import annotations

import random

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata.codec import fields_from_map, fields_to_map
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
    LeaderRecoveryState,
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
from metadata.snapshot import _partition_to_map, decode_snapshot, encode_snapshot


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


# A snapshot written by the encoder before its partitions were written out by hand (commit
# 4cbb382): what brokers' checkpoints and controllers' dumps hold must still load, and the
# encoder must still write exactly these bytes (a canonical encoding: controllers compare digests).
OLD_SNAPSHOT_RECORDS: list[Record] = [
    BeginEpoch(3),
    RegisterBroker(1, "inc-1", (Listener("PLAINTEXT", "127.0.0.1", 9092),), "r1", fenced=False),
    RegisterBroker(2, "inc-2", (Listener("PLAINTEXT", "127.0.0.2", 9092),), None, fenced=False),
    RegisterBroker(3, "inc-3", (Listener("PLAINTEXT", "127.0.0.3", 9092),), None, fenced=True),
    Topic("plain", "id-plain"),
    Partition("id-plain", 0, (1, 2, 3), (1, 2, 3), leader=1),
    Partition("id-plain", 1, (2, 3, 1), (2, 1), elr=(3,), leader=2, leader_epoch=4, partition_epoch=9),
    Partition("id-plain", 2, (3,), (3,), leader=3, leader_recovery_state=LeaderRecoveryState.RECOVERING),
    Topic("moving", "id-moving"),
    Partition("id-moving", 0, (1, 2, 3), (1, 2), leader=1, removing_replicas=(3,), adding_replicas=(2,)),
    Partition("id-moving", 1, (1, 2), (1,), leader=-1),
    Config(ConfigResourceType.TOPIC, "plain", "retention.ms", "1000"),
    FeatureLevel("metadata.version", 7),
]
OLD_SNAPSHOT = bytes.fromhex(
    "89a6666f726d6174b9746964656c6f672d6d657461646174612d736e617073686f74a776657273696f6e00a66f666673"
    "65740cb0636f6e74726f6c6c65725f65706f636803a762726f6b6572739387a962726f6b65725f696401ac62726f6b65"
    "725f65706f636801ae696e6361726e6174696f6e5f6964a5696e632d31a96c697374656e6572739193a9504c41494e54"
    "455854a93132372e302e302e31cd2384a47261636ba27231a666656e636564c2b6696e5f636f6e74726f6c6c65645f73"
    "687574646f776ec287a962726f6b65725f696402ac62726f6b65725f65706f636802ae696e6361726e6174696f6e5f69"
    "64a5696e632d32a96c697374656e6572739193a9504c41494e54455854a93132372e302e302e32cd2384a47261636bc0"
    "a666656e636564c2b6696e5f636f6e74726f6c6c65645f73687574646f776ec287a962726f6b65725f696403ac62726f"
    "6b65725f65706f636803ae696e6361726e6174696f6e5f6964a5696e632d33a96c697374656e6572739193a9504c4149"
    "4e54455854a93132372e302e302e33cd2384a47261636bc0a666656e636564c3b6696e5f636f6e74726f6c6c65645f73"
    "687574646f776ec2a6746f706963739283a46e616d65a66d6f76696e67a8746f7069635f6964a969642d6d6f76696e67"
    "aa706172746974696f6e73928aac706172746974696f6e5f696400a87265706c6963617393010203a3697372920102a3"
    "656c7290a66c656164657201ac6c65616465725f65706f636800af706172746974696f6e5f65706f636800b56c656164"
    "65725f7265636f766572795f737461746500b172656d6f76696e675f7265706c696361739103af616464696e675f7265"
    "706c69636173910288ac706172746974696f6e5f696401a87265706c69636173920102a36973729101a3656c7290a66c"
    "6561646572ffac6c65616465725f65706f636800af706172746974696f6e5f65706f636800b56c65616465725f726563"
    "6f766572795f73746174650083a46e616d65a5706c61696ea8746f7069635f6964a869642d706c61696eaa7061727469"
    "74696f6e739388ac706172746974696f6e5f696400a87265706c6963617393010203a369737293010203a3656c7290a6"
    "6c656164657201ac6c65616465725f65706f636800af706172746974696f6e5f65706f636800b56c65616465725f7265"
    "636f766572795f73746174650088ac706172746974696f6e5f696401a87265706c6963617393020301a3697372920201"
    "a3656c729103a66c656164657202ac6c65616465725f65706f636804af706172746974696f6e5f65706f636809b56c65"
    "616465725f7265636f766572795f73746174650088ac706172746974696f6e5f696402a87265706c696361739103a369"
    "73729103a3656c7290a66c656164657203ac6c65616465725f65706f636800af706172746974696f6e5f65706f636800"
    "b56c65616465725f7265636f766572795f737461746501a7636f6e666967739183ad7265736f757263655f7479706502"
    "ad7265736f757263655f6e616d65a5706c61696ea7636f6e6669677381ac726574656e74696f6e2e6d73a431303030a8"
    "666561747572657381b06d657461646174612e76657273696f6e07bc6e6578745f70726f64756365725f69645f626c6f"
    "636b5f7374617274ff"
)


def test_a_snapshot_written_before_still_loads_and_encodes_the_same():
    image = apply(EMPTY_IMAGE, enumerate(OLD_SNAPSHOT_RECORDS))
    assert decode_snapshot(OLD_SNAPSHOT) == image
    assert encode_snapshot(image) == OLD_SNAPSHOT


@pytest.mark.parametrize("partition", [
    PartitionRegistration("t", 0, (1, 2, 3), (1, 2, 3), leader=1),
    PartitionRegistration("t", 1, (1, 2), (1,), elr=(2,), leader=-1, leader_epoch=3, partition_epoch=5,
                          leader_recovery_state=LeaderRecoveryState.RECOVERING),
    PartitionRegistration("t", 2, (1, 2, 3), (1, 2), leader=1, removing_replicas=(3,), adding_replicas=(2,)),
    PartitionRegistration("t", 3, (1, 2), (1,), leader=1, adding_replicas=(2,)),
], ids=["plain", "recovering", "reassigning", "adding-only"])
def test_the_written_out_partition_encoder_packs_what_the_kinds_do(partition):
    wire_kinds = {k: v for k, v in PARTITION_KINDS.items() if k != "topic_id"}
    expected = fields_to_map(partition, wire_kinds, PARTITION_OPTIONAL)
    assert msgpack.packb(_partition_to_map(partition)) == msgpack.packb(expected)
