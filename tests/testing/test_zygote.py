"""Cluster(fast_start=True) (issue 33): the nodes are forks of tidelog.testing.zygote, which imported
their modules once. A forked cluster serves a real client like a spawned one, stops like one, and
its nodes end with the zygote (PR_SET_PDEATHSIG), so a test process that dies leaves none."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chaos.nemesis import Nemesis
from common.log_setup import LEVEL_ENV
from common.waiting import wait_until
from tidelog.testing import Cluster
from localcluster.launcher import LauncherError, LocalCluster, free_ports
from tidelog.testing.zygote import ForkedNode, Zygote, fork_or_spawn, node_command

confluent_kafka = pytest.importorskip("confluent_kafka")


def test_forked_nodes_serve_and_end_with_their_zygote(tmp_path: Path) -> None:
    with Cluster(brokers=1, combined=True, fast_start=True, base_dir=tmp_path) as cluster:
        node = cluster.node(1)
        assert isinstance(node, ForkedNode) and node.running()
        topic = cluster.create_topic("forked")
        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0})
        producer.produce(topic, b"from a fork", partition=0)
        assert producer.flush(30) == 0
        consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "forked",
                                             "auto.offset.reset": "earliest"})
        try:
            consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
            message = wait_until("the record to be read", lambda: consumer.poll(0.5), 30)
            assert message.error() is None and message.value() == b"from a fork"
        finally:
            consumer.close()
        zygote = Zygote._shared
        assert zygote is not None
        zygote.close()  # as when the test process dies: its stdin closes
        Zygote._shared = None
        wait_until("the forked node to end with its zygote", lambda: not node.running(), 10)
        root = cluster.data_dir
    assert not root.exists()


def test_a_forked_cluster_stops_cleanly(tmp_path: Path) -> None:
    cluster = Cluster(brokers=1, combined=True, fast_start=True, base_dir=tmp_path).start()
    node = cluster.node(1)
    reports = cluster.stop()
    assert [r.outcome for r in reports] == ["stopped"]  # SIGTERM was enough: no SIGKILL
    assert [r.exit_status for r in reports] == [0]  # the zygote's line in its log, read before it went
    assert not node.running() and list(tmp_path.iterdir()) == []


def test_a_forked_node_shows_a_spawned_nodes_command_line(tmp_path: Path) -> None:
    """`tidelog down` and a later start of the same data dir find a running node by its config file
    on its command line: a forked node shows the one `NodeProcess.spawn` runs, so they find it. A
    node a fault restarts is forked again, and its log says so as a spawned one's does."""
    ports = free_ports(["127.0.0.1"], 4)
    with LocalCluster.start(tmp_path, combined=True, controllers=1, brokers=0, raft_port=ports[0],
                            admin_port=ports[1], kafka_port=ports[2], metrics_port=ports[3],
                            spawn=fork_or_spawn) as cluster:
        with Nemesis(cluster) as nemesis:  # a fault's restart forks the node again
            nemesis.kill(1)
            node = nemesis.restart(1)
        assert isinstance(node, ForkedNode)
        assert node.spec.log_path.read_text().count("tidelog launcher: starting") == 2  # as spawned ones log
        cluster.wait_ready(30)  # the restarted node serves
        command = Path(f"/proc/{node.pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        assert command == [os.fsencode(arg) for arg in node_command("combined", str(node.spec.properties_path))]
        found = LocalCluster.attach(tmp_path)
        assert found is not None and [n.pid for n in found.nodes if n.running()] == [node.pid]
        with pytest.raises(LauncherError, match="already running"):
            LocalCluster.start(tmp_path, spawn=fork_or_spawn)
        reports = found.stop()  # as `tidelog down --data-dir` stops it
        assert [r.outcome for r in reports] == ["stopped"]
        # its pid lasts until the zygote has written its exit status and reaped it
        wait_until("the zygote to reap the stopped node", lambda: not node.running(), 10)
        assert node.exit_status == 0


def test_a_forked_node_runs_with_the_environment_of_its_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that sets a variable for its nodes before starting them (a fail point) gets it in a
    forked node as a spawned one inherits it, though the zygote started before it was set."""
    Zygote.shared().ping()  # the zygote's own environment lacks what is set below
    monkeypatch.setenv(LEVEL_ENV, "no-such-level")
    ports = free_ports(["127.0.0.1"], 4)
    with pytest.raises(LauncherError, match="unknown log level 'no-such-level'"):
        LocalCluster.start(tmp_path, combined=True, controllers=1, brokers=0, raft_port=ports[0],
                           admin_port=ports[1], kafka_port=ports[2], metrics_port=ports[3], spawn=fork_or_spawn)
