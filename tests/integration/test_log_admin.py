"""DeleteRecords, DescribeLogDirs and DescribeProducers against a real RF=3 cluster with real
admin clients (kafka-python, confluent-kafka).

DeleteRecords: the answer comes once every replica's log start offset has moved (each
replica's `log-start-offset-checkpoint` says so), consumers start at the new log start,
ListOffsets EARLIEST answers it, retention deletes the whole segments below it on every
replica, and a restarted broker loads it again. Beyond the high watermark: OFFSET_OUT_OF_RANGE,
nothing applied, the connection fine. DescribeLogDirs: sizes equal the segment files.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster_fixtures import http, wait_until
from tests.integration.replication_fixtures import (
    BROKERS,
    broker_log,
    create_topic,
    partition_state,
    replicated_cluster,
    wait_for_state,
    wait_full_isr,
)
from localcluster.launcher import LocalCluster
from localcluster.replica_files import partition_dir

kafka = pytest.importorskip("kafka")
confluent_kafka = pytest.importorskip("confluent_kafka")

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import OffsetOutOfRangeError

RECORDS = 100
SEGMENT_BYTES = "1024"  # ~10 records of 60-odd bytes per segment: many segments
# Retention runs every second here, and removed segments go at once.
PROPERTIES = {"log.retention.check.interval.ms": "1000"}
TOPIC_CONFIGS = {"segment.bytes": SEGMENT_BYTES, "file.delete.delay.ms": "0", "min.insync.replicas": "2"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with replicated_cluster(tmp_path_factory.mktemp("log-admin"), PROPERTIES) as (started, nemesis):
        started.nemesis = nemesis  # type: ignore[attr-defined]
        yield started


def bootstrap(cluster: LocalCluster) -> str:
    servers = cluster.bootstrap_servers
    assert servers is not None
    return servers


def new_topic(cluster: LocalCluster, name: str, partitions: int = 1) -> str:
    create_topic(cluster, name, partitions=partitions, configs=TOPIC_CONFIGS)
    wait_full_isr(cluster, name, partitions)
    return name


def produce(cluster: LocalCluster, topic: str, count: int, *, idempotent: bool = False) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap(cluster), acks="all", linger_ms=0,
                             enable_idempotence=idempotent)
    try:
        for i in range(count):
            producer.send(topic, value=f"record-{i:04d}".encode() + b"x" * 40, partition=0)
            producer.flush()  # one batch per record: many small batches, many segments
    finally:
        producer.close(timeout=10)


def admin(cluster: LocalCluster) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap(cluster), request_timeout_ms=15000)


def checkpointed_start(cluster: LocalCluster, broker: int, topic: str) -> int | None:
    path = cluster.node(broker).spec.directory / "data" / "log-start-offset-checkpoint"
    if not path.exists():
        return None
    for line in path.read_text().splitlines()[2:]:
        fields = line.split()
        if len(fields) == 3 and fields[0] == topic and fields[1] == "0":
            return int(fields[2])
    return None


def segment_bases(cluster: LocalCluster, broker: int, topic: str) -> list[int]:
    return sorted(int(p.stem) for p in partition_dir(cluster.node(broker), topic, 0).glob("*.log"))


def consume_offsets(cluster: LocalCluster, topic: str, expected: int) -> list[int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(cluster), auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=10000)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)  # below the log start: OFFSET_OUT_OF_RANGE, reset to earliest
        offsets: list[int] = []
        for message in consumer:
            offsets.append(message.offset)
            if len(offsets) >= expected:
                break
        return offsets
    finally:
        consumer.close()


def earliest(cluster: LocalCluster, topic: str) -> int:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(cluster))
    try:
        tp = TopicPartition(topic, 0)
        return int(consumer.beginning_offsets([tp])[tp])
    finally:
        consumer.close()


def test_delete_records_moves_every_replica_and_survives_a_restart(
        cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
    topic = new_topic(cluster, "purge")
    produce(cluster, topic, RECORDS)
    tp = TopicPartition(topic, 0)
    client = admin(cluster)
    try:
        client.delete_records({tp: 1}, timeout_ms=15000)  # connections and metadata warm
        started = time.monotonic()
        result = client.delete_records({tp: 60}, timeout_ms=15000)
        elapsed_ms = (time.monotonic() - started) * 1000
    finally:
        client.close()
    with capsys.disabled():  # a measurement, not an assertion
        print(f"\n[log admin measurement] kafka-python delete_records on RF=3, answered once all 3 "
              f"replicas moved: {elapsed_ms:.1f} ms")
    assert result[tp]["low_watermark"] == 60 and result[tp]["error_code"] == 0
    # The answer waited for every replica: each has written its new log start already.
    assert {b: checkpointed_start(cluster, b, topic) for b in BROKERS} == {b: 60 for b in BROKERS}
    assert earliest(cluster, topic) == 60
    assert consume_offsets(cluster, topic, RECORDS - 60) == list(range(60, RECORDS))

    # Retention removes every whole segment below offset 60, on every replica; the segment
    # holding offset 60 stays.
    def trimmed() -> dict[int, list[int]] | None:
        bases = {b: segment_bases(cluster, b, topic) for b in BROKERS}
        ok = all(bs and bs[0] <= 60 and (len(bs) == 1 or bs[1] > 60) for bs in bases.values())
        return bases if ok else None

    bases = wait_until("segments below offset 60 deleted on every replica", trimmed, 30)
    assert all(bs[0] > 0 for bs in bases.values()), bases

    # A crash and restart of the leader: its log loads with the deleted range still gone.
    leader = partition_state(cluster, topic, 0)["leader"]
    nemesis = cluster.nemesis  # type: ignore[attr-defined]
    def loaded_lines() -> list[str]:
        return [line for line in broker_log(cluster, leader).splitlines()
                if f"[Log partition={topic}-0" in line and "Loaded log" in line]

    # the log's creation logs "Loaded log" at DEBUG when it is empty: count what is there now
    loaded_before = len(loaded_lines())
    nemesis.kill(leader)
    nemesis.restart(leader)
    (line, *_) = wait_until("the restarted broker loaded the log",
                            lambda: loaded_lines()[loaded_before:] or None, 60)
    assert "log start offset 60," in line, line
    wait_until("the restarted broker running again", lambda: broker_log(cluster, leader).count(
        "Transitioning from RECOVERY to RUNNING") >= 2 or None, 60)
    wait_for_state(cluster, topic, 0, "the restarted broker back in the ISR",
                   lambda s: leader in s["isr"] and len(s["isr"]) == 3, 60)
    assert earliest(cluster, topic) == 60
    assert checkpointed_start(cluster, leader, topic) == 60


def test_delete_records_beyond_the_high_watermark_applies_nothing(cluster: LocalCluster) -> None:
    topic = new_topic(cluster, "purge-bad")
    produce(cluster, topic, 20)
    tp = TopicPartition(topic, 0)
    client = admin(cluster)
    try:
        with pytest.raises(OffsetOutOfRangeError):
            client.delete_records({tp: 21}, timeout_ms=10000)
        assert earliest(cluster, topic) == 0
        # no replica wrote a new start (the file shows 0 once a periodic checkpoint ran)
        assert all(checkpointed_start(cluster, b, topic) in (None, 0) for b in BROKERS)
        # The same admin connection keeps working: -1 means "up to the high watermark".
        result = client.delete_records({tp: -1}, timeout_ms=10000)
        assert result[tp]["low_watermark"] == 20
    finally:
        client.close()
    assert earliest(cluster, topic) == 20


def test_confluent_kafka_delete_records(cluster: LocalCluster) -> None:
    from confluent_kafka import TopicPartition as CTopicPartition
    from confluent_kafka.admin import AdminClient

    topic = new_topic(cluster, "purge-confluent")
    produce(cluster, topic, 30)
    client = AdminClient({"bootstrap.servers": bootstrap(cluster)})
    futures = client.delete_records([CTopicPartition(topic, 0, 12)], request_timeout=15)
    deleted = next(iter(futures.values())).result(timeout=30)
    assert deleted.low_watermark == 12
    assert earliest(cluster, topic) == 12
    assert {b: checkpointed_start(cluster, b, topic) for b in BROKERS} == {b: 12 for b in BROKERS}


def test_describe_log_dirs_sizes_match_the_files(cluster: LocalCluster) -> None:
    topic = new_topic(cluster, "sizes", partitions=2)
    produce(cluster, topic, 25)
    wait_until("every replica holds the 25 records", lambda: all(
        sum(p.stat().st_size for p in partition_dir(cluster.node(b), topic, 0).glob("*.log")) > 25 * 60
        for b in BROKERS) or None, 30)
    client = admin(cluster)
    try:
        answers = client.describe_log_dirs({topic: [0, 1]})
    finally:
        client.close()
    assert sorted(a["broker"] for a in answers) == sorted(BROKERS)
    for answer in answers:
        node = cluster.node(answer["broker"])
        (log_dir,) = answer["log_dirs"]
        assert log_dir["error_code"] == 0
        assert Path(log_dir["log_dir"]) == (node.spec.directory / "data").absolute()
        stat = os.statvfs(log_dir["log_dir"])
        assert log_dir["total_bytes"] == stat.f_blocks * stat.f_frsize
        assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
        partitions = {p["partition_index"]: p for t in log_dir["topics"] if t["name"] == topic
                      for p in t["partitions"]}
        assert sorted(partitions) == [0, 1]
        for index, p in partitions.items():
            on_disk = sum(f.stat().st_size for f in partition_dir(node, topic, index).glob("*.log"))
            assert p["partition_size"] == on_disk, (answer["broker"], index)
            assert p["offset_lag"] == 0 and p["is_future_key"] is False
        assert partitions[0]["partition_size"] > 0


def test_describe_producers_lists_the_idempotent_producer(cluster: LocalCluster) -> None:
    topic = new_topic(cluster, "producers")
    produce(cluster, topic, 7, idempotent=True)
    tp = TopicPartition(topic, 0)
    client = admin(cluster)
    try:
        states = client.describe_producers([tp])
        follower = next(r for r in partition_state(cluster, topic, 0)["replicas"]
                        if r != partition_state(cluster, topic, 0)["leader"])
        on_follower = wait_until("the follower has the producer", lambda: (
            client.describe_producers([tp], broker_id=follower)[tp].active_producers or None), 30)
    finally:
        client.close()
    (producer,) = states[tp].active_producers
    assert producer.producer_id >= 0 and producer.producer_epoch >= 0
    assert producer.last_sequence == 6
    assert producer.last_timestamp > 0
    assert producer.coordinator_epoch == -1 and producer.current_transaction_start_offset == -1
    assert on_follower[0].producer_id == producer.producer_id


def test_admin_api_delete_records(cluster: LocalCluster) -> None:
    topic = new_topic(cluster, "purge-http")
    produce(cluster, topic, 15)
    url = f"{cluster.admin_url}/v1/topics/{topic}/partitions/0/delete-records"
    status, body = http(url, "POST", {"offset": 16})
    assert status == 400 and json.loads(body)["error"] == "OFFSET_OUT_OF_RANGE", body
    assert earliest(cluster, topic) == 0  # nothing applied
    status, body = http(url, "POST", {"offset": 9, "timeout_ms": 10000})
    assert status == 200, body
    assert json.loads(body) == {"topic": topic, "partition": 0, "low_watermark": 9}
    assert earliest(cluster, topic) == 9
    assert {b: checkpointed_start(cluster, b, topic) for b in BROKERS} == {b: 9 for b in BROKERS}
    status, body = http(f"{cluster.admin_url}/v1/topics/{topic}/partitions/3/delete-records", "POST", {"offset": 1})
    assert status == 404 and json.loads(body)["error"] == "UNKNOWN_TOPIC_OR_PARTITION", body
    status, body = http(url, "POST", {"offset": "9"})
    assert status == 400 and json.loads(body)["field"] == "offset", body
    status, body = http(url, "POST", {"offset": 9, "extra": 1})
    assert status == 400, body


def test_aiokafka_delete_records(cluster: LocalCluster) -> None:
    import asyncio

    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

    topic = new_topic(cluster, "purge-aiokafka")
    produce(cluster, topic, 10)

    async def delete() -> dict:
        client = AIOKafkaAdminClient(bootstrap_servers=bootstrap(cluster))
        await client.start()
        try:
            return await client.delete_records({aiokafka.TopicPartition(topic, 0): RecordsToDelete(7)},
                                               timeout_ms=10000)
        finally:
            await client.close()

    assert asyncio.run(delete()) == {aiokafka.TopicPartition(topic, 0): 7}
    assert earliest(cluster, topic) == 7


def test_a_fenced_follower_does_not_hold_delete_records_and_follows_on_return(cluster: LocalCluster) -> None:
    topic = new_topic(cluster, "purge-down")
    produce(cluster, topic, 40)
    state = partition_state(cluster, topic, 0)
    follower = next(r for r in state["replicas"] if r != state["leader"])
    nemesis = cluster.nemesis  # type: ignore[attr-defined]
    nemesis.kill(follower)
    wait_for_state(cluster, topic, 0, f"broker {follower} out of the ISR", lambda s: follower not in s["isr"], 60)
    produce(cluster, topic, 20)  # the returning follower must fetch these too
    tp = TopicPartition(topic, 0)
    client = admin(cluster)
    try:
        result = client.delete_records({tp: 50}, timeout_ms=15000)
    finally:
        client.close()
    assert result[tp]["low_watermark"] == 50  # the fenced broker's replica does not count
    assert checkpointed_start(cluster, follower, topic) in (None, 0)  # it was down
    nemesis.restart(follower)
    wait_until(f"broker {follower} follows the new log start", lambda: checkpointed_start(
        cluster, follower, topic) == 50 or None, 60)
    wait_for_state(cluster, topic, 0, f"broker {follower} back in the ISR", lambda s: follower in s["isr"], 60)


def test_alter_replica_log_dirs_with_kafka_python(cluster: LocalCluster) -> None:
    # AlterReplicaLogDirs is served on kio's generated messages: no codec of ours. Each broker
    # has one log dir: a move into it succeeds, an unknown dir is LOG_DIR_NOT_FOUND, a
    # partition the broker does not host REPLICA_NOT_AVAILABLE (Kafka's answers).
    from kafka import TopicPartitionReplica
    from kafka.errors import LogDirNotFoundError, NoError, ReplicaNotAvailableError
    from kafka.protocol.admin import AlterReplicaLogDirsRequest

    topic = new_topic(cluster, "move-dirs", partitions=1)
    broker = BROKERS[0]
    own_dir = str((cluster.node(broker).spec.directory / "data").absolute())
    client = admin(cluster)
    try:
        # ApiVersions advertises v1-v2 (Kafka 3.9's), so kafka-python sends v2 (flexible)
        assert client._manager.broker_version_data.api_version(AlterReplicaLogDirsRequest) == 2
        answers = client.alter_replica_log_dirs({
            TopicPartitionReplica(topic, 0, broker): own_dir,
            TopicPartitionReplica("no-such-topic", 3, broker): own_dir,
        })
        assert answers == {TopicPartitionReplica(topic, 0, broker): NoError,
                           TopicPartitionReplica("no-such-topic", 3, broker): ReplicaNotAvailableError}
        elsewhere = str(Path(own_dir).parent / "elsewhere")
        assert client.alter_replica_log_dirs({TopicPartitionReplica(topic, 0, broker): elsewhere}) \
            == {TopicPartitionReplica(topic, 0, broker): LogDirNotFoundError}
        # the broker still answers on the same connection, and the log did not move
        (answer,) = [a for a in client.describe_log_dirs({topic: [0]}) if a["broker"] == broker]
    finally:
        client.close()
    assert [d["log_dir"] for d in answer["log_dirs"]] == [own_dir]
