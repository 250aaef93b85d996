"""KIP-932's group APIs in, responses out: ShareGroupHeartbeat (76) and ShareGroupDescribe (77).

A share group lives on the coordinator its id hashes to (the `__consumer_offsets` partition
leader, as for every group: FindCoordinator GROUP); the rules are `groups/share_group.py`'s,
run on `broker.share.state.ShareBroker`. Topics are named by id on the wire. A group id held
by a classic or consumer-protocol group is refused with GROUP_ID_NOT_FOUND ("not a share
group"), as Kafka refuses a group of another type.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from functools import partial
from typing import Any, Final

from broker.coordinator.errors import CoordinatorError, client_error
from broker.coordinator.runtime import CoordinatorResult
from broker.handlers.consumer_groups import GROUP_OPERATIONS_BITS, AUTHORIZED_OPERATIONS_OMITTED, topics_of
from broker.handlers import groups as group_handlers
from broker.handlers.context import BrokerContext, ClientInfo
from broker.handlers.metadata import broker_endpoint
from broker.share.persister import ShareStore
from broker.share.state import SWEEP_INTERVAL_MS, ShareBroker, ShareSettings, share_settings
from common.errors import ErrorCode, KafkaError
from common.topic_partition import TopicPartition
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol.messages import NO_THROTTLE, build, error_code
from common.protocol.metadata import wire_topic_id
from groups import share_group as sg, share_records
from groups.image import GroupsImage
from groups.partitioner import GROUP_METADATA_TOPIC_NAME
from metadata.records import ConfigResourceType

log = logging.getLogger(__name__)
E = ErrorCode
SHARE_ASSIGNOR: Final = "simple"  # Kafka's share assignor's name, as ShareGroupDescribe reports it
SHARE_GROUP_TYPE: Final = "share"  # ListGroups' group_type and protocol_type of a share group (Kafka's)


def share_broker(ctx: BrokerContext) -> ShareBroker:
    """This broker's share state, made when first used (on the group coordinator's timers)."""
    if ctx.share is None:
        store = ShareStore(ctx.image, lambda image, broker: broker_endpoint(ctx, image, broker, ctx.listener_name),
                           client_id=f"broker-{ctx.broker_id}-share-persister")
        share = ctx.share = ShareBroker(ShareSettings.from_config(ctx.config), ctx.groups.timers, store)
        share.settings_for = partial(group_settings, ctx, share)

        def sweep(now_ms: int) -> None:
            share.sweep(leads=partial(_leads, ctx), coordinates=partial(_coordinates, ctx))
            for group_id, (group, _) in sorted(_share_groups(ctx).items()):  # after a load: their sessions
                timeout_ms = group_settings(ctx, share, group_id).group.session_timeout_ms
                for member_id in sorted(group.members):
                    if not share.has_session(group_id, member_id):
                        arm_session(ctx, share, group_id, member_id, timeout_ms)
        share.timers.schedule_every(("share-sweep", ctx.broker_id), SWEEP_INTERVAL_MS, sweep)
    made: ShareBroker = ctx.share
    return made


def _leads(ctx: BrokerContext, tp: TopicPartition) -> bool:
    try:
        ctx.replicas.leader_partition(tp)
    except KafkaError:
        return False
    return True


def _coordinates(ctx: BrokerContext, group_id: str) -> bool:
    try:
        ctx.groups.partition_for(group_id)
    except CoordinatorError as e:
        return e.code is E.COORDINATOR_LOAD_IN_PROGRESS  # loading here: still this broker's
    return True


def _other_type(ctx: BrokerContext, partition: int, group_id: str) -> bool:
    groups = ctx.groups.groups(partition)
    return group_id in groups.groups or group_id in groups.consumer_groups


def _topics(ctx: BrokerContext) -> sg.Topics:
    return topics_of(ctx.image())


def _by_topic(assignment: sg.Assignment) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic_id, partition in sorted(assignment):
        out.setdefault(topic_id, []).append(partition)
    return out


# ---- ShareGroupHeartbeat ------------------------------------------------------------------


def _heartbeat_response(version: int, r: sg.HeartbeatResponse) -> Any:
    m = messages.response_module(ApiKey.SHARE_GROUP_HEARTBEAT, version)
    assignment = None
    if r.assignment is not None:
        assignment = m.Assignment(topic_partitions=tuple(
            m.TopicPartitions(topic_id=wire_topic_id(t), partitions=tuple(ps)) for t, ps in _by_topic(r.assignment).items()))
    return build(m.ShareGroupHeartbeatResponse, throttle_time=NO_THROTTLE, error_code=error_code(r.error),
                 error_message=r.message, member_id=r.member_id or None, member_epoch=r.member_epoch,
                 heartbeat_interval=timedelta(milliseconds=r.heartbeat_interval_ms), assignment=assignment)


def _run(ctx: BrokerContext, partition: int, group_id: str,
         rule: Callable[[sg.ShareGroup | None], sg.HeartbeatOutcome]) -> asyncio.Future[sg.HeartbeatOutcome | None]:
    """`rule` on the group as the coordinator's current image holds it; its records are Kafka's
    ShareGroup* records of the group's `__consumer_offsets` partition (so a new coordinator
    loads the group), and the future holds its outcome once they commit (CoordinatorError if
    they cannot). Run in the coordinator's order: two heartbeats never decide on one epoch."""
    coordinator = ctx.groups

    def operation(state: GroupsImage) -> CoordinatorResult[GroupsImage, sg.HeartbeatOutcome]:
        before = state.share_groups.get(group_id)
        out = rule(before)
        if out.response.error is not E.NONE or not out.records:
            return CoordinatorResult(answer=out)
        records = share_records.membership_records(before or sg.ShareGroup(group_id), out.records)

        def logged(image: GroupsImage) -> GroupsImage:
            after = image.share_groups.get(group_id)
            if after is not None and (before is None or before.group_epoch != after.group_epoch):
                log.info("Share group %s (%s-%d) %s -> %s, group epoch %d, %d member(s): %s", group_id,
                         GROUP_METADATA_TOPIC_NAME, partition, "absent" if before is None else before.state.value,
                         after.state.value, after.group_epoch, len(after.members), out.reason or "-")
            return image
        return CoordinatorResult(coordinator.shard.encode(records), out, memory=logged)

    return coordinator.runtime.submit(partition, operation)


