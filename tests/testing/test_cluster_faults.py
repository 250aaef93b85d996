"""tidelog.testing.Cluster without pytest's help: the fault helpers block until their effect is
visible, undo themselves as context managers, are bounded, and stop() leaves nothing behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration import cluster_fixtures
from tests.integration.cluster_fixtures import processes_mentioning, wait_until
from tidelog.testing import Cluster, ClusterTimeout
from tidelog.testing.observe import is_paused, process_state

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(brokers=3, base_dir=tmp_path_factory.mktemp("faults"), fast_start=True) as started:
        yield started


@pytest.fixture
def topic(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    name = cluster.create_topic(request.node.name, partitions=1, replication_factor=3)
    yield name
    cluster.recover()
    cluster.delete_topic(name)


def test_ready_means_usable(cluster: Cluster) -> None:
    assert cluster.bootstrap_servers == ",".join(f"127.0.0.{n}:{cluster.node(4).spec.kafka_port}" for n in (4, 5, 6))
    assert (cluster.controller_ids, cluster.broker_ids) == ([1, 2, 3], [4, 5, 6])
    cluster.wait_until_healthy(timeout=5)


def test_kill_a_follower_until_the_block_ends(cluster: Cluster, topic: str) -> None:
    leader = cluster.leader_of(topic)
    follower = next(b for b in cluster.broker_ids if b != leader)
    with cluster.kill(follower) as fault:  # returns once fenced: out of every ISR
        assert not cluster.node(follower).running()
        assert follower not in cluster.partition(topic)["isr"]
        assert fault.node_id == follower
    assert cluster.node(follower).running()
    assert sorted(cluster.wait_for_isr(topic, 0, 3)) == [4, 5, 6]


def test_kill_leader_moves_leadership(cluster: Cluster, topic: str) -> None:
    before = cluster.partition(topic)
    fault = cluster.kill_leader(topic)
    after = cluster.partition(topic)
    assert fault.node_id == before["leader"]
    assert after["leader"] not in (before["leader"], -1)
    assert after["leader_epoch"] > before["leader_epoch"]
    assert cluster.leader_of(topic) == after["leader"]  # what every live broker's Metadata says too
    fault.undo()
    assert cluster.wait_for_isr(topic, 0, 3)


def test_isolate_a_follower_until_the_block_ends(cluster: Cluster, topic: str) -> None:
    from chaos.nemeses.firewall import chains

    leader = cluster.leader_of(topic)
    follower = next(b for b in cluster.broker_ids if b != leader)
    with cluster.isolate(follower):  # cut off from every other node, both ways
        wait_until(f"broker {follower} out of the ISR",
                   lambda: follower not in cluster.partition(topic)["isr"], 30)
        assert cluster.node(follower).running()
        assert chains(), "the harness's iptables chain holds the cut"
    assert sorted(cluster.wait_for_isr(topic, 0, 3)) == [4, 5, 6]


def test_pause_until_the_block_ends(cluster: Cluster) -> None:
    broker = cluster.node(5)
    with cluster.pause(5):
        assert process_state(broker.pid) == "T"
    assert broker.running() and not is_paused(broker)


def test_controlled_shutdown_is_clean_and_moves_leaders(cluster: Cluster, topic: str) -> None:
    leader = cluster.leader_of(topic)
    with cluster.controlled_shutdown(leader):
        node = cluster.node(leader)
        assert node.exit_status == 0
        assert cluster.partition(topic)["leader"] not in (leader, -1)
        assert "Transitioning from PENDING_CONTROLLED_SHUTDOWN to SHUTTING_DOWN" in node.log_tail(200)
    assert cluster.node(leader).running()
    cluster.wait_for_isr(topic, 0, 3)


def test_kill_the_active_controller(cluster: Cluster) -> None:
    active = cluster.active_controller()
    with cluster.kill(active):  # returns once the two others agree on a successor
        successor = cluster.active_controller()
        assert successor != active
    cluster.wait_until_healthy()


def test_recover_undoes_every_fault(cluster: Cluster, topic: str) -> None:
    cluster.kill(4, wait=False)
    cluster.pause(6)
    cluster.recover()
    assert all(n.running() and not is_paused(n) for n in cluster.local.nodes)
    assert len(cluster.partition(topic)["isr"]) == 3


def test_every_wait_is_bounded(cluster: Cluster, topic: str) -> None:
    started = time.monotonic()
    with pytest.raises(ClusterTimeout, match=f"{topic}-0 to have 5 replica"):
        cluster.wait_for_isr(topic, 0, 5, timeout=0.5)
    assert time.monotonic() - started < 5


def test_stop_is_bounded_and_leaves_nothing(tmp_path_factory: pytest.TempPathFactory) -> None:
    base = tmp_path_factory.mktemp("stop")
    cluster = Cluster(brokers=2, controllers=1, base_dir=base, stop_timeout=6,
                      fast_start=cluster_fixtures.FORK_NODES).start()
    root = cluster.data_dir
    for node_id in cluster.broker_ids:
        cluster.pause(node_id)  # paused nodes ignore SIGTERM until resumed
    started = time.monotonic()
    reports = cluster.stop()
    assert time.monotonic() - started < 6 + 2
    assert {r.outcome for r in reports} <= {"stopped", "killed after ignoring SIGTERM"}
    assert not root.exists() and processes_mentioning(str(root)) == []
    assert cluster.stop() == []  # twice is fine


def test_a_script_that_never_stops_its_cluster_leaves_nothing(tmp_path: Path) -> None:
    """No `with`, no stop(): atexit (and behind it the watchdog) stops the nodes and removes the dir."""
    script = ("from tidelog.testing import Cluster\n"
              f"cluster = Cluster(brokers=1, combined=True, base_dir={str(tmp_path)!r}).start()\n"
              "print(cluster.data_dir, flush=True)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120, check=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
                              str(REPO), os.environ.get("PYTHONPATH")]))})
    root = Path(done.stdout.decode().strip())
    assert root.parent == tmp_path
    wait_until("the script's cluster gone", lambda: not root.exists() and not processes_mentioning(str(root)), 20)
