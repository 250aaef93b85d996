"""`tidelog up` and `tidelog down`: a local cluster under one data dir, for people.

    tidelog up [--controllers 3] [--brokers 3] [--data-dir ./tidelog-data] [--detach]
    tidelog up --combined [--controllers 1] [--brokers 0] ...   one process per node runs both roles
    tidelog up --broker-config num.partitions=3 [--controller-config KEY=VALUE] ...
    tidelog up --controllers 5 ...        on an existing data dir of 3: grows the quorum online
    tidelog up --brokers 3 --racks 3      brokers get broker.rack rack-1, rack-2, rack-3
    tidelog down [--data-dir ./tidelog-data]

`up` starts every node that is not running (`localcluster.launcher`; as `docker compose up` does, a
node that was killed comes back on its own and the running ones are left as they are, each
named in one line; only a cluster running in full is "already running"), waits until the quorum
has an active controller,
prints one `READY bootstrap=… admin=…` line and a table of the nodes, then runs until Ctrl-C
(SIGINT, SIGTERM or SIGHUP), when it stops every node (brokers first, then controllers); with
--detach it returns once ready and `down` stops the nodes later. Ready means: the controllers
agree on an active controller and every broker is registered and unfenced.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from common.limits import READY_TIMEOUT, WATCH_INTERVAL
from localcluster import cluster_layout as layout
from tidelog.cli_common import silence_stdout
from localcluster.cluster_layout import LayoutError, data_dir_lock
from localcluster.launcher import Interrupted, LauncherError, LocalCluster
from localcluster.node_process import StopReport
from tidelog.cluster_growth import grow, growth_target

DEFAULT_DATA_DIR: Final = Path("tidelog-data")
STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def _add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                        help=f"the cluster's directory: configs, data, logs, cluster.json "
                             f"(default: ./{DEFAULT_DATA_DIR})")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `tidelog up`. Shape options left out mean: as stored in the data dir, else the default."""
    parser.add_argument("--controllers", type=_count, default=None,
                        help=f"controllers (quorum voters) on 127.0.0.1..N (default: as stored, else "
                             f"{layout.DEFAULT_CONTROLLERS}; with --combined: 1); more than a data dir's "
                             "cluster has grows its quorum online, one controller at a time")
    parser.add_argument("--security", choices=("SASL_SSL", "SSL", "SASL_PLAINTEXT"), default=None,
                        help="a secured listener on every broker (Kafka port + 2), also the inter-broker one: "
                             "a throwaway CA, certificates and users in the data dir; prints the client "
                             "settings (kept in <data dir>/client.properties). Chosen at the first start.")
    parser.add_argument("--combined", action="store_true", default=None,
                        help="combined mode (process.roles=broker,controller): each controller also runs a "
                             "broker in the same process; --brokers then adds separate brokers (default 0)")
    parser.add_argument("--brokers", type=_count, default=None,
                        help=f"brokers on the addresses after the controllers' "
                             f"(default: as stored, else {layout.DEFAULT_BROKERS})")
    parser.add_argument("--racks", type=_count, default=0,
                        help="give new brokers broker.rack rack-1..rack-N in turn (KIP-36 rack-aware placement, "
                             "KIP-392 follower fetching); default 0: no racks")
    _add_data_dir(parser)
    parser.add_argument("--detach", action="store_true",
                        help="return once the cluster is ready; stop it later with `tidelog down`")
    parser.add_argument("--raft-port", type=int, default=None,
                        help=f"quorum port on every controller's address (default: {layout.DEFAULT_RAFT_PORT})")
    parser.add_argument("--admin-port", type=int, default=None,
                        help=f"HTTP admin API port on every controller's address "
                             f"(default: {layout.DEFAULT_ADMIN_PORT})")
    parser.add_argument("--kafka-port", type=int, default=None,
                        help=f"Kafka listener port on every broker's address (default: {layout.DEFAULT_KAFKA_PORT})")
    parser.add_argument("--metrics-port", type=int, default=None,
                        help=f"GET /metrics port on every broker's address (default: {layout.DEFAULT_METRICS_PORT})")
    parser.add_argument("--broker-config", type=_key_value, action="append", default=[], metavar="KEY=VALUE",
                        help="a broker config (e.g. num.partitions=3), repeatable: set in every broker's "
                             "server.properties, new or existing, and kept on restart")
    parser.add_argument("--controller-config", type=_key_value, action="append", default=[],
                        metavar="KEY=VALUE", help="a controller config, repeatable, likewise")
    parser.add_argument("--ready-timeout", type=float, default=READY_TIMEOUT,
                        help=f"seconds to wait for an active controller (default: {READY_TIMEOUT:.0f})")
    parser.add_argument("--hosts", choices=("loopback", "netns"), default="loopback",
                        help="where nodes live: loopback addresses 127.0.0.N (default), or netns: each node its "
                             "own network namespace on 198.18.0.x, clients in one more (needs root; a data dir "
                             "keeps the kind it was made with; tidelog.hosts)")


