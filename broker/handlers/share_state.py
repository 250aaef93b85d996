"""KIP-932's share-state APIs, answered by the share group's coordinator: ReadShareGroupState
(84) and WriteShareGroupState (85), broker to broker, and an admin's DescribeShareGroupOffsets
(90), AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92).

A share partition's leader reads its state when it starts the share partition and writes it
after every change it must not lose (`broker.share.persister`). Kafka answers them at its share
coordinator over `__share_group_state`; tidelog's share coordinator is the group's coordinator,
which keeps the snapshot as a record of the group's `__consumer_offsets` partition
(`groups.share_records`): a write answers once its record committed (acks=all), a read answers
from the committed state. A snapshot is the partition's whole state, so the last one written wins.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from broker.coordinator.errors import CoordinatorError, client_error
from broker.coordinator.runtime import CoordinatorResult
from broker.handlers.context import BrokerContext, ClientInfo
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol.messages import NO_THROTTLE, build, error_code
from common.protocol.metadata import wire_topic_id
from groups.consumer_records import image_topic_id
from groups.image import GroupsImage
from common.topic_partition import TopicPartition
from groups.share_records import UNKNOWN_LAG, ShareSnapshotKey, ShareSnapshotValue, ShareStateRecord, share_lag

E = ErrorCode
UNINITIALIZED = -1  # state epoch and start offset of a share partition with no state yet (Kafka's)


async def read_share_state(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    m = messages.response_module(ApiKey.READ_SHARE_GROUP_STATE, version)
    results = []
    for topic in req.topics:
        answers = []
        for p in topic.partitions:
            key = ShareSnapshotKey(req.group_id, image_topic_id(topic.topic_id), p.partition)
            try:
                state = ctx.groups.runtime.committed(ctx.groups.partition_for(req.group_id)).share_states.get(key)
            except CoordinatorError as e:
                answers.append(build(m.PartitionResult, partition=p.partition, error_code=error_code(e.code),
                                     error_message=str(e), state_epoch=UNINITIALIZED, start_offset=UNINITIALIZED,
                                     state_batches=()))
                continue
            answers.append(build(
                m.PartitionResult, partition=p.partition, error_code=E.NONE,
                state_epoch=UNINITIALIZED if state is None else state.state_epoch,
                start_offset=UNINITIALIZED if state is None else state.start_offset,
                state_batches=() if state is None else tuple(m.StateBatch(
                    first_offset=b[0], last_offset=b[1], delivery_state=b[2], delivery_count=b[3])
                    for b in state.batches)))
        results.append(m.ReadStateResult(topic_id=topic.topic_id, partitions=tuple(answers)))
    return m.ReadShareGroupStateResponse(results=tuple(results))


async def write_share_state(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    m = messages.response_module(ApiKey.WRITE_SHARE_GROUP_STATE, version)
    results = []
    for topic in req.topics:
        answers = []
        for p in topic.partitions:
            record = ShareStateRecord(
                ShareSnapshotKey(req.group_id, image_topic_id(topic.topic_id), p.partition),
                ShareSnapshotValue(p.state_epoch, p.leader_epoch, p.start_offset, tuple(
                    (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches)))
            code, message = await _write(ctx, req.group_id, record)
            answers.append(build(m.PartitionResult, partition=p.partition, error_code=code, error_message=message))
        results.append(m.WriteStateResult(topic_id=topic.topic_id, partitions=tuple(answers)))
    return m.WriteShareGroupStateResponse(results=tuple(results))


async def _append(ctx: BrokerContext, group_id: str,
                  operation: Callable[[GroupsImage], CoordinatorResult[GroupsImage, ErrorCode]]) -> tuple[
        ErrorCode, str | None]:
    """`operation`'s answer, run on the group's coordinator partition; the client's code and the
    coordinator's reason when this broker cannot write there (not the coordinator, loading, ...)."""
    try:
        answer = await ctx.groups.runtime.write(ctx.groups.partition_for(group_id), operation)
    except CoordinatorError as e:
        return client_error(e.code), str(e)
    return E.NONE if answer is None else answer, None


