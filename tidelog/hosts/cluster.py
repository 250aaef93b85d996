"""A local cluster whose nodes are separate hosts: each node in its own network namespace
(`tidelog.hosts.netns`), on its own 198.18.0.x address with the default ports, and the client
side in one more namespace, "client".

    with NetnsCluster.start(root, controllers=3, brokers=3) as cluster:   # needs root
        with cluster.network.entered(CLIENT_HOST):
            Producer({"bootstrap.servers": cluster.bootstrap_servers})
    # every node stopped and every namespace removed here, even when the body raised

It is `localcluster.launcher.LocalCluster` with two differences: a node is spawned under
`ip netns exec <its namespace>` (which execs: the pid is the node's, so stopping and the
recycled-pid check work unchanged), and readiness is probed from the client namespace, the only
place the nodes' addresses are reachable from. cluster.json gains a `hosts` entry naming the
namespaces; the client commands read it and enter the client namespace (`enter_client_namespace`).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import subprocess
import sys
import time
from secrets import token_urlsafe
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from common.limits import NODE_READ_TIMEOUT, READY_TIMEOUT
from localcluster import cluster_layout as layout
from localcluster.cluster_layout import (
    ADMIN_TOKEN_BYTES,
    LayoutError,
    NodeSpec,
    data_dir_lock,
    load_or_create_secrets,
    replace_private,
    write_atomic,
)
from localcluster import hosted
from localcluster.launcher import LauncherError, LocalCluster
from localcluster.node_process import SOURCE_ROOT, STOP_TIMEOUT, NodeProcess, StopReport
from localcluster.racks import broker_racks, with_racks
from localcluster.server_properties import properties_files
from localcluster.rpc_keys import write_node_key
from security.rpc_secret import load_or_create_secret
from tidelog.admin_client import AdminClient
from tidelog.cli_common import ClusterError
from tidelog.hosts.netns import (
    HOST_NETWORK,
    HostNetwork,
    NetnsError,
    NetworkPlan,
    delete_namespaces,
    enter_namespace_for_good,
)
from tidelog.hosts.partition import HostPartitions

CLIENT_HOST: Final = "client"
ADMIN_TOKEN_FILE: Final = "admin.token"  # the controllers' admin.token (0600): their API is beyond loopback
HOSTS_KEY: Final = hosted.HOSTS_KEY  # cluster.json's entry: the namespaces (NetworkPlan.to_document)
NETNS_KIND: Final = "netns"  # its "kind" (NetworkPlan.to_document)


def load_or_create_admin_token(root: Path) -> str:
    """The admin.token every controller of `root` requires (reads too, beyond loopback), made once."""
    path = root / ADMIN_TOKEN_FILE
    if not path.exists():
        layout.write_private(path, token_urlsafe(ADMIN_TOKEN_BYTES) + "\n")
    return path.read_text(encoding="ascii").strip()


def admin_token(root: Path) -> str | None:
    """The admin token of a netns data dir, None when it has none."""
    try:
        return (root / ADMIN_TOKEN_FILE).read_text(encoding="ascii").strip() or None
    except OSError:
        return None


def host_name(node_id: int) -> str:
    return f"node{node_id}"


def plan_specs(root: Path, plan: NetworkPlan, *, controllers: int, brokers: int,
               combined: bool) -> tuple[NodeSpec, ...]:
    """The loopback plan's nodes, each moved to its host's address (same default ports on every host)."""
    specs = layout.plan(root, controllers=controllers, brokers=brokers, combined=combined)
    return tuple(dataclasses.replace(s, host=plan.host(host_name(s.node_id)).address) for s in specs)


def specs_from_document(document: Mapping[str, Any]) -> tuple[NodeSpec, ...]:
    """The nodes of a netns cluster.json (`layout.nodes_from_document` takes loopback hosts only)."""
    specs = []
    for entry in document.get("nodes", []):
        try:
            broker = layout.runs_broker(entry["role"])
            spec = NodeSpec(int(entry["id"]), str(entry["role"]), str(entry["host"]), int(entry["raft_port"]),
                            int(entry["admin_port"]), Path(entry["data_dir"]),
                            int(entry["kafka_port"]) if broker else 0, int(entry["metrics_port"]) if broker else 0)
        except (KeyError, TypeError, ValueError) as exc:
            raise LayoutError(f"{layout.CLUSTER_FILE}: a malformed node entry {entry!r:.200} ({exc!r})") from None
        if spec.role not in layout.ROLES or not _in_host_network(spec.host):
            raise LayoutError(f"{layout.CLUSTER_FILE}: node {spec.node_id} is not on a {HOST_NETWORK} host")
        specs.append(spec)
    return tuple(specs)


def _in_host_network(host: str) -> bool:
    try:
        return ipaddress.IPv4Address(host) in HOST_NETWORK
    except ValueError:
        return False


def hosts_plan(document: Mapping[str, Any] | None) -> NetworkPlan | None:
    """The namespaces a cluster.json records; None for a loopback cluster."""
    if document is None or HOSTS_KEY not in document:
        return None
    return NetworkPlan.from_document(document[HOSTS_KEY])


def enter_client_namespace(document: Mapping[str, Any] | None) -> bool:
    """Move this thread into the client namespace of a netns cluster.json (a client command, before
    it starts a thread or opens a socket); False for a loopback cluster (nothing to do)."""
    plan = hosts_plan(document)
    if plan is None:
        return False
    enter_namespace_for_good(plan.host(CLIENT_HOST).namespace)
    return True


def _cluster_view(token: str, spec: NodeSpec) -> Mapping[str, Any]:
    """GET /v1/cluster with the token (the launcher's probe sends none, and beyond loopback reads need it)."""
    try:
        return AdminClient([spec.admin_url], token=token, timeout=NODE_READ_TIMEOUT).cluster()
    except ClusterError as exc:  # not answering yet: the probe's callers expect OSError
        raise OSError(str(exc)) from None


def _brokers(token: str, url: str) -> list[dict[str, Any]]:
    try:
        return AdminClient([url], token=token, timeout=NODE_READ_TIMEOUT).brokers()
    except ClusterError as exc:
        raise OSError(str(exc)) from None


class NetnsCluster(LocalCluster):
    """The nodes of one data dir, each in its own namespace; `remove()` also removes the network."""

    def __init__(self, root: Path, cluster_id: str, nodes: list[NodeProcess], network: HostNetwork) -> None:
        super().__init__(root, cluster_id, nodes)
        self.network = network
        self._partitions: HostPartitions | None = None

    @property
    def partitions(self) -> HostPartitions:
        """Partitions between this cluster's hosts (rules inside their namespaces: they go with them)."""
        if self._partitions is None:
            self._partitions = HostPartitions(self.network)
        return self._partitions

    def partition(self, side_a: Sequence[int | str], side_b: Sequence[int | str], *, one_way: bool = False) -> int:
        """Cut the hosts of nodes `side_a` from those of `side_b` (node ids, or host names such as
        CLIENT_HOST); the handle for `self.partitions.heal`."""
        known = {n.spec.node_id for n in self.nodes}

        def hosts(side: Sequence[int | str]) -> list[str]:
            for item in side:
                if isinstance(item, int) and item not in known:
                    raise ValueError(f"no node {item}: nodes are {sorted(known)}")
            return [host_name(item) if isinstance(item, int) else item for item in side]

        return self.partitions.cut(hosts(side_a), hosts(side_b), one_way=one_way)

    def heal_partition(self, handle: int) -> None:
        self.partitions.heal(handle)

    @property
    def admin_token(self) -> str | None:
        """The token the controllers' admin API requires beyond loopback (the chaos engine sends it)."""
        return admin_token(self.root)

    @classmethod
    def start(cls, root: Path, *, controllers: int | None = None, brokers: int | None = None,  # type: ignore[override]
              combined: bool = False, ready_timeout: float = READY_TIMEOUT,
              extra_properties: Mapping[str, str] | None = None, broker_config: Mapping[str, str] | None = None,
              controller_config: Mapping[str, str] | None = None, racks: int = 0,
              should_stop: Callable[[], bool] = lambda: False, **_ignored: object) -> NetnsCluster:
        """Make the network, write the configs, spawn every node in its namespace, wait until ready.
        `racks` N > 0 gives the brokers broker.rack rack-1..rack-N in turn, as `tidelog up --racks`."""
        root = root.resolve()
        with data_dir_lock(root):
            document = read_cluster_file_any(root)
            if document is not None:  # a restart: the same namespaces and addresses, the nodes' own configs
                return cls._restart(root, document, ready_timeout, should_stop)
            controllers = (1 if combined else layout.DEFAULT_CONTROLLERS) if controllers is None else controllers
            brokers = (0 if combined else layout.DEFAULT_BROKERS) if brokers is None else brokers
            ids = range(1, controllers + brokers + 1)
            network = HostNetwork.create([*(host_name(i) for i in ids), CLIENT_HOST])
            try:
                specs = plan_specs(root, network.plan, controllers=controllers, brokers=brokers, combined=combined)
                secrets = load_or_create_secrets(root)
                rpc_secret = root / layout.RPC_SECRET_FILE
                load_or_create_secret(rpc_secret)
                token = load_or_create_admin_token(root)
                # every node: controllers check it, brokers send it (internal topics' creation)
                broker_config = {"admin.token": token, **(broker_config or {})}
                controller_config = {"admin.token": token, **(controller_config or {})}
                files = properties_files(specs, secrets, extra_properties, broker_config, controller_config,
                                         rpc_secret)
                files = with_racks(files, specs, broker_racks(specs, racks))
                cluster = cls(root, secrets.cluster_id, [NodeProcess(s, None) for s in specs], network)
            except BaseException:  # a bad rack count (RackError, a LayoutError) too
                network.remove()
                raise
            for spec in specs:
                spec.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
                write_node_key(spec, rpc_secret)  # a broker: its own RPC key, not the master (issue 29)
                replace_private(spec.properties_path, files[spec.node_id])
            return cluster._spawn_all(token, ready_timeout, should_stop)

    @classmethod
    def _restart(cls, root: Path, document: Mapping[str, Any], ready_timeout: float,
                 should_stop: Callable[[], bool]) -> NetnsCluster:
        plan = hosts_plan(document)
        if plan is None:
            raise LauncherError(f"{root} holds a loopback cluster: leave --hosts netns out to restart it")
        pids = layout.pids_from_document(document)
        nodes = [NodeProcess(spec, pids.get(spec.node_id)) for spec in specs_from_document(document)]
        running = [n.spec.label for n in nodes if n.running()]
        if running:
            raise LauncherError(f"{root}: {', '.join(running)} still run; stop the cluster first "
                                f"(tidelog down --data-dir {root})")
        delete_namespaces(plan.namespaces)  # no node runs in them: leftovers of a run that died
        network = HostNetwork.create([h.name for h in plan.hosts], run_id=plan.run_id)
        cluster = cls(root, str(document.get("cluster_id")), [NodeProcess(n.spec, None) for n in nodes], network)
        token = admin_token(root)
        if token is None:
            network.remove()
            raise LauncherError(f"{root / ADMIN_TOKEN_FILE} is missing: the nodes' admin.token cannot be read back")
        return cluster._spawn_all(token, ready_timeout, should_stop)

    def _spawn_all(self, token: str, ready_timeout: float, should_stop: Callable[[], bool]) -> NetnsCluster:
        """Spawn every node, record it at once, wait until ready; on any failure remove everything."""
        try:
            for index, node in enumerate(self.nodes):
                self.nodes[index] = self.spawn(node.spec)
                self.started += (node.spec.node_id,)
                self.write_cluster_file()  # at once: `down` and the watchdog find them if we die now
            with self.network.entered(CLIENT_HOST):  # the nodes' addresses exist in the namespaces only
                self.wait_ready(ready_timeout, should_stop, probe=lambda spec: _cluster_view(token, spec),
                                brokers_probe=lambda url: _brokers(token, url))
        except BaseException:
            self.remove()
            raise
        return self

    def spawn(self, spec: NodeSpec) -> NodeProcess:
        """The unchanged node command, under `ip netns exec` of its host (which execs it)."""
        command = [sys.executable, "-m", "tidelog", spec.role, "--config", str(spec.properties_path)]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SOURCE_ROOT), env.get("PYTHONPATH")]))
        with open(spec.log_path, "ab") as log:
            log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} tidelog launcher: starting {' '.join(command)} "
                      f"in namespace {self.network.namespace(host_name(spec.node_id))}\n".encode())
            log.flush()
            popen = self.network.popen(host_name(spec.node_id), command, stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=log, cwd=spec.directory, env=env, start_new_session=True)
        return NodeProcess(spec, popen.pid, popen)

    def restart(self, node_id: int) -> NodeProcess:
        """Start a stopped or killed node again in its namespace (tests: after a SIGKILL)."""
        index = next(i for i, n in enumerate(self.nodes) if n.spec.node_id == node_id)
        if self.nodes[index].running():
            raise LauncherError(f"{self.nodes[index].spec.label} runs already")
        self.nodes[index] = self.spawn(self.nodes[index].spec)
        self.write_cluster_file()
        return self.nodes[index]

    @classmethod
    def attach(cls, root: Path) -> NetnsCluster | None:
        """The netns cluster cluster.json of `root` describes; None when there is none or it is a loopback one."""
        root = root.resolve()
        document = read_cluster_file_any(root)
        plan = hosts_plan(document)
        if document is None or plan is None:
            return None
        pids = layout.pids_from_document(document)
        nodes = [NodeProcess(spec, pids.get(spec.node_id)) for spec in specs_from_document(document)]
        return cls(root, str(document.get("cluster_id")), nodes, HostNetwork(plan))

    def write_cluster_file(self, *, stopped: bool = False) -> None:
        pids: dict[int, int | None] = {n.spec.node_id: None if stopped or not n.running() else n.pid
                                       for n in self.nodes}
        document = layout.cluster_document(self.cluster_id, self.specs, pids)
        document[HOSTS_KEY] = self.network.plan.to_document()
        write_atomic(self.root / layout.CLUSTER_FILE, json.dumps(document, indent=2) + "\n")

    def remove(self, timeout: float = STOP_TIMEOUT) -> list[StopReport]:
        """Stop every node, then remove every namespace (the network goes even if a node did not die:
        `ip netns del` detaches it, and the kernel frees it with its last process)."""
        try:
            return self.stop(timeout)
        finally:
            self.network.remove()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.remove()


def read_cluster_file_any(root: Path) -> dict[str, Any] | None:
    """cluster.json of `root` as JSON, loopback or netns (`layout.read_cluster_file` refuses netns hosts)."""
    try:
        document = json.loads((root / layout.CLUSTER_FILE).read_text())
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise LayoutError(f"{root / layout.CLUSTER_FILE} is not JSON ({exc}); fix or remove it") from None
    return document if isinstance(document, dict) else None


def remove_recorded(root: Path) -> list[str]:
    """SIGKILL every node a netns cluster.json names and remove its namespaces (the watchdog, and
    `tidelog down` after its clean stop); the errors, one line each."""
    cluster = NetnsCluster.attach(root)
    if cluster is None:
        return []
    for node in cluster.nodes:
        node.kill()
    try:
        return delete_namespaces(cluster.network.plan.namespaces)
    except NetnsError as exc:
        return [str(exc)]


hosted.register(NETNS_KIND, NetnsCluster.attach)  # the chaos runner's --cluster-dir reaches it (localcluster.hosted)
