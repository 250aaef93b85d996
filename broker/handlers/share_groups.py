"""KIP-932's group APIs in, responses out: ShareGroupHeartbeat (76) and ShareGroupDescribe (77).

A share group lives on the coordinator its id hashes to (the `__consumer_offsets` partition
leader, as for every group: FindCoordinator GROUP); the rules are `groups/share_group.py`'s,
run on `broker.share.state.ShareBroker`. Topics are named by id on the wire. A group id held
by a classic or consumer-protocol group is refused with GROUP_ID_NOT_FOUND ("not a share
group"), as Kafka refuses a group of another type.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from functools import partial
from typing import Any, Final

from broker.coordinator.errors import CoordinatorError
from broker.handlers.consumer_groups import GROUP_OPERATIONS_BITS, AUTHORIZED_OPERATIONS_OMITTED, topics_of
from broker.handlers import groups as group_handlers
from broker.handlers.context import BrokerContext, ClientInfo
from broker.handlers.metadata import broker_endpoint
from broker.share.persister import ShareStore
from broker.share.state import SWEEP_INTERVAL_MS, ShareBroker, ShareSettings
from common.errors import ErrorCode, KafkaError
from common.topic_partition import TopicPartition
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol.messages import NO_THROTTLE, build, error_code
from common.protocol.metadata import wire_topic_id
from groups import share_group as sg

E = ErrorCode
SHARE_ASSIGNOR: Final = "simple"  # Kafka's share assignor's name, as ShareGroupDescribe reports it
SHARE_GROUP_TYPE: Final = "share"  # ListGroups' group_type and protocol_type of a share group (Kafka's)


def share_broker(ctx: BrokerContext) -> ShareBroker:
    """This broker's share state, made when first used (on the group coordinator's timers)."""
    if ctx.share is None:
        store = ShareStore(ctx.image, lambda image, broker: broker_endpoint(ctx, image, broker, ctx.listener_name),
                           client_id=f"broker-{ctx.broker_id}-share-persister")
        share = ctx.share = ShareBroker(ShareSettings.from_config(ctx.config), ctx.groups.timers, store)
        share.timers.schedule_every(("share-sweep", ctx.broker_id), SWEEP_INTERVAL_MS,
                                    lambda now_ms: share.sweep(leads=partial(_leads, ctx),
                                                               coordinates=partial(_coordinates, ctx)))
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


def _arm_session(ctx: BrokerContext, share: ShareBroker, group_id: str, member_id: str, *, leaving: bool) -> None:
    """The member's session deadline (soft state): when it passes, the member is removed."""
    key = ("share-session", group_id, member_id)
    if leaving:
        share.timers.cancel(key)
        return

    def expire(now_ms: int) -> None:
        group = share.groups.get(group_id)
        if group is None or member_id not in group.members:
            return
        out = sg.expire(group, [member_id], topics=_topics(ctx))
        share.apply_group(group_id, out.records, out.reason)

    share.timers.schedule_in(key, share.settings.group.session_timeout_ms, expire)


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
    core = sg.HeartbeatRequest(req.group_id, req.member_id, req.member_epoch, req.rack_id,
                               None if req.subscribed_topic_names is None else tuple(req.subscribed_topic_names),
                               client.client_id, client.host)
    out = sg.heartbeat(share.groups.get(req.group_id), core, topics=_topics(ctx), config=share.settings.group)
    if out.response.error is E.NONE:
        share.apply_group(req.group_id, out.records, out.reason)
        _arm_session(ctx, share, req.group_id, req.member_id, leaving=req.member_epoch == sg.LEAVE_EPOCH)
    return _heartbeat_response(version, out.response)


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
    share = share_broker(ctx)
    out = []
    for group_id in req.group_ids:
        def failed(code: ErrorCode, message: str) -> Any:
            return build(m.DescribedGroup, error_code=error_code(code), error_message=message, group_id=group_id,
                         group_state=sg.ShareGroupState.DEAD.value, group_epoch=-1, assignment_epoch=-1,
                         assignor_name="", members=(), authorized_operations=operations)
        try:
            ctx.groups.partition_for(group_id)
        except CoordinatorError as e:
            out.append(failed(e.code, str(e)))
            continue
        group = share.groups.get(group_id)
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
    if ctx.share is None or (types and SHARE_GROUP_TYPE not in types):
        return response
    m = messages.response_module(ApiKey.LIST_GROUPS, version)
    share: ShareBroker = ctx.share
    listed = []
    for group_id, group in sorted(share.groups.items()):
        try:
            ctx.groups.partition_for(group_id)
        except CoordinatorError:  # its coordinator moved away: no longer this broker's to list
            continue
        if not states or group.state.value.lower() in states:
            listed.append(build(m.ListedGroup, group_id=group_id, group_state=group.state.value,
                                protocol_type=SHARE_GROUP_TYPE, group_type=SHARE_GROUP_TYPE))
    return replace(response, groups=(*response.groups, *listed))
