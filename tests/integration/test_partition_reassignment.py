"""Partition reassignment (KIP-455) end to end: 3 controllers + brokers 4-7, real clients.

- an RF=3 partition moves from brokers 4,5,6 to 5,6,7 while an idempotent acks=all
  confluent-kafka producer writes: no failed delivery, every acknowledged record readable
  afterwards, broker 4's replica directory gone;
- a reassignment that cannot finish (its new broker is down) is listed, then cancelled;
- a throttled reassignment (`tidelog reassign --throttle`) moves slowly and is cancelled half-way;
- RF 1 -> 3 -> 1 through the admin API, and through `tidelog reassign`;
- the active controller is killed mid-reassignment: the next one completes it;
- bad input (unknown broker, duplicate replicas) is INVALID_REPLICA_ASSIGNMENT with nothing
  applied and the client's connection still serving.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.nemesis import Nemesis
from chaos.workload import read_all
from tests.integration.cluster_fixtures import http, spawn_node, wait_until
from localcluster.launcher import LocalCluster, free_ports
from localcluster.replica_files import partition_dir


HOSTS = tuple(f"127.0.0.{i}" for i in range(1, 8))
FAST = {"broker.heartbeat.interval.ms": "200", "broker.session.timeout.ms": "3000",
        "replica.lag.time.max.ms": "4000", "replica.fetch.backoff.ms": "200"}
MOVE_S = 60.0
THROTTLE_BYTES_PER_S = 100_000  # both sides; only topics naming throttled replicas are slowed
RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, Nemesis]]:
    root = tmp_path_factory.mktemp("reassign")
    raft_port, admin_port, kafka_port, metrics_port = free_ports(HOSTS, 4)
    with LocalCluster.start(root, controllers=3, brokers=4, raft_port=raft_port, admin_port=admin_port,
                            kafka_port=kafka_port, metrics_port=metrics_port, ready_timeout=90,
                            extra_properties=FAST, spawn=spawn_node) as started:
        with Nemesis(started) as nemesis:
            yield started, nemesis


def url(cluster: LocalCluster) -> str:
    """The admin API of a controller that listens (any one forwards writes to the active one):
    one restarted by an earlier test may be running but not listening yet."""
    def listening() -> str | None:
        for node in cluster.controllers:
            parts = urllib.parse.urlsplit(node.spec.admin_url)
            try:
                if node.running() and parts.hostname and parts.port:
                    socket.create_connection((parts.hostname, parts.port), timeout=1).close()
                    return node.spec.admin_url
            except OSError:
                continue
        return None
    found: str = wait_until("a controller's admin API listening", listening, 30)
    return found


def create(cluster: LocalCluster, name: str, replicas: list[int]) -> None:
    status, body = http(url(cluster) + "/v1/topics", "POST",
                        {"name": name, "assignments": [{"partition": 0, "replicas": replicas}]})
    assert status == 201, body

    def in_sync() -> bool | None:
        status, body = http(f"{url(cluster)}/v1/topics/{name}")
        assert status == 200, body
        partition = next(p for p in json.loads(body)["partitions"] if p["partition"] == 0)
        return sorted(partition["isr"]) == sorted(replicas) and partition["leader"] >= 0
    wait_until(f"{name}-0 fully in sync", in_sync, 30)


def state(cluster: LocalCluster, topic: str) -> dict[str, Any]:
    status, body = http(f"{url(cluster)}/v1/topics/{topic}")
    assert status == 200, body
    return next(p for p in json.loads(body)["partitions"] if p["partition"] == 0)  # type: ignore[no-any-return]


def ongoing(cluster: LocalCluster) -> list[dict[str, Any]]:
    status, body = http(url(cluster) + "/v1/reassignments")
    assert status == 200, body
    return json.loads(body)["partitions"]  # type: ignore[no-any-return]


def reassign(cluster: LocalCluster, topic: str, replicas: list[int] | None) -> tuple[int, dict[str, Any]]:
    status, body = http(url(cluster) + "/v1/reassignments", "POST",
                        {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": replicas}]})
    return status, json.loads(body)


def wait_moved(cluster: LocalCluster, topic: str, replicas: list[int], timeout_s: float = MOVE_S) -> None:
    def done() -> bool:
        s = state(cluster, topic)
        return s["replicas"] == replicas and sorted(s["isr"]) == sorted(replicas) and s["leader"] in replicas \
            and not any(o["topic"] == topic for o in ongoing(cluster))
    wait_until(f"{topic}-0 on {replicas}", done, timeout_s)


def admin(cluster: LocalCluster) -> Any:
    from kafka.admin import KafkaAdminClient
    return KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=20_000)


class Producer(threading.Thread):
    """Idempotent acks=all confluent-kafka producer writing numbered records until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer as CProducer
        self.topic, self.stop_event = topic, threading.Event()
        self.acked: set[bytes] = set()
        self.failed: list[str] = []
        self.producer = CProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                   "linger.ms": 5, "message.timeout.ms": 60_000})

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked.add(msg.value())

    def run(self) -> None:
        n = 0
        while not self.stop_event.is_set():  # until stopped by the test
            self.producer.produce(self.topic, value=b"%08d" % n, partition=0, on_delivery=self._delivered)
            n += 1
            self.producer.poll(0.002)
        self.producer.flush(60)

    def finish(self) -> None:
        self.stop_event.set()
        self.join(90)


