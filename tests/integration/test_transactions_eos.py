"""Exactly-once through failures, against a real RF=3 cluster with real clients (issue 27).

1. A consume-transform-produce loop (tests/integration/eos_transform.py, confluent-kafka, EOS v2
   / KIP-447: send_offsets_to_transaction with the consumer's group metadata) runs as OS
   processes: a second one joins (a group rebalance), one is SIGKILLed with a transaction open and
   replaced by an instance with its transactional.id. A read_committed reader of the output sees
   every input value exactly once.
2. Every broker is restarted (SIGTERM, then started again) with two transactions open: each
   partition's LSO and DescribeProducers' open transactions come back the same, the transactions
   then end as asked (or as the restart made them end), the LSO reaches the HW, and the aborted
   data stays out of read_committed reads across one more restart of every broker (the
   `.txnindex`).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from common.broker_connection import BrokerUnavailable
from common.kafka_client import KafkaClient
from common.protocol import fetch, list_offsets, messages
from common.protocol.api_keys import ApiKey
from common.waiting import WaitTimeout
from common.request_versions import LIST_OFFSETS_VERSION
from localcluster.launcher import LocalCluster
from localcluster.node_process import NodeProcess
from tests.integration.cluster_fixtures import wait_until
from tests.integration.replication_fixtures import BROKERS, partition_state, wait_full_isr
from tests.integration.txn_fixtures import bootstrap, client_of, new_topic, read_values, txn_cluster

confluent_kafka: Any = pytest.importorskip("confluent_kafka")

PARTITIONS = 3
TIMEOUT_S = 60.0  # one bounded wait of a step (a rebalance, a restart of the cluster)
STOP_S = 30.0  # a broker's clean shutdown
READ_COMMITTED, READ_UNCOMMITTED = 1, 0
TRANSFORM = Path(__file__).with_name("eos_transform.py")
RECORDS = 3_000  # input values "0".."2999"
HOLD_S = 0.15  # each transform transaction stays open this long before its commit (the kill's window)
PROPERTIES = {"group.initial.rebalance.delay.ms": "300",
              "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"}
MIN_ISR_2 = {"min.insync.replicas": "2"}
T = TypeVar("T")


cluster = txn_cluster("txn-eos", PROPERTIES)


# ---- 1. consume-transform-produce through a rebalance and a SIGKILL -------------------------


class Transform:
    """One eos_transform.py process; its stdout lines collected by a thread."""

    def __init__(self, cluster: LocalCluster, source: str, sink: str, tid: str) -> None:
        self.tid = tid
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, str(TRANSFORM), bootstrap(cluster), source, sink, "eos-transform", tid,
             "--hold-s", str(HOLD_S)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:  # ends when the process does
            self.lines.append(line.rstrip("\n"))

    def events(self, kind: str) -> list[str]:
        return [line for line in list(self.lines) if line.startswith(kind + " ")]

    def committed_records(self) -> int:
        return sum(int(line.split()[2]) for line in self.events("committed"))

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        self._reader.join(5)


def test_consume_transform_produce_is_exactly_once_through_a_rebalance_and_a_kill(cluster: LocalCluster) -> None:
    source, sink = (new_topic(cluster, name, PARTITIONS, MIN_ISR_2) for name in ("eos-in", "eos-out"))
    feed = confluent_kafka.Producer({"bootstrap.servers": bootstrap(cluster), "linger.ms": 20})
    for v in range(RECORDS):
        feed.produce(source, str(v).encode(), partition=v % PARTITIONS)
    assert feed.flush(TIMEOUT_S) == 0

    started = time.monotonic()
    transforms: list[Transform] = []
    try:
        first = Transform(cluster, source, sink, "eos-transform-a")
        transforms.append(first)
        wait_until("the first transform commits transactions", lambda: len(first.events("committed")) >= 3,
                   TIMEOUT_S)
        second = Transform(cluster, source, sink, "eos-transform-b")  # joins: the group rebalances
        transforms.append(second)
        wait_until("the second transform is assigned partitions and commits",
                   lambda: second.events("assigned") and second.events("assigned")[-1] != "assigned "
                   and len(second.events("committed")) >= 2, TIMEOUT_S)
        rebalanced = len(first.events("assigned"))
        assert rebalanced >= 2, first.lines  # the first gave partitions up to the second

        # the kill lands in the window between a transaction's flushed records and its commit
        seen = len(second.events("open"))
        wait_until("the second transform holds a transaction open",
                   lambda: len(second.events("open")) > seen and
                   len(second.events("open")) > len(second.events("committed")), TIMEOUT_S, poll_s=0.01)
        second.kill()
        open_at_kill = len(second.events("open")) > len(second.events("committed"))
        replacement = Transform(cluster, source, sink, "eos-transform-b")  # its init aborts b's transaction
        transforms.append(replacement)

        def output_complete() -> bool:
            return sum(t.committed_records() for t in transforms) >= RECORDS
        wait_until("the transforms commit every input record", output_complete, TIMEOUT_S)
        committed = read_committed(cluster, sink, RECORDS)
        uncommitted = read_values(cluster, sink, "read_uncommitted", RECORDS, partitions=PARTITIONS)
    finally:
        for t in transforms:
            t.kill()
    elapsed = time.monotonic() - started

    counts = Counter(value for _, value in committed)
    expected = {f"out-{v}".encode() for v in range(RECORDS)}
    unexpected, lost = sorted(set(counts) - expected), sorted(expected - set(counts))
    duplicated = sorted(value for value, n in counts.items() if n > 1)
    assert not unexpected, f"{len(unexpected)} unexpected values, e.g. {unexpected[:10]}"
    assert not lost, f"{len(lost)} lost values, e.g. {lost[:10]}"
    assert not duplicated, f"{len(duplicated)} duplicated values, e.g. {duplicated[:10]}"
    for partition, value in committed:  # each output record on the partition of its input
        assert int(value[len(b"out-"):]) % PARTITIONS == partition
    assert len(uncommitted) >= len(committed)
    aborted_duplicates = len(uncommitted) - len(committed)
    print(f"exactly-once: {RECORDS} records in {elapsed:.1f} s, the kill hit an open transaction: {open_at_kill}, "
          f"aborted records visible read_uncommitted: {aborted_duplicates}, "
          f"transform events: {[t.lines for t in transforms]}")
    assert open_at_kill, second.lines
    assert aborted_duplicates > 0  # the killed transaction's flushed records, aborted


# ---- 2. every broker restarted with transactions open ---------------------------------------


def per_leader(cluster: LocalCluster, topic: str, ask: Callable[[KafkaClient, int, int], T | None]
               ) -> dict[int, T] | None:
    """partition -> what `ask(client, leader, partition)` answers from each partition's leader
    (None while a partition has no leader, a leader does not answer, or `ask` answers None)."""
    answer: dict[int, T] = {}
    try:
        with client_of(cluster, "txn-eos-test") as client:
            client.metadata([topic])
            for p in range(PARTITIONS):
                leader = int(partition_state(cluster, topic, p)["leader"])
                got = ask(client, leader, p) if leader >= 0 else None
                if got is None:
                    return None
                answer[p] = got
    except (BrokerUnavailable, OSError, KeyError):
        return None
    return answer


def offsets(cluster: LocalCluster, topic: str) -> dict[int, tuple[int, int]] | None:
    """partition -> (LSO, HW) from each partition's leader: ListOffsets LATEST under
    READ_COMMITTED and READ_UNCOMMITTED."""
    def ask(client: KafkaClient, leader: int, p: int) -> tuple[int, int] | None:
        pair = []
        for isolation in (READ_COMMITTED, READ_UNCOMMITTED):
            request = list_offsets.request(LIST_OFFSETS_VERSION, fetch.CONSUMER_REPLICA_ID,
                                           [(topic, p, list_offsets.LATEST_TIMESTAMP, -1)], isolation_level=isolation)
            response = client.call(leader, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, request,
                                   list_offsets.encode_request, list_offsets.decode_response)
            (row,) = [r for t in response.topics for r in t.partitions]
            if row.error_code != 0:
                return None
            pair.append(int(row.offset))
        return pair[0], pair[1]
    return per_leader(cluster, topic, ask)


def open_transactions(cluster: LocalCluster, topic: str) -> dict[int, set[tuple[int, int, int]]] | None:
    """partition -> (producer id, epoch, transaction start offset) of each open transaction
    DescribeProducers shows on its leader."""
    m = messages.request_module(ApiKey.DESCRIBE_PRODUCERS, 0)

    def ask(client: KafkaClient, leader: int, p: int) -> set[tuple[int, int, int]] | None:
        request = m.DescribeProducersRequest(topics=(m.TopicRequest(name=topic, partition_indexes=(p,)),))
        response = client.call(leader, ApiKey.DESCRIBE_PRODUCERS, 0, request, messages.encode_request,
                               messages.response_decoder(ApiKey.DESCRIBE_PRODUCERS))
        (row,) = [r for t in response.topics for r in t.partitions]
        if row.error_code != 0:
            return None
        return {(s.producer_id, s.producer_epoch, s.current_txn_start_offset)
                for s in row.active_producers if s.current_txn_start_offset >= 0}
    return per_leader(cluster, topic, ask)


def read_committed(cluster: LocalCluster, topic: str, expected: int) -> list[tuple[int, bytes]]:
    return read_values(cluster, topic, "read_committed", expected, partitions=PARTITIONS)


def restart_every_broker(cluster: LocalCluster, topic: str) -> None:
    """SIGTERM every broker, then start them all again; back once every partition has its ISR."""
    for broker_id in BROKERS:
        report = cluster.node(broker_id).stop(STOP_S)
        assert report.outcome == "stopped", report.describe()
    for broker_id in BROKERS:
        node = cluster.node(broker_id)
        cluster.nodes[cluster.nodes.index(node)] = NodeProcess.spawn(node.spec)
    cluster.write_cluster_file()
    try:
        wait_full_isr(cluster, topic, PARTITIONS, TIMEOUT_S)
    except WaitTimeout:  # name the broker that did not come back, with its log's end
        down = [cluster.node(b) for b in BROKERS if not cluster.node(b).running()]
        raise AssertionError(f"brokers not running after the restart: "
                             f"{[(n.spec.label, n.log_tail()) for n in down]}") from None


def end(cluster: LocalCluster, producer: Any, tid: str, commit: bool) -> str:
    """Commit or abort the open transaction of `producer`; if the client refuses (fenced or timed
    out by the restart), a new producer with the same transactional.id aborts it, as Kafka's
    InitProducerId does. What happened, for the test's report."""
    try:
        if commit:
            producer.commit_transaction(TIMEOUT_S)
        else:
            producer.abort_transaction(TIMEOUT_S)
        return "committed" if commit else "aborted"
    except confluent_kafka.KafkaException as exc:
        again = confluent_kafka.Producer({"bootstrap.servers": bootstrap(cluster), "transactional.id": tid})
        again.init_transactions(TIMEOUT_S)
        return f"aborted by re-init after {exc.args[0]}"


