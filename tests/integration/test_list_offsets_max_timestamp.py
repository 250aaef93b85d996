"""ListOffsets MAX_TIMESTAMP (-3, KIP-734) through a real client: confluent-kafka's
`AdminClient.list_offsets` with `OffsetSpec.max_timestamp()`, which needs ListOffsets v7 (the
flexible versions, v6+). Three records produced in one batch with timestamps base+100,
base+400, base+200 must answer offset 1 (the record carrying the largest timestamp, KAFKA-16310),
also compressed, after segment rolls, on a follower that became leader, and after the old
leader's crash and restart (its indexes rebuilt) once it leads again.

One 1-controller + 3-broker cluster for the whole module; every process stopped on exit.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster_fixtures import http, wait_until
from tests.integration.replication_fixtures import (
    create_topic,
    partition_state,
    replicated_cluster,
    wait_for_state,
    wait_full_isr,
)
from localcluster import replica_files
from localcluster.launcher import LocalCluster

confluent_kafka = pytest.importorskip("confluent_kafka")
admin = pytest.importorskip("confluent_kafka.admin")

CLIENT_TIMEOUT_S = 20.0
BASE = 1_700_000_000_000
TIMESTAMPS = (BASE + 100, BASE + 400, BASE + 200)
ROLLED_SEGMENT_BYTES = 1024
# topic -> (producer compression, topic configs)
TOPICS = {
    "mt-plain": ("none", {}),
    "mt-gzip": ("gzip", {}),
    "mt-lz4": ("lz4", {}),
    "mt-rolled": ("none", {"segment.bytes": str(ROLLED_SEGMENT_BYTES)}),
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, object]]:
    with replicated_cluster(tmp_path_factory.mktemp("max-timestamp") / "cluster") as started:
        cluster, _ = started
        for name, (compression, configs) in TOPICS.items():
            create_topic(cluster, name, partitions=1, replication_factor=3, configs=configs)
            produce_batch(cluster, name, compression)
            if name == "mt-rolled":  # later records with smaller timestamps, over several segments
                produce_many(cluster, name, count=60, timestamp=BASE + 300)
        for name in TOPICS:
            wait_full_isr(cluster, name, 1)
        yield started


def produce_batch(cluster: LocalCluster, topic: str, compression: str) -> None:
    """The three records in one batch: a long linger and one flush."""
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                         "linger.ms": 2000, "compression.type": compression,
                                         "acks": "all"})
    delivered: list[tuple[int, int]] = []
    for i, ts in enumerate(TIMESTAMPS):
        producer.produce(topic, value=f"r{i}".encode(), partition=0, timestamp=ts,
                         on_delivery=lambda err, msg: delivered.append((msg.offset(), msg.timestamp()[1]))
                         if err is None else pytest.fail(str(err)))
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert sorted(delivered) == [(0, TIMESTAMPS[0]), (1, TIMESTAMPS[1]), (2, TIMESTAMPS[2])]


def produce_many(cluster: LocalCluster, topic: str, *, count: int, timestamp: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                         "linger.ms": 0, "acks": "all"})
    for i in range(count):  # one batch each: flushed one by one
        producer.produce(topic, value=b"x" * 200, partition=0, timestamp=timestamp - i)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0


def max_timestamp(cluster: LocalCluster, topic: str) -> tuple[int, int]:
    client = admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    tp = confluent_kafka.TopicPartition(topic, 0)
    futures = client.list_offsets({tp: admin.OffsetSpec.max_timestamp()},
                                  request_timeout=CLIENT_TIMEOUT_S)
    info = futures[tp].result(timeout=CLIENT_TIMEOUT_S)
    return info.offset, info.timestamp


def eventually_max_timestamp(cluster: LocalCluster, topic: str) -> tuple[int, int]:
    """The answer once the client's metadata names the new leader and its epoch, and that
    leader's high watermark has reached its epoch's start (KIP-207: OFFSET_NOT_AVAILABLE until
    then): Kafka's retriable answers, which librdkafka's list_offsets hands back instead of retrying."""
    error = confluent_kafka.KafkaError
    not_yet = (error.NOT_LEADER_FOR_PARTITION, error.OFFSET_NOT_AVAILABLE, error.FENCED_LEADER_EPOCH,
               error.UNKNOWN_LEADER_EPOCH, error.LEADER_NOT_AVAILABLE)

    def answer() -> tuple[int, int] | None:
        try:
            return max_timestamp(cluster, topic)
        except confluent_kafka.KafkaException as e:
            if e.args[0].code() not in not_yet:
                raise
            return None
    return wait_until(f"{topic}: an answer from its leader", answer)  # type: ignore[no-any-return]


def segment_files(cluster: LocalCluster, broker_id: int, topic: str) -> list[Path]:
    return sorted(replica_files.partition_dir(cluster.node(broker_id), topic, 0).glob("*.log"))


@pytest.mark.parametrize("topic", sorted(TOPICS))
def test_max_timestamp_names_the_record_that_carries_it(cluster: tuple[LocalCluster, object],
                                                        topic: str) -> None:
    assert max_timestamp(cluster[0], topic) == (1, BASE + 400)


def test_the_rolled_topic_really_has_several_segments(cluster: tuple[LocalCluster, object]) -> None:
    c, _ = cluster
    leader = partition_state(c, "mt-rolled", 0)["leader"]
    assert len(segment_files(c, leader, "mt-rolled")) > 3


def test_follower_that_became_leader_then_restarted_leader(cluster: tuple[LocalCluster, object]) -> None:
    c, nemesis = cluster
    old = partition_state(c, "mt-plain", 0)["leader"]
    led = [t for t in TOPICS if partition_state(c, t, 0)["leader"] == old]
    nemesis.kill(old)  # type: ignore[attr-defined]
    for topic in led:
        wait_for_state(c, topic, 0, "a follower becomes leader", lambda s: s["leader"] not in (old, -1))
    for topic in TOPICS:  # the followers' copies answer the same
        assert eventually_max_timestamp(c, topic) == (1, BASE + 400), topic
    nemesis.restart(old)  # type: ignore[attr-defined]  # crashed: recovery rebuilds its indexes
    for topic in TOPICS:
        wait_full_isr(c, topic, 1)
    status, body = http(f"{c.admin_url}/v1/elections", "POST", {"type": "preferred", "partitions": [
        {"topic": t, "partition": 0} for t in led]})
    assert status == 200, body
    for topic in led:
        wait_for_state(c, topic, 0, f"broker {old} leads again", lambda s: s["leader"] == old)
    for topic in TOPICS:
        assert eventually_max_timestamp(c, topic) == (1, BASE + 400), topic
