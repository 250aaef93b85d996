"""Cluster(fast_start=True) (issue 33): the nodes are forks of tidelog.testing.zygote, which imported
their modules once. A forked cluster serves a real client like a spawned one, stops like one, and
its nodes end with the zygote (PR_SET_PDEATHSIG), so a test process that dies leaves none."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from chaos.nemesis import Nemesis
from common.limits import KILL_WAIT
from common.log_setup import LEVEL_ENV
from common.waiting import wait_until
from localcluster.cluster_layout import CONTROLLER, NodeSpec
from tidelog.testing import Cluster
from localcluster.launcher import LauncherError, LocalCluster, free_ports
from tidelog.testing.zygote import ForkedNode, Zygote, fork_or_spawn, node_command, start_time

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


# -- reaping ------------------------------------------------------------------------------------------


@pytest.fixture
def own_zygote() -> Iterator[Zygote]:
    """A zygote of this test's own: the test holds it blocked, which the shared one must never be."""
    zygote = Zygote()
    try:
        zygote.ping()
        yield zygote
    finally:
        zygote.close()


def waiting_node(zygote: Zygote, directory: Path, node_id: int) -> ForkedNode:
    """A forked node that waits, alive, until killed: its config file is a FIFO nobody writes."""
    spec = NodeSpec(node_id=node_id, role=CONTROLLER, host="127.0.0.1", raft_port=1, admin_port=1,
                    directory=directory)
    os.mkfifo(spec.properties_path)
    return zygote.spawn(spec)


@contextlib.contextmanager
def reading(fifo: Path) -> Iterator[Callable[[], str]]:
    """`fifo` open for reading (a writer's open of it goes through): what came through so far."""
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    read: list[bytes] = []

    def so_far() -> str:
        with contextlib.suppress(BlockingIOError):
            read.append(os.read(reader, 4096))
        return b"".join(read).decode()

    try:
        yield so_far
    finally:
        os.close(reader)


def exited(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


def sigchld_pending(pid: int) -> bool:
    """SIGCHLD queued for `pid` (to the process, or to its main thread) and not taken yet."""
    fields = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                  if ":\t" in line)
    return bool((int(fields["ShdPnd"], 16) | int(fields["SigPnd"], 16)) & (1 << (signal.SIGCHLD - 1)))


def waits_for_a_reader(pid: int) -> bool:
    """`pid`'s main thread is blocked opening a FIFO for writing, until someone opens it for reading."""
    return Path(f"/proc/{pid}/wchan").read_text() == "wait_for_partner"


def test_a_node_exiting_while_the_zygote_writes_anothers_exit_line_is_reaped_too(tmp_path: Path,
                                                                               own_zygote: Zygote) -> None:
    """Two nodes exiting together: the second's SIGCHLD reaches the zygote while it writes the first's
    exit line (held here: that log is a FIFO without a reader). The zygote reaped in its SIGCHLD handler
    once, which then ran again inside itself, reaped the first there, and died of ECHILD when the outer
    call reaped it too; its other nodes then lingered as zombies of pid 1, "running" to a stop."""
    zygote = own_zygote._popen.pid
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
    first_log = tmp_path / "first" / "node.log"
    os.mkfifo(first_log)
    with reading(first_log):
        first = waiting_node(own_zygote, tmp_path / "first", 1)
        second = waiting_node(own_zygote, tmp_path / "second", 2)
    first_pid, second_pid = first.pid, second.pid
    assert first_pid is not None and second_pid is not None
    try:  # no reader now: the zygote's open of the first's log blocks
        os.kill(first_pid, signal.SIGKILL)
        wait_until("the zygote to wait for a reader of the first node's log", lambda: waits_for_a_reader(zygote), 10)
        os.kill(second_pid, signal.SIGKILL)
        wait_until("the zygote to take the second node's SIGCHLD and wait again",
                   lambda: exited(second_pid) and not sigchld_pending(zygote) and waits_for_a_reader(zygote), 10)
    finally:  # the zygote's open returns, whatever happened above
        with reading(first_log) as so_far:
            written = wait_until("the first node's exit line", lambda: so_far() if "exited with" in so_far() else "", 10)
    assert f"(pid {first_pid}) exited with status -9" in written
    wait_until("both nodes reaped", lambda: not first.running() and not second.running(), KILL_WAIT)
    assert second.exit_status == -9
    own_zygote.ping()  # it lives on


def test_a_forked_nodes_pid_held_by_another_process_or_thread_is_not_the_node(tmp_path: Path) -> None:
    """pid_max is 32,768 on the test machine: a reaped node's pid comes back after a wrap, for another
    process or a thread (/proc/<tid> resolves too). The node is not running then, and is not signalled."""
    spec = NodeSpec(node_id=1, role=CONTROLLER, host="127.0.0.1", raft_port=1, admin_port=1, directory=tmp_path)
    release = threading.Event()
    thread = threading.Thread(target=release.wait)
    thread.start()
    other = subprocess.Popen(["sleep", "60"])
    try:
        assert ForkedNode(spec, other.pid).running()  # its start read now: the process it is
        started = start_time(other.pid)
        assert started is not None
        earlier = ForkedNode(spec, other.pid, started - 1)  # a node that held the pid before
        assert not earlier.running()
        earlier.send(signal.SIGKILL)
        assert other.poll() is None
        assert thread.native_id is not None
        assert not ForkedNode(spec, thread.native_id, start_time(os.getpid())).running()
    finally:
        release.set()
        thread.join()
        other.kill()
        other.wait()
