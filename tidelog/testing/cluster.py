"""A real tidelog cluster for a test, a script or a notebook: started in seconds, broken on purpose,
always stopped.

    with Cluster(brokers=3) as cluster:              # 3 controllers (127.0.0.1-3) + 3 brokers (.4-.6)
        cluster.bootstrap_servers                    # "127.0.0.4:41231,127.0.0.5:41231,127.0.0.6:41231"
        topic = cluster.create_topic("orders", partitions=3, configs={"min.insync.replicas": "2"})
        cluster.kill_leader(topic, 0)                # see faults.py
        cluster.recover()                            # every node back, every ISR full

Every cluster gets its own data dir (a fresh temporary directory) and free ports, so test processes
(pytest-xdist workers, two suites on one machine) never collide; `stop()` removes the directory.
Nodes run with small heartbeat, session and replica-lag timeouts (TEST_BROKER_CONFIG) so faults
show in seconds; `broker_config` overrides them. Start-up fails with the log tail of every node
that could not start; stop is SIGTERM (brokers first: a controlled shutdown), a bound, SIGKILL;
and `reaper` makes sure nothing outlives the process even when it is killed.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Self

from chaos import nemesis as chaos_nemesis
from chaos.nemeses.network import NetworkNemesis
from common.limits import ADMIN_WRITE_TIMEOUT, READY_TIMEOUT
from common.units import SECONDS
from localcluster import cluster_layout as layout
from localcluster.cluster_layout import LayoutError
from localcluster.launcher import LauncherError, LocalCluster, free_ports
from localcluster.node_process import NodeProcess, StopReport
from tidelog.testing import client_security, observe, reaper, reuse, zygote
from tidelog.testing.client_security import check_security
from tidelog.testing.faults import FaultInjection
from tidelog.testing.link_power_faults import LinkPowerFaults, open_power_layer
from tidelog.testing.observe import ClusterTimeout, poll, serving

STOP_TIMEOUT: Final = 15 * SECONDS  # the whole stop, SIGKILL included; far more than a clean stop takes
START_ATTEMPTS: Final = 3  # a port another process took between choosing it and binding it: start again
MAX_DEFAULT_VOTERS: Final = 3
TEST_BROKER_CONFIG: Final = {
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "3000",  # a paused or cut-off broker is fenced within ~3 s (a killed one at once)
    "replica.lag.time.max.ms": "4000",
    "replica.fetch.backoff.ms": "200",
    "replica.socket.timeout.ms": "5000",
    "controlled.shutdown.timeout.ms": "10000",
    # Kafka's 6 s floor kept a test's consumer from a short session.timeout.ms (and librdkafka's
    # max.poll.interval.ms, which must not be below it): a test may now ask for 1 s; clients'
    # defaults are unchanged
    "group.min.session.timeout.ms": "1000",
}

if TYPE_CHECKING:
    from chaos.nemeses.power import PowerLayer

log = logging.getLogger(__name__)


class ClusterStartError(RuntimeError):
    """The cluster did not become ready; the message holds every node's log tail."""