def test_restart_of_every_broker_with_transactions_open(cluster: LocalCluster) -> None:
    topic = new_topic(cluster, "eos-restart", PARTITIONS, MIN_ISR_2)
    started = time.monotonic()
    producers: dict[str, Any] = {}
    for outcome in ("commit", "abort"):
        p = confluent_kafka.Producer({"bootstrap.servers": bootstrap(cluster), "transactional.id": f"restart-{outcome}",
                                      "transaction.timeout.ms": 300_000, "linger.ms": 5})
        p.init_transactions(TIMEOUT_S)
        p.begin_transaction()
        for i in range(30):
            p.produce(topic, f"{outcome}-{i}".encode(), partition=i % PARTITIONS)
        p.flush(TIMEOUT_S)
        producers[outcome] = p

    before = wait_until("every partition's LSO and HW", lambda: offsets(cluster, topic), TIMEOUT_S)
    opened = wait_until("every partition's open transactions", lambda: open_transactions(cluster, topic), TIMEOUT_S)
    assert all(lso < hw for lso, hw in before.values()), before  # the open transactions hold the LSO back
    assert all(len(starts) == 2 for starts in opened.values()), opened
    assert all(min(start for _, _, start in opened[p]) == before[p][0] for p in range(PARTITIONS)), (opened, before)

    restart_every_broker(cluster, topic)
    # the HW comes back once the followers have fetched again; the LSO is then the first open offset
    after = wait_until("every partition's HW is back", lambda: (lambda o: o if o and all(
        o[p][1] == before[p][1] for p in range(PARTITIONS)) else None)(offsets(cluster, topic)), TIMEOUT_S)
    assert after == before
    assert wait_until("open transactions described", lambda: open_transactions(cluster, topic), TIMEOUT_S) == opened

    outcomes = {"commit": end(cluster, producers["commit"], "restart-commit", True),
                "abort": end(cluster, producers["abort"], "restart-abort", False)}
    committed = [f"commit-{i}".encode() for i in range(30)] if outcomes["commit"] == "committed" else []

    def stable() -> dict[int, tuple[int, int]] | None:
        o = offsets(cluster, topic)
        return o if o and all(lso == hw for lso, hw in o.values()) else None
    final = wait_until("the LSO reaches the HW on every partition", stable, TIMEOUT_S)
    assert all(final[p][1] == before[p][1] + 2 for p in range(PARTITIONS)), (final, before)  # two markers
    assert sorted(v for _, v in read_committed(cluster, topic, len(committed))) == sorted(committed)

    restart_every_broker(cluster, topic)  # the aborted list comes back from the .txnindex
    wait_until("every partition's offsets after the second restart",
               lambda: (lambda o: o if o == final else None)(offsets(cluster, topic)), TIMEOUT_S)
    assert sorted(v for _, v in read_committed(cluster, topic, len(committed))) == sorted(committed)
    everything = read_values(cluster, topic, "read_uncommitted", 60, partitions=PARTITIONS)
    assert len(everything) == 60  # the aborted records are in the log: read_committed skipped them
    print(f"restart with open transactions: {outcomes}, offsets before {before}, final {final}, "
          f"{time.monotonic() - started:.1f} s")
