"""What the client commands (`status`, `topics`, `produce`, `consume`) share: how they find the
cluster, and how their outcomes become exit codes scripts can trust.

    tidelog topics list                                  # ./tidelog-data/cluster.json
    tidelog topics list --data-dir /srv/tidelog-data
    tidelog topics list --admin-url http://127.0.0.1:9080,http://127.0.0.2:9080
    tidelog produce demo --bootstrap-server 127.0.0.4:9092

Exit codes: 0 ok; 1 the cluster answered with an error (printed with Kafka's error name,
e.g. `Error: TOPIC_ALREADY_EXISTS: ...`) or could not be reached; 2 usage (argparse's own
code: a bad option, a malformed value, a cluster that cannot be found from the options).

Finding the cluster is pure (`endpoints`: options and an already read cluster.json in, the
addresses out); `resolve` reads the file.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import ssl
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any, Final

from common.client_security import ClientSecurity, SaslRefused
from common.config_schema import ConfigError
from security.controller_tls_context import client_context
from security.sasl_client import ClientSecurityError, client_security, read_client_properties

DEFAULT_DATA_DIR: Final = Path("tidelog-data")
CLUSTER_FILE: Final = "cluster.json"
TOKEN_ENV: Final = "TIDELOG_ADMIN_TOKEN"


class ExitCode(IntEnum):
    OK = 0
    ERROR = 1  # the cluster refused, failed or could not be reached
    USAGE = 2  # argparse's own code for bad options


class UsageError(Exception):
    """Options that cannot work together or a cluster that cannot be found from them (exit 2)."""


class ClusterError(Exception):
    """The cluster answered with an error, or did not answer (exit 1); `error` is Kafka's name."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(f"{error}: {message}")
        self.error, self.message = error, message


@dataclass(frozen=True, slots=True)
class Endpoints:
    """Where a client command talks to: every controller's admin URL, every bootstrap broker."""

    admin_urls: tuple[str, ...]
    bootstrap_servers: tuple[tuple[str, int], ...]
    source: str  # for messages: where these came from
    cluster_document: Mapping[str, Any] | None = None  # cluster.json, when read
    security: ClientSecurity | None = None  # --command-config's TLS / SASL for the Kafka listener
    admin_tls: ssl.SSLContext | None = None  # --admin-ca: the https admin API's CA (issue 29)


def positive_int(text: str) -> int:
    """argparse type: an integer above 0."""
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer of 0 or more."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def add_reset_offsets_options(reset: argparse.ArgumentParser, execute_help: str) -> Any:
    """kafka-consumer-groups.sh's and kafka-share-groups.sh's common reset-offsets options: the
    group, the topic, --to-earliest|--to-latest|--to-offset and --dry-run|--execute; returns the
    targets' exclusive group, for a command that takes more targets."""
    add_cluster_options(reset, admin=False)
    reset.add_argument("--group", required=True)
    reset.add_argument("--topic", required=True, help="TOPIC or TOPIC:P1,P2 (only these partitions)")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=non_negative_int)
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the plan only (the default)")
    mode.add_argument("--execute", action="store_true", help=execute_help)
    return to


def parse_host_port(text: str, option: str) -> tuple[str, int]:
    """`host:port` ([v6]:port too); UsageError naming the option otherwise."""
    host, colon, port = text.strip().rpartition(":")
    host = host.strip("[]")
    if not colon or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise UsageError(f"{option}: {text!r} is not host:port")
    return host, int(port)


def parse_bootstrap_servers(text: str, option: str = "--bootstrap-server") -> tuple[tuple[str, int], ...]:
    """Kafka's comma-separated bootstrap.servers."""
    items = [item for item in text.split(",") if item.strip()]
    if not items:
        raise UsageError(f"{option}: give at least one host:port")
    return tuple(parse_host_port(item, option) for item in items)


def format_bootstrap_servers(servers: Sequence[tuple[str, int]]) -> str:
    """Kafka's bootstrap.servers text of parsed servers (an IPv6 host in brackets)."""
    return ",".join(f"[{host}]:{port}" if ":" in host else f"{host}:{port}" for host, port in servers)


def parse_admin_urls(text: str, option: str = "--admin-url") -> tuple[str, ...]:
    """Comma-separated http(s)://host:port of controllers (a bare host:port gets http://)."""
    urls = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        url = item if "://" in item else f"http://{item}"
        scheme, _, rest = url.partition("://")
        if scheme not in ("http", "https") or not rest:  # https: a controller listener with TLS (issue 29)
            raise UsageError(f"{option}: {item!r} is not http://host:port or https://host:port")
        parse_host_port(rest.rstrip("/"), option)
        urls.append(url.rstrip("/"))
    if not urls:
        raise UsageError(f"{option}: give at least one http://host:port")
    return tuple(urls)