class NodeCrashed(RuntimeError):
    """A node exited that no fault helper stopped; the message holds its log tail."""


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """The shape and configs of a test cluster; equal specs describe interchangeable clusters."""

    brokers: int = 3
    controllers: int | None = None  # None: 3 separate controllers, or min(brokers, 3) combined nodes
    combined: bool = False
    broker_config: tuple[tuple[str, str], ...] = ()
    topic_config: tuple[tuple[str, str], ...] = ()
    racks: int = 0  # > 0: brokers get broker.rack rack-1..rack-N in turn (localcluster.racks)
    power_loss: bool = False  # the power-loss layer under every node from its start (power_loss())
    security: str | None = None  # SASL_SSL, SSL or SASL_PLAINTEXT: a secured listener too (client_config())

    def __post_init__(self) -> None:
        check_security(self.security)
        if self.power_loss and self.combined:
            raise ValueError("power_loss: needs separate controllers and brokers (combined=False): a combined "
                             "node's metadata and data share one directory tree")
        if not 0 <= self.racks <= self.brokers:
            raise ValueError(f"racks must be between 0 and the {self.brokers} broker(s), got {self.racks}")
        if self.brokers < 1:
            raise ValueError(f"a test cluster needs at least 1 broker, got {self.brokers}")
        if self.controllers is not None and self.controllers < 1:
            raise ValueError(f"a test cluster needs at least 1 controller, got {self.controllers}")
        if self.combined and self.voters > self.brokers:
            raise ValueError(f"combined mode runs each controller inside a broker: {self.voters} controllers "
                             f"need at least as many brokers, got {self.brokers}")

    @classmethod
    def of(cls, brokers: int = 3, controllers: int | None = None, combined: bool = False,
           broker_config: Mapping[str, Any] | None = None, topic_config: Mapping[str, Any] | None = None,
           racks: int = 0, power_loss: bool = False, security: str | None = None) -> ClusterSpec:
        def pairs(config: Mapping[str, Any] | None) -> tuple[tuple[str, str], ...]:
            return tuple(sorted((str(k), _config_value(v)) for k, v in (config or {}).items()))

        return cls(int(brokers), None if controllers is None else int(controllers), bool(combined),
                   pairs(broker_config), pairs(topic_config), int(racks), bool(power_loss), security)

    @property
    def voters(self) -> int:
        if self.controllers is not None:
            return self.controllers
        return min(self.brokers, MAX_DEFAULT_VOTERS) if self.combined else MAX_DEFAULT_VOTERS

    @property
    def separate_brokers(self) -> int:
        return self.brokers - self.voters if self.combined else self.brokers

    @property
    def id(self) -> str:
        """A short name for test ids: "3c+3b", "1x", "3x+2b" (x: combined nodes), plus a config mark."""
        shape = f"{self.voters}x" if self.combined else f"{self.voters}c"
        shape += f"+{self.separate_brokers}b" if self.separate_brokers else ""
        shape += f"-{self.racks}racks" if self.racks else ""
        shape += "-power" if self.power_loss else ""
        shape += f"-{self.security.lower()}" if self.security else ""
        return shape + ("-config" if self.broker_config or self.topic_config else "")


def _config_value(value: Any) -> str:
    """Kafka's spelling of a config value: booleans lower case."""
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass
class _Started:
    root: Path
    local: LocalCluster
    watchdog: reaper.Watchdog | None  # None: a reused cluster, which its slot's idle watchdog ends
    startup_seconds: float
    power: PowerLayer | None = None
    stopped: list[StopReport] = field(default_factory=list)
    slot: reuse.Slot | None = None  # --tidelog-reuse: the leased slot; stop() lets go of it


