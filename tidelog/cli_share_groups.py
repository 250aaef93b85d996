"""`tidelog share-groups list|describe|reset-offsets`: kafka-share-groups.sh over the Kafka protocol.

    tidelog share-groups list                        # the share groups (ListGroups, type share)
    tidelog share-groups describe --group jobs       # state and epochs, then per share partition its
                                                     # start offset and lag, then each member's epoch
                                                     # and assignment
    tidelog share-groups reset-offsets --group jobs --topic demo --to-earliest [--execute]

Option names and table columns are kafka-share-groups.sh's. describe reads ShareGroupDescribe
and DescribeShareGroupOffsets v1 (START-OFFSET: the share-partition start offset, every record
before it acknowledged or archived; LAG: the records from it to the high watermark not yet done,
as the group's coordinator counts them). reset-offsets (AlterShareGroupOffsets) prints the plan
(GROUP TOPIC PARTITION NEW-START-OFFSET) and changes nothing unless --execute; as Kafka's tool, it
refuses, dry run included, while the group has active members.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, Final

from common.table import render
from tidelog import cli_common
from tidelog.cli_common import ClusterError

if TYPE_CHECKING:
    from groups.offset_reset import ResetTo

SHARE_GROUP_TYPE: Final = "share"
LIST_GROUPS_VERSION: Final = 5  # v5 (KIP-848) has the types filter
SHARE_GROUP_DESCRIBE_VERSION: Final = 1
DESCRIBE_OFFSETS_VERSION: Final = 1  # v1 (KIP-1226) adds each partition's lag
UNKNOWN: Final = -1  # DescribeShareGroupOffsets' start offset or lag when there is none yet


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="share_groups_command", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="every share group of the cluster (kafka-share-groups --list)")
    cli_common.add_cluster_options(listing, admin=False)
    listing.add_argument("--state", help="only groups in this state (Empty, Stable, Dead)")
    listing.set_defaults(run=run_list)
    describe = actions.add_parser("describe", help="state, epochs, each partition's start offset and lag, members")
    cli_common.add_cluster_options(describe, admin=False)
    describe.add_argument("--group", required=True)
    describe.set_defaults(run=run_describe)
    reset = actions.add_parser("reset-offsets", help="move an empty share group's start offsets "
                                                     "(dry run unless --execute)")
    cli_common.add_reset_offsets_options(reset, "set the new start offsets")
    reset.set_defaults(run=run_reset)


def share_offsets(admin: Any, group_id: str) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (start offset, lag) of each share partition the group has state
    for (DescribeShareGroupOffsets v1; -1 where there is none yet)."""
    from common.protocol import messages
    from common.protocol.api_keys import ApiKey

    api = ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS
    m = messages.request_module(api, DESCRIBE_OFFSETS_VERSION)
    request = m.DescribeShareGroupOffsetsRequest(groups=(m.DescribeShareGroupOffsetsRequestGroup(
        group_id=group_id, topics=None),))
    response = admin._at_coordinator(group_id, api, DESCRIBE_OFFSETS_VERSION, request, messages.encode_request,
                                     messages.response_decoder(api), lambda r: r.groups[0].error_code)
    return {(t.topic_name, p.partition_index): (p.start_offset, p.lag) for t in response.groups[0].topics
            for p in t.partitions if p.error_code == 0}


def _list(args: argparse.Namespace) -> int:
    from common.kafka_client import error_name
    from common.protocol import messages
    from common.protocol.api_keys import ApiKey
    from tidelog.cli_groups import _admin, _unavailable
    from common.broker_connection import BrokerUnavailable

    client, _ = _admin(args)
    m = messages.request_module(ApiKey.LIST_GROUPS, LIST_GROUPS_VERSION)
    request = m.ListGroupsRequest(states_filter=() if args.state is None else (args.state,),
                                  types_filter=(SHARE_GROUP_TYPE,))
    names: set[str] = set()
    with client:
        try:
            client.metadata([])
            for broker_id in sorted(client.brokers):  # each broker lists the groups it coordinates
                response = client.call(broker_id, ApiKey.LIST_GROUPS, LIST_GROUPS_VERSION, request,
                                       messages.encode_request, messages.response_decoder(ApiKey.LIST_GROUPS))
                if response.error_code:
                    raise ClusterError(error_name(response.error_code), f"broker {broker_id} could not list its groups")
                names.update(g.group_id for g in response.groups if g.group_type == SHARE_GROUP_TYPE)
        except BrokerUnavailable as exc:
            raise _unavailable(exc) from None
    cli_common.say_lines(sorted(names))
    return 0


