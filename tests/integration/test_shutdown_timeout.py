"""controlled.shutdown.timeout.ms bounds a broker's stop when no controller answers.

3 controllers + broker 4 as real processes; broker 4 leads partitions (it is RUNNING, so a
SIGTERM starts a controlled shutdown). Every controller is then paused (SIGSTOP: its
sockets still accept connections, nothing is ever answered, the hardest case for a client)
and broker 4 gets SIGTERM: should_shut_down never comes, and the broker must stop anyway
within the timeout (plus its own stop work), say so in its log in words an operator can
grep for, and exit. The controllers are resumed before the cluster is stopped.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.log.log_manager import CLEAN_SHUTDOWN_FILE
from common.waiting import WaitTimeout
from localcluster.node_process import held_by
from tests.integration.cluster_fixtures import http, spawn_node, wait_until
from localcluster.launcher import LocalCluster, free_ports

HOSTS = tuple(f"127.0.0.{n}" for n in range(1, 5))
BROKER = 4
TIMEOUT_MS = 2000
EXIT_BOUND_S = TIMEOUT_MS / 1000 + 8.0  # the timeout, then closing the logs and the process; generous on a busy host
READY_S = 30.0
PROPERTIES = {"broker.heartbeat.interval.ms": "200", "broker.session.timeout.ms": "3000",
              "controlled.shutdown.timeout.ms": str(TIMEOUT_MS)}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    raft_port, admin_port, kafka_port, metrics_port = free_ports(HOSTS, 4)
    with LocalCluster.start(tmp_path / "cluster", controllers=3, raft_port=raft_port, admin_port=admin_port,
                            brokers=1, kafka_port=kafka_port, metrics_port=metrics_port, ready_timeout=READY_S,
                            extra_properties=PROPERTIES, spawn=spawn_node) as started:
        try:
            yield started
        finally:  # a paused controller ignores SIGTERM until resumed: resume them before the stop
            for node in started.controllers:
                node.send(signal.SIGCONT)


def test_broker_stops_within_the_timeout_when_no_controller_answers(cluster: LocalCluster) -> None:
    status, answer = http(f"{cluster.admin_url}/v1/topics", "POST",
                          {"name": "led", "partitions": 2, "replication_factor": 1})
    assert status == 201, answer
    node = cluster.node(BROKER)
    def leads_both() -> bool:  # a 404 until the controller we ask has applied the topic
        status, body = http(f"{cluster.admin_url}/v1/topics/led")
        return status == 200 and all(p["leader"] == BROKER for p in json.loads(body)["partitions"])

    wait_until("broker 4 leading both partitions", leads_both)
    wait_until("broker 4 RUNNING", lambda: "Transitioning from RECOVERY to RUNNING." in node.spec.log_path.read_text(
        errors="replace"))

    for controller in cluster.controllers:
        controller.send(signal.SIGSTOP)
    started = time.monotonic()
    node.send(signal.SIGTERM)
    try:
        wait_until("broker 4 to exit", lambda: not node.running(), timeout_s=EXIT_BOUND_S + 5)
    except WaitTimeout:  # say where it is held: its threads in the kernel and its last lines
        pytest.fail(f"broker {BROKER} did not exit {EXIT_BOUND_S + 5:g} s after SIGTERM; its threads: "
                    f"{held_by(node.pid)}\n{node.log_tail()}")
    elapsed = time.monotonic() - started
    print(f"broker {BROKER}: SIGTERM -> exit in {elapsed * 1000:.0f} ms with every controller paused "
          f"(controlled.shutdown.timeout.ms={TIMEOUT_MS})")

    log = node.spec.log_path.read_text(errors="replace")
    assert TIMEOUT_MS / 1000 <= elapsed < EXIT_BOUND_S, log[-3000:]
    assert node.exit_status == 0, log[-3000:]
    assert (f"controlled shutdown did not complete within controlled.shutdown.timeout.ms={TIMEOUT_MS} ms; "
            "shutting down without waiting further") in log, log[-3000:]
    for old, new in (("RUNNING", "PENDING_CONTROLLED_SHUTDOWN"), ("PENDING_CONTROLLED_SHUTDOWN", "SHUTTING_DOWN"),
                     ("SHUTTING_DOWN", "SHUTDOWN")):
        assert f"Transitioning from {old} to {new}." in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    # It exits dirty: the logs are flushed and closed, but without the clean-shutdown marker,
    # so the next start recovers them as after a crash.
    assert not (node.spec.directory / "data" / CLEAN_SHUTDOWN_FILE).exists()
    assert "without the clean-shutdown marker (exiting dirty)" in log, log[-3000:]
