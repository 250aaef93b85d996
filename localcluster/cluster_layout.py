"""The shape of a local cluster: which node runs where, its files, cluster.json (a node's
server.properties text is `localcluster.server_properties`'s).

Planning and rendering are pure; the section at the end reads and writes the data dir's
files (never a process or a socket: `localcluster.launcher` owns those). Node ids 1..C are
the controllers and C+1..C+B the brokers, each node on its own loopback address
127.0.0.<id>, so chaos can cut the link between two nodes. With `combined`, nodes 1..C are
combined nodes (`process.roles=broker,controller`, Kafka's combined mode): one process
each, with the ports of both roles.

    <data-dir>/cluster.json              what runs where (rewritten by every up and down)
    <data-dir>/meta.properties           cluster.id, generated on first start
    <data-dir>/quorum.password           the Raft password, mode 0600, generated on first start
    <data-dir>/controller-<id>/          server.properties (0600: it holds the password),
                                         node.log, metadata/ (the quorum's journal and dump)
    <data-dir>/broker-<id>/              server.properties, node.log, data/ (log.dirs)
    <data-dir>/combined-<id>/            both: metadata/ and data/
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import re
import secrets as random_secrets
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from common.config import KAFKA_PORT
from common.table import render

DEFAULT_CONTROLLERS: Final = 3
DEFAULT_BROKERS: Final = 3
DEFAULT_RAFT_PORT: Final = 9093  # Kafka's controller port
DEFAULT_ADMIN_PORT: Final = 9080
DEFAULT_KAFKA_PORT: Final = KAFKA_PORT  # the port of Kafka's default listener
DEFAULT_METRICS_PORT: Final = 9081  # a broker's GET /metrics
MAX_NODES: Final = 254  # one loopback address 127.0.0.N each
MAX_CONTROLLERS: Final = 9  # a Raft quorum larger than this only slows commits down
LOOPBACK_NETWORK: Final = "127.0.0."
CONTROLLER: Final = "controller"
BROKER: Final = "broker"
COMBINED: Final = "combined"  # process.roles=broker,controller in one process
ROLES: Final = (CONTROLLER, BROKER, COMBINED)
BROKER_DATA_DIR: Final = "data"
COMBINED_METADATA_DIR: Final = "metadata"

CLUSTER_FILE: Final = "cluster.json"
META_FILE: Final = "meta.properties"
PASSWORD_FILE: Final = "quorum.password"
RPC_SECRET_FILE: Final = "rpc.secret"  # controller.rpc.secret.file of every node (security.rpc_auth)
LOCK_FILE: Final = ".tidelog-up.lock"
PROPERTIES_FILE: Final = "server.properties"
NODE_LOG_FILE: Final = "node.log"
CLUSTER_FILE_VERSION: Final = 1
PASSWORD_BYTES: Final = 32  # random bytes of the quorum password (url-safe base64)
ADMIN_TOKEN_BYTES: Final = 32  # random bytes of an admin token made for a cluster beyond loopback

_CLUSTER_ID = re.compile(r"[A-Za-z0-9_-]{22}")  # Kafka's: 16 random bytes, url-safe base64


class LayoutError(RuntimeError):
    """A request or a data dir that does not describe a cluster `tidelog up` can run; says what to do."""


def runs_controller(role: str) -> bool:
    """A quorum voter with the admin API: a controller or a combined node."""
    return role in (CONTROLLER, COMBINED)


def runs_broker(role: str) -> bool:
    """A Kafka listener: a broker or a combined node."""
    return role in (BROKER, COMBINED)


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node of the local cluster: where it listens and where it keeps its files."""

    node_id: int
    role: str
    host: str
    raft_port: int
    admin_port: int
    directory: Path
    kafka_port: int = 0  # brokers and combined nodes only (a controller has none)
    metrics_port: int = 0  # brokers and combined nodes only

    @property
    def ports(self) -> tuple[tuple[str, int], ...]:
        """(what, port) of every address this node binds on its host."""
        ports: tuple[tuple[str, int], ...] = ()
        if runs_controller(self.role):
            ports += (("raft", self.raft_port), ("admin API", self.admin_port))
        if runs_broker(self.role):
            ports += (("Kafka listener", self.kafka_port), ("metrics", self.metrics_port))
        return ports

    @property
    def bootstrap_address(self) -> str:
        return f"{self.host}:{self.kafka_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"

    @property
    def properties_path(self) -> Path:
        return self.directory / PROPERTIES_FILE

    @property
    def log_path(self) -> Path:
        return self.directory / NODE_LOG_FILE

    @property
    def quorum_address(self) -> str:
        return f"{self.host}:{self.raft_port}"

    @property
    def admin_address(self) -> str:
        return f"{self.host}:{self.admin_port}"

    @property
    def admin_url(self) -> str:
        return f"http://{self.admin_address}"

    @property
    def label(self) -> str:
        return f"{self.role} {self.node_id}"


