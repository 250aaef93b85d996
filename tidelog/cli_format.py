"""`tidelog format`: one node's config and storage for a machine of its own (Kafka's
`kafka-storage.sh format`, plus the server.properties `tidelog up` would write).

    # the first node makes the cluster's secrets (cluster id, quorum password, RPC secret, admin token)
    tidelog format --dir /var/lib/tidelog --node-id 1 --roles broker,controller --host 10.0.0.1 \\
        --controllers 1@10.0.0.1,2@10.0.0.2,3@10.0.0.3
    # every other node copies them: /var/lib/tidelog/cluster.secrets of the first, copied over (0600)
    tidelog format --dir /var/lib/tidelog --node-id 2 ... --secrets ./cluster.secrets
    tidelog combined --config /var/lib/tidelog/server.properties

The node binds its listeners on --listen-host (default: --host) and advertises --host, which
must be an address its peers reach it at. The result is checked as the node will parse it
before anything is written, and a directory formatted already is refused (Kafka's
--ignore-formatted makes that a no-op instead).

Planning is pure (`FormatRequest` -> the files' texts); `run` reads and writes them.
"""

from __future__ import annotations

import argparse
import base64
import ipaddress
import os
import re
import secrets as random_secrets
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from common.config import parse_config
from common.config_schema import ConfigError
from common.properties import parse_properties, properties_line
from localcluster.cluster_layout import (
    ADMIN_TOKEN_BYTES,
    DEFAULT_ADMIN_PORT,
    DEFAULT_KAFKA_PORT,
    DEFAULT_METRICS_PORT,
    DEFAULT_RAFT_PORT,
    MAX_CONTROLLERS,
    PASSWORD_BYTES,
    write_private,
)
from security.rpc_auth import MIN_SECRET_BYTES, SECRET_FILE_KEY
from security.rpc_secret import broker_key_text

SECRETS_FILE: Final = "cluster.secrets"  # what the first node makes and the others copy
RPC_SECRET_FILE: Final = "rpc.secret"
PROPERTIES_FILE: Final = "server.properties"
META_FILE: Final = "meta.properties"
METADATA_DIR: Final = "metadata"
DATA_DIR: Final = "data"
ROLES: Final = {"broker": "broker", "controller": "controller", "broker,controller": "broker,controller",
                "controller,broker": "broker,controller"}
SECRET_KEYS: Final = ("cluster.id", "controller.cluster.password", "admin.token", "rpc.secret")
_HOST = re.compile(r"[A-Za-z0-9.-]{1,253}")
_VOTER = re.compile(r"(?P<id>[0-9]{1,9})@(?P<host>[^:@,\s]+)")


class FormatError(ValueError):
    """A request `tidelog format` refuses; the message names the option."""


@dataclass(frozen=True, slots=True)
class ClusterSecretsBundle:
    cluster_id: str
    password: str
    admin_token: str
    rpc_secret_hex: str

    def __repr__(self) -> str:
        return f"ClusterSecretsBundle(cluster_id={self.cluster_id!r}, [secrets hidden])"

    def to_text(self) -> str:
        values = (self.cluster_id, self.password, self.admin_token, self.rpc_secret_hex)
        lines = ["# The cluster's secrets, made by `tidelog format` on its first node. Copy this file",
                 "# (mode 0600) to every other node and pass it with --secrets; keep it private."]
        return "\n".join([*lines, *(properties_line(k, v) for k, v in zip(SECRET_KEYS, values))]) + "\n"

    @classmethod
    def from_text(cls, text: str, source: str) -> ClusterSecretsBundle:
        entries = parse_properties(text, source)
        missing = [k for k in SECRET_KEYS if not entries.get(k)]
        if missing:
            raise FormatError(f"--secrets {source} lacks {', '.join(missing)}: copy the first node's {SECRETS_FILE}")
        return cls(*(entries[k] for k in SECRET_KEYS))


def new_secrets() -> ClusterSecretsBundle:
    return ClusterSecretsBundle(base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("="),
                                random_secrets.token_urlsafe(PASSWORD_BYTES),
                                random_secrets.token_urlsafe(ADMIN_TOKEN_BYTES),
                                random_secrets.token_hex(MIN_SECRET_BYTES))


@dataclass(frozen=True, slots=True)
class FormatRequest:
    directory: Path
    node_id: int
    roles: str  # "broker", "controller" or "broker,controller"
    host: str  # advertised: where peers and clients reach this node
    listen_host: str  # bound
    controllers: tuple[tuple[int, str], ...]  # (id, host) of every quorum voter
    raft_port: int = DEFAULT_RAFT_PORT
    admin_port: int = DEFAULT_ADMIN_PORT
    kafka_port: int = DEFAULT_KAFKA_PORT
    metrics_port: int = DEFAULT_METRICS_PORT

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles


