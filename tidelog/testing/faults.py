"""Fault helpers of a test cluster: each breaks one thing, then blocks until the break is visible.

    old = cluster.kill_leader("orders", 0)      # SIGKILL; returns once clients see a new leader
    with cluster.pause(5):                      # SIGSTOP until the block ends
        ...
    with cluster.controlled_shutdown(4):        # SIGTERM, clean exit; restarted after the block
        ...

Every helper uses the chaos engine's `Nemesis` (no second nemesis here), returns a `Fault` whose
`with` block undoes it, and is bounded: past its deadline it raises `ClusterTimeout` naming what
it waited for. "Visible" means what a client would notice: a killed broker is fenced and leads
nothing in the controllers' metadata nor in any live broker's Metadata answer; a killed active
controller has a successor every live controller names; a restarted broker is registered,
unfenced and listed by every broker.

Request faults (`inject`, `delay`, `drop_connection`, `throttle`) act inside the brokers on Kafka
requests (broker/request_faults.py), installed through each broker's control route; each returns
a `RequestFault` whose `with` block removes it and whose `fired` counts the requests it changed.

Network faults (`isolate`, `heal`) use the chaos engine's network nemesis
(`chaos.nemeses.network.NetworkNemesis`: the harness's own iptables chain, cutting only links
between this cluster's nodes). Where it cannot run (not root, no iptables) they skip the
calling test with the reason (or raise `FaultUnavailable` outside pytest). A cluster built
with `network_nemesis=` uses that factory instead.
"""

from __future__ import annotations

import signal
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Protocol, Self

from common.units import SECONDS
from localcluster import cluster_layout as layout
from tidelog.testing import observe
from tidelog.testing.observe import ClusterTimeout, poll, serving
from tidelog.testing.request_fault_client import RequestFault, RequestFaultClient

if TYPE_CHECKING:
    from chaos.nemesis import Nemesis
    from localcluster.launcher import LocalCluster
    from localcluster.node_process import NodeProcess

SHUTDOWN_MARGIN: Final = 5 * SECONDS  # beyond controlled.shutdown.timeout.ms before SIGKILL
NO_NETWORK_NEMESIS: Final = "network faults need a network nemesis; this cluster was built without one"


class FaultUnavailable(RuntimeError):
    """This fault cannot be injected here (under pytest the test is skipped with this reason instead)."""


class NetworkNemesis(Protocol):
    def isolate(self, node_id: int) -> object: ...

    def heal(self) -> object: ...


def unavailable(reason: str) -> None:
    """Skip the running test with `reason`; outside pytest, raise FaultUnavailable."""
    if "pytest" in sys.modules:
        import pytest

        pytest.skip(reason)
    raise FaultUnavailable(reason)


class Fault:
    """One injected fault; leaving a `with` block undoes it (once), as does `undo()`."""

    def __init__(self, action: str, node_id: int, undo: Callable[[], object]) -> None:
        self.action, self.node_id, self._undo = action, node_id, undo
        self.undone = False

    def __repr__(self) -> str:
        return f"Fault({self.action} node {self.node_id}{', undone' if self.undone else ''})"

    def undo(self) -> None:
        if not self.undone:
            self.undone = True
            self._undo()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.undo()