@dataclass(frozen=True, slots=True)
class ClusterSecrets:
    """The cluster id and the Raft password every controller shares; repr hides the password."""

    cluster_id: str
    password: str

    def __post_init__(self) -> None:
        if not _CLUSTER_ID.fullmatch(self.cluster_id):
            raise LayoutError(f"cluster id {self.cluster_id!r} is not 22 url-safe base64 characters")
        if len(self.password) < 16:
            raise LayoutError("the quorum password is shorter than 16 characters")

    def __repr__(self) -> str:
        return f"ClusterSecrets(cluster_id={self.cluster_id!r}, password=[hidden])"


def _check_port(name: str, port: int) -> None:
    if not 0 < port <= 65535:
        raise LayoutError(f"{name} must be a TCP port (1-65535), got {port}")


def plan(root: Path, *, controllers: int = DEFAULT_CONTROLLERS, raft_port: int = DEFAULT_RAFT_PORT,
         admin_port: int = DEFAULT_ADMIN_PORT, brokers: int = 0, kafka_port: int = DEFAULT_KAFKA_PORT,
         metrics_port: int = DEFAULT_METRICS_PORT, combined: bool = False) -> tuple[NodeSpec, ...]:
    """Controllers 1..C on 127.0.0.1..C (combined nodes with `combined`), then brokers C+1..C+B on
    the next addresses; every node of a role has the same ports on its own address."""
    if not 1 <= controllers <= MAX_CONTROLLERS:
        raise LayoutError(f"--controllers must be between 1 and {MAX_CONTROLLERS}, got {controllers}")
    _check_port("the raft port", raft_port)
    _check_port("the admin port", admin_port)
    if raft_port == admin_port:
        raise LayoutError(f"the raft and admin ports must differ, both are {raft_port}")
    if brokers < 0 or controllers + brokers > MAX_NODES:
        raise LayoutError(f"--brokers must be between 0 and {MAX_NODES - controllers}, got {brokers}")
    if brokers or combined:
        _check_port("the Kafka port", kafka_port)
        _check_port("the metrics port", metrics_port)
        if kafka_port == metrics_port:
            raise LayoutError(f"the Kafka and metrics ports must differ, both are {kafka_port}")
    if combined and {kafka_port, metrics_port} & {raft_port, admin_port}:
        raise LayoutError(f"a combined node binds all four ports on one address: the raft ({raft_port}), "
                          f"admin ({admin_port}), Kafka ({kafka_port}) and metrics ({metrics_port}) ports "
                          "must all differ")
    role = COMBINED if combined else CONTROLLER
    nodes = [NodeSpec(i, role, f"{LOOPBACK_NETWORK}{i}", raft_port, admin_port, root / f"{role}-{i}",
                      kafka_port if combined else 0, metrics_port if combined else 0)
             for i in range(1, controllers + 1)]
    nodes += [NodeSpec(i, BROKER, f"{LOOPBACK_NETWORK}{i}", 0, 0, root / f"{BROKER}-{i}", kafka_port, metrics_port)
              for i in range(controllers + 1, controllers + brokers + 1)]
    return tuple(nodes)


def meta_properties(cluster_id: str) -> str:
    return f"# Written by `tidelog up` on first start.\nversion=1\ncluster.id={cluster_id}\n"


def cluster_id_from_meta(text: str) -> str:
    """The cluster.id line of meta.properties (written by `meta_properties`)."""
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "cluster.id":
            return value.strip()
    raise LayoutError(f"{META_FILE} has no cluster.id line")


def cluster_document(cluster_id: str, nodes: Sequence[NodeSpec],
                     pids: Mapping[int, int | None]) -> dict[str, Any]:
    """cluster.json: the cluster id, the bootstrap servers and admin URL, and every node."""
    controllers = [n for n in nodes if runs_controller(n.role)]
    return {
        "version": CLUSTER_FILE_VERSION,
        "cluster_id": cluster_id,
        "bootstrap_servers": bootstrap_servers(nodes),
        "admin_url": controllers[0].admin_url,
        "nodes": [_node_entry(n, pids.get(n.node_id)) for n in nodes],
    }


