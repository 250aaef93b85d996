"""Link and power faults of a test cluster (issue 33), built on the chaos engine's own modules.

    with cluster.slow_link(4, 5, delay_ms=200):     # every connection between nodes 4 and 5 relayed 200 ms late
        ...
    cluster.lossy_link(4, 5, loss=0.2)              # 20 % of the link's packets dropped, until recover()
    cluster.bandwidth(4, 5, kbit=800)               # each direction of the link shaped to 800 kbit/s
    cluster.power_loss(1, restart=True)             # needs Cluster(power_loss=True): unsynced writes gone

A link is every connection the two nodes open to each other's service ports (raft, admin API,
Kafka listener: chaos.nemeses.links); the harness's own clients use other ports and are never
slowed. Link faults use chaos.links.install.LinkFaults (a delay proxy behind iptables REDIRECT,
HTB classes on lo, iptables `statistic` loss), opened on the first link fault of the cluster and
closed, with every rule, class and the proxy, by `stop()`; `recover()` removes every link fault.
Where they cannot run (not root, no iptables/tc/ss) the calling test is skipped with the reason.

Power loss uses chaos.nemeses.power.PowerLayer: a FUSE layer mounted under every controller's
metadata dir and every broker's data dir *before the nodes start* (so only a cluster built with
power_loss=True has it), which on `pull` drops every write the node did not fsync. The node is
SIGKILLed first, then the plug pulled; it starts again on the surviving bytes with `restart=True`,
the Fault's `with` block or `recover()`.
"""

from __future__ import annotations

import logging
import subprocess
from abc import ABC, abstractmethod
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Self

from chaos.links import rules as link_rules
from chaos.nemeses import links as link_matches
from common.limits import COMMAND_TIMEOUT_S
from tidelog.testing.faults import Fault, unavailable

if TYPE_CHECKING:
    from chaos.links.install import LinkFaults
    from chaos.nemeses.power import PowerLayer
    from localcluster.launcher import LocalCluster
    from localcluster.node_process import NodeProcess

log = logging.getLogger(__name__)

NO_POWER_LAYER: Final = ("power_loss() needs the power-loss layer under the node from its start: build the cluster "
                         "with Cluster(power_loss=True) or @pytest.mark.tidelog(power_loss=True)")
LINK_SEED: Final = 33  # the delay proxy's jitter draws: a test's jitter repeats from run to run


class LinkFault:
    """One installed link fault; leaving a `with` block removes it (once), as does `remove()`."""

    def __init__(self, kind: str, a: int, b: int, handle: int, faults: LinkFaults,
                 matches: list[link_matches.PacketMatch]) -> None:
        self.kind, self.a, self.b = kind, a, b
        self._handle, self._faults, self._matches = handle, faults, matches
        self.removed = False
        self._final_lost: tuple[int, int] | None = None  # the counters as removal found them
        self._final_relayed: int | None = None

    def __repr__(self) -> str:
        return f"LinkFault({self.kind} {self.a}<->{self.b}{', removed' if self.removed else ''})"

    def lost(self) -> tuple[int, int]:
        """A lossy link's (packets seen, packets dropped) so far, or until it was removed."""
        if self._final_lost is not None:
            return self._final_lost
        return self._faults.loss_counters(self._handle)

    def relayed(self) -> int:
        """A slow link's connections relayed by the delay proxy so far, or until it was removed."""
        if self._final_relayed is not None:
            return self._final_relayed
        return self._faults.relayed(self._handle)

    def remove(self) -> None:
        if not self.removed:
            self.removed = True
            self._final_relayed = self._faults.relayed(self._handle)
            if self.kind == "lossy_link":
                try:
                    self._final_lost = self._faults.loss_counters(self._handle)
                except (RuntimeError, OSError, subprocess.SubprocessError) as exc:  # the removal matters more
                    log.warning("test cluster: the counters of %r could not be read: %s", self, exc)
            self._faults.remove(self._handle)
            if self.kind == "slow_link":
                reset_connections(self._matches)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.remove()


def reset_connections(matches: list[link_matches.PacketMatch]) -> None:
    """Reset the link's established connections (`ss -K`): one opened through the delay proxy
    keeps its NAT entry after the redirect is gone and would otherwise stall until a timeout."""
    for connection in link_rules.connections(matches):
        subprocess.run(link_rules.kill_filter(connection), capture_output=True, timeout=COMMAND_TIMEOUT_S,
                       check=False)  # none established is fine


class PowerFault(Fault):
    """A power loss; `lost` is what the layer dropped (files rolled back, bytes, directory changes)."""

    def __init__(self, node_id: int, lost: dict[str, Any], restart: Any) -> None:
        super().__init__("power_loss", node_id, restart)
        self.lost = lost


