"""KIP-848's group APIs in, responses out: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69).

The rules are `groups/consumer_heartbeat.py`'s, run on the coordinator's image of the group's
`__consumer_offsets` partition (`GroupCoordinator.run_consumer`); the answer goes once their
records committed. Topics are named by id on the wire, as Kafka's messages do; the rule reads
the broker's metadata image for names, ids and partition counts.

KIP-848's online migration (`groups/migration.py`): a member joining a classic group with
members upgrades it to a consumer group, and the last consumer-protocol member leaving turns
it back into a classic one, as `group.consumer.migration.policy` allows.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import timedelta
from typing import Any, Final

from broker.group_coordinator.runtime import CoordinatorError, GroupCoordinator
from broker.handlers.context import ClientInfo
from common.errors import ErrorCode
from common.protocol import acls, messages
from common.protocol.api_keys import ApiKey
from common.protocol.messages import NO_THROTTLE, build, error_code
from groups.consumer_group import ConsumerGroup, ConsumerGroupState
from groups.group_configs import consumer_config
from metadata.records import ConfigResourceType
from groups.assignors import NO_RACKS
from broker.group_coordinator.consumer_ops import partition_racks, topics_of
from groups.consumer_heartbeat import HeartbeatOutcome, HeartbeatRequest, HeartbeatResponse, Topics
from groups.migration import migrating_heartbeat
from common.protocol.metadata import wire_topic_id
from groups.consumer_records import Assignment, image_topic_id
from groups.image import GroupsImage
from groups.records import CoordinatorRecord, GroupMetadataKey
from metadata.image import MetadataImage

E = ErrorCode
GROUP_OPERATIONS_BITS: Final = acls.operations_bitfield(acls.GROUP_OPERATIONS)
AUTHORIZED_OPERATIONS_OMITTED: Final = -2147483648  # Kafka's INT32_MIN: "not asked for"


def _image_id(image: MetadataImage, wire: uuid.UUID) -> str:
    """A wire topic id as the image spells it (minted ids are base64url of the 16 bytes; an id of
    another form, in hand-written test images, is found by comparing wire forms)."""
    minted = image_topic_id(wire)
    if image.topic_by_id(minted) is not None:
        return minted
    for topic in image.topics.by_id.values():
        if wire_topic_id(topic.topic_id) == wire:
            return topic.topic_id
    return minted  # a deleted topic: owned by nobody the image knows


def _by_topic(assignment: Assignment) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic_id, partition in sorted(assignment):
        out.setdefault(topic_id, []).append(partition)
    return out


# ---- ConsumerGroupHeartbeat ----------------------------------------------------------------


def _heartbeat_response(version: int, r: HeartbeatResponse) -> Any:
    m = messages.response_module(ApiKey.CONSUMER_GROUP_HEARTBEAT, version)
    assignment = None
    if r.assignment is not None:
        assignment = m.Assignment(topic_partitions=tuple(
            m.TopicPartitions(topic_id=wire_topic_id(t), partitions=tuple(ps)) for t, ps in _by_topic(r.assignment).items()))
    return build(m.ConsumerGroupHeartbeatResponse, throttle_time=NO_THROTTLE, error_code=error_code(r.error),
                 error_message=r.message, member_id=r.member_id, member_epoch=r.member_epoch,
                 heartbeat_interval=timedelta(milliseconds=r.heartbeat_interval_ms), assignment=assignment)


def _rule(state: GroupsImage, req: HeartbeatRequest, topics: Topics, coord: GroupCoordinator,
          now_ms: int) -> HeartbeatOutcome:
    group = state.consumer_groups.get(req.group_id)
    racked = req.rack_id is not None or (group is not None and any(m.rack_id for m in group.members.values()))
    config = consumer_config(coord.settings.consumer, coord.image().config(ConfigResourceType.GROUP, req.group_id))
    return migrating_heartbeat(state.groups.get(req.group_id), group, req, topics=topics, config=config,
                               classic_config=coord.config, now_ms=now_ms,
                               partition_racks=partition_racks(coord.image()) if racked else NO_RACKS)


async def consumer_heartbeat(coord: GroupCoordinator, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's ConsumerGroupHeartbeatRequest of `version` (v0: the coordinator names a
    joining member without an id; v1: the consumer always names itself)."""
    member_id = req.member_id
    if version == 0 and not member_id and req.member_epoch == 0:
        member_id = str(uuid.uuid4())
    try:
        partition = coord.partition_for(req.group_id)
    except CoordinatorError as e:
        return _heartbeat_response(version, HeartbeatResponse(e.code, str(e), member_id))
    image = coord.image()
    owned = None if req.topic_partitions is None else frozenset(
        (_image_id(image, tp.topic_id), p) for tp in req.topic_partitions for p in tp.partitions)
    core = HeartbeatRequest(
        req.group_id, member_id, req.member_epoch, req.instance_id, req.rack_id,
        messages.milliseconds(req.rebalance_timeout), req.subscribed_topic_names,
        getattr(req, "subscribed_topic_regex", None), req.server_assignor, owned, client.client_id, client.host)
    topics, now_ms = topics_of(image), coord.now_ms()
    outcome, error = await coord.run_consumer(partition, req.group_id,
                                              lambda state: _rule(state, core, topics, coord, now_ms))
    if error is not E.NONE:
        return _heartbeat_response(version, HeartbeatResponse(error, None, member_id))
    return _heartbeat_response(version, outcome.response)