def bootstrap_servers(nodes: Sequence[NodeSpec]) -> str | None:
    """host:port of every broker, comma-separated (Kafka's bootstrap.servers); None without brokers."""
    return ",".join(n.bootstrap_address for n in nodes if runs_broker(n.role)) or None


def _node_entry(n: NodeSpec, pid: int | None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": n.node_id, "role": n.role, "host": n.host, "raft_port": n.raft_port,
        "admin_port": n.admin_port, "admin_url": n.admin_url, "pid": pid,
        "data_dir": str(n.directory), "config_file": str(n.properties_path),
        "log_file": str(n.log_path),
    }
    if n.role == BROKER:
        del entry["admin_url"]
    if runs_broker(n.role):
        entry.update(kafka_port=n.kafka_port, metrics_port=n.metrics_port,
                     bootstrap=n.bootstrap_address, metrics_url=n.metrics_url)
    return entry


def nodes_from_document(document: object) -> tuple[NodeSpec, ...]:
    """The nodes a cluster.json describes; LayoutError naming what is wrong with it."""
    if not isinstance(document, dict) or document.get("version") != CLUSTER_FILE_VERSION:
        raise LayoutError(f"{CLUSTER_FILE} is not a version {CLUSTER_FILE_VERSION} cluster file")
    entries = document.get("nodes")
    if not isinstance(entries, list) or not entries:
        raise LayoutError(f"{CLUSTER_FILE} lists no nodes")
    nodes = []
    for entry in entries:
        try:
            broker = runs_broker(entry["role"])
            node = NodeSpec(int(entry["id"]), str(entry["role"]), str(entry["host"]),
                            int(entry["raft_port"]), int(entry["admin_port"]), Path(entry["data_dir"]),
                            int(entry["kafka_port"]) if broker else 0, int(entry["metrics_port"]) if broker else 0)
        except (KeyError, TypeError, ValueError) as exc:
            raise LayoutError(f"{CLUSTER_FILE}: a malformed node entry {entry!r:.200} ({exc!r})") from None
        if node.role not in ROLES or not node.host.startswith(LOOPBACK_NETWORK):
            raise LayoutError(f"{CLUSTER_FILE}: node {node.node_id} is not a loopback controller or broker "
                              "(or combined node)")
        nodes.append(node)
    return tuple(nodes)


def pids_from_document(document: Mapping[str, Any]) -> dict[int, int]:
    """node id -> pid recorded at the last start (nodes recorded as stopped are left out)."""
    return {int(e["id"]): int(e["pid"]) for e in document["nodes"] if isinstance(e.get("pid"), int)}


def node_table(nodes: Sequence[NodeSpec], pids: Mapping[int, int | None], *,
               active: int | None = None) -> list[str]:
    """A small aligned table of the nodes, for people (a KAFKA column once any node runs a broker)."""
    kafka = any(runs_broker(n.role) for n in nodes)
    header = ("NODE", "ROLE", "HOST", "RAFT", "ADMIN", *(("KAFKA",) if kafka else ()), "PID", "LOG")
    rows = []
    for n in nodes:
        role = f"{n.role} (active)" if n.node_id == active else n.role
        controller = runs_controller(n.role)
        listener = (f"PLAINTEXT://{n.bootstrap_address}" if runs_broker(n.role) else None,) if kafka else ()
        rows.append((n.node_id, role, n.host, n.raft_port if controller else None,
                     n.admin_url if controller else None, *listener, pids.get(n.node_id), n.log_path))
    return render(header, rows)


# --- the data dir's files: secrets, cluster.json, the lock (I/O from here on) -------------


def load_or_create_secrets(root: Path) -> ClusterSecrets:
    """The cluster id and Raft password of `root`, generated (password file 0600) on first start."""
    meta, password_file = root / META_FILE, root / PASSWORD_FILE
    if meta.exists() != password_file.exists() and not (root / CLUSTER_FILE).exists():
        # a first start cut short between the two writes: nothing ever used these secrets
        meta.unlink(missing_ok=True)
        password_file.unlink(missing_ok=True)
    if meta.exists() != password_file.exists():
        present, missing = (meta, password_file) if meta.exists() else (password_file, meta)
        raise LayoutError(f"{present} exists but {missing} does not: restore it from a backup, "
                          "or start a new cluster in an empty --data-dir")
    if not meta.exists():
        cluster_id = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        password = random_secrets.token_urlsafe(PASSWORD_BYTES)
        write_private(password_file, password + "\n")
        write_atomic(meta, meta_properties(cluster_id))
    if os.stat(password_file).st_mode & 0o077:
        print(f"warning: {password_file} was readable by others; setting its mode to 0600", file=sys.stderr)
        os.chmod(password_file, 0o600)
    return ClusterSecrets(cluster_id_from_meta(meta.read_text()), password_file.read_text().strip())


