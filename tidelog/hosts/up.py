"""`tidelog up --hosts netns`, `tidelog down` of such a cluster, `tidelog hosts clean`, and how the
client commands reach it.

    sudo tidelog up --hosts netns [--controllers 3] [--brokers 3] [--data-dir D] [--detach]
    sudo tidelog status --data-dir D            # enters D's client namespace itself
    sudo tidelog down --data-dir D              # stops the nodes, removes every namespace
    sudo tidelog hosts clean                    # namespaces of dead runs

Its namespaces go with `down` (or Ctrl-C); `up --hosts netns` on the same data dir makes them again,
with the same names and addresses, and starts the nodes from their own configs. Without --detach a watchdog (tidelog.hosts.watchdog) removes everything if
`up` itself is SIGKILLed; with --detach the cluster outlives `up` by design, until `down`.

A client command enters the client namespace with setns(2) on its main thread before it opens a
socket (`prepare_client_command`), rather than re-executing itself under `ip netns exec`: one
process (its pid, its signals, its stdin for `produce`), no second interpreter start-up, and no
remount of /sys that `ip netns exec` does.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Final

from localcluster.launcher import Interrupted, LauncherError
from localcluster.cluster_layout import LayoutError
from tidelog.hosts.cluster import (
    CLIENT_HOST,
    NetnsCluster,
    admin_token,
    enter_client_namespace,
    hosts_plan,
    read_cluster_file_any,
)
from tidelog.hosts.netns import NetnsError, available, clean_dead_runs
from tidelog.hosts.watchdog import NetnsWatchdog

NETNS: Final = "netns"
LOOPBACK: Final = "loopback"
HOSTS_CHOICES: Final = (LOOPBACK, NETNS)
NOT_CLIENT_COMMANDS: Final = frozenset({"up", "down", "chaos", "hosts", "format"})
PORT_OPTIONS: Final = ("raft_port", "admin_port", "kafka_port", "metrics_port")


def run_up(args: argparse.Namespace) -> int:
    """`tidelog up --hosts netns`: the exit status."""
    from tidelog import local_cluster as ui  # its printing and Ctrl-C handling, shared

    unavailable = available()
    if unavailable is not None:
        print(f"tidelog up: --hosts netns: {unavailable}", file=sys.stderr)
        return 1
    given = [f"--{o.replace('_', '-')}" for o in PORT_OPTIONS if getattr(args, o, None) is not None]
    if given:
        print(f"tidelog up: {', '.join(given)} do not apply with --hosts netns: every host has its own address "
              "and uses the default ports", file=sys.stderr)
        return 2
    root: Path = args.data_dir.resolve()
    watchdog = None if args.detach else NetnsWatchdog(root, remove_data=False)
    try:
        with ui._stop_requests() as stop:
            ui._say(f"Starting a cluster of network namespaces in {root} ...")
            started = time.monotonic()
            try:
                cluster = NetnsCluster.start(root, controllers=args.controllers, brokers=args.brokers,
                                             combined=bool(args.combined), ready_timeout=args.ready_timeout,
                                             racks=int(getattr(args, "racks", 0) or 0),
                                             broker_config=dict(args.broker_config),
                                             controller_config=dict(args.controller_config), should_stop=stop.is_set)
            except Interrupted:
                print("tidelog up: interrupted before the cluster was ready; every node and namespace is removed",
                      file=sys.stderr)
                return 1
            except (LauncherError, LayoutError, NetnsError) as exc:
                print(f"tidelog up: {exc}", file=sys.stderr)
                return 1
            ui._print_ready(cluster, started)
            client = cluster.network.namespace(CLIENT_HOST)
            ui._say(f"hosts: network namespaces of run {cluster.network.plan.run_id}; clients run in {client} "
                    f"(tidelog status|topics|produce|consume --data-dir {root} enter it themselves; "
                    f"others: ip netns exec {client} <command>); admin token in {root / 'admin.token'}")
            if args.detach:
                ui._say(f"Detached. Stop the cluster and remove its namespaces with: tidelog down --data-dir {root}")
                return 0
            ui._say("Press Ctrl-C to stop the cluster.")
            asked = ui._watch(cluster, stop)
            ui._say("Stopping every node ..." if asked else "Every node has exited; removing the namespaces.")
            try:
                status = ui._print_reports(cluster.stop())
            finally:
                cluster.network.remove()
            ui._say(f"namespaces of run {cluster.network.plan.run_id} removed")
            return status if asked else 1
    finally:
        if watchdog is not None:
            watchdog.close()


def is_netns(root: Path) -> bool:
    """Whether `root`'s cluster.json describes a netns cluster (False without one, or if unreadable)."""
    try:
        return hosts_plan(read_cluster_file_any(root.resolve())) is not None
    except (LayoutError, NetnsError):
        return False


def run_down(root: Path) -> int:
    """`tidelog down` of a netns cluster: stop its nodes, remove its namespaces."""
    from tidelog import local_cluster as ui

    try:
        cluster = NetnsCluster.attach(root)
    except (LayoutError, NetnsError) as exc:
        print(f"tidelog down: {exc}", file=sys.stderr)
        return 1
    assert cluster is not None, "is_netns checked"
    ui._say(f"Stopping the cluster of {root} and removing its namespaces ...")
    try:
        status = ui._print_reports(cluster.stop())
        cluster.network.remove()
    except NetnsError as exc:
        print(f"tidelog down: {exc}", file=sys.stderr)
        return 1
    return status


def prepare_client_command(args: argparse.Namespace) -> str | None:
    """Before a client command runs: with --data-dir of a netns cluster (or `chaos run --cluster-dir`
    of one), move into its client namespace and take its admin token (unless one was given); an
    error message, or None."""
    command = getattr(args, "command", None)
    if command == "chaos" and isinstance(getattr(args, "cluster_dir", None), Path):
        root = args.cluster_dir  # `chaos run --cluster-dir D`: its workload and nemeses act from the client host
    elif command in NOT_CLIENT_COMMANDS or not isinstance(getattr(args, "data_dir", None), Path):
        return None
    else:
        root = args.data_dir
    try:
        document = read_cluster_file_any(root.resolve())
        if not enter_client_namespace(document):
            return None
    except (LayoutError, NetnsError, OSError) as exc:
        return f"{root} holds a cluster of network namespaces, and its client namespace cannot be entered: {exc}"
    if hasattr(args, "admin_token") and args.admin_token is None:
        args.admin_token = admin_token(root.resolve())
    return None


def add_hosts_arguments(parser: argparse.ArgumentParser) -> None:
    """`tidelog hosts clean`."""
    sub = parser.add_subparsers(dest="hosts_command", required=True, metavar="ACTION")
    clean = sub.add_parser("clean", help="remove the namespaces of dead runs",
                           description="Delete every tidelog-<run>-* network namespace whose creator is gone and "
                                       "which holds no process (a run SIGKILLed before its watchdog could act).")
    clean.set_defaults(run=run_clean)


def run_clean(args: argparse.Namespace) -> int:
    unavailable = available()
    if unavailable is not None:
        print(f"tidelog hosts clean: {unavailable}", file=sys.stderr)
        return 1
    removed = clean_dead_runs()
    print(f"removed the namespaces of {len(removed)} dead run(s){': ' if removed else ''}{' '.join(removed)}")
    return 0
