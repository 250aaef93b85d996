"""Start, watch and stop a local cluster of real node processes on loopback addresses.

The one place that starts nodes for `tidelog up`, `tidelog down` and the integration tests:

    with LocalCluster.start(tmp_path, controllers=3, raft_port=p1, admin_port=p2,
                            brokers=1, kafka_port=p3, metrics_port=p4) as cluster:
        cluster.admin_url            # any controller forwards writes to the active one
        cluster.bootstrap_servers    # "127.0.0.4:p3": ready means registered and unfenced
    # every node stopped here, even when the body raised

Each node runs in its own session (localcluster/node_process.py), so a Ctrl-C on the terminal
reaches `tidelog up` only, which then stops the nodes in order.
"""

from __future__ import annotations

import errno
import sys
import json
import random
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from common.limits import NODE_READ_TIMEOUT, READY_TIMEOUT
from common.units import SECONDS
from localcluster import cluster_layout as layout
from localcluster.cluster_layout import (
    NodeSpec,
    data_dir_lock,
    load_or_create_secrets,
    read_cluster_file,
    replace_private,
    resolve_layout,
    write_atomic,
)
from localcluster.racks import broker_racks, with_racks
from localcluster.node_process import (
    STOP_TIMEOUT,
    NodeProcess,
    StopReport,
    stop_nodes,
)
from localcluster.rpc_keys import write_node_key
from localcluster.security_setup import plan as security_plan
from localcluster.server_properties import properties_files
from security.rpc_secret import load_or_create_secret

# a start looks this often whether its nodes answer: each look is one small HTTP GET per controller
# (refused at once while a node is still importing), so 50 ms costs little and READY comes sooner
READY_POLL_INTERVAL: Final = 0.05 * SECONDS
MAX_HTTP_ANSWER_BYTES: Final = 1024 * 1024
FREE_PORT_TRIES: Final = 50
# free_ports draws from [FREE_PORT_FLOOR, the ephemeral range's start): clear of well-known services
# and of the ports the kernel hands out itself; a band under FREE_PORT_MIN_BAND ports is too crowded
FREE_PORT_FLOOR: Final = 20000
FREE_PORT_MIN_BAND: Final = 2000
EPHEMERAL_RANGE_FILE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")

Probe = Callable[[NodeSpec], Mapping[str, Any]]


class LauncherError(RuntimeError):
    """The cluster cannot be started or stopped as asked; the message says why and what to do."""


class Interrupted(LauncherError):
    """A stop was asked for (Ctrl-C, SIGTERM) while the cluster was starting."""


# --- readiness -------------------------------------------------------------------------------


def probe_cluster_view(node: NodeSpec) -> Mapping[str, Any]:
    """GET /v1/cluster of one controller (raises OSError or ValueError when it cannot answer)."""
    with urllib.request.urlopen(f"{node.admin_url}/v1/cluster", timeout=NODE_READ_TIMEOUT) as answer:
        view = json.loads(answer.read(MAX_HTTP_ANSWER_BYTES))
    if not isinstance(view, dict):
        raise ValueError(f"GET /v1/cluster answered {view!r:.100}")
    return view


def probe_brokers(admin_url: str) -> list[Mapping[str, Any]]:
    """GET /v1/brokers of one controller (raises OSError or ValueError when it cannot answer)."""
    with urllib.request.urlopen(f"{admin_url}/v1/brokers", timeout=NODE_READ_TIMEOUT) as answer:
        brokers = json.loads(answer.read(MAX_HTTP_ANSWER_BYTES))
    if not isinstance(brokers, list) or not all(isinstance(b, dict) for b in brokers):
        raise ValueError(f"GET /v1/brokers answered {brokers!r:.100}")
    return brokers


def unfenced_brokers(brokers: Sequence[Mapping[str, Any]], stale: Mapping[int, str] | None = None) -> set[int]:
    """Ids of the registered brokers that are unfenced and not shutting down; a broker whose
    incarnation is its `stale` one (a killed process whose session has not expired yet) is not."""
    return {b["broker_id"] for b in brokers if b.get("fenced") is False and not b.get("in_controlled_shutdown")
            and (stale is None or b.get("incarnation_id") != stale.get(b["broker_id"]))}


