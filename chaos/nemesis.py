"""Faults on a running LocalCluster's processes: kill, restart, pause, resume.

    with Nemesis(cluster) as nemesis:
        nemesis.kill(4); nemesis.restart(4)
        with nemesis.paused(5):
            ...
    # leaving the block resumes every paused node, even when the body failed

Jepsen's word for the thing that breaks the system under test. Every action is logged with
its monotonic time in `events`, so a test can say how long recovery took after a fault.
A paused node (SIGSTOP) is always resumed before anything stops it: a stopped process would
ignore SIGTERM until SIGKILL.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType

from localcluster.launcher import LocalCluster
from localcluster.node_process import NodeProcess

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Event:
    at: float  # time.monotonic()
    action: str  # "kill", "restart", "pause", "resume"
    node_id: int


class Nemesis:
    """Breaks nodes of one cluster on purpose and undoes pauses on exit."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.events: list[Event] = []
        self._paused: set[int] = set()

    def __enter__(self) -> Nemesis:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.heal()

    def _record(self, action: str, node_id: int) -> float:
        at = time.monotonic()
        self.events.append(Event(at, action, node_id))
        log.info("nemesis: %s node %d", action, node_id)
        return at

    def kill(self, node_id: int) -> float:
        """SIGKILL the node (a crash: no flush, no clean-shutdown marker); the time it died."""
        node = self.cluster.node(node_id)
        self._paused.discard(node_id)
        report = node.kill()
        if report.outcome == "did not die":
            raise RuntimeError(f"node {node_id} survived SIGKILL")
        return self._record("kill", node_id)

    def restart(self, node_id: int) -> NodeProcess:
        """Start the node again from its data dir (a new incarnation); the old one must be gone."""
        index, old = next((i, n) for i, n in enumerate(self.cluster.nodes) if n.spec.node_id == node_id)
        if old.running():
            raise RuntimeError(f"node {node_id} is still running (pid {old.pid}); kill or stop it first")
        # a cluster of separate hosts (tidelog.hosts) spawns a node in its own namespace
        spawn = getattr(self.cluster, "spawn", NodeProcess.spawn)
        node = spawn(old.spec)
        self.cluster.nodes[index] = node
        self.cluster.write_cluster_file()
        self._record("restart", node_id)
        return node

    def pause(self, node_id: int) -> float:
        """SIGSTOP: the process keeps its sockets but answers nothing (a hung node)."""
        self.cluster.node(node_id).send(signal.SIGSTOP)
        self._paused.add(node_id)
        return self._record("pause", node_id)

    def resume(self, node_id: int) -> float:
        self.cluster.node(node_id).send(signal.SIGCONT)
        self._paused.discard(node_id)
        return self._record("resume", node_id)

    @contextlib.contextmanager
    def paused(self, node_id: int) -> Iterator[None]:
        self.pause(node_id)
        try:
            yield
        finally:
            self.resume(node_id)

    def heal(self) -> None:
        """Resume every node still paused."""
        for node_id in sorted(self._paused):
            self.resume(node_id)