async def _write(ctx: BrokerContext, group_id: str, record: ShareStateRecord) -> tuple[ErrorCode, str | None]:
    coordinator = ctx.groups
    assert record.value is not None

    def operation(state: GroupsImage) -> CoordinatorResult[GroupsImage, ErrorCode]:
        # a leader of an older leader epoch (one that has not learnt it was replaced) is fenced,
        # as Kafka's share coordinator fences it: the new leader's snapshot stays
        held = state.share_states.get(record.key)
        if held is not None and record.value is not None:
            if held.state_epoch > record.value.state_epoch:  # an admin altered the offsets since
                return CoordinatorResult(answer=E.FENCED_STATE_EPOCH)
            if held.leader_epoch > record.value.leader_epoch:
                return CoordinatorResult(answer=E.FENCED_LEADER_EPOCH)
        return CoordinatorResult(coordinator.shard.encode((record,)), E.NONE)

    code, message = await _append(ctx, group_id, operation)
    if code in (E.FENCED_LEADER_EPOCH, E.FENCED_STATE_EPOCH):
        return code, f"a snapshot of a newer epoch is held for {record.key}"
    return code, message


async def describe_share_offsets(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """DescribeShareGroupOffsets (90): each share partition's start offset (SPSO), the leader
    epoch of its last snapshot and (v1) its lag, from the committed state (-1: no state yet);
    topics null: every share partition of the group this coordinator holds."""
    m = messages.response_module(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, version)
    image = ctx.image()
    names = {t.topic_id: name for name, t in image.topics.by_name.items()}
    groups = []
    for g in req.groups:
        try:
            states = ctx.groups.runtime.committed(ctx.groups.partition_for(g.group_id)).share_states
        except CoordinatorError as e:
            groups.append(build(m.DescribeShareGroupOffsetsResponseGroup, group_id=g.group_id, topics=(),
                                error_code=error_code(e.code), error_message=str(e)))
            continue
        wanted: dict[str, list[int]] = {}
        if g.topics is None:
            for key in sorted((k for k in states if k.group == g.group_id), key=lambda k: (k.topic_id, k.partition)):
                if key.topic_id in names:
                    wanted.setdefault(names[key.topic_id], []).append(key.partition)
        else:
            wanted = {t.topic_name: list(t.partitions) for t in g.topics}
        topics = []
        for name, partitions in wanted.items():
            topic = image.topic(name)
            answers = []
            for p in partitions:
                state = None if topic is None else states.get(ShareSnapshotKey(g.group_id, topic.topic_id, p))
                answers.append(build(
                    m.DescribeShareGroupOffsetsResponsePartition, partition_index=p,
                    start_offset=UNINITIALIZED if state is None else state.start_offset,
                    leader_epoch=UNINITIALIZED if state is None else state.leader_epoch,
                    lag=UNKNOWN_LAG if state is None else _lag(ctx, TopicPartition(name, p), state),
                    error_code=E.UNKNOWN_TOPIC_OR_PARTITION if topic is None else E.NONE))
            topics.append(build(m.DescribeShareGroupOffsetsResponseTopic, topic_name=name,
                                topic_id=None if topic is None else wire_topic_id(topic.topic_id),
                                partitions=tuple(answers)))
        groups.append(build(m.DescribeShareGroupOffsetsResponseGroup, group_id=g.group_id, topics=tuple(topics),
                            error_code=E.NONE))
    return build(m.DescribeShareGroupOffsetsResponse, throttle_time=NO_THROTTLE, groups=tuple(groups))


def _lag(ctx: BrokerContext, tp: TopicPartition, state: ShareSnapshotValue) -> int:
    """The share partition's lag against this broker's high watermark of it. The coordinator
    holds a replica of the partition in most clusters (leader or follower: a follower's high
    watermark may trail the leader's until its next fetch); with none here the lag is unknown (-1)
    rather than a ListOffsets round trip per partition, which Kafka's coordinator makes."""
    partition = ctx.replicas.get_partition(tp)
    return UNKNOWN_LAG if partition is None else share_lag(state, partition.log.high_watermark)


# ---- an admin's changes: only while the share group has no members (Kafka's rule) -------------------


def _admin_states(ctx: BrokerContext, group_id: str) -> Mapping[ShareSnapshotKey, ShareSnapshotValue] | tuple[
        ErrorCode, str]:
    """The group's committed share state, or the (error, message) an admin's change is refused
    with: not the coordinator here, or the group has members (NON_EMPTY_GROUP)."""
    try:
        image = ctx.groups.runtime.current(ctx.groups.partition_for(group_id))
    except CoordinatorError as e:
        return error_code(e.code), str(e)
    states, group = image.share_states, image.share_groups.get(group_id)
    if group is not None and group.members:
        return E.NON_EMPTY_GROUP, f"The share group {group_id} has {len(group.members)} member(s); stop them first."
    return states


async def _admin_write(ctx: BrokerContext, group_id: str, records: list[ShareStateRecord]) -> tuple[ErrorCode, str | None]:
    """Records an admin's change makes, unfenced (the leader's next write is fenced by them)."""
    coordinator = ctx.groups
    if not records:
        return E.NONE, None

    def operation(state: GroupsImage) -> CoordinatorResult[GroupsImage, ErrorCode]:
        return CoordinatorResult(coordinator.shard.encode(tuple(records)), E.NONE)
    return await _append(ctx, group_id, operation)


async def alter_share_offsets(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """AlterShareGroupOffsets (91): each named share partition starts again at the given offset
    (nothing in flight), under a new state epoch: its leader learns it when a member opens a
    share session, or when its next write is fenced (FENCED_STATE_EPOCH)."""
    m = messages.response_module(ApiKey.ALTER_SHARE_GROUP_OFFSETS, version)
    image = ctx.image()
    states = _admin_states(ctx, req.group_id)
    if isinstance(states, tuple):
        return build(m.AlterShareGroupOffsetsResponse, throttle_time=NO_THROTTLE, error_code=states[0],
                     error_message=states[1], responses=())
    responses = []
    for t in req.topics:
        topic = image.topic(t.topic_name)
        results, records = [], []
        for p in t.partitions:
            code = E.NONE
            if topic is None or p.partition_index not in topic.partitions:
                code = E.UNKNOWN_TOPIC_OR_PARTITION
            elif p.start_offset < 0:
                code = E.INVALID_REQUEST
            else:
                key = ShareSnapshotKey(req.group_id, topic.topic_id, p.partition_index)
                held = states.get(key)
                records.append(ShareStateRecord(key, ShareSnapshotValue(
                    (held.state_epoch if held else 0) + 1, held.leader_epoch if held else UNINITIALIZED,
                    p.start_offset, ())))
            results.append((p.partition_index, code))
        written, message = await _admin_write(ctx, req.group_id, records)
        responses.append(build(
            m.AlterShareGroupOffsetsResponseTopic, topic_name=t.topic_name,
            topic_id=None if topic is None else wire_topic_id(topic.topic_id), partitions=tuple(
                build(m.AlterShareGroupOffsetsResponsePartition, partition_index=p,
                      error_code=code if code is not E.NONE else written,
                      error_message=message if code is E.NONE else None) for p, code in results)))
    return build(m.AlterShareGroupOffsetsResponse, throttle_time=NO_THROTTLE, error_code=E.NONE,
                 responses=tuple(responses))


async def delete_share_offsets(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """DeleteShareGroupOffsets (92): the share group's state of each named topic goes (a
    tombstone per share partition); consuming it again starts from share.auto.offset.reset."""
    m = messages.response_module(ApiKey.DELETE_SHARE_GROUP_OFFSETS, version)
    image = ctx.image()
    states = _admin_states(ctx, req.group_id)
    if isinstance(states, tuple):
        return build(m.DeleteShareGroupOffsetsResponse, throttle_time=NO_THROTTLE, error_code=states[0],
                     error_message=states[1], responses=())
    responses = []
    for t in req.topics:
        topic = image.topic(t.topic_name)
        if topic is None:
            responses.append(build(m.DeleteShareGroupOffsetsResponseTopic, topic_name=t.topic_name, topic_id=None,
                                   error_code=E.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        records = [ShareStateRecord(key, None) for key in states
                   if key.group == req.group_id and key.topic_id == topic.topic_id]
        code, message = await _admin_write(ctx, req.group_id, records)
        responses.append(build(m.DeleteShareGroupOffsetsResponseTopic, topic_name=t.topic_name,
                               topic_id=wire_topic_id(topic.topic_id), error_code=code, error_message=message))
    return build(m.DeleteShareGroupOffsetsResponse, throttle_time=NO_THROTTLE, error_code=E.NONE,
                 responses=tuple(responses))