def test_move_rf3_to_a_fourth_broker_while_producing(cluster: tuple[LocalCluster, Nemesis]) -> None:
    c, _ = cluster
    create(c, "moving", [4, 5, 6])
    producer = Producer(c.bootstrap_servers or "", "moving")
    producer.start()
    try:
        wait_until("some records acknowledged", lambda: len(producer.acked) > 200, 30)
        client = admin(c)
        try:
            from kafka import TopicPartition
            answer = client.alter_partition_reassignments({TopicPartition("moving", 0): [5, 6, 7]})
            assert answer == {TopicPartition("moving", 0): None}
            listed = client.list_partition_reassignments()
            assert not listed or listed[TopicPartition("moving", 0)]["adding_replicas"] == [7]
            wait_moved(c, "moving", [5, 6, 7])
            assert client.list_partition_reassignments() == {}
        finally:
            client.close()
        time.sleep(1.0)  # the producer keeps writing to the new replica set
    finally:
        producer.finish()
    assert not producer.is_alive()
    assert producer.failed == [], producer.failed[:5]
    assert len(producer.acked) > 200
    read = {value for _, _, value in read_all(c.bootstrap_servers or "", "moving", 1)}
    assert producer.acked <= read, f"{len(producer.acked - read)} acknowledged records lost"
    wait_until("broker 4 deleted its replica", lambda: not partition_dir(c.node(4), "moving", 0).exists(), 20)


def test_cancel_half_way_reverts(cluster: tuple[LocalCluster, Nemesis]) -> None:
    c, nemesis = cluster
    create(c, "cancelled", [4, 5, 6])
    nemesis.kill(7)  # registered but down: the adding replica can never catch up
    try:
        status, body = reassign(c, "cancelled", [4, 5, 7])
        assert status == 200 and body["results"][0]["error"] == "NONE", body
        # reads come from one controller's image, which may trail the active one by a few ms
        listed = wait_until("the reassignment listed", lambda: [o for o in ongoing(c) if o["topic"] == "cancelled"])
        assert listed == [{"topic": "cancelled", "partition": 0, "replicas": [4, 5, 7, 6], "adding_replicas": [7],
                           "removing_replicas": [6], "target_replicas": [4, 5, 7]}]
        status, body = reassign(c, "cancelled", None)
        assert status == 200 and body["results"][0]["error"] == "NONE", body
        wait_until("reverted", lambda: sorted(state(c, "cancelled")["replicas"]) == [4, 5, 6]
                   and not [o for o in ongoing(c) if o["topic"] == "cancelled"])
        status, body = reassign(c, "cancelled", None)
        assert (status, body["error"], body["field"]) == (400, "NO_REASSIGNMENT_IN_PROGRESS", "partitions[0].replicas")
    finally:
        nemesis.restart(7)
    wait_until("broker 7 unfenced again", lambda: any(
        b["broker_id"] == 7 and not b["fenced"] for b in json.loads(http(url(c) + "/v1/brokers")[1])), 30)


