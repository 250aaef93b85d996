"""`tidelog groups list|describe|delete|reset-offsets`: kafka-consumer-groups.sh over the Kafka protocol.

    tidelog groups list
    tidelog groups describe --group app          # per partition: offsets, log end, lag, owner
                                                 # a KIP-848 group: its type, assignor, epochs,
                                                 # each member's type (classic/consumer),
                                                 # epoch, assignment and target
                                                 # a KIP-932 share group: its members, epochs
                                                 # and assignments
    tidelog groups delete --group app            # only an empty group (NON_EMPTY_GROUP otherwise)
    tidelog groups reset-offsets --group app --topic demo --to-earliest [--execute]
                                                 # a share group: its partitions' start offsets
                                                 # (AlterShareGroupOffsets), no member active

Option names and table columns are kafka-consumer-groups.sh's. reset-offsets prints the plan
(GROUP TOPIC PARTITION NEW-OFFSET) and, as Kafka's tool, changes nothing unless --execute;
it needs the group to be empty (its members stopped), or the commit is refused.
"""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any, Final

from groups.offset_reset import ResetTo, plan_reset
from tidelog import cli_common
from tidelog.cli_common import ClusterError, UsageError
from common.table import render

EARLIEST: Final = -2
GROUP_ID_NOT_FOUND: Final = 69  # ConsumerGroupDescribe's answer for a group that is not a KIP-848 one
CONSUMER_GROUP_DESCRIBE_VERSION: Final = 1  # v1 (KIP-1099) adds each member's MemberType
MEMBER_TYPES: Final = {0: "classic", 1: "consumer"}  # ConsumerGroupDescribe v1's MemberType; -1: unknown


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="groups_command", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="every group of the cluster (kafka-consumer-groups --list)")
    cli_common.add_cluster_options(listing, admin=False)
    listing.set_defaults(run=run_list)
    describe = actions.add_parser("describe", help="offsets, log end offsets, lag and owner of each partition")
    cli_common.add_cluster_options(describe, admin=False)
    describe.add_argument("--group", required=True)
    describe.set_defaults(run=run_describe)
    delete = actions.add_parser("delete", help="delete an empty group and its committed offsets")
    cli_common.add_cluster_options(delete, admin=False)
    delete.add_argument("--group", required=True)
    delete.set_defaults(run=run_delete)
    reset = actions.add_parser("reset-offsets", help="move an empty group's committed offsets (dry run unless --execute)")
    to = cli_common.add_reset_offsets_options(reset, "commit the new offsets")
    to.add_argument("--shift-by", type=int)
    to.add_argument("--to-datetime", help="YYYY-MM-DDTHH:mm:SS.sss[+zone]: the first offset at or after it")
    reset.set_defaults(run=run_reset)


def _target(args: argparse.Namespace) -> tuple[ResetTo, int]:
    if args.to_earliest:
        return ResetTo.EARLIEST, 0
    if args.to_latest:
        return ResetTo.LATEST, 0
    if args.to_offset is not None:
        return ResetTo.OFFSET, args.to_offset
    if args.shift_by is not None:
        return ResetTo.SHIFT, args.shift_by
    return ResetTo.TIMESTAMP, 0


def _parse_topic(text: str) -> tuple[str, list[int] | None]:
    topic, colon, parts = text.partition(":")
    if not colon:
        return topic, None
    try:
        return topic, [int(p) for p in parts.split(",")]
    except ValueError:
        raise UsageError(f"--topic {text!r}: partitions must be numbers, as TOPIC:0,1") from None


def _admin(args: argparse.Namespace):  # noqa: ANN202 - imports kept out of the parser's path
    from tidelog.group_admin import GroupAdmin
    from common.kafka_client import KafkaClient

    found = cli_common.resolve(args, need_kafka=True)
    client = KafkaClient(found.bootstrap_servers, client_id="tidelog-consumer-groups", security=found.security)
    return client, GroupAdmin(client)


def _unavailable(exc: Exception) -> ClusterError:
    return ClusterError("NETWORK_EXCEPTION", str(exc))


def _list(args: argparse.Namespace) -> int:
    from common.broker_connection import BrokerUnavailable

    client, admin = _admin(args)
    with client:
        try:
            cli_common.say_lines([g.group_id for g in admin.list_groups()])
        except BrokerUnavailable as exc:
            raise _unavailable(exc) from None
    return 0


