"""LocalCluster.start on a data dir whose cluster partly runs (localcluster/launcher.py): it starts
only the nodes that do not run, leaves the others alone even when it fails, refuses a config
change a running node would not read, and waits for a restarted broker's new incarnation.
Spawning, probing and liveness are faked: no process starts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from localcluster import launcher, node_process
from localcluster.cluster_layout import NodeSpec, read_cluster_file
from localcluster.launcher import LauncherError, LocalCluster, registered_incarnations, unfenced_brokers

BROKERS = [
    {"broker_id": 4, "incarnation_id": "old-4", "fenced": False, "in_controlled_shutdown": False},
    {"broker_id": 5, "incarnation_id": "new-5", "fenced": False, "in_controlled_shutdown": False},
    {"broker_id": 6, "incarnation_id": "i-6", "fenced": True, "in_controlled_shutdown": False},
    {"broker_id": 7, "incarnation_id": "i-7", "fenced": False, "in_controlled_shutdown": True},
]


@pytest.mark.parametrize(("stale", "expected"), [
    (None, {4, 5}),
    ({}, {4, 5}),
    ({4: "old-4"}, {5}),  # a killed broker's registration, its session not expired yet
    ({4: "older-4", 5: "old-5"}, {4, 5}),  # both re-registered since
])
def test_unfenced_brokers_skip_a_stale_incarnation(stale: Mapping[int, str] | None, expected: set[int]) -> None:
    assert unfenced_brokers(BROKERS, stale) == expected


def test_registered_incarnations_asks_the_next_controller_when_one_is_down(tmp_path: Path) -> None:
    specs = [NodeSpec(i, "controller", f"127.0.0.{i}", 1, 2, tmp_path / str(i)) for i in (1, 2)]
    asked: list[str] = []

    def probe(url: str) -> Sequence[Mapping[str, Any]]:
        asked.append(url)
        if url == specs[0].admin_url:
            raise ConnectionRefusedError(url)
        return BROKERS
    assert registered_incarnations(specs, probe) == {4: "old-4", 5: "new-5", 6: "i-6", 7: "i-7"}
    assert asked == [specs[0].admin_url, specs[1].admin_url]
    assert registered_incarnations([], probe) == {}


class FakeNodes:
    """NodeProcess.spawn records the spec; a node 'runs' while its pid is in `alive`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.spawned: list[int] = []
        self.alive: set[int] = set()
        self.signalled: list[int] = []
        self.waited_for: Mapping[int, str] | None = None
        self.ready_error: BaseException | None = None
        monkeypatch.setattr(node_process.NodeProcess, "spawn", staticmethod(self.spawn))
        monkeypatch.setattr(node_process, "process_runs", lambda pid, config: pid in self.alive)
        monkeypatch.setattr(node_process.NodeProcess, "send", lambda node, sig: self.send(node, sig))
        monkeypatch.setattr(launcher, "check_ports_free", self.check_ports)
        monkeypatch.setattr(launcher, "registered_incarnations", lambda specs: {4: "old-4", 5: "old-5"})
        monkeypatch.setattr(LocalCluster, "wait_ready", self.wait_ready)
        self.checked: list[int] = []

    def spawn(self, spec: NodeSpec) -> node_process.NodeProcess:
        pid = 1000 + spec.node_id + 100 * len(self.spawned)
        self.spawned.append(spec.node_id)
        self.alive.add(pid)
        return node_process.NodeProcess(spec, pid)

    def send(self, node: node_process.NodeProcess, sig: object) -> None:
        assert node.pid is not None
        self.signalled.append(node.spec.node_id)
        self.alive.discard(node.pid)

    def check_ports(self, nodes: Sequence[NodeSpec]) -> None:
        self.checked = [n.node_id for n in nodes]

    def wait_ready(self, cluster: LocalCluster, *args: Any, stale_incarnations: Mapping[int, str] | None = None,
                   **kwargs: Any) -> int:
        self.waited_for = stale_incarnations
        if self.ready_error is not None:
            raise self.ready_error
        return 1

    def kill(self, root: Path, node_id: int) -> None:
        document = read_cluster_file(root)
        assert document is not None
        self.alive.discard(next(n["pid"] for n in document["nodes"] if n["id"] == node_id))


@pytest.fixture
def nodes(monkeypatch: pytest.MonkeyPatch) -> FakeNodes:
    return FakeNodes(monkeypatch)


def pids(root: Path) -> dict[int, int | None]:
    document = read_cluster_file(root)
    assert document is not None
    return {n["id"]: n["pid"] for n in document["nodes"]}


def start(root: Path, **options: Any) -> LocalCluster:
    return LocalCluster.start(root, controllers=1, brokers=2, raft_port=19093, admin_port=19080,
                              kafka_port=19092, metrics_port=19081, **options)


def test_only_the_dead_node_starts_and_its_old_incarnation_is_not_ready(tmp_path: Path, nodes: FakeNodes) -> None:
    root = tmp_path.resolve()
    first = start(root)
    assert (first.started, first.already_running, nodes.spawned) == ((1, 2, 3), (), [1, 2, 3])
    assert nodes.waited_for == {}  # nothing ran before: no stale registration to wait past
    before = pids(root)
    nodes.kill(root, 3)

    again = LocalCluster.start(root)
    assert (again.started, again.already_running, nodes.spawned) == ((3,), (1, 2), [1, 2, 3, 3])
    assert nodes.checked == [3]  # the running nodes hold their own ports
    assert nodes.waited_for == {}  # broker 3 is not among the registrations the controller listed
    after = pids(root)
    assert after[1] == before[1] and after[2] == before[2] and after[3] not in (None, before[3])

    with pytest.raises(LauncherError, match="already running"):
        LocalCluster.start(root)
    assert nodes.spawned == [1, 2, 3, 3]


def test_a_restarted_broker_waits_past_its_stale_registration(tmp_path: Path, nodes: FakeNodes) -> None:
    root = tmp_path.resolve()
    LocalCluster.start(root, controllers=1, brokers=4, raft_port=19093, admin_port=19080, kafka_port=19092,
                       metrics_port=19081)
    nodes.kill(root, 4)
    LocalCluster.start(root)
    assert nodes.waited_for == {4: "old-4"}  # not 5: it runs and was not restarted


def test_a_failed_restart_stops_only_what_it_started(tmp_path: Path, nodes: FakeNodes) -> None:
    root = tmp_path.resolve()
    start(root)
    before = pids(root)
    nodes.kill(root, 3)
    nodes.ready_error = LauncherError("broker 3 never unfenced")
    with pytest.raises(LauncherError, match="never unfenced"):
        LocalCluster.start(root)
    assert nodes.signalled == [3]
    assert pids(root) == {1: before[1], 2: before[2], 3: None}


def test_a_config_change_for_a_running_node_is_refused(tmp_path: Path, nodes: FakeNodes) -> None:
    root = tmp_path.resolve()
    start(root)
    nodes.kill(root, 3)
    with pytest.raises(LauncherError, match=r"server.properties of broker 2, which already run"):
        LocalCluster.start(root, broker_config={"num.partitions": "3"})
    assert nodes.spawned == [1, 2, 3]  # nothing started
    assert "num.partitions" not in (root / "broker-2" / "server.properties").read_text()
    LocalCluster.start(root, controller_config={})  # without the option: broker 3 comes back
    assert nodes.spawned == [1, 2, 3, 3]
