"""Power loss of nodes: the power-loss layer (chaos.power) under their data, and the pulled plug.

    with PowerLayer.open(root, scenario.cluster, brokers_too=True) as power:   # before the nodes start
        nemesis.kill(2); nemesis.kill(3)        # at once: every target dead first
        reports = power.pull([2, 3])            # their unsynced writes dropped, the layer mounted again
        nemesis.restart(2); ...                 # the heal: back on the surviving bytes

What each node loses is what its own writes left volatile: a controller's metadata log
(`<node>/__cluster_metadata-0`: the Raft journal, term/vote file and dump, fsynced when
`controller.quorum.fsync` is true) and, when a scenario powers off brokers, a broker's log
dirs (`<node>/data`: partition logs Kafka does not fsync per write; it relies on replication).
The node's own log (node.log) and server.properties stay outside the layer: the harness reads
them after the run. A combined node is not covered (its roles share one directory tree).
The layer costs a FUSE round trip per file operation, so only the roles a scenario powers off
are mounted.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from chaos.engine.targets import ClusterView, TargetError
from chaos.power import fuse_missing
from chaos.power.mount import PowerMount, PowerMountError
from chaos.scenarios.spec import ClusterShape, Fault, FaultAction, Scenario
from localcluster.cluster_layout import BROKER, BROKER_DATA_DIR, CONTROLLER
from quorum.quorum_settings import METADATA_DIR_NAME

log = logging.getLogger(__name__)

STATE_DIR: Final = ".power"  # under the cluster's root: each mount's backing files, daemon log, reports
ENTRIES_SHOWN: Final = 20  # directory changes undone listed in the history per node (all are counted)
CONTROLLER_SELECTORS: Final = frozenset({"active-controller", "controller-follower", "majority", "minority",
                                         "controllers"})


class PowerUnavailable(RuntimeError):
    """FUSE cannot run here; the message names the install that fixes it."""


def power_faults(scenario: Scenario) -> list[str]:
    """The targets of the scenario's power faults (empty: no layer needed)."""
    return [f.target for f in scenario.faults if f.action is FaultAction.POWER]


def needs_brokers(targets: Sequence[str], shape: ClusterShape) -> bool:
    """Whether a power fault may hit a broker (a partition's replicas, a broker, a node id past the controllers)."""
    for target in targets:
        head, _, rest = target.partition(":")
        if head in CONTROLLER_SELECTORS:
            continue
        ids = [i.strip() for i in rest.split(",")] if head in ("node", "nodes") else []
        if ids and all(i.isdigit() and int(i) <= shape.controllers for i in ids):
            continue
        return True
    return False


def power_targets(fault: Fault, targets: list[int], view: ClusterView, topic: str, rng: random.Random
                  ) -> tuple[list[int], dict[str, list[int]]]:
    """The nodes to power off (`params.nodes` = N keeps N of the targets, a partition selector's
    leader or the active controller first) and the workload topic's replicas now, partition -> brokers, so the checker
    can tell a minority of a partition's replicas from a majority."""
    replicas = {str(p["partition"]): sorted(p["replicas"]) for p in view.partitions(topic)}
    count = fault.param("nodes")
    if count is None:
        return targets, replicas
    if not isinstance(count, int) or not 1 <= count <= len(targets):
        raise TargetError(f"params.nodes: expected 1..{len(targets)} of {fault.target}'s nodes, got {count!r}")
    head, _, _ = fault.target.partition(":")
    leader = view.partition(*_topic_partition(fault.target))["leader"] if head in ("replicas", "isr") else -1
    if head == "controllers":
        try:
            leader = view.active_controller()
        except TargetError:
            pass  # mid-election (no active controller): any N of them is still a majority
    others = [t for t in targets if t != leader]
    rng.shuffle(others)
    chosen = ([leader] if leader in targets else []) + others
    return sorted(chosen[:count]), replicas


def _topic_partition(selector: str) -> tuple[str, int]:
    _, topic, number = selector.split(":")
    return topic, int(number)


class PowerLayer:
    """The power-loss mounts of one cluster, node id -> mount; unmounted on exit, whatever happened."""

    def __init__(self) -> None:
        self.mounts: dict[int, PowerMount] = {}
        self._stack = ExitStack()

    @classmethod
    def open(cls, root: Path, shape: ClusterShape, *, brokers_too: bool) -> PowerLayer:
        why = fuse_missing()
        if why is not None:
            raise PowerUnavailable(why)
        if shape.combined:
            raise PowerUnavailable("power-loss faults need separate controllers and brokers ([cluster] combined "
                                   "= false): a combined node's metadata and data share one directory tree")
        layer = cls()
        try:
            nodes = [(n, root / f"{CONTROLLER}-{n}" / METADATA_DIR_NAME) for n in range(1, shape.controllers + 1)]
            if brokers_too:
                first = shape.controllers + 1
                nodes += [(n, root / f"{BROKER}-{n}" / BROKER_DATA_DIR) for n in range(first, first + shape.brokers)]
            for node_id, directory in nodes:
                mount = PowerMount.create(directory, root / STATE_DIR / f"node-{node_id}")
                layer._stack.callback(mount.unmount)
                layer.mounts[node_id] = mount
        except BaseException:
            layer.close()
            raise
        log.info("power-loss layer mounted for nodes %s", sorted(layer.mounts))
        return layer

    def pull(self, node_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """Drop the volatile writes of each node (already SIGKILLed); what each lost."""
        reports: dict[int, dict[str, Any]] = {}
        pulled = [(n, self.mounts[n]) for n in sorted(node_ids) if n in self.mounts]
        for node_id in sorted(set(node_ids) - set(self.mounts)):
            reports[node_id] = {"power_loss": False, "why": "no power-loss layer under this node"}
        # every plug first, then every rollback, then every remount: the whole fault takes about
        # as long as one node's (the fencing checker matches a fencing to its fault's start)
        for _, mount in pulled:
            mount.begin_pull()
        for node_id, mount in pulled:
            try:
                report = mount.finish_pull()
            except PowerMountError as exc:  # the node still restarts, on what the backing holds
                log.error("power loss of node %d failed: %s", node_id, exc)
                reports[node_id] = {"power_loss": False, "error": str(exc)}
                continue
            undone = list(report.get("entries_undone", ()))
            report.update(entries_undone=undone[:ENTRIES_SHOWN], entries_undone_count=len(undone))
            reports[node_id] = report
            log.info("power loss of node %d: %d files rolled back, %d bytes dropped, %d directory changes undone",
                     node_id, report.get("files_rolled_back", 0), report.get("bytes_dropped", 0), len(undone))
        for _, mount in pulled:
            mount.ensure_mounted()
        for _, mount in pulled:
            mount.wait_mounted()
        return reports

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> PowerLayer:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
