"""Controlled shutdown end to end: 3 controllers + brokers 4 and 5 as real processes.

SIGTERM broker 4 (what the launcher's node stop sends): it heartbeats want_shut_down, the
active controller moves its leaders away (RF 1 partitions it led go leaderless, Kafka's
behaviour: KIP-841 keeps the last ISR member), answers should_shut_down once broker 5 has
replayed those records, and broker 4 flushes, writes the clean-shutdown marker and exits 0.
Then it is started again from the same directory and comes back unfenced, leading its RF 1
partitions again.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.log.log_manager import CLEAN_SHUTDOWN_FILE
from tests.integration.cluster_fixtures import http, spawn_node, wait_until
from localcluster.launcher import LocalCluster, free_ports
from localcluster.node_process import NodeProcess

HOSTS = tuple(f"127.0.0.{n}" for n in range(1, 6))
STOPPED_BROKER, OTHER_BROKER = 4, 5
NO_LEADER = -1
READY_S = 30.0
EXIT_BOUND_S = 10.0  # SIGTERM -> exit; the controlled-shutdown timeout below is shorter still
PROPERTIES = {"broker.heartbeat.interval.ms": "200", "broker.session.timeout.ms": "1500",
              "controlled.shutdown.timeout.ms": "8000"}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    raft_port, admin_port, kafka_port, metrics_port = free_ports(HOSTS, 4)
    with LocalCluster.start(tmp_path / "cluster", controllers=3, raft_port=raft_port, admin_port=admin_port,
                            brokers=2, kafka_port=kafka_port, metrics_port=metrics_port, ready_timeout=READY_S,
                            extra_properties=PROPERTIES, spawn=spawn_node) as started:
        yield started  # every node (the restarted one included) stopped on exit, even on failure


def get(url: str) -> Any:
    status, answer = http(url)
    assert status == 200, (url, status, answer[:300])
    return json.loads(answer)


def create_topic(cluster: LocalCluster, name: str, partitions: int, replication_factor: int) -> None:
    status, answer = http(f"{cluster.admin_url}/v1/topics", "POST",
                          {"name": name, "partitions": partitions, "replication_factor": replication_factor})
    assert status == 201, answer

    def led() -> bool:  # a 404 until the controller we read from has applied the topic
        status, answer = http(f"{cluster.admin_url}/v1/topics/{name}")
        return status == 200 and all(p["leader"] != NO_LEADER for p in json.loads(answer)["partitions"])
    wait_until(f"every partition of {name} led", led)


def leaders(cluster: LocalCluster, name: str) -> dict[int, int]:
    return {p["partition"]: p["leader"] for p in get(f"{cluster.admin_url}/v1/topics/{name}")["partitions"]}


def broker(cluster: LocalCluster, broker_id: int) -> dict[str, Any]:
    return get(f"{cluster.admin_url}/v1/brokers/{broker_id}")


def test_sigterm_is_a_controlled_shutdown_and_the_broker_comes_back(cluster: LocalCluster) -> None:
    create_topic(cluster, "six", 6, 1)
    create_topic(cluster, "pair", 2, 2)
    led_before = {p for p, leader in leaders(cluster, "six").items() if leader == STOPPED_BROKER}
    assert led_before, "placement gave broker 4 no RF 1 partition: the test would prove nothing"

    node = cluster.node(STOPPED_BROKER)
    wait_until("broker 4 RUNNING", lambda: "Transitioning from RECOVERY to RUNNING." in node.spec.log_path.read_text(
        errors="replace"))
    started = time.monotonic()
    node.send(signal.SIGTERM)
    wait_until("broker 4 to exit", lambda: not node.running(), timeout_s=EXIT_BOUND_S + 5)
    elapsed = time.monotonic() - started
    print(f"broker {STOPPED_BROKER}: SIGTERM -> exit in {elapsed * 1000:.0f} ms")
    log = node.spec.log_path.read_text(errors="replace")
    assert node.exit_status == 0, log[-3000:]
    assert elapsed < EXIT_BOUND_S, log[-3000:]
    for old, new in (("RUNNING", "PENDING_CONTROLLED_SHUTDOWN"), ("PENDING_CONTROLLED_SHUTDOWN", "SHUTTING_DOWN"),
                     ("SHUTTING_DOWN", "SHUTDOWN")):
        assert f"Transitioning from {old} to {new}." in log, log[-3000:]
    assert "controlled.shutdown.timeout.ms" not in log and "Traceback" not in log, log[-3000:]
    assert (node.spec.directory / "data" / CLEAN_SHUTDOWN_FILE).exists()

    # (the controller we read from may apply the committed records a moment after the active one)
    wait_until("broker 4 fenced", lambda: broker(cluster, STOPPED_BROKER)["fenced"] is True)
    wait_until("broker 4 leading nothing", lambda: STOPPED_BROKER not in [
        *leaders(cluster, "six").values(), *leaders(cluster, "pair").values()])
    six, pair = leaders(cluster, "six"), leaders(cluster, "pair")
    assert STOPPED_BROKER not in six.values() and STOPPED_BROKER not in pair.values()
    assert all(six[p] == NO_LEADER for p in led_before)  # RF 1: leaderless, not moved (KIP-841)
    assert all(leader in (OTHER_BROKER, NO_LEADER) for leader in pair.values())

    index = cluster.nodes.index(node)
    cluster.nodes[index] = NodeProcess.spawn(node.spec)  # the same config and data dir, a new process
    cluster.write_cluster_file()
    wait_until("broker 4 unfenced again", lambda: broker(cluster, STOPPED_BROKER)["state"] == "UNFENCED",
               timeout_s=READY_S)
    wait_until("broker 4 leading its RF 1 partitions again",
               lambda: all(leaders(cluster, "six")[p] == STOPPED_BROKER for p in led_before))
