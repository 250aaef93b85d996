"""`tidelog status`: the cluster at a glance, from the active controller's admin API.

    tidelog status [--data-dir ./tidelog-data | --admin-url URL]

Prints the cluster id, the active controller and its Raft term, the voters (who leads, who
is connected, how far each has replicated), the brokers (state, listener, broker epoch,
heartbeat age), the topic and offline-partition counts, and, when the cluster came from
`tidelog up`, whether each node's process runs. Exit 0 when the API answered with an
active controller; 1 when no controller answered or none is active (`Error: ...` says which).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tidelog import cli_common
from tidelog.admin_client import AdminClient
from tidelog.cli_common import ClusterError, say, say_lines
from common.table import render
from security.controller_tls import controller_url


def cluster_lines(view: Mapping[str, Any]) -> list[str]:
    active = view.get("active_controller")
    lines = [f"Cluster {view['cluster_id']}: active controller {'none' if active is None else active}, "
             f"controller epoch {view['controller_epoch']}, Raft term {view['term']}, "
             f"metadata offset {view['metadata_offset']}"]
    rows = [(v["node_id"], v.get("api_address"), v["quorum_address"], v["role"], v.get("connected"),
             v.get("match_index")) for v in view.get("voters", [])]
    lines += render(("CONTROLLER", "ADMIN", "RAFT", "ROLE", "CONNECTED", "MATCH_INDEX"), rows, right={5})
    return lines


def _listener(broker: Mapping[str, Any]) -> str:
    listeners = broker.get("listeners") or []
    return ",".join(f"{li['host']}:{li['port']}" for li in listeners) or "-"


def broker_lines(brokers: Sequence[Mapping[str, Any]]) -> list[str]:
    if not brokers:
        return ["No brokers are registered."]
    rows = [(b["broker_id"], b["state"], _listener(b), b["broker_epoch"], b.get("rack"), b.get("heartbeat_age_ms"))
            for b in brokers]
    return render(("BROKER", "STATE", "LISTENER", "EPOCH", "RACK", "HEARTBEAT_AGE_MS"), rows, right={3, 5})


def topic_line(topics: Sequence[Mapping[str, Any]]) -> str:
    partitions = sum(int(t["partitions"]) for t in topics)
    offline = sum(int(t["offline_partitions"]) for t in topics)
    under = sum(int(t.get("under_replicated_partitions", 0)) for t in topics)
    return (f"Topics: {len(topics)}, partitions: {partitions}, offline partitions: {offline}, "
            f"under-replicated partitions: {under}")


def process_lines(document: Mapping[str, Any], running: Mapping[int, bool]) -> list[str]:
    """The nodes cluster.json names, with whether their process runs (`running` by node id)."""
    rows = [(n["id"], n["role"], n["host"], n.get("pid"), "running" if running.get(n["id"]) else "stopped",
             n.get("log_file")) for n in document.get("nodes", [])]
    return render(("NODE", "ROLE", "HOST", "PID", "PROCESS", "LOG"), rows)


def _running(document: Mapping[str, Any]) -> dict[int, bool]:
    from localcluster.node_process import process_runs

    return {int(n["id"]): isinstance(n.get("pid"), int) and process_runs(n["pid"], Path(n["config_file"]))
            for n in document.get("nodes", []) if "config_file" in n}


def status(args: argparse.Namespace) -> int:
    found = cli_common.resolve(args, need_admin=True)
    client = AdminClient(found.admin_urls, token=args.admin_token, tls=found.admin_tls)
    document = found.cluster_document
    try:
        view = client.cluster()
    except ClusterError:
        if document is not None:  # say which processes are (not) there: the likely reason
            say_lines(process_lines(document, _running(document)))
        raise
    active = view.get("active_controller")
    address = next((v.get("api_address") for v in view.get("voters", []) if v["node_id"] == active), None)
    if address and active != view.get("node_id"):  # the active controller knows match indexes and heartbeats
        active_client = AdminClient((controller_url(address, found.admin_tls), *found.admin_urls),
                                    token=args.admin_token, tls=found.admin_tls)  # https with --admin-ca
        try:
            view, client = active_client.cluster(), active_client
        except ClusterError:
            pass
    say_lines(cluster_lines(view))
    say()
    say_lines(broker_lines(client.brokers()))
    say()
    say(topic_line(client.topics()))
    if document is not None:
        say()
        say_lines(process_lines(document, _running(document)))
    if view.get("active_controller") is None:
        raise ClusterError("NOT_CONTROLLER", "no active controller: the quorum has no leader (is a majority of "
                           "the controllers running?)")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cli_common.add_cluster_options(parser, kafka=False)


run = cli_common.guarded("status", status)
