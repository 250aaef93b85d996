"""`tidelog quorum describe --status|--replication`: kafka-metadata-quorum.sh's describe over
the admin API (`GET /v1/quorum`, DescribeQuorum as the active controller answers it; issue 28),
and its add-controller / remove-controller (KIP-853, `POST|DELETE /v1/quorum/voters`).

    tidelog quorum describe --status
    tidelog quorum describe --replication [--human-readable]
    tidelog quorum add-controller --command-config controller-4/server.properties
    tidelog quorum add-controller --controller-id 4 --controller-api 127.0.0.4:9080
    tidelog quorum remove-controller --controller-id 4 [--controller-directory-id ID]

add-controller asks the new controller (already running, started with
controller.quorum.listener: an observer) to join: the active controller catches it up, then
makes it a voter. remove-controller removes one voter; removing the active controller hands
leadership over first. Both print the voter set after the change.

The lines and columns are Kafka's MetadataQuorumCommand's: --status prints ClusterId,
LeaderId, LeaderEpoch, HighWatermark, MaxFollowerLag, MaxFollowerLagTimeMs, CurrentVoters,
CurrentObservers; --replication a table of NodeId, DirectoryId, LogEndOffset, Lag,
LastFetchTimestamp, LastCaughtUpTimestamp, Status (Leader, Follower, Observer). A controller
added to the quorum has its directory id; the voters the cluster first started with and the
brokers print Kafka's zero Uuid (nobody recorded theirs).
"""

from __future__ import annotations

import argparse
import base64
import time
from pathlib import Path
from collections.abc import Mapping, Sequence
from typing import Any, Final

from metadata.quorum_description import QuorumDescription, ReplicaState
from common.config import parse_config
from common.config_schema import ConfigError
from common.properties import load_properties
from tidelog import cli_common
from tidelog.admin_client import AdminClient
from tidelog.cli_common import ClusterError, UsageError

ZERO_DIRECTORY_ID: Final = base64.urlsafe_b64encode(bytes(16)).decode().rstrip("=")  # Kafka's Uuid.ZERO_UUID
REPLICATION_HEADERS: Final = ("NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                              "LastCaughtUpTimestamp", "Status")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    describe = actions.add_parser("describe", help="describe the metadata quorum (kafka-metadata-quorum describe)")
    cli_common.add_cluster_options(describe, kafka=False)
    describe.add_argument("--status", action="store_true", help="the leader, epoch, high watermark and lag")
    describe.add_argument("--replication", action="store_true", help="each voter's and observer's progress")
    describe.add_argument("--human-readable", action="store_true",
                          help="with --replication: timestamps as 'N ms ago'")
    describe.set_defaults(run=cli_common.guarded("quorum describe", run_describe))

    add = actions.add_parser("add-controller", help="add a running controller to the quorum's voters "
                             "(kafka-metadata-quorum add-controller; KIP-853)")
    cli_common.add_cluster_options(add, kafka=False)
    add.add_argument("--command-config", type=Path, metavar="FILE",
                     help="the new controller's server.properties: its node.id and controller.listener")
    add.add_argument("--controller-id", type=int, help="the new controller's node.id")
    add.add_argument("--controller-api", metavar="HOST:PORT", help="the new controller's HTTP API (controller.listener)")
    add.add_argument("--controller-directory-id", help="its directory id (default: as it answers)")
    add.set_defaults(run=cli_common.guarded("quorum add-controller", run_add_controller))

    remove = actions.add_parser("remove-controller", help="remove a controller from the quorum's voters "
                                "(kafka-metadata-quorum remove-controller; KIP-853)")
    cli_common.add_cluster_options(remove, kafka=False)
    remove.add_argument("--controller-id", type=int, required=True, help="the voter's node.id")
    remove.add_argument("--controller-directory-id", help="its directory id (default: as the voter set has it)")
    remove.set_defaults(run=cli_common.guarded("quorum remove-controller", run_remove_controller))


# --- pure: an answer to lines ------------------------------------------------------------------


def leader_of(quorum: QuorumDescription) -> ReplicaState:
    for voter in quorum.voters:
        if voter.replica_id == quorum.leader_id:
            return voter
    raise ClusterError("UNKNOWN_SERVER_ERROR", f"the quorum names leader {quorum.leader_id}, not among its voters")


def status_lines(quorum: QuorumDescription, cluster_id: str) -> list[str]:
    """Kafka's handleDescribeStatus."""
    leader = leader_of(quorum)
    laggard = min(quorum.voters, key=lambda v: v.log_end_offset)
    if laggard is leader or laggard.log_end_offset == leader.log_end_offset:
        lag_ms = 0
    elif leader.last_caught_up_timestamp >= 0 and laggard.last_caught_up_timestamp >= 0:
        lag_ms = leader.last_caught_up_timestamp - laggard.last_caught_up_timestamp
    else:
        lag_ms = -1
    return [f"ClusterId:              {cluster_id}",
            f"LeaderId:               {quorum.leader_id}",
            f"LeaderEpoch:            {quorum.leader_epoch}",
            f"HighWatermark:          {quorum.high_watermark}",
            f"MaxFollowerLag:         {leader.log_end_offset - laggard.log_end_offset}",
            f"MaxFollowerLagTimeMs:   {lag_ms}",
            f"CurrentVoters:          {_nodes(quorum.voters)}",
            f"CurrentObservers:       {_nodes(quorum.observers)}"]


def _nodes(replicas: Sequence[ReplicaState]) -> str:
    """Kafka's `{"id": N, "directoryId": "..."}` per replica; the directory id only where one is
    recorded (a controller added to the quorum, KIP-853)."""
    def node(r: ReplicaState) -> str:
        if r.directory_id is None or r.directory_id == ZERO_DIRECTORY_ID:
            return f'{{"id": {r.replica_id}}}'
        return f'{{"id": {r.replica_id}, "directoryId": "{r.directory_id}"}}'
    return "[" + ", ".join(node(r) for r in replicas) + "]"


def replication_rows(quorum: QuorumDescription, *, human_readable: bool, now_ms: int) -> list[list[str]]:
    """Kafka's handleDescribeReplication: the leader, the other voters, the observers."""
    leader = leader_of(quorum)

    def when(ms: int) -> str:
        if ms < 0:
            return "-1"
        return f"{max(now_ms - ms, 0)} ms ago" if human_readable else str(ms)

    def row(r: ReplicaState, status: str) -> list[str]:
        return [str(r.replica_id), r.directory_id or ZERO_DIRECTORY_ID, str(r.log_end_offset),
                str(leader.log_end_offset - r.log_end_offset), when(r.last_fetch_timestamp),
                when(r.last_caught_up_timestamp), status]

    return ([row(leader, "Leader")]
            + [row(v, "Follower") for v in quorum.voters if v.replica_id != quorum.leader_id]
            + [row(o, "Observer") for o in quorum.observers])


def table_lines(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Kafka's ToolsUtils.prettyPrintTable: columns padded to their widest cell, tab-separated."""
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows)]
    return ["\t".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip()
            for line in [list(headers), *rows]]