class LinkPowerFaults(ABC):
    """The link and power faults of `tidelog.testing.Cluster` (which provides the lookups below)."""

    _dirty: bool
    _expected_down: set[int]
    _link_faults: LinkFaults | None
    _installed_links: list[LinkFault]
    _power_layer: PowerLayer | None

    @property
    @abstractmethod
    def local(self) -> LocalCluster: ...

    @abstractmethod
    def node(self, node_id: int) -> NodeProcess: ...

    @abstractmethod
    def kill(self, node_id: int, *, wait: bool = True) -> Fault: ...

    @abstractmethod
    def _restart_if_down(self, node_id: int) -> None: ...

    # -- links ----------------------------------------------------------------------------------------

    def slow_link(self, a: int, b: int, delay_ms: float, jitter_ms: float = 0) -> LinkFault:
        """Relay every connection between nodes a and b with `delay_ms` (± `jitter_ms`, order kept) on
        each direction's bytes, so a round trip gains twice it; the link's open connections are reset
        so that they reconnect through the proxy."""
        try:
            params = link_rules.delay_params({"delay_ms": delay_ms, "jitter_ms": jitter_ms})
        except link_rules.LinkParamError as exc:
            raise ValueError(str(exc).removeprefix("params.")) from None
        matches = self._link(a, b)
        faults = self._open_links()
        return self._installed("slow_link", a, b, faults, faults.delay(matches, params, seed=LINK_SEED), matches)

    def lossy_link(self, a: int, b: int, loss: float) -> LinkFault:
        """Drop each packet between nodes a and b with probability `loss` (0 < loss < 1), independently."""
        if isinstance(loss, bool) or not isinstance(loss, (int, float)) or not 0 < loss < 1:
            raise ValueError(f"loss: a probability strictly between 0 and 1, got {loss!r}")
        matches = self._link(a, b)
        faults = self._open_links()
        return self._installed("lossy_link", a, b, faults, faults.loss(matches, float(loss)), matches)

    def bandwidth(self, a: int, b: int, kbit: int) -> LinkFault:
        """Shape each direction of the link between nodes a and b to `kbit` kbit/s (HTB on lo)."""
        if isinstance(kbit, bool) or not isinstance(kbit, int):
            raise ValueError(f"kbit: an integer number of kbit/s, got {kbit!r}")
        try:
            rate = link_rules.rate_kbit({"rate_kbit": kbit})
        except link_rules.LinkParamError as exc:
            raise ValueError(str(exc).removeprefix("params.rate_")) from None
        matches = self._link(a, b)
        faults = self._open_links()
        return self._installed("bandwidth", a, b, faults, faults.bandwidth(matches, rate), matches)

    def link_faults(self) -> list[LinkFault]:
        """The link faults installed and not removed yet."""
        return [f for f in self.__dict__.get("_installed_links", []) if not f.removed]

    def clear_link_faults(self) -> None:
        """Remove every link fault (recover() does); the chains stay until stop()."""
        for fault in self.__dict__.get("_installed_links", []):
            fault.remove()
        self.__dict__["_installed_links"] = []

    def close_link_faults(self) -> None:
        """Remove every link fault, the run's chains, HTB root and proxy (stop() does)."""
        self.clear_link_faults()
        faults = self.__dict__.pop("_link_faults", None)
        if faults is not None:
            faults.close()

    def _link(self, a: int, b: int) -> list[link_matches.PacketMatch]:
        """The packet matches of the link between nodes a and b (ValueError naming the argument)."""
        ids = [n.spec.node_id for n in self.local.nodes]
        for name, value in (("a", a), ("b", b)):
            if value not in ids:
                raise ValueError(f"{name}: no node {value!r}; nodes are {ids}")
        if a == b:
            raise ValueError(f"b: a link joins two nodes, got node {a} twice")
        matches = link_matches.both_ways(self.node(a).spec, self.node(b).spec)
        if not matches:  # two nodes on one address (combined nodes' roles), or roles that never talk
            raise ValueError(f"b: nodes {a} and {b} have no link between them")
        return matches

    def _open_links(self) -> LinkFaults:
        faults = self.__dict__.get("_link_faults")
        if faults is None:
            from chaos.links import install

            why = install.missing()
            if why is not None:
                unavailable(why)
            faults = self.__dict__["_link_faults"] = install.LinkFaults.open()
        return faults

    def _installed(self, kind: str, a: int, b: int, faults: LinkFaults, handle: int,
                   matches: list[link_matches.PacketMatch]) -> LinkFault:
        fault = LinkFault(kind, a, b, handle, faults, matches)
        self.__dict__.setdefault("_installed_links", []).append(fault)
        self._dirty = True  # recover() waits for the cluster to be healthy again once it is removed
        log.info("test cluster: %s between nodes %d and %d installed (link fault %d)", kind, a, b, handle)
        return fault

    # -- power ----------------------------------------------------------------------------------------

    def power_loss(self, node_id: int, *, restart: bool = False) -> PowerFault:
        """Pull a node's plug: SIGKILL, then every write it did not fsync dropped (a controller's
        metadata log, a broker's partition logs). Returns once the node is gone as `kill` does; with
        `restart`, once it is back on the surviving bytes (else the Fault's `with`, or recover())."""
        self.node(node_id)  # ValueError for a node that does not exist
        layer = self.__dict__.get("_power_layer")
        if layer is None:
            raise RuntimeError(NO_POWER_LAYER)
        self.kill(node_id)
        lost = layer.pull([node_id]).get(node_id, {})
        log.info("test cluster: power loss of node %d: %d bytes dropped", node_id, lost.get("bytes_dropped", 0))
        fault = PowerFault(node_id, lost, lambda: self._restart_if_down(node_id))
        if restart:
            fault.undo()
        return fault


def open_power_layer(root: Path, controllers: int, brokers: int) -> PowerLayer:
    """The power-loss layer under every node of a cluster about to start in `root` (skips the test
    where FUSE cannot run)."""
    from chaos.nemeses.power import PowerLayer, PowerUnavailable
    from chaos.power import fuse_missing
    from chaos.scenarios.spec import ClusterShape

    why = fuse_missing()
    if why is not None:
        unavailable(why)
    try:
        return PowerLayer.open(root, ClusterShape(controllers=controllers, brokers=brokers), brokers_too=True)
    except PowerUnavailable as exc:
        unavailable(str(exc))
        raise  # unreachable: unavailable raises