class Cluster(FaultInjection, LinkPowerFaults):
    """A local cluster of real tidelog processes; `with` starts it and stops it, whatever happens."""

    def __init__(self, brokers: int = 3, *, controllers: int | None = None, combined: bool = False,
                 broker_config: Mapping[str, Any] | None = None, topic_config: Mapping[str, Any] | None = None,
                 base_dir: str | Path | None = None, ready_timeout: float = READY_TIMEOUT,
                 wait_timeout: float = observe.WAIT_TIMEOUT, stop_timeout: float = STOP_TIMEOUT,
                 network_nemesis: Callable[[LocalCluster], Any] | None = None, racks: int = 0,
                 power_loss: bool = False, security: str | None = None,
                 reuse_idle_minutes: float | None = None, fast_start: bool = False) -> None:
        self.spec = ClusterSpec.of(brokers, controllers, combined, broker_config, topic_config, racks, power_loss,
                                   security)
        self.broker_config = {**TEST_BROKER_CONFIG, **dict(self.spec.broker_config)}
        self.topic_config = dict(self.spec.topic_config)
        self.base_dir = None if base_dir is None else Path(base_dir)
        self.ready_timeout, self.wait_timeout, self.stop_timeout = ready_timeout, wait_timeout, stop_timeout
        self._network_factory = network_nemesis or NetworkNemesis
        self._network: Any = None
        self._started: _Started | None = None
        self._expected_down: set[int] = set()
        self._dirty = False
        # --tidelog-reuse (tidelog.testing.reuse): kept running after stop() for the next run, and
        # stopped by its idle watchdog after this many idle minutes; a power-loss layer is never kept
        self.reuse_idle_minutes = None if power_loss else reuse_idle_minutes
        # test-only (the plugin passes it): fork the nodes from tidelog.testing.zygote, which has
        # imported their modules once, instead of six interpreters importing them on two cores
        self.fast_start = fast_start

    # -- life cycle ---------------------------------------------------------------------------------

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    def start(self) -> Self:
        """Start every node and return once the cluster is READY: the controllers agree on an active
        one, every broker is registered and unfenced and every broker lists every broker."""
        if self._started is not None:
            raise RuntimeError("this cluster is already started")
        began = time.monotonic()
        if self.reuse_idle_minutes is not None and self._start_reused(began):
            return self
        for attempt in range(1, START_ATTEMPTS + 1):  # bounded: a port race is rare, three is plenty
            root = Path(tempfile.mkdtemp(prefix="tidelog-", dir=self.base_dir))
            watchdog = reaper.Watchdog(root)
            power: PowerLayer | None = None
            try:
                if self.spec.power_loss:  # mounted before the nodes start: every write of theirs goes through it
                    power = open_power_layer(root, self.spec.voters, self.spec.separate_brokers)
                local = self._start_nodes(root)
            except (LauncherError, LayoutError, ClusterTimeout) as exc:
                tails = _log_tails_of(root, already_shown=str(exc))
                _close_power(power)
                shutil.rmtree(root, ignore_errors=True)
                watchdog.close()
                if attempt < START_ATTEMPTS and ("in use" in str(exc) or "Address already in use" in tails):
                    log.warning("a port of the test cluster was taken meanwhile; starting again (%s)", exc)
                    continue
                raise ClusterStartError(f"the tidelog test cluster ({self.spec.id}) did not start: {exc}\n"
                                        f"{tails}") from None
            except BaseException:
                _close_power(power)
                shutil.rmtree(root, ignore_errors=True)
                watchdog.close()
                raise
            self._adopt(_Started(root, local, watchdog, time.monotonic() - began, power))
            return self
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _adopt(self, started: _Started) -> None:
        self._started = started
        self.__dict__["_power_layer"] = started.power
        reaper.register(self)  # from here on, stop() or atexit ends it, whatever comes next
        self.nemesis = chaos_nemesis.Nemesis(started.local)
        self._network = self._network_factory(started.local) if self._network_factory is not None else None
        log.info("tidelog test cluster %s ready in %.2f s: bootstrap %s, admin %s, data dir %s%s", self.spec.id,
                 self.startup_seconds, self.bootstrap_servers, self.admin_url, started.root,
                 " (reused)" if started.slot is not None else "")

    def _start_reused(self, began: float) -> bool:
        """--tidelog-reuse: adopt the slot's cluster, cleaned (recover(), every topic deleted), or
        start one in the slot; False when another session holds the slot (start a private one)."""
        key = reuse.slot_key(repr((self.spec, sorted(self.broker_config.items()))))
        slot = reuse.Slot.claim(key)
        if slot is None:
            log.warning("tidelog reuse: the %s cluster's slot %s is in use by another test session; starting a "
                        "cluster of its own", self.spec.id, key)
            return False
        try:
            local = LocalCluster.attach(slot.cluster_root) if slot.cluster_root.exists() else None
            if local is not None and any(n.running() for n in local.nodes):
                self._adopt(_Started(slot.cluster_root, local, None, time.monotonic() - began, slot=slot))
                if self._clean_reused():
                    assert self._started is not None, "adopted above"
                    self._started.startup_seconds = time.monotonic() - began
                    return True
            slot.clear_cluster()
            slot.cluster_root.mkdir(mode=0o700, parents=True)
            local = self._start_nodes(slot.cluster_root)
            slot.ensure_watchdog(self.reuse_idle_minutes or reuse.DEFAULT_IDLE_MINUTES)
        except (LauncherError, LayoutError, ClusterTimeout) as exc:
            slot.clear_cluster()
            slot.release()
            raise ClusterStartError(f"the tidelog test cluster ({self.spec.id}, reused) did not start: {exc}") from None
        except BaseException:
            slot.clear_cluster()
            slot.release()
            raise
        self._adopt(_Started(slot.cluster_root, local, None, time.monotonic() - began, slot=slot))
        return True

    def _clean_reused(self) -> bool:
        """A kept cluster as a fresh one: every node back (a node a fault left dead restarted),
        every fault undone, every topic deleted; False (and let go) if that fails."""
        try:
            try:
                self.recover()
            except NodeCrashed as exc:  # dead since the last run: recover() restarted it
                log.info("tidelog reuse: %s", str(exc).splitlines()[0])
            self._delete_topics()
            return True
        except Exception:
            log.exception("tidelog reuse: the kept %s cluster could not be cleaned; starting it anew", self.spec.id)
            reaper.unregister(self)
            if self._network is not None:
                self._network.close()
            self._started = None
            return False

    def _delete_topics(self) -> None:
        """Delete every topic but the internal ones and wait until none is listed."""
        for name in self.topic_names():
            if not name.startswith("__"):
                self.delete_topic(name)
        poll("the previous run's topics to be deleted",
             lambda: not [n for n in self.topic_names() if not n.startswith("__")] or None,
             self.wait_timeout, nodes=self.local.nodes)

    def _release_reused(self, started: _Started) -> list[StopReport]:
        """stop() of a reused cluster: every fault this session made undone that must not outlive it
        (network cuts, link faults, request faults, paused nodes), the nodes left running."""
        assert started.slot is not None, "called for reused clusters only"
        reaper.unregister(self)
        try:
            if self._network is not None:
                self._network.close()
            self.close_link_faults()
            self.nemesis.heal()
            self.clear_request_faults()
            started.local.write_cluster_file()  # the pids of nodes a fault restarted, for the next run
        except Exception:  # the next run cleans what is left, or starts the cluster anew
            log.exception("tidelog reuse: undoing this session's faults before letting go failed")
        finally:
            started.slot.release()
            self._started = None
        return []

    def _start_nodes(self, root: Path) -> LocalCluster:
        hosts = [f"{layout.LOOPBACK_NETWORK}{i}" for i in range(1, self.spec.voters + self.spec.separate_brokers + 1)]
        raft_port, admin_port, kafka_port, metrics_port = free_ports(hosts, 4)
        spawn = NodeProcess.spawn
        if self.fast_start and self.reuse_idle_minutes is None:  # a kept cluster must outlive the zygote
            spawn = zygote.fork_or_spawn
        local = LocalCluster.start(root, controllers=self.spec.voters, brokers=self.spec.separate_brokers,
                                   combined=self.spec.combined, raft_port=raft_port, admin_port=admin_port,
                                   kafka_port=kafka_port, metrics_port=metrics_port,
                                   ready_timeout=self.ready_timeout, extra_properties=self.broker_config,
                                   racks=self.spec.racks, security=self.spec.security, spawn=spawn)
        try:
            wanted = {n.spec.node_id for n in local.brokers}
            poll("every broker to list every broker in its Metadata",
                 lambda: observe.brokers_know_brokers(local, wanted), self.ready_timeout, nodes=local.nodes)
        except BaseException:
            reaper.stop_within(local, self.stop_timeout)
            raise
        return local

    def stop(self) -> list[StopReport]:
        """Stop every node (SIGTERM, brokers first; SIGKILL once stop_timeout is spent) and remove the
        data dir; one report per node. Safe to call twice."""
        started = self._started
        if started is None:
            return []
        if started.slot is not None:
            return self._release_reused(started)
        reaper.unregister(self)
        try:
            try:
                if self._network is not None:
                    self._network.close()  # heals, and removes the harness's chain
            except Exception:  # a network nemesis that fails must not keep processes alive
                log.exception("healing the network before the stop failed")
            try:
                self.close_link_faults()  # before the nodes stop, so that they can say goodbye
            except Exception:
                log.exception("removing the link faults before the stop failed")
            started.stopped = reaper.stop_within(started.local, self.stop_timeout)
        finally:
            self.__dict__.pop("_power_layer", None)
            _close_power(started.power)  # after the nodes stopped: nothing writes through it any more
            shutil.rmtree(started.root, ignore_errors=True)
            if started.watchdog is not None:
                started.watchdog.close()
            self._started = None
        survivors = [r for r in started.stopped if r.outcome == "did not die"]
        if survivors:
            raise RuntimeError("nodes survived SIGKILL: " + "; ".join(r.describe() for r in survivors))
        return started.stopped

    def recover(self, timeout: float | None = None) -> None:
        """Undo every fault: heal the network, resume paused nodes, restart stopped ones, then wait until
        healthy (every partition led, every ISR full). Raises NodeCrashed, after recovering, if a node
        had exited that no fault helper stopped. Cheap when nothing happened."""
        local = self.local
        crashed = [n for n in local.nodes if not n.running() and n.spec.node_id not in self._expected_down]
        report = observe.log_tails(crashed) if crashed else ""
        self.clear_link_faults()  # a test's link faults end with it, before the wait for health
        if self._dirty or crashed or not all(serving(n) for n in local.nodes):
            self.heal()
            self.nemesis.heal()
            for node in list(local.nodes):
                if not node.running():
                    self.nemesis.restart(node.spec.node_id)
            self._expected_down.clear()
            self.wait_until_healthy(timeout)
            self._dirty = False
        self.clear_request_faults()  # a test's request faults end with it (issue 33)
        if crashed:
            raise NodeCrashed(f"{', '.join(n.spec.label for n in crashed)} exited on its own (now restarted):\n"
                              f"{report}")

    # -- where it runs ------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Started and not stopped yet."""
        return self._started is not None

    @property
    def local(self) -> LocalCluster:
        if self._started is None:
            raise RuntimeError("the cluster is not started: use `with Cluster(...) as cluster:` or start()")
        return self._started.local

    @property
    def data_dir(self) -> Path:
        return self.local.root

    @property
    def startup_seconds(self) -> float:
        """From start() to READY (the measure of issue 16's "ready in <= 3 s")."""
        assert self._started is not None, "started: checked by local"
        return self._started.startup_seconds

    @property
    def bootstrap_servers(self) -> str:
        servers = self.local.bootstrap_servers
        assert servers is not None, "a test cluster has at least one broker"
        return servers

    def client_config(self) -> dict[str, str]:
        """A confluent-kafka config for the cluster: with `security`, the secured listeners'
        bootstrap.servers and the launcher's CA and user (client_security); else bootstrap.servers."""
        if self.spec.security is None:
            return {"bootstrap.servers": self.bootstrap_servers}
        return client_security.confluent_config(self.data_dir)

    def python_client_config(self) -> dict[str, Any]:
        """client_config() as keyword arguments of kafka-python's and aiokafka's clients."""
        if self.spec.security is None:
            return {"bootstrap_servers": self.bootstrap_servers}
        return client_security.python_config(self.data_dir)

    @property
    def admin_url(self) -> str:
        return self.local.admin_url

    @property
    def broker_ids(self) -> list[int]:
        return [n.spec.node_id for n in self.local.brokers]

    @property
    def controller_ids(self) -> list[int]:
        return [n.spec.node_id for n in self.local.controllers]

    def node(self, node_id: int) -> NodeProcess:
        for node in self.local.nodes:
            if node.spec.node_id == node_id:
                return node
        raise ValueError(f"no node {node_id}: nodes are {[n.spec.node_id for n in self.local.nodes]}")

    def active_controller(self) -> int:
        return poll("the controllers to agree on an active controller",
                    lambda: observe.active_controller(self.local), self.wait_timeout, nodes=self.local.nodes)

    def log_tails(self, lines: int = observe.LOG_TAIL_LINES) -> str:
        """The end of every node's log, for a failing test's report."""
        return observe.log_tails(self.local.nodes, lines)

    # -- topics -------------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int | None = None,
                     configs: Mapping[str, Any] | None = None) -> str:
        """Create a topic (replication factor default: min(3, brokers); configs over topic_config) and
        return its name once every partition has a leader in every live broker's Metadata."""
        rf = min(3, len(self.broker_ids)) if replication_factor is None else replication_factor
        merged = {**self.topic_config, **{k: _config_value(v) for k, v in (configs or {}).items()}}
        observe.admin(self.local, timeout=ADMIN_WRITE_TIMEOUT).create_topic(
            name, partitions=partitions, replication_factor=rf, configs=merged)
        self.wait_for_leaders(name)
        return name

    def delete_topic(self, name: str) -> None:
        observe.admin(self.local, timeout=ADMIN_WRITE_TIMEOUT).delete_topic(name)

    def topic_names(self) -> list[str]:
        return sorted(t["name"] for t in observe.admin(self.local).topics())

    def partition(self, topic: str, partition: int = 0) -> Mapping[str, Any]:
        """The controllers' state of one partition: leader, leader_epoch, replicas, isr, elr, ..."""
        return observe.partition_view(self.local, topic, partition)

    # -- waits --------------------------------------------------------------------------------------

    def leader_of(self, topic: str, partition: int = 0, timeout: float | None = None) -> int:
        """The partition's leader once it has one that every live broker's Metadata names."""
        def leader() -> int | None:
            state = self.partition(topic, partition)
            found = state["leader"]
            ok = found >= 0 and observe.brokers_agree(self.local, topic, {partition: found})
            return found if ok else None

        return poll(f"{topic}-{partition} to have a leader clients see", leader,
                    self.wait_timeout if timeout is None else timeout, nodes=self.local.nodes)

    def wait_for_leaders(self, topic: str, timeout: float | None = None) -> dict[int, int]:
        """partition -> leader once every partition of `topic` has one that every live broker names."""
        def leaders() -> dict[int, int] | None:
            view = observe.admin(self.local).topic(topic)
            found = {p["partition"]: p["leader"] for p in view["partitions"]}
            ok = found and min(found.values()) >= 0 and observe.brokers_agree(self.local, topic, found)
            return found if ok else None

        return poll(f"every partition of {topic} to have a leader clients see", leaders,
                    self.wait_timeout if timeout is None else timeout, nodes=self.local.nodes)

    def wait_for_isr(self, topic: str, partition: int, size: int, timeout: float | None = None) -> list[int]:
        """The partition's ISR once it has exactly `size` members (the controllers' committed view)."""
        def isr() -> list[int] | None:
            members = list(self.partition(topic, partition)["isr"])
            return members if len(members) == size else None

        return poll(f"{topic}-{partition} to have {size} replica(s) in its ISR", isr,
                    self.wait_timeout if timeout is None else timeout, nodes=self.local.nodes)

    def wait_until_healthy(self, timeout: float | None = None) -> None:
        """Return once every node serves, every broker is unfenced and every partition is led with a
        full ISR, as the controllers and every broker's Metadata show (observe.healthy)."""
        poll("the cluster to be healthy", lambda: observe.healthy(self.local) is None or None,
             self.wait_timeout if timeout is None else timeout, nodes=self.local.nodes)


def _close_power(power: PowerLayer | None) -> None:
    """Unmount the power-loss layer (its daemons too); a failure is logged, never raised over the
    error that brought us here."""
    if power is not None:
        try:
            power.close()
        except Exception:
            log.exception("unmounting the power-loss layer failed")


def _log_tails_of(root: Path, already_shown: str) -> str:
    """The log tails of the nodes cluster.json of `root` names (read before the directory goes),
    but for those whose log `already_shown` (the launcher's message) holds."""
    try:
        found = LocalCluster.attach(root)
    except (LayoutError, OSError):
        found = None
    nodes = [] if found is None else [n for n in found.nodes if str(n.spec.log_path) not in already_shown]
    return observe.log_tails(nodes) if nodes else ""