def registered_incarnations(controllers: Sequence[NodeSpec], brokers_probe: Callable[
        [str], Sequence[Mapping[str, Any]]] = probe_brokers) -> dict[int, str]:
    """broker id -> incarnation id, as the first controller that answers lists them ({} if none does)."""
    for spec in controllers:
        try:
            return {int(b["broker_id"]): str(b.get("incarnation_id")) for b in brokers_probe(spec.admin_url)}
        except (OSError, ValueError, KeyError, TypeError):  # down or not serving: ask the next one
            continue
    return {}


def agreed_active(views: Mapping[int, Mapping[str, Any]], cluster_id: str) -> int | None:
    """The active controller, once every controller answers for this cluster and names it."""
    if any(view.get("cluster_id") != cluster_id for view in views.values()):
        return None
    actives = [node_id for node_id, view in views.items() if view.get("is_active") is True]
    named = {view.get("active_controller") for view in views.values()}
    return actives[0] if len(actives) == 1 and named == {actives[0]} else None


def check_ports_free(nodes: Sequence[NodeSpec]) -> None:
    """LauncherError listing every address a node needs that is taken (or not on this machine)."""
    problems = []
    for node in nodes:
        for what, port in node.ports:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                # SO_REUSEADDR, as the nodes bind: a TIME_WAIT left by the last run is no conflict
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind((node.host, port))
                except OSError as exc:
                    if exc.errno == errno.EADDRNOTAVAIL:
                        problems.append(f"{node.host} is not a loopback address of this machine "
                                        f"(macOS: sudo ifconfig lo0 alias {node.host} up)")
                    else:
                        problems.append(f"{node.host}:{port} ({what} of {node.label}) is in use "
                                        f"by another process ({exc.strerror})")
    if problems:
        listed = "\n".join(f"  - {p}" for p in dict.fromkeys(problems))
        raise LauncherError(f"cannot start the cluster:\n{listed}\nStop whatever holds these "
                            "ports, or give a new --data-dir other ports with --raft-port/--admin-port.")


def ephemeral_port_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int] | None:
    """The kernel's range for port-0 binds and outgoing connections; None where it cannot be read."""
    try:
        low, high = (int(field) for field in path.read_text().split())
    except (OSError, ValueError):  # not Linux, or an unexpected format: keep to bind-to-0
        return None
    return low, high


def _candidate_port(hosts: Sequence[str], rng: random.Random, below: int | None) -> socket.socket:
    """A socket bound to a port at hosts[0]: under `below` when a wide enough band lies there."""
    sock = socket.socket()
    try:
        if below is not None and below - FREE_PORT_FLOOR >= FREE_PORT_MIN_BAND:
            sock.bind((hosts[0], rng.randrange(FREE_PORT_FLOOR, below)))
        else:
            sock.bind((hosts[0], 0))
    except OSError:
        sock.close()
        raise
    return sock


def free_ports(hosts: Sequence[str], count: int = 2, *, rng: random.Random | None = None,
               port_range: tuple[int, int] | None = None) -> list[int]:
    """`count` distinct ports nobody listens on at any of `hosts` (tests: one per node role).

    They are drawn from below the kernel's ephemeral range: a port the kernel gives out there can be
    taken, between this choice and the node's bind, by any outgoing connection whose socket is bound
    to that host (a controller's Raft connections leave from its own address), and the node then
    dies with EADDRINUSE. Outside Linux, or with no band below the range, the kernel picks (port 0).
    """
    rng = rng or random.Random()
    below = (port_range or ephemeral_port_range() or (None, None))[0]
    with ExitStack() as held:  # hold each chosen port until all are chosen, so none repeats
        ports: list[int] = []
        for _ in range(FREE_PORT_TRIES):  # bounded: a port free on one address is almost always free on all
            if len(ports) == count:
                return ports
            try:
                first = held.enter_context(_candidate_port(hosts, rng, below))
            except OSError:  # that random port is in use at hosts[0]: draw again
                continue
            port = first.getsockname()[1]
            try:
                for host in hosts[1:]:
                    with socket.socket() as probe:
                        probe.bind((host, port))
            except OSError:
                continue
            ports.append(port)
        if len(ports) == count:
            return ports
    raise LauncherError(f"no {count} ports free on every one of {', '.join(hosts)} in {FREE_PORT_TRIES} tries")