# --- the command -------------------------------------------------------------------------------


def run_describe(args: argparse.Namespace) -> int:
    if args.status == args.replication:
        raise UsageError("give exactly one of --status or --replication")
    client = AdminClient.of(cli_common.resolve(args, need_admin=True), token=args.admin_token)
    answer = client.request("GET", "/v1/quorum")
    if not isinstance(answer, Mapping):
        raise ClusterError("UNKNOWN_SERVER_ERROR", "GET /v1/quorum did not answer an object")
    try:
        quorum = QuorumDescription.from_map(answer)
    except ValueError as exc:
        raise ClusterError("UNKNOWN_SERVER_ERROR", str(exc)) from None
    if args.status:
        cluster: Any = client.cluster()
        cli_common.say_lines(status_lines(quorum, str(cluster.get("cluster_id", ""))))
    else:
        rows = replication_rows(quorum, human_readable=args.human_readable, now_ms=int(time.time() * 1000))
        cli_common.say_lines(table_lines(REPLICATION_HEADERS, rows))
    return int(cli_common.ExitCode.OK)


# --- add-controller / remove-controller --------------------------------------------------------


def voter_lines(voters: Sequence[Mapping[str, Any]]) -> list[str]:
    """The voter set after a change, one line per voter."""
    return ["CurrentVoters:" ] + [f"  {v.get('node_id')}\tdirectory {v.get('directory_id')}\tquorum "
                                  f"{v.get('raft_address')}" for v in voters]


def _new_controller(args: argparse.Namespace) -> tuple[int, str]:
    """(node id, API address) of the controller to add, from --command-config or the options."""
    if args.command_config is not None:
        if args.controller_id is not None or args.controller_api is not None:
            raise UsageError("give --command-config, or --controller-id with --controller-api, not both")
        try:
            config = parse_config(load_properties(str(args.command_config)))
        except (OSError, ConfigError) as exc:
            raise UsageError(f"--command-config {args.command_config}: {exc}") from None
        node_id, listener = config["node.id"], config["controller.listener"]
        if not isinstance(node_id, int) or not isinstance(listener, str):
            raise UsageError(f"--command-config {args.command_config} sets no node.id or controller.listener")
        return node_id, listener
    if args.controller_id is None or args.controller_api is None:
        raise UsageError("give --command-config FILE, or --controller-id and --controller-api")
    return args.controller_id, args.controller_api


def run_add_controller(args: argparse.Namespace) -> int:
    node_id, api_address = _new_controller(args)
    body: dict[str, Any] = {"voter_id": node_id, "api_address": api_address}
    if args.controller_directory_id is not None:
        body["directory_id"] = args.controller_directory_id
    client = AdminClient.of(cli_common.resolve(args, need_admin=True), token=args.admin_token)
    answer = client.request("POST", "/v1/quorum/voters", body)
    cli_common.say(f"Added controller {node_id} to the quorum's voters.")
    cli_common.say_lines(voter_lines(answer.get("voters", []) if isinstance(answer, Mapping) else []))
    return int(cli_common.ExitCode.OK)


def run_remove_controller(args: argparse.Namespace) -> int:
    client = AdminClient.of(cli_common.resolve(args, need_admin=True), token=args.admin_token)
    directory_id = args.controller_directory_id
    if directory_id is None:  # Kafka's tool requires it; the voter set knows it
        current = client.request("GET", "/v1/quorum/voters")
        found = [v for v in (current.get("voters", []) if isinstance(current, Mapping) else [])
                 if isinstance(v, Mapping) and v.get("node_id") == args.controller_id]
        if not found:
            raise ClusterError("VOTER_NOT_FOUND", f"controller {args.controller_id} is not a voter")
        directory_id = str(found[0].get("directory_id"))
    answer = client.request("DELETE", f"/v1/quorum/voters/{args.controller_id}?directory_id={directory_id}")
    cli_common.say(f"Removed controller {args.controller_id} from the quorum's voters.")
    cli_common.say_lines(voter_lines(answer.get("voters", []) if isinstance(answer, Mapping) else []))
    return int(cli_common.ExitCode.OK)