def arm_session(ctx: BrokerContext, share: ShareBroker, group_id: str, member_id: str, timeout_ms: int) -> None:
    """The member's session deadline (soft state, as Kafka keeps it): when it passes, the
    member is removed (`groups.share_group.expire`), unless its coordinator moved meanwhile
    (the new one arms its own: `ShareBroker.sweep`)."""
    def expire(now_ms: int) -> None:
        share.forget_session(group_id, member_id)
        try:
            partition = ctx.groups.partition_for(group_id)
            future = _run(ctx, partition, group_id, lambda group: sg.expire(group, [member_id], topics=_topics(ctx))
                          if group is not None else sg.NO_OUTCOME)
        except CoordinatorError:
            return
        future.add_done_callback(_quiet)

    share.arm_session(group_id, member_id, timeout_ms, expire)


def _quiet(future: asyncio.Future[Any]) -> None:
    """A background write's failure is the coordinator's to log (its write failed or moved)."""
    if not future.cancelled():
        future.exception()


def group_settings(ctx: BrokerContext, share: ShareBroker, group_id: str) -> ShareSettings:
    """The broker's share settings with the group's own share.* configs (IncrementalAlterConfigs
    on GROUP), within the broker's bounds."""
    return share_settings(share.settings, ctx.image().config(ConfigResourceType.GROUP, group_id))