def _describe(args: argparse.Namespace) -> int:
    from common.broker_connection import BrokerUnavailable

    client, admin = _admin(args)
    with client:
        try:
            consumer = _consumer_group(admin, args.group)
            if consumer is not None:
                return _describe_consumer(admin, args.group, consumer)
            share = _described(admin, args.group, "SHARE_GROUP_DESCRIBE", 1)
            if share is not None:
                return _describe_share(admin, args.group, share)
            d = admin.describe(args.group)
        except BrokerUnavailable as exc:
            raise _unavailable(exc) from None
    if d.state == "Dead":
        raise ClusterError("GROUP_ID_NOT_FOUND", f"Consumer group '{args.group}' does not exist.")
    if not d.members:
        cli_common.say(f"Consumer group '{args.group}' has no active members.")
        cli_common.say()
    rows = [(d.group_id, p.topic, p.partition, p.current_offset, p.log_end_offset, p.lag,
             p.member.member_id if p.member else None, p.member.client_host if p.member else None,
             p.member.client_id if p.member else None) for p in d.partitions]
    cli_common.say_lines(render(("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                 "CONSUMER-ID", "HOST", "CLIENT-ID"), rows, right={2, 3, 4, 5}))
    return 0


def _consumer_group(admin: Any, group_id: str) -> Any | None:
    """kio's ConsumerGroupDescribe v1 DescribedGroup of a KIP-848 group; None when the group is
    not one (a classic group or none: DescribeGroups describes those)."""
    return _described(admin, group_id, "CONSUMER_GROUP_DESCRIBE", CONSUMER_GROUP_DESCRIBE_VERSION)


def _described(admin: Any, group_id: str, api_name: str, version: int) -> Any | None:
    """The DescribedGroup a ConsumerGroupDescribe or ShareGroupDescribe answers (their requests
    have one shape); None when the group is not of that type."""
    from common.protocol import messages
    from common.protocol.api_keys import ApiKey

    api = ApiKey[api_name]
    module = messages.request_module(api, version)
    request = getattr(module, api.name.title().replace("_", "") + "Request")(
        group_ids=(group_id,), include_authorized_operations=False)
    response = admin._at_coordinator(group_id, api, version, request, messages.encode_request,
                                     messages.response_decoder(api), lambda r: r.groups[0].error_code)
    group = response.groups[0]
    if group.error_code == GROUP_ID_NOT_FOUND:
        return None
    if group.error_code:
        raise ClusterError(_error_name(group.error_code), group.error_message or f"cannot describe {group_id}")
    return group


def _partitions(assignment: Any) -> str:
    """kafka-consumer-groups.sh's form: topic:0,1;other:3 ("-" for none)."""
    parts = [f"{tp.topic_name}:{','.join(str(p) for p in sorted(tp.partitions))}"
             for tp in sorted(assignment.topic_partitions, key=lambda tp: tp.topic_name) if tp.partitions]
    return ";".join(parts) or "-"


def _describe_consumer(admin: Any, group_id: str, group: Any) -> int:
    """A KIP-848 group: the group line, the partitions with their lag and owner (as for a
    classic group), then each member with its epoch, assignment and target assignment
    (kafka-consumer-groups.sh --describe --members --verbose's columns) and the protocol it
    speaks (MEMBER-TYPE: classic for a member of an online migration that still uses
    JoinGroup/SyncGroup, consumer for a ConsumerGroupHeartbeat one)."""
    owners = {(tp.topic_name, p): m for m in group.members for tp in m.assignment.topic_partitions
              for p in tp.partitions}
    committed = admin.committed(group_id)
    keys = sorted(set(committed) | set(owners))
    ends = admin.log_end_offsets(sorted({t for t, _ in keys}))
    cli_common.say(f"Consumer group '{group_id}': type consumer, assignor {group.assignor_name}, state "
                   f"{group.group_state}, group epoch {group.group_epoch}, assignment epoch {group.assignment_epoch}")
    cli_common.say()
    if not group.members:
        cli_common.say(f"Consumer group '{group_id}' has no active members.")
        cli_common.say()
    rows = []
    for t, p in keys:
        current, end, owner = committed.get((t, p)), ends.get((t, p)), owners.get((t, p))
        lag = None if current is None or end is None else max(end - current, 0)
        rows.append((group_id, t, p, current, end, lag, owner.member_id if owner else None,
                     owner.client_host if owner else None, owner.client_id if owner else None))
    cli_common.say_lines(render(("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                 "CONSUMER-ID", "HOST", "CLIENT-ID"), rows, right={2, 3, 4, 5}))
    if group.members:
        cli_common.say()
        cli_common.say_lines(render(
            ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "MEMBER-TYPE", "CURRENT-EPOCH", "CURRENT-ASSIGNMENT",
             "TARGET-ASSIGNMENT"),
            [(group_id, m.member_id, m.client_host, m.client_id, MEMBER_TYPES.get(m.member_type, "unknown"),
              m.member_epoch, _partitions(m.assignment), _partitions(m.target_assignment)) for m in group.members],
            right={5}))
    return 0


def _share_offsets(admin: Any, group_id: str) -> dict[tuple[str, int], int]:
    """Each share partition's start offset (the coordinator's durable state; -1 for one without
    state yet): `tidelog share-groups`' DescribeShareGroupOffsets, without the lag."""
    from tidelog.cli_share_groups import share_offsets

    return {key: start for key, (start, _) in share_offsets(admin, group_id).items()}


def _alter_share(admin: Any, group_id: str, topic: str, plan: dict[int, int]) -> None:
    """AlterShareGroupOffsets v0: each partition of `plan` starts again at its offset."""
    from common.protocol import messages
    from common.protocol.api_keys import ApiKey

    api = ApiKey.ALTER_SHARE_GROUP_OFFSETS
    m = messages.request_module(api, 0)
    request = m.AlterShareGroupOffsetsRequest(group_id=group_id, topics=(m.AlterShareGroupOffsetsRequestTopic(
        topic_name=topic, partitions=tuple(m.AlterShareGroupOffsetsRequestPartition(partition_index=p, start_offset=o)
                                           for p, o in sorted(plan.items()))),))
    response = admin._at_coordinator(group_id, api, 0, request, messages.encode_request,
                                     messages.response_decoder(api), lambda r: r.error_code)
    if response.error_code:
        raise ClusterError(_error_name(response.error_code), response.error_message or "cannot reset")
    for t in response.responses:
        for p in t.partitions:
            if p.error_code:
                raise ClusterError(_error_name(p.error_code), p.error_message or f"cannot reset {topic}-{p}")


def _describe_share(admin: Any, group_id: str, group: Any) -> int:
    """A KIP-932 share group: the group line, each share partition's start offset (SPSO: every
    record before it is acknowledged or archived) with the log end offset and the records past
    it, then each member with its epoch and assignment (kafka-share-groups.sh --describe's
    columns; many members may share a partition)."""
    cli_common.say(f"Share group '{group_id}': type share, assignor {group.assignor_name}, state "
                   f"{group.group_state}, group epoch {group.group_epoch}")
    cli_common.say()
    starts = _share_offsets(admin, group_id)
    ends = admin.log_end_offsets(sorted({t for t, _ in starts}))
    rows = [(group_id, t, p, start, ends.get((t, p)),
             None if start < 0 or ends.get((t, p)) is None else max(ends[(t, p)] - start, 0))
            for (t, p), start in sorted(starts.items())]
    cli_common.say_lines(render(("GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LOG-END-OFFSET", "LAG"), rows,
                                right={2, 3, 4, 5}))
    cli_common.say()
    if not group.members:
        cli_common.say(f"Share group '{group_id}' has no active members.")
        return 0
    cli_common.say_lines(render(
        ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "EPOCH", "ASSIGNMENT"),
        [(group_id, m.member_id, m.client_host, m.client_id, m.member_epoch, _partitions(m.assignment))
         for m in group.members], right={4}))
    return 0


def _error_name(code: int) -> str:
    from common.kafka_client import error_name
    return error_name(code)


def _delete(args: argparse.Namespace) -> int:
    from common.broker_connection import BrokerUnavailable

    client, admin = _admin(args)
    with client:
        try:
            admin.delete(args.group)
        except BrokerUnavailable as exc:
            raise _unavailable(exc) from None
    cli_common.say(f"Deletion of requested consumer groups ('{args.group}') was successful.")
    return 0


def _reset(args: argparse.Namespace) -> int:
    from common.broker_connection import BrokerUnavailable

    topic, only = _parse_topic(args.topic)
    by_time = None
    client, admin = _admin(args)
    with client:
        try:
            info = client.metadata([topic]).topics.get(topic)
            if info is None or info.error_code:
                raise ClusterError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {topic!r} does not exist")
            partitions = only if only is not None else sorted(info.partitions)
            earliest = {p: o for (t, p), o in admin.log_end_offsets([topic], EARLIEST).items()}
            latest = {p: o for (t, p), o in admin.log_end_offsets([topic]).items()}
            committed = {p: o for (t, p), o in admin.committed(args.group).items() if t == topic}
            if args.to_datetime is not None:
                try:
                    when = int(datetime.fromisoformat(args.to_datetime).timestamp() * 1000)
                except ValueError:
                    raise UsageError(f"--to-datetime {args.to_datetime!r} is not YYYY-MM-DDTHH:mm:SS.sss") from None
                by_time = {p: o for (t, p), o in admin.log_end_offsets([topic], when).items()}
            to, value = _target(args)
            share = _described(admin, args.group, "SHARE_GROUP_DESCRIBE", 1)
            starts = _share_offsets(admin, args.group)
            if share is not None or starts:  # a share group: its partitions' start offsets move
                from tidelog.cli_share_groups import reset_share_offsets

                reset_share_offsets(admin, args.group, share, topic, partitions, earliest=earliest, latest=latest,
                                    to=to, value=value, by_time=by_time, execute=args.execute)
                return 0
            described = admin.describe(args.group)
            if described.members:  # Kafka's tool refuses a dry run too
                raise ClusterError("NON_EMPTY_GROUP", f"Assignments can only be reset if the group "
                                   f"'{args.group}' is inactive, but the current state is {described.state}.")
            plan = plan_reset(partitions, committed, earliest, latest, to, value, by_time)
            if args.execute:
                admin.commit(args.group, {(topic, p): o for p, o in plan.items()})
        except BrokerUnavailable as exc:
            raise _unavailable(exc) from None
    cli_common.say_lines(render(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
                                [(args.group, topic, p, o) for p, o in sorted(plan.items())], right={2, 3}))
    return 0


run_list = cli_common.guarded("groups list", _list)
run_describe = cli_common.guarded("groups describe", _describe)
run_delete = cli_common.guarded("groups delete", _delete)
run_reset = cli_common.guarded("groups reset-offsets", _reset)