def write_private(path: Path, text: str) -> None:
    """Create `path` readable by its owner only; it must not exist yet."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)


def replace_private(path: Path, text: str) -> None:
    """Write `path` (new or not) readable by its owner only, all at once: a crash leaves the old file."""
    scratch = path.with_name(path.name + ".tmp")
    scratch.unlink(missing_ok=True)
    write_private(scratch, text)
    os.replace(scratch, path)


def write_atomic(path: Path, text: str) -> None:
    scratch = path.with_name(path.name + ".tmp")
    scratch.write_text(text, encoding="utf-8")
    os.replace(scratch, path)


def read_cluster_file(root: Path) -> dict[str, Any] | None:
    """cluster.json of `root`, or None when no cluster was ever started there."""
    path = root / CLUSTER_FILE
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise LayoutError(f"{path} is not JSON ({exc}); fix or remove it") from None
    nodes_from_document(document)  # refuses a malformed file now, not half-way through a start
    assert isinstance(document, dict), "nodes_from_document refuses anything else"
    return document


@contextmanager
def data_dir_lock(root: Path) -> Iterator[None]:
    """Held while one `up` or `down` changes `root`, so two never start the same cluster twice."""
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(root / LOCK_FILE, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LayoutError(f"another `tidelog up` or `down` is working on {root} right now") from None
        yield


def resolve_layout(root: Path, *, controllers: int | None, raft_port: int | None,
                   admin_port: int | None, brokers: int | None = None, kafka_port: int | None = None,
                   metrics_port: int | None = None, combined: bool | None = None) -> tuple[NodeSpec, ...]:
    """The nodes of `root`: those of its cluster.json, or a new plan; a conflicting request is an error.

    A first start without `brokers` plans none (the launcher's callers ask; `tidelog up` asks 3).
    `combined` None: as stored (a first start: not combined).
    """
    document = read_cluster_file(root)
    if document is None:
        return plan(root, controllers=DEFAULT_CONTROLLERS if controllers is None else controllers,
                    raft_port=DEFAULT_RAFT_PORT if raft_port is None else raft_port,
                    admin_port=DEFAULT_ADMIN_PORT if admin_port is None else admin_port,
                    brokers=brokers or 0, kafka_port=DEFAULT_KAFKA_PORT if kafka_port is None else kafka_port,
                    metrics_port=DEFAULT_METRICS_PORT if metrics_port is None else metrics_port,
                    combined=bool(combined))
    specs = nodes_from_document(document)
    voters = [s for s in specs if runs_controller(s.role)]
    stored_brokers = [s for s in specs if s.role == BROKER]
    listeners = [s for s in specs if runs_broker(s.role)]
    stored_combined = voters[0].role == COMBINED
    if combined is not None and combined != stored_combined:
        shape, flag = ("combined nodes", "in") if stored_combined else ("separate controllers", "out")
        raise LayoutError(f"{root} holds an existing cluster of {shape}; leave --combined {flag} to "
                          "restart it, or use a new --data-dir.")
    stored: dict[str, int | None] = {
        "--controllers": len(voters), "--raft-port": voters[0].raft_port, "--admin-port": voters[0].admin_port,
        "--brokers": len(stored_brokers)}
    asked = {"--controllers": controllers, "--raft-port": raft_port, "--admin-port": admin_port,
             "--brokers": brokers}
    if listeners:
        stored.update({"--kafka-port": listeners[0].kafka_port, "--metrics-port": listeners[0].metrics_port})
        asked.update({"--kafka-port": kafka_port, "--metrics-port": metrics_port})
    conflicts = [f"{flag} {asked[flag]} (it has {value})" for flag, value in stored.items()
                 if asked[flag] is not None and asked[flag] != value]
    if conflicts:
        raise LayoutError(f"{root} holds an existing cluster that cannot change shape: "
                          f"{', '.join(conflicts)}. Leave these options out to restart it as it was, "
                          "or use a new --data-dir.")
    if any(spec.directory.parent != root for spec in specs):
        raise LayoutError(f"{root / CLUSTER_FILE} names node directories outside {root}")
    return specs