# ---- ConsumerGroupDescribe -----------------------------------------------------------------


def _described(m: Any, group_id: str, group: ConsumerGroup, image: MetadataImage, default_assignor: str,
               operations: int) -> Any:
    names = {t.topic_id: name for name, t in image.topics.by_name.items()}

    def assignment(a: Assignment) -> Any:
        return m.Assignment(topic_partitions=tuple(
            m.TopicPartitions(topic_id=wire_topic_id(t), topic_name=names.get(t, ""), partitions=tuple(ps))
            for t, ps in _by_topic(a).items()))

    members = tuple(build(
        m.Member, member_id=member.member_id, instance_id=member.instance_id, rack_id=member.rack_id,
        member_epoch=member.member_epoch, client_id=member.client_id, client_host=member.client_host,
        subscribed_topic_names=member.subscribed_topic_names, subscribed_topic_regex=member.subscribed_topic_regex,
        assignment=assignment(member.assigned), target_assignment=assignment(group.target.get(member.member_id,
                                                                                               frozenset())),
        member_type=0 if member.uses_classic_protocol else 1)  # v1: 0 classic, 1 consumer protocol, -1 unknown
        for _, member in sorted(group.members.items()))
    return build(m.DescribedGroup, error_code=error_code(E.NONE), group_id=group_id, group_state=group.state.value,
                 group_epoch=group.group_epoch, assignment_epoch=group.assignment_epoch,
                 assignor_name=group.preferred_assignor(default_assignor), members=members,
                 authorized_operations=operations)


async def consumer_describe(coord: GroupCoordinator, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's ConsumerGroupDescribeRequest of `version`."""
    m = messages.response_module(ApiKey.CONSUMER_GROUP_DESCRIBE, version)
    operations = GROUP_OPERATIONS_BITS if req.include_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED
    out = []
    for group_id in req.group_ids:
        def failed(code: ErrorCode, message: str) -> Any:
            return build(m.DescribedGroup, error_code=error_code(code), error_message=message, group_id=group_id,
                         group_state=ConsumerGroupState.DEAD.value, group_epoch=-1, assignment_epoch=-1,
                         assignor_name="", members=(), authorized_operations=operations)
        try:
            partition = coord.partition_for(group_id)
        except CoordinatorError as e:
            out.append(failed(e.code, str(e)))
            continue
        group = coord.consumer_group(partition, group_id)
        if group is None:  # Kafka: unknown, or a classic group
            what = "is not a consumer group" if coord.groups(partition).groups.get(group_id) else "not found"
            out.append(failed(E.GROUP_ID_NOT_FOUND, f"Group {group_id} {what}."))
            continue
        out.append(_described(m, group_id, group, coord.image(), coord.settings.consumer.assignors[0], operations))
    return build(m.ConsumerGroupDescribeResponse, throttle_time=NO_THROTTLE, groups=tuple(out))