def _describe(args: argparse.Namespace) -> int:
    from common.broker_connection import BrokerUnavailable
    from tidelog.cli_groups import _admin, _described, _partitions, _unavailable

    client, admin = _admin(args)
    with client:
        try:
            group = _described(admin, args.group, "SHARE_GROUP_DESCRIBE", SHARE_GROUP_DESCRIBE_VERSION)
            if group is None:
                raise ClusterError("GROUP_ID_NOT_FOUND", f"Share group '{args.group}' does not exist.")
            offsets = share_offsets(admin, args.group)
        except BrokerUnavailable as exc:
            raise _unavailable(exc) from None
    cli_common.say(f"Share group '{args.group}': state {group.group_state}, assignor {group.assignor_name}, "
                   f"group epoch {group.group_epoch}, assignment epoch {group.assignment_epoch}, "
                   f"{len(group.members)} member(s)")
    cli_common.say()
    rows = [(args.group, t, p, _shown(start), _shown(lag)) for (t, p), (start, lag) in sorted(offsets.items())]
    cli_common.say_lines(render(("GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"), rows, right={2, 3, 4}))
    cli_common.say()
    if not group.members:
        cli_common.say(f"Share group '{args.group}' has no active members.")
        return 0
    cli_common.say_lines(render(
        ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "MEMBER-EPOCH", "#PARTITIONS", "ASSIGNMENT"),
        [(args.group, m.member_id, m.client_host, m.client_id, m.member_epoch,
          sum(len(tp.partitions) for tp in m.assignment.topic_partitions), _partitions(m.assignment))
         for m in sorted(group.members, key=lambda m: m.member_id)], right={4, 5}))
    return 0


def _shown(value: int) -> int | None:
    """-1 (no state yet, no lag known) shows as kafka-share-groups.sh's "-"."""
    return None if value == UNKNOWN else value


def _reset(args: argparse.Namespace) -> int:
    from common.broker_connection import BrokerUnavailable
    from tidelog.cli_groups import EARLIEST, _admin, _described, _parse_topic, _target, _unavailable

    topic, only = _parse_topic(args.topic)
    client, admin = _admin(args)
    with client:
        try:
            info = client.metadata([topic]).topics.get(topic)
            if info is None or info.error_code:
                raise ClusterError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {topic!r} does not exist")
            group = _described(admin, args.group, "SHARE_GROUP_DESCRIBE", SHARE_GROUP_DESCRIBE_VERSION)
            to, value = _target(args)
            reset_share_offsets(admin, args.group, group, topic, only if only is not None else sorted(info.partitions),
                                earliest={p: o for (t, p), o in admin.log_end_offsets([topic], EARLIEST).items()},
                                latest={p: o for (t, p), o in admin.log_end_offsets([topic]).items()},
                                to=to, value=value, by_time=None, execute=args.execute)
        except BrokerUnavailable as exc:
            raise _unavailable(exc) from None
    return 0


def reset_share_offsets(admin: Any, group_id: str, group: Any | None, topic: str, partitions: list[int], *,
                        earliest: dict[int, int], latest: dict[int, int], to: ResetTo, value: int,
                        by_time: dict[int, int] | None, execute: bool) -> None:
    """A share group's reset (this command's and `tidelog groups reset-offsets`'): refused, dry
    run included, while `group` (its ShareGroupDescribe) has active members, as
    kafka-share-groups.sh; else the plan printed, and made with AlterShareGroupOffsets when
    `execute`."""
    from groups.offset_reset import plan_reset
    from tidelog.cli_groups import _alter_share

    if group is not None and group.members:
        raise ClusterError("NON_EMPTY_GROUP", f"Share group '{group_id}' has active members: "
                           f"stop them before resetting its offsets.")
    current = {p: start for (t, p), (start, _) in share_offsets(admin, group_id).items() if t == topic and start >= 0}
    plan = plan_reset(partitions, current, earliest, latest, to, value, by_time)
    if execute:
        _alter_share(admin, group_id, topic, plan)
    cli_common.say_lines(render(("GROUP", "TOPIC", "PARTITION", "NEW-START-OFFSET"),
                                [(group_id, topic, p, o) for p, o in sorted(plan.items())], right={2, 3}))


run_list = cli_common.guarded("share-groups list", _list)
run_describe = cli_common.guarded("share-groups describe", _describe)
run_reset = cli_common.guarded("share-groups reset-offsets", _reset)