def parse_controllers(text: str) -> tuple[tuple[int, str], ...]:
    """--controllers `1@10.0.0.1,2@10.0.0.2,...` (ports are --raft-port / --admin-port on every one)."""
    voters = []
    for part in text.split(","):
        match = _VOTER.fullmatch(part.strip())
        if match is None:
            raise FormatError(f"--controllers: {part.strip()!r} is not ID@HOST (e.g. 1@10.0.0.1)")
        voters.append((int(match["id"]), match["host"]))
    ids = [i for i, _ in voters]
    if len(set(ids)) != len(ids):
        raise FormatError(f"--controllers names a node id twice: {text}")
    hosts = [h for _, h in voters]
    if len(set(hosts)) != len(hosts):
        raise FormatError(f"--controllers names a host twice (one controller per host with these ports): {text}")
    if not 1 <= len(voters) <= MAX_CONTROLLERS:
        raise FormatError(f"--controllers names {len(voters)} controllers; 1 to {MAX_CONTROLLERS}")
    return tuple(sorted(voters))


def check_request(request: FormatRequest) -> None:
    """FormatError naming the option when the request cannot make a node that joins its cluster."""
    for option, host in (("--host", request.host), ("--listen-host", request.listen_host)):
        if not _HOST.fullmatch(host):
            raise FormatError(f"{option} {host!r} is not a host name or IPv4 address")
    if request.host in ("0.0.0.0", "::"):
        raise FormatError("--host is what peers and clients connect to: a wildcard address cannot be advertised; "
                          "bind it with --listen-host 0.0.0.0 and give this machine's address as --host")
    # a host name is resolved by the peers; a loopback address is reachable from this machine only
    if _is_ip(request.host) and ipaddress.ip_address(request.host).is_loopback and any(
            not ipaddress.ip_address(h).is_loopback for _, h in request.controllers if _is_ip(h)):
        raise FormatError(f"--host {request.host} is a loopback address, which the other machines cannot "
                          "reach: advertise this machine's own address")
    voters = dict(request.controllers)
    if request.is_controller:
        if request.node_id not in voters:
            raise FormatError(f"--node-id {request.node_id} runs a controller but is not in --controllers "
                              f"({', '.join(f'{i}@{h}' for i, h in request.controllers)})")
        if voters[request.node_id] != request.host:
            raise FormatError(f"--controllers says node {request.node_id} is at {voters[request.node_id]}, but "
                              f"--host is {request.host}: every node's --controllers must be the same list")
    elif request.node_id in voters:
        raise FormatError(f"--node-id {request.node_id} is a controller in --controllers, but --roles is broker: "
                          "a broker needs a node id no controller has")
    ports = [request.raft_port, request.admin_port] if request.is_controller else []
    ports += [request.kafka_port, request.metrics_port] if request.is_broker else []
    if len(set(ports)) != len(ports) or not all(0 < p <= 65535 for p in ports):
        raise FormatError(f"the ports this node binds must be distinct TCP ports, got {ports}")


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def node_properties(request: FormatRequest, secrets: ClusterSecretsBundle) -> str:
    """server.properties of the node (pure)."""
    d = request.directory
    entries: dict[str, str] = {"node.id": str(request.node_id), "process.roles": request.roles,
                               "cluster.id": secrets.cluster_id,
                               "controller.api.voters": ",".join(f"{i}@{h}:{request.admin_port}"
                                                                 for i, h in request.controllers)}
    if request.is_controller:
        entries.update({
            "controller.quorum.voters": ",".join(f"{i}@{h}:{request.raft_port}" for i, h in request.controllers),
            "controller.listener": f"{request.host}:{request.admin_port}",
            "controller.cluster.password": secrets.password,
            "metadata.log.dir": str(d / METADATA_DIR)})
    if request.is_broker:
        entries.update({
            "listeners": f"PLAINTEXT://{request.listen_host}:{request.kafka_port}",
            "advertised.listeners": f"PLAINTEXT://{request.host}:{request.kafka_port}",
            "log.dirs": str(d / DATA_DIR),
            "metrics.listener": f"{request.listen_host}:{request.metrics_port}"})
    entries.update({"admin.token": secrets.admin_token, SECRET_FILE_KEY: str(d / RPC_SECRET_FILE)})
    lines = [f"# Written by `tidelog format` for node {request.node_id} ({request.roles}); edit freely.",
             "# It holds the quorum password and the admin token: keep it private (mode 0600)."]
    return "\n".join([*lines, *(properties_line(k, v) for k, v in entries.items())]) + "\n"