async def share_heartbeat(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's ShareGroupHeartbeatRequest v1 (the member always names itself)."""
    try:
        partition = ctx.groups.partition_for(req.group_id)
    except CoordinatorError as e:
        return _heartbeat_response(version, sg.HeartbeatResponse(e.code, str(e), req.member_id))
    if _other_type(ctx, partition, req.group_id):
        return _heartbeat_response(version, sg.HeartbeatResponse(
            E.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a share group.", req.member_id))
    share = share_broker(ctx)
    settings = group_settings(ctx, share, req.group_id)
    core = sg.HeartbeatRequest(req.group_id, req.member_id, req.member_epoch, req.rack_id,
                               None if req.subscribed_topic_names is None else tuple(req.subscribed_topic_names),
                               client.client_id, client.host)
    try:
        out = await _run(ctx, partition, req.group_id,
                         lambda group: sg.heartbeat(group, core, topics=_topics(ctx), config=settings.group))
    except CoordinatorError as e:
        return _heartbeat_response(version, sg.HeartbeatResponse(client_error(e.code), str(e), req.member_id))
    assert out is not None
    if out.response.error is E.NONE:
        if req.member_epoch == sg.LEAVE_EPOCH:
            share.forget_session(req.group_id, req.member_id)
        else:
            arm_session(ctx, share, req.group_id, req.member_id, settings.group.session_timeout_ms)
    return _heartbeat_response(version, out.response)


def _share_groups(ctx: BrokerContext) -> dict[str, tuple[sg.ShareGroup, int]]:
    """Every share group coordinated here (its committed state), with its `__consumer_offsets` partition."""
    out = {}
    for partition in ctx.groups.active_partitions():
        try:
            groups = ctx.groups.runtime.committed(partition).share_groups
        except CoordinatorError:
            continue
        for group_id, group in groups.items():
            out[group_id] = (group, partition)
    return out


# ---- ShareGroupDescribe -------------------------------------------------------------------


def _described(m: Any, group: sg.ShareGroup, ctx: BrokerContext, operations: int) -> Any:
    names = {t.topic_id: name for name, t in ctx.image().topics.by_name.items()}

    def assignment(a: sg.Assignment) -> Any:
        return m.Assignment(topic_partitions=tuple(
            m.TopicPartitions(topic_id=wire_topic_id(t), topic_name=names.get(t, ""), partitions=tuple(ps))
            for t, ps in _by_topic(a).items()))

    members = tuple(build(
        m.Member, member_id=member.member_id, rack_id=member.rack_id, member_epoch=member.member_epoch,
        client_id=member.client_id, client_host=member.client_host,
        subscribed_topic_names=member.subscribed_topic_names, assignment=assignment(member.assignment))
        for _, member in sorted(group.members.items()))
    return build(m.DescribedGroup, error_code=error_code(E.NONE), group_id=group.group_id,
                 group_state=group.state.value, group_epoch=group.group_epoch, assignment_epoch=group.group_epoch,
                 assignor_name=SHARE_ASSIGNOR, members=members, authorized_operations=operations)


async def share_describe(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    m = messages.response_module(ApiKey.SHARE_GROUP_DESCRIBE, version)
    operations = GROUP_OPERATIONS_BITS if req.include_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED
    share_broker(ctx)  # its sweep arms the sessions of members loaded here
    out = []
    for group_id in req.group_ids:
        def failed(code: ErrorCode, message: str) -> Any:
            return build(m.DescribedGroup, error_code=error_code(code), error_message=message, group_id=group_id,
                         group_state=sg.ShareGroupState.DEAD.value, group_epoch=-1, assignment_epoch=-1,
                         assignor_name="", members=(), authorized_operations=operations)
        try:
            group = ctx.groups.runtime.committed(ctx.groups.partition_for(group_id)).share_groups.get(group_id)
        except CoordinatorError as e:
            out.append(failed(e.code, str(e)))
            continue
        if group is None:
            out.append(failed(E.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."))
            continue
        out.append(_described(m, group, ctx, operations))
    return build(m.ShareGroupDescribeResponse, throttle_time=NO_THROTTLE, groups=tuple(out))


# ---- ListGroups -----------------------------------------------------------------------------


async def list_groups(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """ListGroups: the classic and consumer-protocol groups (broker/handlers/groups.py), then the
    share groups coordinated here, of type "share" (v5's types filter, KIP-848/KIP-932)."""
    response = await group_handlers.list_(ctx.groups, req, version, client)
    types = {t.lower() for t in getattr(req, "types_filter", ())}
    states = {s.lower() for s in getattr(req, "states_filter", ())}
    if types and SHARE_GROUP_TYPE not in types:
        return response
    m = messages.response_module(ApiKey.LIST_GROUPS, version)
    listed = []
    for group_id, (group, _) in sorted(_share_groups(ctx).items()):
        if not states or group.state.value.lower() in states:
            listed.append(build(m.ListedGroup, group_id=group_id, group_state=group.state.value,
                                protocol_type=SHARE_GROUP_TYPE, group_type=SHARE_GROUP_TYPE))
    return replace(response, groups=(*response.groups, *listed))
