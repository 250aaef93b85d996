"""`tidelog quorum describe --status|--replication`: kafka-metadata-quorum.sh's describe over
the admin API (`GET /v1/quorum`, DescribeQuorum as the active controller answers it; issue 28).

    tidelog quorum describe --status
    tidelog quorum describe --replication [--human-readable]

The lines and columns are Kafka's MetadataQuorumCommand's: --status prints ClusterId,
LeaderId, LeaderEpoch, HighWatermark, MaxFollowerLag, MaxFollowerLagTimeMs, CurrentVoters,
CurrentObservers; --replication a table of NodeId, DirectoryId, LogEndOffset, Lag,
LastFetchTimestamp, LastCaughtUpTimestamp, Status (Leader, Follower, Observer). tidelog's
voters have no directory ids (Kafka's zero Uuid is printed) and no Kafka-protocol endpoints.
"""

from __future__ import annotations

import argparse
import base64
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

from metadata.quorum_description import QuorumDescription, ReplicaState
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
    return "[" + ", ".join(f'{{"id": {r.replica_id}}}' for r in replicas) + "]"


def replication_rows(quorum: QuorumDescription, *, human_readable: bool, now_ms: int) -> list[list[str]]:
    """Kafka's handleDescribeReplication: the leader, the other voters, the observers."""
    leader = leader_of(quorum)

    def when(ms: int) -> str:
        if ms < 0:
            return "-1"
        return f"{max(now_ms - ms, 0)} ms ago" if human_readable else str(ms)

    def row(r: ReplicaState, status: str) -> list[str]:
        return [str(r.replica_id), ZERO_DIRECTORY_ID, str(r.log_end_offset),
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
    client = AdminClient(cli_common.resolve(args, need_admin=True).admin_urls, token=args.admin_token)
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
