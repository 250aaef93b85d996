"""SIGKILL of the transaction coordinator with a transaction open, against a real RF=3 cluster: a
new leader of the transactional id's `__transaction_state` partition loads its state by replay,
the confluent-kafka producer finds it and commits, the markers reach every partition (some of
whose leaders were on the killed broker too), and a read_committed consumer reads every value
exactly once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from localcluster.launcher import LocalCluster
from tests.integration.replication_fixtures import (
    create_topic,
    partition_state,
    replicated_cluster,
    wait_for_state,
    wait_full_isr,
)
from tests.integration.test_transaction_coordinator import PROPERTIES, TIMEOUT_S, consume, describe, wait_state
from transactions.partitioner import TRANSACTION_STATE_TOPIC_NAME, partition_for

confluent_kafka = pytest.importorskip("confluent_kafka")

PARTITIONS = 3
TRANSACTION_PARTITIONS = int(PROPERTIES["transaction.state.log.num.partitions"])


@pytest.fixture
def cluster(tmp_path: Any) -> Iterator[tuple[LocalCluster, Any]]:
    with replicated_cluster(tmp_path, PROPERTIES) as started:
        yield started


def test_sigkill_of_the_coordinator_mid_transaction(cluster: tuple[LocalCluster, Any]) -> None:
    running, nemesis = cluster
    topic, tid = "txn-failover", "tx-failover"
    create_topic(running, topic, partitions=PARTITIONS, replication_factor=3)
    wait_full_isr(running, topic, PARTITIONS)
    bootstrap = running.bootstrap_servers
    assert bootstrap is not None
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    sent = [f"v-{i}".encode() for i in range(30)]
    for i, v in enumerate(sent):
        p.produce(topic, v, partition=i % PARTITIONS)
    assert p.flush(TIMEOUT_S) == 0
    before = describe(running, tid)
    assert before.state == "Ongoing"
    state_partition = partition_for(tid, TRANSACTION_PARTITIONS)
    coordinator = partition_state(running, TRANSACTION_STATE_TOPIC_NAME, state_partition)["leader"]
    nemesis.kill(coordinator)
    wait_for_state(running, TRANSACTION_STATE_TOPIC_NAME, state_partition, "a new coordinator",
                   lambda s: s["leader"] not in (-1, coordinator))
    started = time.monotonic()
    p.commit_transaction(TIMEOUT_S)  # librdkafka finds the new coordinator
    done = wait_state(running, tid, "CompleteCommit")
    assert (done.producer_id, done.producer_epoch) == (before.producer_id, before.producer_epoch)
    assert time.monotonic() - started < TIMEOUT_S
    got = consume(running, topic, "read_committed", len(sent))
    assert sorted(v for _, v in got) == sorted(sent)
    new_leader = partition_state(running, TRANSACTION_STATE_TOPIC_NAME, state_partition)["leader"]
    log = next(b for b in running.brokers if b.spec.node_id == new_leader).spec.log_path.read_text(errors="replace")
    assert f"from {TRANSACTION_STATE_TOPIC_NAME}-{state_partition}" in log and "Loaded" in log
    assert f"Transactional id {tid} ({TRANSACTION_STATE_TOPIC_NAME}-{state_partition}) producer id" in log
