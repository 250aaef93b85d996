"""Coordinator failover: SIGKILL the broker that coordinates a consuming group.

Two confluent-kafka members consume a 6-partition RF=3 topic and commit synchronously while
a producer keeps writing; the coordinator broker (leader of the group's `__consumer_offsets`
partition) is killed. A new leader of that partition loads the group's offsets, the members
find it and carry on: every produced record is consumed, the committed offsets end at the
high watermarks, and duplicates are at most what was consumed after the last commit.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator

import pytest

from groups.partitioner import GROUP_METADATA_TOPIC_NAME, coordinator_partition
from tests.integration.cluster_fixtures import wait_until
from tests.integration.group_fixtures import split, start_member, stop_members
from tests.integration.replication_fixtures import (
    create_topic,
    partition_state,
    replicated_cluster,
    wait_for_state,
    wait_full_isr,
)
from localcluster.launcher import LocalCluster

confluent_kafka = pytest.importorskip("confluent_kafka")

PARTITIONS = 6
OFFSETS_PARTITIONS = 12
RECORDS = 1500
CONSUME_S = 90.0
PROPERTIES = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000",
              "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS)}


@pytest.fixture
def cluster(tmp_path) -> Iterator[tuple[LocalCluster, object]]:  # noqa: ANN001
    with replicated_cluster(tmp_path, PROPERTIES) as started:
        yield started


def test_sigkill_of_the_coordinator_keeps_offsets_and_loses_nothing(cluster) -> None:  # noqa: ANN001
    from confluent_kafka import Consumer, Producer, TopicPartition

    running, nemesis = cluster
    create_topic(running, "failover", partitions=PARTITIONS, replication_factor=3)
    wait_full_isr(running, "failover", PARTITIONS)
    bootstrap = running.bootstrap_servers
    assert bootstrap is not None
    group = "failover-group"
    members = [start_member("confluent", bootstrap, group, "failover", i) for i in range(2)]
    sent: list[bytes] = []
    done = threading.Event()
    failures: list[BaseException] = []

    def write() -> None:
        try:
            p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                          "linger.ms": 5})
            for i in range(RECORDS):
                v = f"r-{i}".encode()
                p.produce("failover", value=v, key=v)
                sent.append(v)
                p.poll(0)
                time.sleep(0.004)
            assert p.flush(60) == 0, "records not delivered"
        except BaseException as e:  # noqa: BLE001 - re-raised by the test
            failures.append(e)
        finally:
            done.set()

    writer = threading.Thread(target=write, daemon=True)
    try:
        wait_until("2 members split 6 partitions", lambda: split(members, PARTITIONS), CONSUME_S)
        writer.start()
        wait_until("consumption under way", lambda: sum(len(m.seen()) for m in members) >= RECORDS // 5, CONSUME_S)
        offsets_partition = coordinator_partition(group, OFFSETS_PARTITIONS)
        coordinator = partition_state(running, GROUP_METADATA_TOPIC_NAME, offsets_partition)["leader"]
        nemesis.kill(coordinator)
        wait_for_state(running, GROUP_METADATA_TOPIC_NAME, offsets_partition, "a new coordinator",
                       lambda s: s["leader"] not in (-1, coordinator))
        assert done.wait(CONSUME_S), "the producer did not finish"
        assert not failures, failures
        wait_until("every record consumed", lambda: set(sent) <= {v for m in members for _, _, v in m.seen()},
                   CONSUME_S)
    finally:
        stop_members(members)
        writer.join(10)
    seen = [(p, o) for m in members for p, o, _ in m.seen()]
    duplicates = len(seen) - len(set(seen))
    assert duplicates <= RECORDS // 2, f"{duplicates} duplicates: more than the uncommitted tail"
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        committed = c.committed([TopicPartition("failover", p) for p in range(PARTITIONS)], timeout=20)
        ends = {p: c.get_watermark_offsets(TopicPartition("failover", p), timeout=20)[1] for p in range(PARTITIONS)}
    finally:
        c.close()
    assert {tp.partition: tp.offset for tp in committed} == ends
    log = next(b for b in running.brokers if b.spec.node_id == partition_state(
        running, GROUP_METADATA_TOPIC_NAME, offsets_partition)["leader"]).spec.log_path.read_text(errors="replace")
    loaded = re.findall(rf"Loaded \d+ group\(s\) and offsets of (\d+) group\(s\) from "
                        rf"{GROUP_METADATA_TOPIC_NAME}-{offsets_partition} \(leader epoch [1-9]", log)
    assert loaded and int(loaded[-1]) >= 1, "the new coordinator did not load the group's offsets"