def test_replication_factor_up_and_down(cluster: tuple[LocalCluster, Nemesis]) -> None:
    c, _ = cluster
    create(c, "growing", [5])
    status, body = reassign(c, "growing", [5, 6, 7])
    assert status == 200, body
    wait_moved(c, "growing", [5, 6, 7])
    cli = subprocess.run([sys.executable, "-m", "tidelog", "reassign", "--admin-url", url(c),
                          "--topic", "growing", "--partition", "0", "--replicas", "6", "--execute"],
                         capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    wait_moved(c, "growing", [6])
    wait_until("brokers 5 and 7 deleted their replicas", lambda: not partition_dir(c.node(5), "growing", 0).exists()
               and not partition_dir(c.node(7), "growing", 0).exists(), 20)


def test_bad_input_is_invalid_replica_assignment_and_applies_nothing(cluster: tuple[LocalCluster, Nemesis]) -> None:
    c, _ = cluster
    create(c, "bad-input", [4, 5])
    before = state(c, "bad-input")
    from kafka import TopicPartition
    from kafka.errors import InvalidReplicationAssignmentError, UnknownTopicOrPartitionError
    client = admin(c)
    try:
        tp = TopicPartition("bad-input", 0)
        assert client.alter_partition_reassignments({tp: [4, 99]}) == {tp: InvalidReplicationAssignmentError}
        assert client.alter_partition_reassignments({tp: [4, 4]}) == {tp: InvalidReplicationAssignmentError}
        missing = TopicPartition("bad-input", 7)
        assert client.alter_partition_reassignments({missing: [4]}) == {missing: UnknownTopicOrPartitionError}
        assert client.list_partition_reassignments() == {}  # the same connection still serves
    finally:
        client.close()
    after = state(c, "bad-input")
    assert (after["replicas"], after["partition_epoch"]) == (before["replicas"], before["partition_epoch"])
    status, body = reassign(c, "bad-input", [5, 5])
    assert (status, body["error"], body["field"]) == (400, "INVALID_REPLICA_ASSIGNMENT", "partitions[0].replicas")
    status, body = (lambda r: (r[0], json.loads(r[1])))(http(url(c) + "/v1/reassignments", "POST",
                                                              {"partitions": [{"topic": "bad-input", "partition": 0,
                                                                               "replicas": ["x"]}]}))
    assert (status, body["field"]) == (400, "partitions[0].replicas[0]")


def test_controller_failover_mid_reassignment_completes(cluster: tuple[LocalCluster, Nemesis]) -> None:
    c, nemesis = cluster
    create(c, "failover", [4, 5])
    nemesis.kill(6)
    try:
        status, body = reassign(c, "failover", [5, 6])
        assert status == 200, body
        wait_until("listed", lambda: [o["adding_replicas"] for o in ongoing(c) if o["topic"] == "failover"] == [[6]])
        cluster_view = json.loads(http(url(c) + "/v1/cluster")[1])
        active = cluster_view["active_controller"]
        nemesis.kill(active)
    finally:
        nemesis.restart(6)
    try:
        wait_moved(c, "failover", [5, 6])
    finally:
        if not c.node(active).running():
            nemesis.restart(active)


def cli(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tidelog", "reassign", "--admin-url", url(cluster), *args],
                          capture_output=True, text=True, timeout=60)


def replica_bytes(cluster: LocalCluster, broker_id: int, topic: str) -> int:
    directory = partition_dir(cluster.node(broker_id), topic, 0)
    return sum(p.stat().st_size for p in directory.glob("*.log")) if directory.exists() else 0


def test_throttled_reassignment_is_slow_and_cancelled_half_way(cluster: tuple[LocalCluster, Nemesis]) -> None:
    from confluent_kafka import Producer as CProducer
    c, _ = cluster
    create(c, "slow", [4, 5])
    producer = CProducer({"bootstrap.servers": c.bootstrap_servers, "acks": "all", "linger.ms": 20,
                          "compression.type": "none"})
    for i in range(4000):  # ~4 MB: 40 s at the throttle once its first burst is spent
        producer.produce("slow", value=b"%08d" % i + b"x" * 1016, partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0
    total = replica_bytes(c, 4, "slow")
    assert total > 3_000_000
    started = cli(c, "--topic", "slow", "--partition", "0", "--replicas", "4,5,6", "--execute",
                  "--throttle", str(THROTTLE_BYTES_PER_S))
    assert started.returncode == 0, started.stderr
    assert "Successfully started partition reassignments for slow-0" in started.stdout
    def throttle_set() -> bool:
        configs = json.loads(http(f"{url(c)}/v1/topics/slow/configs")[1])["configs"]
        return (configs.get("leader.replication.throttled.replicas"),
                configs.get("follower.replication.throttled.replicas")) == ("0:4,0:5", "0:6")
    wait_until("throttled replicas set on the topic", throttle_set)
    for broker in (4, 5, 6):  # the rate is a dynamic broker config on every broker the move involves
        rates = json.loads(http(f"{url(c)}/v1/brokers/{broker}/configs")[1])["configs"]
        assert {k: rates.get(k) for k in RATE_KEYS} == dict.fromkeys(RATE_KEYS, str(THROTTLE_BYTES_PER_S)), rates
    wait_until("broker 6 copying", lambda: replica_bytes(c, 6, "slow") > 0, 20)
    time.sleep(3.0)
    copied = replica_bytes(c, 6, "slow")
    assert 0 < copied < total, (copied, total)  # half-way: the throttle holds it back
    wait_until("listed", lambda: [o["adding_replicas"] for o in ongoing(c) if o["topic"] == "slow"] == [[6]])
    listed = cli(c, "--list")
    assert "slow-0: replicas: 4,5,6. adding: 6. removing: ." in listed.stdout, listed.stdout
    cancelled = cli(c, "--topic", "slow", "--partition", "0", "--cancel")
    assert cancelled.returncode == 0, cancelled.stderr
    wait_until("reverted", lambda: state(c, "slow")["replicas"] == [4, 5]
               and not [o for o in ongoing(c) if o["topic"] == "slow"])
    wait_until("broker 6 deleted its partial copy", lambda: not partition_dir(c.node(6), "slow", 0).exists(), 20)
    verified = cli(c, "--topic", "slow", "--partition", "0", "--replicas", "4,5,6", "--verify")
    assert "There is no active reassignment of partition slow-0, but replica set is [4, 5]" in verified.stdout
    assert "Clearing topic-level throttles on topic slow" in verified.stdout
    assert "Clearing broker-level throttles on broker 6" in verified.stdout
    assert not set(RATE_KEYS) & json.loads(http(f"{url(c)}/v1/brokers/6/configs")[1])["configs"].keys()
    wait_until("throttles cleared", lambda: not json.loads(http(f"{url(c)}/v1/topics/slow/configs")[1])[
        "configs"].get("leader.replication.throttled.replicas"))