def add_down_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `tidelog down`."""
    _add_data_dir(parser)


@contextmanager
def _stop_requests() -> Iterator[threading.Event]:
    """An event set by SIGINT, SIGTERM or SIGHUP while inside; the old handlers come back after."""
    requested = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: requested.set()) for sig in STOP_SIGNALS}
    try:
        yield requested
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _say(line: str = "") -> None:
    try:
        print(line, flush=True)  # a pipe reader (a test, a script) sees each line as it happens
    except BrokenPipeError:  # `tidelog up | head`: the reader left; the cluster is no less up
        silence_stdout()


def _print_restarted(cluster: LocalCluster) -> None:
    """One line per node, when some ran already: which were left so and which this `up` started."""
    if not cluster.already_running:
        return  # every node started: the READY table says it all
    for node in cluster.nodes:
        name = f"node {node.spec.node_id} ({node.spec.role})"
        if node.spec.node_id in cluster.started:
            _say(f"{name} was not running: started (pid {node.pid})")
        else:
            _say(f"{name} is running (pid {node.pid}): left as it is")


def _print_ready(cluster: LocalCluster, started: float) -> None:
    _say(f"READY bootstrap={cluster.bootstrap_servers or 'none'} admin={cluster.admin_url}")
    if not cluster.brokers:
        _say(f"brokers: none (--brokers 0): only the {len(cluster.controllers)} controllers run, "
             "so there is no bootstrap server.")
    _say(f"cluster id {cluster.cluster_id}, ready in {time.monotonic() - started:.1f} s, "
         f"layout in {cluster.root / layout.CLUSTER_FILE}")
    _say(f"web console: {cluster.admin_url}/console/ (any controller serves it)")
    pids = {n.spec.node_id: n.pid for n in cluster.nodes}
    for line in layout.node_table(cluster.specs, pids, active=cluster.active_controller):
        _say(line)


def _print_reports(reports: Sequence[StopReport]) -> int:
    for report in reports:
        _say(f"  {report.describe()}")
    survivors = [r for r in reports if r.outcome == "did not die"]
    if survivors:
        print(f"{len(survivors)} node(s) survived SIGKILL; see the lines above", file=sys.stderr)
    return 1 if survivors else 0


def _watch(cluster: LocalCluster, stop: threading.Event) -> bool:
    """Run until a stop is asked for (True), saying when a node exits; False once every node has."""
    reported: set[int] = set()
    while not stop.wait(WATCH_INTERVAL):  # until Ctrl-C / SIGTERM / SIGHUP
        for node in cluster.nodes:
            if node.spec.node_id not in reported and not node.running():
                reported.add(node.spec.node_id)
                status = "" if node.exit_status is None else f" with status {node.exit_status}"  # None: not ours
                _say(f"{node.spec.label} (pid {node.pid}) exited{status}; its log: {node.spec.log_path}")
        if len(reported) == len(cluster.nodes):
            return False
    return True


def run(args: argparse.Namespace) -> int:
    """`tidelog up`: the exit status."""
    from tidelog.hosts import up as netns_up  # (issue 30)
    if getattr(args, "hosts", "loopback") == "netns":
        return netns_up.run_up(args)
    if netns_up.is_netns(args.data_dir):
        print(f"tidelog up: {args.data_dir.resolve()} holds a cluster of network namespaces: restart it with "
              "tidelog up --hosts netns", file=sys.stderr)
        return 1
    started = time.monotonic()
    root: Path = args.data_dir.resolve()
    with _stop_requests() as stop:
        _say(f"Starting a local cluster in {root} ...")
        try:
            brokers, controllers = args.brokers, args.controllers
            if not (root / layout.CLUSTER_FILE).exists():  # a first start: the defaults of its mode
                if brokers is None:
                    brokers = 0 if args.combined else layout.DEFAULT_BROKERS
                if controllers is None and args.combined:
                    controllers = 1
            # more controllers than the data dir's cluster has: start it as it is, then grow it
            # online (KIP-853, tidelog.cluster_growth)
            grow_to = growth_target(root, controllers)
            running = LocalCluster.attach(root) if grow_to is not None else None
            if running is not None and all(n.running() for n in running.nodes):
                cluster = running  # a detached cluster running in full grows as it runs
                cluster.already_running = tuple(n.spec.node_id for n in cluster.nodes)
            else:
                cluster = LocalCluster.start(root, controllers=None if grow_to else controllers,
                                             raft_port=args.raft_port, admin_port=args.admin_port, brokers=brokers,
                                             kafka_port=args.kafka_port, metrics_port=args.metrics_port,
                                             ready_timeout=args.ready_timeout, should_stop=stop.is_set,
                                             combined=args.combined, broker_config=dict(args.broker_config),
                                             controller_config=dict(args.controller_config), racks=args.racks,
                                             security=args.security)
            if grow_to is not None:
                grow(cluster, grow_to, say=_say)
        except Interrupted:
            print("tidelog up: interrupted before the cluster was ready; every node it started is stopped",
                  file=sys.stderr)
            return 1
        except (LauncherError, LayoutError) as exc:
            print(f"tidelog up: {exc}", file=sys.stderr)
            return 1
        _print_restarted(cluster)
        _print_ready(cluster, started)
        client_settings = root / "client.properties"  # --security (localcluster.security_setup)
        if args.security is not None and client_settings.exists():
            _say(f"Client settings for the {args.security} listeners (confluent-kafka / librdkafka; "
                 f"kept in {client_settings}):")
            for line in client_settings.read_text().splitlines():
                _say(f"  {line}")
        if args.detach:
            _say(f"Detached. Stop the cluster with: tidelog down --data-dir {root}")
            return 0
        _say("Press Ctrl-C to stop the cluster.")
        asked = _watch(cluster, stop)
        _say("Stopping every node ..." if asked else "Every node has exited; recording the cluster as stopped.")
        status = _print_reports(cluster.stop())
        return status if asked else 1


def run_down(args: argparse.Namespace) -> int:
    """`tidelog down`: stop every node of the data dir's cluster; the exit status."""
    root: Path = args.data_dir.resolve()
    if not (root / layout.CLUSTER_FILE).exists():
        print(f"tidelog down: {root} has no {layout.CLUSTER_FILE}: no cluster was started there", file=sys.stderr)
        return 1
    from tidelog.hosts import up as netns_up  # (issue 30) a cluster of network namespaces
    if netns_up.is_netns(root):
        return netns_up.run_down(root)
    try:
        with data_dir_lock(root):
            cluster = LocalCluster.attach(root)
            assert cluster is not None, "cluster.json exists: checked above"
            _say(f"Stopping the cluster of {root} ...")
            return _print_reports(cluster.stop())
    except (LauncherError, LayoutError) as exc:
        print(f"tidelog down: {exc}", file=sys.stderr)
        return 1
