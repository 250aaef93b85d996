"""KIP-392 follower fetching on a real cluster: three brokers in three racks (`racks=3`, so each
RF=3 partition has one replica per rack), replica.selector.class RackAwareReplicaSelector, and a
confluent-kafka consumer with `client.rack` set to a follower's rack.

- the consumer reads everything, and the follower's GET /metrics shows it served the reads
  (tidelog_broker_follower_fetch_reads_total) after the leader pointed the consumer there
  (tidelog_broker_preferred_read_replica_answers_total);
- when that follower is SIGKILLed the consumer keeps reading: records produced after the kill
  all arrive, now from the leader.
"""

from __future__ import annotations

import time
import urllib.request
from typing import Any

import pytest

from common.prometheus import samples
from common.waiting import wait_until
from localcluster.launcher import probe_brokers
from tidelog.testing.cluster import Cluster

confluent_kafka = pytest.importorskip("confluent_kafka")

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
pytestmark = pytest.mark.tidelog(brokers=3, racks=3, broker_config={"replica.selector.class": RACK_AWARE})
RECORDS = 20
CONSUME_TIMEOUT_S = 60.0  # after the kill: librdkafka's reconnect backoff, then back to the leader
HTTP_TIMEOUT_S = 10.0


def counter(cluster: Cluster, broker_id: int, name: str) -> float:
    with urllib.request.urlopen(cluster.node(broker_id).spec.metrics_url, timeout=HTTP_TIMEOUT_S) as answer:
        return samples(answer.read().decode()).get(name, 0.0)


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for value in values:
        producer.produce(topic, value=value, partition=0)
    assert producer.flush(30) == 0, "records left undelivered"


def consume(consumer: Any, want: int, timeout_s: float) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:  # bounded by timeout_s
        message = consumer.poll(0.5)
        if message is None or message.error() is not None:
            continue
        got.append(message.value())
    return got


def test_a_rack_aware_consumer_reads_from_its_racks_follower_and_falls_back_to_the_leader(
        tidelog_cluster: Cluster, tidelog_topic: Any) -> None:
    cluster = tidelog_cluster
    racks = {b["broker_id"]: b["rack"] for b in probe_brokers(cluster.admin_url)}
    assert sorted(racks.values()) == ["rack-1", "rack-2", "rack-3"], racks
    topic = tidelog_topic(partitions=1, replication_factor=3)
    cluster.wait_for_isr(topic, 0, 3)
    leader = cluster.leader_of(topic)
    follower = min(b for b in racks if b != leader)
    before = [counter(cluster, follower, "tidelog_broker_follower_fetch_reads_total"),
              counter(cluster, leader, "tidelog_broker_preferred_read_replica_answers_total")]
    first = [f"before-{i}".encode() for i in range(RECORDS)]
    produce(cluster.bootstrap_servers, topic, first)

    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": cluster.bootstrap_servers, "group.id": f"{topic}-reader",
        "client.rack": racks[follower], "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "reconnect.backoff.max.ms": 1000, "topic.metadata.refresh.interval.ms": 1000})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        assert consume(consumer, RECORDS, CONSUME_TIMEOUT_S) == first
        served = wait_until(
            f"broker {follower} (rack {racks[follower]}) to count the consumer's reads as follower",
            lambda: (n := counter(cluster, follower, "tidelog_broker_follower_fetch_reads_total")) > before[0] and n,
            10.0)
        pointed = counter(cluster, leader, "tidelog_broker_preferred_read_replica_answers_total")
        assert pointed > before[1], f"leader {leader} never sent the consumer to broker {follower}"
        assert counter(cluster, follower, "tidelog_broker_follower_fetch_bytes_total") > 0
        assert served > before[0]

        cluster.kill(follower)  # the preferred replica is gone: the consumer must go back to the leader
        second = [f"after-{i}".encode() for i in range(RECORDS)]
        produce(cluster.bootstrap_servers, topic, second)
        assert consume(consumer, RECORDS, CONSUME_TIMEOUT_S) == second
    finally:
        consumer.close()