class LocalCluster:
    """The nodes of one data dir; a context manager that stops them all on exit."""

    def __init__(self, root: Path, cluster_id: str, nodes: Sequence[NodeProcess]) -> None:
        self.root, self.cluster_id, self.nodes = root, cluster_id, list(nodes)
        self.active_controller: int | None = None
        self.started: tuple[int, ...] = ()  # node ids `start` spawned
        self.already_running: tuple[int, ...] = ()  # node ids `start` found running
        self._spawn: Callable[[NodeSpec], NodeProcess] | None = None  # what `start` started its nodes with

    @property
    def specs(self) -> tuple[NodeSpec, ...]:
        return tuple(n.spec for n in self.nodes)

    @property
    def controllers(self) -> list[NodeProcess]:
        """The quorum voters: controllers or combined nodes."""
        return [n for n in self.nodes if layout.runs_controller(n.spec.role)]

    @property
    def admin_url(self) -> str:
        return self.controllers[0].spec.admin_url

    @property
    def brokers(self) -> list[NodeProcess]:
        """The Kafka listeners: brokers or combined nodes."""
        return [n for n in self.nodes if layout.runs_broker(n.spec.role)]

    @property
    def bootstrap_servers(self) -> str | None:
        """host:port of every broker, comma-separated; None without brokers."""
        return layout.bootstrap_servers(self.specs)

    def node(self, node_id: int) -> NodeProcess:
        return next(n for n in self.nodes if n.spec.node_id == node_id)

    def spawn(self, spec: NodeSpec) -> NodeProcess:
        """Start one node as `start` started this cluster's (a fault's restart, chaos.nemesis):
        forked again when tidelog.testing's zygote forked them, else NodeProcess.spawn."""
        return (self._spawn or NodeProcess.spawn)(spec)

    @classmethod
    def start(cls, root: Path, *, controllers: int | None = None, raft_port: int | None = None,
              admin_port: int | None = None, brokers: int | None = None, kafka_port: int | None = None,
              metrics_port: int | None = None, ready_timeout: float = READY_TIMEOUT,
              extra_properties: Mapping[str, str] | None = None,
              should_stop: Callable[[], bool] = lambda: False, combined: bool | None = None,
              broker_config: Mapping[str, str] | None = None,
              controller_config: Mapping[str, str] | None = None, racks: int = 0,
              security: str | None = None,
              spawn: Callable[[NodeSpec], NodeProcess] | None = None) -> LocalCluster:
        """Start every node of `root` (planned on first start, reused after) that is not running,
        and wait until the whole cluster is ready (as `docker compose up` does: a node killed
        since the last start comes back; the ids are in `started` and `already_running`).

        `broker_config` / `controller_config` (`tidelog up --broker-config K=V`) are set in the
        server.properties of every node of that role, new or existing, after the whole set is
        validated as the nodes will parse it: a bad key writes nothing and starts nothing (nor
        does a key for a node that is running: it would not read it).
        `racks` N > 0 gives new brokers broker.rack rack-1..rack-N in turn (`localcluster.racks`).
        `spawn` starts one node (tidelog.testing's zygote forks them from pre-imported modules);
        None means NodeProcess.spawn, looked up at call time.
        On any failure, including `should_stop()` turning true (`Interrupted`), the nodes this call
        started are stopped before the error is raised (those already running are left so):
        LayoutError for a request or data dir that cannot be run, LauncherError for a cluster
        already running in full, taken ports, a node that died or a cluster never ready.
        """
        if spawn is None:
            spawn = NodeProcess.spawn
        root = root.resolve()
        with data_dir_lock(root):
            specs = resolve_layout(root, controllers=controllers, raft_port=raft_port, admin_port=admin_port,
                                   brokers=brokers, kafka_port=kafka_port, metrics_port=metrics_port,
                                   combined=combined)
            recorded = cls.attach(root)
            running = {n.spec.node_id: n for n in recorded.nodes if n.running()} if recorded is not None else {}
            if len(running) == len(specs):
                pids = ", ".join(str(n.pid) for n in running.values())
                raise LauncherError(f"the cluster of {root} is already running (pids {pids}); "
                                    f"stop it with: tidelog down --data-dir {root}")
            missing = [spec for spec in specs if spec.node_id not in running]
            check_ports_free(missing)  # a running node holds its own ports
            secrets = load_or_create_secrets(root)  # after the port checks: that refusal leaves none
            rpc_secret = root / layout.RPC_SECRET_FILE  # issue 29: every node signs or checks /rpc/ with it
            if load_or_create_secret(rpc_secret)[1]:
                print(f"generated the broker<->controller RPC secret in {rpc_secret}", file=sys.stderr)
            # --security (issue 29): a secured listener per broker, its certificates and users
            per_node = security_plan(root, specs, security)[0] if security is not None else None
            files = properties_files(specs, secrets, extra_properties, broker_config or {},
                                     controller_config or {}, rpc_secret, per_node)
            files = with_racks(files, specs, broker_racks(specs, racks))  # new brokers only: --racks N
            touched = [running[i].spec.label for i in sorted(files) if i in running]
            if touched and not (broker_config or controller_config):  # only the RPC secret's key is new there
                raise LauncherError(f"{', '.join(touched)} already run(s) from a server.properties made before "
                                    f"broker<->controller RPC authentication, and would not read the "
                                    f"controller.rpc.secret.file this start adds: stop the cluster once "
                                    f"(tidelog down --data-dir {root}), then start it again")
            if touched:
                raise LauncherError(f"--broker-config/--controller-config would change the server.properties of "
                                    f"{', '.join(touched)}, which already run and would not read it: stop the "
                                    f"cluster first (tidelog down --data-dir {root}), or leave the option out")
            cluster = cls(root, secrets.cluster_id,
                          [running.get(spec.node_id) or NodeProcess(spec, None) for spec in specs])
            cluster.already_running = tuple(sorted(running))
            cluster._spawn = spawn
            # A killed broker stays registered and unfenced until its session expires, and its new
            # process cannot register before then: ready means the new incarnation is unfenced.
            restarted = {spec.node_id for spec in missing if layout.runs_broker(spec.role)}
            stale = {broker_id: incarnation for broker_id, incarnation in registered_incarnations(
                [n.spec for n in running.values() if layout.runs_controller(n.spec.role)]).items()
                if broker_id in restarted}
            try:
                for spec in missing:
                    spec.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
                    write_node_key(spec, rpc_secret)  # a broker: its own RPC key, not the master (issue 29)
                    if spec.node_id in files:
                        replace_private(spec.properties_path, files[spec.node_id])
                    cluster.nodes[specs.index(spec)] = spawn(spec)
                    cluster.started += (spec.node_id,)
                    cluster.write_cluster_file()  # at once: `down` finds them even if we die now
                cluster.wait_ready(ready_timeout, should_stop, stale_incarnations=stale)
            except BaseException:
                cluster.stop_started()
                raise
            return cluster

    @classmethod
    def attach(cls, root: Path) -> LocalCluster | None:
        """The cluster cluster.json of `root` describes, with its recorded pids; None without one."""
        root = root.resolve()
        document = read_cluster_file(root)
        if document is None:
            return None
        pids = layout.pids_from_document(document)
        nodes = [NodeProcess(spec, pids.get(spec.node_id)) for spec in layout.nodes_from_document(document)]
        return cls(root, str(document.get("cluster_id")), nodes)

    def wait_ready(self, timeout: float = READY_TIMEOUT, should_stop: Callable[[], bool] = lambda: False,
                   probe: Probe = probe_cluster_view,
                   brokers_probe: Callable[[str], Sequence[Mapping[str, Any]]] = probe_brokers,
                   stale_incarnations: Mapping[int, str] | None = None) -> int:
        """Poll every controller's /v1/cluster until they agree on one active controller, then every
        controller's /v1/brokers until each shows every broker registered and unfenced (so whichever
        admin URL a client reads next agrees: a follower applies records a moment after the active
        controller), none in its `stale_incarnations` one; the active controller's id."""
        deadline = time.monotonic() + timeout
        active = self._wait_active(deadline, timeout, should_stop, probe)
        wanted = {n.spec.node_id for n in self.brokers}
        seen: object = None
        while wanted:  # bounded by the deadline
            self._check_alive(should_stop)
            try:
                views = [unfenced_brokers(brokers_probe(n.spec.admin_url), stale_incarnations)
                         for n in self.controllers]
                seen = set.intersection(*views)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                seen = exc
            if isinstance(seen, set) and wanted <= seen:
                break
            if time.monotonic() >= deadline:
                raise LauncherError(f"the brokers {sorted(wanted)} were not all registered and unfenced after "
                                    f"{timeout:.0f} s (last: {seen!r:.200}); see the node logs under {self.root}")
            time.sleep(READY_POLL_INTERVAL)
        return active

    def _check_alive(self, should_stop: Callable[[], bool]) -> None:
        if should_stop():
            raise Interrupted("stopped while the cluster was starting")
        for node in self.nodes:
            if not node.running():
                status = "" if node.exit_status is None else f" with status {node.exit_status}"
                raise LauncherError(f"{node.spec.label} (pid {node.pid}) exited{status} before "
                                    f"the cluster was ready; the end of {node.spec.log_path}:\n"
                                    f"{node.log_tail()}")

    def _wait_active(self, deadline: float, timeout: float, should_stop: Callable[[], bool], probe: Probe) -> int:
        last: dict[int, object] = {}
        while time.monotonic() < deadline:  # bounded by the deadline
            self._check_alive(should_stop)
            views: dict[int, Mapping[str, Any]] = {}
            for node in self.controllers:
                try:
                    views[node.spec.node_id] = probe(node.spec)
                    last[node.spec.node_id] = {k: views[node.spec.node_id].get(k)
                                               for k in ("cluster_id", "active_controller", "is_active",
                                                         "term", "no_active_controller_reason")}
                except (OSError, ValueError) as exc:  # not listening yet
                    last[node.spec.node_id] = exc
            active = agreed_active(views, self.cluster_id) if len(views) == len(self.controllers) else None
            if active is not None:
                self.active_controller = active
                return active
            time.sleep(READY_POLL_INTERVAL)
        seen = "\n".join(f"  {self.node(i).spec.label}: {answer!r:.400}" for i, answer in sorted(last.items()))
        raise LauncherError(f"no active controller that every controller agrees on after {timeout:.0f} s "
                            f"(cluster id {self.cluster_id}); last answers:\n{seen}\n"
                            f"see the node logs under {self.root}")

    def write_cluster_file(self, *, stopped: bool = False) -> None:
        """cluster.json with the pid of every node that runs (None: stopped, or died since)."""
        pids: dict[int, int | None] = {n.spec.node_id: None if stopped or not n.running() else n.pid
                                       for n in self.nodes}
        document = layout.cluster_document(self.cluster_id, self.specs, pids)
        write_atomic(self.root / layout.CLUSTER_FILE, json.dumps(document, indent=2) + "\n")

    def stop(self, timeout: float = STOP_TIMEOUT) -> list[StopReport]:
        """Stop every node (SIGTERM, wait, SIGKILL) and record in cluster.json which still run."""
        reports = stop_nodes(self.nodes, timeout)
        if self.nodes:
            self.write_cluster_file()
        return reports

    def stop_started(self, timeout: float = STOP_TIMEOUT) -> list[StopReport]:
        """Stop the nodes `start` spawned, leaving those it found running (a failed restart of one
        node must not take the rest of the cluster down)."""
        reports = stop_nodes([n for n in self.nodes if n.spec.node_id in self.started], timeout)
        if self.nodes:
            self.write_cluster_file()
        return reports

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()