class FaultInjection(ABC):
    """The fault helpers of `tidelog.testing.Cluster`, which provides the attributes below and
    implements the three abstract lookups."""

    nemesis: Nemesis
    wait_timeout: float
    broker_config: dict[str, str]
    _expected_down: set[int]
    _dirty: bool
    _network: Any

    @property
    @abstractmethod
    def local(self) -> LocalCluster: ...

    @abstractmethod
    def node(self, node_id: int) -> NodeProcess: ...

    @abstractmethod
    def leader_of(self, topic: str, partition: int = 0, timeout: float | None = None) -> int: ...

    # -- processes --------------------------------------------------------------------------------

    def kill(self, node_id: int, *, wait: bool = True) -> Fault:
        """SIGKILL a node (a crash: no flush, no clean-shutdown marker); with `wait`, return once a
        broker is fenced and leads nothing (clients see new leaders) and a killed active controller
        has a successor (when a majority of voters is left)."""
        node = self.node(node_id)
        self._dirty = True
        self.nemesis.kill(node_id)
        self._expected_down.add(node_id)
        if wait:
            self._wait_gone(node)
        return Fault("kill", node_id, lambda: self._restart_if_down(node_id))

    def restart(self, node_id: int, *, wait: bool = True) -> None:
        """Start a stopped or killed node again from its data dir; with `wait`, return once a broker is
        registered, unfenced and known to every broker, and a controller agrees on the active one."""
        node = self.node(node_id)
        self._dirty = True
        if node.running():
            raise RuntimeError(f"{node.spec.label} is running (pid {node.pid}); kill or shut it down first")
        self.nemesis.restart(node_id)
        self._expected_down.discard(node_id)
        if wait:
            self._wait_back(self.node(node_id))

    def _restart_if_down(self, node_id: int) -> None:
        """A Fault's undo: a node already brought back (recover(), a restart by hand) is left alone."""
        if not self.node(node_id).running():
            self.restart(node_id)

    def pause(self, node_id: int) -> Fault:
        """SIGSTOP a node: it keeps its sockets and answers nothing (a hung process, a long GC pause).
        Returns once the process is stopped; its session expires later (broker.session.timeout.ms)."""
        node = self.node(node_id)
        if not node.running():
            raise RuntimeError(f"{node.spec.label} is not running: nothing to pause")
        self._dirty = True
        self.nemesis.pause(node_id)
        poll(f"{node.spec.label} to stop (SIGSTOP)", lambda: observe.is_paused(node), self.wait_timeout)
        return Fault("pause", node_id, lambda: self.resume(node_id))

    def resume(self, node_id: int, *, wait: bool = True) -> None:
        """SIGCONT a paused node; with `wait`, return once it serves again (a broker fenced while
        paused is unfenced again)."""
        node = self.node(node_id)
        self.nemesis.resume(node_id)
        poll(f"{node.spec.label} to run again (SIGCONT)", lambda: not observe.is_paused(node), self.wait_timeout)
        if wait:
            self._wait_back(node)

    def controlled_shutdown(self, broker_id: int) -> Fault:
        """SIGTERM a broker (Kafka's controlled shutdown: leaders and ISR membership move off it first)
        and return once it exited 0 and the controllers show it fenced, leading nothing. A broker that
        does not exit within controlled.shutdown.timeout.ms (+5 s) is SIGKILLed and ClusterTimeout raised;
        one that exits dirty raises RuntimeError with its log tail."""
        node = self.node(broker_id)
        if not layout.runs_broker(node.spec.role):
            raise ValueError(f"{node.spec.label} is not a broker: controlled shutdown is a broker's")
        if not node.running():
            raise RuntimeError(f"{node.spec.label} is not running: nothing to shut down")
        self._dirty = True
        self._expected_down.add(broker_id)
        bound = int(self.broker_config.get("controlled.shutdown.timeout.ms", "30000")) / 1000 + SHUTDOWN_MARGIN
        node.send(signal.SIGTERM)
        try:
            poll(f"{node.spec.label} to finish its controlled shutdown", lambda: not node.running(), bound)
        except ClusterTimeout:
            node.kill()
            raise
        if node.exit_status != 0:
            raise RuntimeError(f"{node.spec.label} exited with status {node.exit_status} instead of a clean "
                               f"controlled shutdown:\n{observe.log_tails([node])}")
        self._wait_gone(node)
        return Fault("controlled_shutdown", broker_id, lambda: self._restart_if_down(broker_id))

    def kill_leader(self, topic: str, partition: int = 0, *, wait: bool = True) -> Fault:
        """SIGKILL the partition's leader (its `node_id` is on the returned Fault); with `wait`, return
        once it is fenced and clients see the partition's new leader (or no leader, when no other
        replica was in the ISR)."""
        return self.kill(self.leader_of(topic, partition), wait=wait)

    # -- the network --------------------------------------------------------------------------------

    def isolate(self, node_id: int) -> Fault:
        """Cut every link between a node and the rest of its cluster, both ways (skips the test where
        network faults cannot run: not root, or no iptables). `heal()`, or the Fault's `with`, undoes it."""
        network = self._network_nemesis()
        self.node(node_id)
        self._dirty = True
        network.isolate(node_id)
        return Fault("isolate", node_id, self.heal)

    def heal(self) -> None:
        """Undo every network fault (nothing without a network nemesis)."""
        if self._network is not None:
            self._network.heal()

    def _network_nemesis(self) -> NetworkNemesis:
        if self._network is None:
            unavailable(NO_NETWORK_NEMESIS)
        reason = getattr(self._network, "unavailable_reason", lambda: None)()
        if reason:
            unavailable(f"network faults are not available here: {reason}")
        return self._network

    # -- Kafka requests (issue 33: broker/request_faults.py) -------------------------------------------

    def inject(self, api: str, error: str, *, times: int | None = 1, broker: int | None = None,
               topic: str | None = None, client_id: str | None = None, group: str | None = None) -> RequestFault:
        """Answer matching requests with a Kafka error instead of serving them (the API's own answer,
        the error per partition where Kafka puts it there):
        `inject("Produce", "NOT_LEADER_OR_FOLLOWER", times=1)`. `times` counts per broker (None:
        until removed); broker None means every broker."""
        return self._request_fault({"kind": "error", "api": api, "error": error, "times": times},
                                   broker, topic, client_id, group)

    def delay(self, api: str, ms: int, *, times: int | None = None, broker: int | None = None,
              topic: str | None = None, client_id: str | None = None, group: str | None = None) -> RequestFault:
        """Hold matching requests `ms` before serving them (other connections carry on; a Produce is
        appended in order and its answer held)."""
        return self._request_fault({"kind": "delay", "api": api, "delay_ms": ms, "times": times},
                                   broker, topic, client_id, group)

    def drop_connection(self, api: str, *, when: str = "before", times: int | None = 1, broker: int | None = None,
                        topic: str | None = None, client_id: str | None = None,
                        group: str | None = None) -> RequestFault:
        """Close the connection on a matching request: `when="before"` serving it, or `"after"`
        serving it without sending the answer ("served but the answer was lost")."""
        if when not in ("before", "after"):
            raise ValueError(f"when: 'before' or 'after', got {when!r}")
        return self._request_fault({"kind": f"drop_{when}", "api": api, "times": times},
                                   broker, topic, client_id, group)

    def throttle(self, api: str, ms: int, *, times: int | None = None, broker: int | None = None,
                 topic: str | None = None, client_id: str | None = None, group: str | None = None) -> RequestFault:
        """Serve matching requests with throttle_time_ms = `ms` in the answer (KIP-219: the client
        waits that long before its next request to this broker)."""
        return self._request_fault({"kind": "throttle", "api": api, "throttle_ms": ms, "times": times},
                                   broker, topic, client_id, group)

    def request_faults(self) -> list[RequestFault]:
        """The request faults installed and not removed yet."""
        return list(self._request_fault_client().active)

    def clear_request_faults(self) -> None:
        """Remove every request fault (recover() does): cheap when none was installed."""
        client = self.__dict__.get("_request_faults")
        if client is not None:
            client.clear()

    def _request_fault(self, spec: dict[str, Any], broker: int | None, topic: str | None, client_id: str | None,
                       group: str | None) -> RequestFault:
        spec.update({k: v for k, v in (("topic", topic), ("client_id", client_id), ("group", group)) if v is not None})
        brokers = [n.spec.node_id for n in self.local.brokers] if broker is None else [broker]
        return self._request_fault_client().install(spec, brokers)  # ValueError: nothing installed

    def _request_fault_client(self) -> RequestFaultClient:
        client = self.__dict__.get("_request_faults")
        if client is None or client.local is not self.local:  # a restarted cluster: a new data dir
            client = self.__dict__["_request_faults"] = RequestFaultClient(self.local)
        return client

    # -- waits ----------------------------------------------------------------------------------------

    def _wait_gone(self, node: NodeProcess) -> None:
        node_id = node.spec.node_id
        if layout.runs_controller(node.spec.role):
            voters = self.local.controllers
            if sum(1 for n in voters if serving(n)) * 2 > len(voters):  # a majority is left: it elects
                poll(f"a new active controller after {node.spec.label} went away",
                     lambda: observe.active_controller(self.local) not in (None, node_id), self.wait_timeout,
                     nodes=self.local.nodes)
        if layout.runs_broker(node.spec.role):
            poll(f"{node.spec.label} fenced and leading nothing, as clients see it",
                 lambda: self._fenced_and_leaderless(node_id), self.wait_timeout, nodes=self.local.nodes)

    def _fenced_and_leaderless(self, broker_id: int) -> bool:
        for controller in self.local.controllers:
            if serving(controller):
                view = observe.admin_view(controller, "/v1/brokers")
                if broker_id in observe.unfenced_brokers(view):
                    return False
        client = observe.admin(self.local)
        for summary in client.topics():
            topic = client.topic(summary["name"])
            leaders = {p["partition"]: p["leader"] for p in topic["partitions"]}
            if broker_id in leaders.values() or not observe.brokers_agree(self.local, topic["name"], leaders):
                return False
        return True

    def _wait_back(self, node: NodeProcess) -> None:
        node_id = node.spec.node_id
        if layout.runs_controller(node.spec.role):
            poll(f"{node.spec.label} to answer and agree on the active controller",
                 lambda: observe.probe_cluster_view(node.spec) and observe.active_controller(self.local) is not None,
                 self.wait_timeout, nodes=self.local.nodes)
        if layout.runs_broker(node.spec.role):
            wanted = {n.spec.node_id for n in self.local.brokers if serving(n)}
            poll(f"{node.spec.label} registered, unfenced and known to every broker",
                 lambda: node_id in observe.unfenced_everywhere(self.local)
                 and observe.brokers_know_brokers(self.local, wanted),
                 self.wait_timeout, nodes=self.local.nodes)