def meta_properties(request: FormatRequest, secrets: ClusterSecretsBundle) -> str:
    return (f"# Written by `tidelog format` (as kafka-storage.sh format does).\nversion=1\n"
            f"cluster.id={secrets.cluster_id}\nnode.id={request.node_id}\n")


def rpc_file_text(request: FormatRequest, secrets: ClusterSecretsBundle) -> str:
    """A controller's (or combined node's) rpc.secret holds the master; a broker's only its own key,
    so it cannot sign for another broker (issue 29, security.rpc_auth)."""
    if request.is_controller:
        return secrets.rpc_secret_hex + "\n"
    return broker_key_text(bytes.fromhex(secrets.rpc_secret_hex), request.node_id)


def format_files(request: FormatRequest, secrets: ClusterSecretsBundle, *, first: bool) -> dict[str, str]:
    """File name (in the node's directory) -> text; checked as the node will parse its config."""
    check_request(request)
    text = node_properties(request, secrets)
    try:
        parse_config(parse_properties(text, PROPERTIES_FILE))
    except ConfigError as exc:
        raise FormatError(f"the config this would write is refused: {exc}") from None
    files = {PROPERTIES_FILE: text, META_FILE: meta_properties(request, secrets),
             RPC_SECRET_FILE: rpc_file_text(request, secrets)}
    if first:
        files[SECRETS_FILE] = secrets.to_text()
    return files


# --- the command ---------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", type=Path, required=True, help="the node's directory: config, metadata/, data/")
    parser.add_argument("--node-id", type=int, required=True, help="node.id, unique in the cluster")
    parser.add_argument("--roles", choices=sorted(ROLES), required=True, help="process.roles")
    parser.add_argument("--host", required=True, help="this machine's address that peers and clients reach")
    parser.add_argument("--listen-host", help="the address to bind (default: --host; 0.0.0.0 for all)")
    parser.add_argument("--controllers", required=True, metavar="ID@HOST,...",
                        help="every controller (quorum voter), the same list on every node")
    parser.add_argument("--secrets", type=Path, help=f"the first node's {SECRETS_FILE}; without it, this is the "
                                                     "first node and makes new ones")
    parser.add_argument("--raft-port", type=int, default=DEFAULT_RAFT_PORT)
    parser.add_argument("--admin-port", type=int, default=DEFAULT_ADMIN_PORT)
    parser.add_argument("--kafka-port", type=int, default=DEFAULT_KAFKA_PORT)
    parser.add_argument("--metrics-port", type=int, default=DEFAULT_METRICS_PORT)
    parser.add_argument("--ignore-formatted", action="store_true",
                        help="a directory formatted already is left as it is, exit 0 (Kafka's option)")
    parser.set_defaults(run=run)


def request_from_args(args: argparse.Namespace) -> FormatRequest:
    return FormatRequest(args.dir.resolve(), args.node_id, ROLES[args.roles], args.host,
                         args.listen_host or args.host, parse_controllers(args.controllers),
                         args.raft_port, args.admin_port, args.kafka_port, args.metrics_port)


def run(args: argparse.Namespace) -> int:
    try:
        request = request_from_args(args)
        if (request.directory / META_FILE).exists():
            if args.ignore_formatted:
                print(f"{request.directory} is formatted already: left as it is")
                return 0
            raise FormatError(f"{request.directory} is formatted already ({META_FILE} exists); "
                              "--ignore-formatted to leave it, or format an empty --dir")
        first = args.secrets is None
        if first:
            secrets = new_secrets()
        else:
            try:
                secrets = ClusterSecretsBundle.from_text(args.secrets.read_text(encoding="utf-8"), str(args.secrets))
            except OSError as exc:
                raise FormatError(f"--secrets: cannot read {args.secrets}: {exc.strerror}") from None
        files = format_files(request, secrets, first=first)
    except FormatError as exc:
        print(f"tidelog format: {exc}", file=sys.stderr)
        return 2
    request.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    for sub in ([METADATA_DIR] if request.is_controller else []) + ([DATA_DIR] if request.is_broker else []):
        (request.directory / sub).mkdir(mode=0o700, exist_ok=True)
    for name, text in sorted(files.items(), key=lambda item: item[0] == META_FILE):  # meta.properties last
        write_private(request.directory / name, text)
    print(f"Formatted {request.directory} for node {request.node_id} ({request.roles}) of cluster "
          f"{secrets.cluster_id}; start it with: tidelog {_command(request.roles)} --config "
          f"{request.directory / PROPERTIES_FILE}")
    if first:
        print(f"Copy {request.directory / SECRETS_FILE} to every other node and format it with --secrets")
    return 0


def _command(roles: str) -> str:
    return "combined" if roles == "broker,controller" else roles