def endpoints(*, admin_url: str | None, bootstrap_server: str | None, data_dir: Path,
              document: Mapping[str, Any] | None) -> Endpoints:
    """Explicit options win; what they leave out comes from cluster.json (`document`, None if absent).

    Controllers other than the first are listed too, so a command still works while one is down.
    """
    admin = parse_admin_urls(admin_url) if admin_url is not None else ()
    bootstrap = parse_bootstrap_servers(bootstrap_server) if bootstrap_server is not None else ()
    source = " and ".join(name for name, given in (("--admin-url", admin), ("--bootstrap-server", bootstrap))
                          if given)
    if document is not None and (not admin or not bootstrap):
        nodes = document.get("nodes")
        if not isinstance(nodes, list):
            raise UsageError(f"{data_dir / CLUSTER_FILE} lists no nodes; start the cluster with `tidelog up`")
        if not admin:
            admin = tuple(str(n["admin_url"]) for n in nodes if isinstance(n, dict) and n.get("admin_url"))
        if not bootstrap:
            servers = document.get("bootstrap_servers")
            bootstrap = parse_bootstrap_servers(servers, CLUSTER_FILE) if isinstance(servers, str) else ()
        source = f"{data_dir / CLUSTER_FILE}" + (f" and {source}" if source else "")
    return Endpoints(admin, bootstrap, source or "nothing", document)


def read_cluster_document(data_dir: Path) -> dict[str, Any] | None:
    """cluster.json of `data_dir`, None when there is none; UsageError when it is not JSON."""
    path = data_dir / CLUSTER_FILE
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    if not isinstance(document, dict):
        raise UsageError(f"{path} is not a cluster file")
    return document


def add_cluster_options(parser: argparse.ArgumentParser, *, admin: bool = True, kafka: bool = True) -> None:
    """--data-dir, and --admin-url / --bootstrap-server where the command uses them."""
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                        help=f"find the cluster in this data dir's {CLUSTER_FILE}, as `tidelog up` wrote it "
                             f"(default: ./{DEFAULT_DATA_DIR})")
    if admin:
        parser.add_argument("--admin-url", metavar="URL[,URL...]",
                            help="controllers' admin API, e.g. http://127.0.0.1:9080 (default: from --data-dir)")
        parser.add_argument("--admin-ca", type=Path, metavar="FILE",
                            help="the CA that signs the controllers' certificates, for an https admin URL "
                                 "(the listener.name.controller.ssl.truststore.location file)")
        parser.add_argument("--admin-token", default=os.environ.get(TOKEN_ENV),
                            help=f"bearer token for writes when the cluster sets admin.token "
                                 f"(default: ${TOKEN_ENV})")
    if kafka:
        parser.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]",
                            help="Kafka bootstrap servers (default: from --data-dir)")
        parser.add_argument("--command-config", type=Path, metavar="FILE",
                            help="client settings for a secured listener, as Kafka's tools take them: "
                                 "security.protocol, sasl.mechanism, sasl.username, sasl.password, "
                                 "ssl.ca.location, ... (e.g. the client.properties `tidelog up --security` "
                                 "writes)")


def resolve(args: argparse.Namespace, *, need_admin: bool = False, need_kafka: bool = False) -> Endpoints:
    """The endpoints a command needs, from its options; UsageError when one is missing."""
    data_dir: Path = args.data_dir
    admin_url, bootstrap = getattr(args, "admin_url", None), getattr(args, "bootstrap_server", None)
    explicit = (admin_url is not None or not need_admin) and (bootstrap is not None or not need_kafka)
    document = None if explicit else read_cluster_document(data_dir)
    found = endpoints(admin_url=admin_url, bootstrap_server=bootstrap, data_dir=data_dir, document=document)
    if need_admin and not found.admin_urls:
        raise UsageError(f"no admin API to talk to: give --admin-url, or --data-dir of a cluster started with "
                         f"`tidelog up` (there is no {data_dir / CLUSTER_FILE})")
    if need_kafka and not found.bootstrap_servers:
        raise UsageError(f"no broker to talk to: give --bootstrap-server, or --data-dir of a cluster with "
                         f"brokers started with `tidelog up` (looked in {data_dir / CLUSTER_FILE})")
    admin_ca: Path | None = getattr(args, "admin_ca", None)
    if admin_ca is not None:
        try:
            found = dataclasses.replace(found, admin_tls=client_context(str(admin_ca)))
        except ConfigError as exc:
            raise UsageError(f"--admin-ca {admin_ca}: {exc}") from None
    command_config: Path | None = getattr(args, "command_config", None)
    if command_config is not None:
        try:
            found = dataclasses.replace(found, security=client_security(read_client_properties(command_config)))
        except ClientSecurityError as exc:
            raise UsageError(f"--command-config {command_config}: {exc}") from None
    return found


def guarded(command: str, body: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Run a client command, turning its errors into a message on stderr and the exit code."""
    def run(args: argparse.Namespace) -> int:
        try:
            return body(args)
        except UsageError as exc:
            print(f"tidelog {command}: {exc}", file=sys.stderr)
            return ExitCode.USAGE
        except ClusterError as exc:
            print(f"Error: {exc.error}: {exc.message}", file=sys.stderr)
            return ExitCode.ERROR
        except SaslRefused as exc:  # --command-config's credentials refused: Kafka's tools stop there too
            print(f"Error: SASL_AUTHENTICATION_FAILED: {exc}", file=sys.stderr)
            return ExitCode.ERROR
        except BrokenPipeError:  # `... | head`: the reader is gone, which is not an error
            silence_stdout()
            return ExitCode.OK
    return run


def silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def say(line: str = "") -> None:
    print(line, flush=True)


def say_lines(lines: Sequence[str]) -> None:
    for line in lines:
        print(line)
    sys.stdout.flush()
