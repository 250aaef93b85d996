"""KIP-932's record APIs in, responses out: ShareFetch (78) and ShareAcknowledge (79).

Sent to each partition's leader. A member's requests to one broker form a share session
(KIP-932): epoch 0 opens it (no acknowledgements allowed), each later request carries the next
epoch (SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH otherwise) and adds or forgets
partitions, and epoch -1 acknowledges, closes it and releases what the member still holds. A
ShareFetch first applies its acknowledgements (each partition's all or nothing,
INVALID_RECORD_STATE for a record the member does not hold), then acquires, on every session
partition, records from the first available offset (`groups.share_partition.acquire`) and
returns the batches holding them with the acquired ranges and their delivery counts. Finding
none, it waits up to max_wait for an append (the fetch purgatory) or a lock to run out.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final

from broker.handlers.context import BrokerContext, ClientInfo
from broker.handlers.fetch_partitions import topic_name
from broker.handlers.share_groups import share_broker
from broker.share.batches import batch_spans
from broker.share.state import ShareBroker, ShareSession
from common.errors import ErrorCode, KafkaError
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol.messages import NO_THROTTLE, build, error_code
from common.topic_partition import TopicPartition
from common.units import SECOND_MS
from groups import share_partition as sp

E = ErrorCode
INITIAL_EPOCH: Final = 0
FINAL_EPOCH: Final = -1
MAX_SESSION_EPOCH: Final = 2**31 - 1  # an int32: the epoch after it is 1 (Kafka's ShareRequestMetadata.nextEpoch)
DEFAULT_MAX_RECORDS: Final = 500  # a ShareFetch v1 that names no max_records (<= 0) gets Kafka's default


@dataclass(slots=True)
class Named:
    """A request's partitions by name, and what it named by an unknown topic id."""

    acks: dict[TopicPartition, tuple[Any, ...]] = field(default_factory=dict)  # tp -> acknowledgement batches
    ids: dict[TopicPartition, uuid.UUID] = field(default_factory=dict)
    unknown: list[tuple[uuid.UUID, int]] = field(default_factory=list)


def _named(ctx: BrokerContext, topics: Any) -> Named:
    image, out = ctx.image(), Named()
    for t in topics:
        name = topic_name(image, t.topic_id)
        for p in t.partitions:
            if name is None:
                out.unknown.append((t.topic_id, p.partition_index))
                continue
            tp = TopicPartition(name, p.partition_index)
            out.ids[tp] = t.topic_id
            out.acks[tp] = tuple(p.acknowledgement_batches)
    return out


def _session(share: ShareBroker, group_id: str, member_id: str, epoch: int) -> ShareSession | ErrorCode:
    """The member's share session for a request of `epoch` (epoch 0 opens one), or the error."""
    if epoch == INITIAL_EPOCH:
        return share.open_session(group_id, member_id)
    session = share.session(group_id, member_id)
    if session is None:
        return E.SHARE_SESSION_NOT_FOUND
    if epoch == FINAL_EPOCH:
        return session
    if epoch != session.next_epoch:
        return E.INVALID_SHARE_SESSION_EPOCH
    session.next_epoch = 1 if epoch == MAX_SESSION_EPOCH else epoch + 1
    return session


async def _acknowledge(ctx: BrokerContext, client: ClientInfo, share: ShareBroker, group_id: str, member_id: str,
                 tp: TopicPartition, batches: tuple[Any, ...]) -> ErrorCode:
    """One partition's acknowledgement batches, all or nothing."""
    if not batches:
        return E.NONE
    try:
        ctx.replicas.leader_partition(tp)
    except KafkaError as e:
        return error_code(ctx.partition_error(tp, e, ctx.image()))
    held = share.partitions.get((group_id, tp))
    if held is None:
        return E.INVALID_RECORD_STATE
    state, records = held.state, list[sp.TransitionStarted]()
    try:
        for b in batches:
            out = sp.acknowledge(state, member_id=member_id, first=b.first_offset, last=b.last_offset,
                                 types=tuple(b.acknowledge_types), limits=share.settings_for(group_id).limits)
            state = sp.replay_all(state, out)
            records.extend(out)
    except sp.AcknowledgeError as e:
        ctx.refusals.refused(client, "acknowledgement", e.code, f"{tp} of share group {group_id}: {e}")
        return e.code
    # pending until durable: committed once the share state write succeeds, else rolled back
    # (the records stay the member's until their lock expires, then are delivered again)
    share.apply_partition(group_id, tp, records, f"member {member_id} acknowledging", quiet=True)
    return await share.acknowledge(group_id, tp, tuple(records), member_id)


def _leader(ctx: BrokerContext, tp: TopicPartition) -> tuple[int, int]:
    topic = ctx.image().topic(tp.topic)
    partition = None if topic is None else topic.partitions.get(tp.partition)
    return (-1, -1) if partition is None else (partition.leader, partition.leader_epoch)


@dataclass(frozen=True, slots=True)
class Acquired:
    code: ErrorCode
    records: bytes = b""
    ranges: tuple[tuple[int, int, int], ...] = ()


def _acquire(ctx: BrokerContext, share: ShareBroker, group_id: str, member_id: str, tp: TopicPartition,
             max_bytes: int, max_records: int) -> Acquired:
    """Acquire what the member may have of one partition: the batches and the ranges."""
    try:
        partition = ctx.replicas.leader_partition(tp)
        plog = partition.log
        current = share.partitions.get((group_id, tp))
        if current is None or current.leader_epoch != partition.leader_epoch:  # moved since `_load`
            return Acquired(E.NOT_LEADER_OR_FOLLOWER)
        state = share.partition(group_id, tp, leader_epoch=partition.leader_epoch,
                                log_start_offset=plog.log_start_offset, high_watermark=plog.high_watermark)
        available = [o for o, f in state.in_flight.items() if f.state is sp.RecordState.AVAILABLE]
        offset = min(available) if available else state.end_offset
        if offset >= plog.high_watermark or max_records <= 0:
            return Acquired(E.NONE)
        data = ctx.replicas.read(tp, offset, max_bytes, min_one_batch=True).records.read_bytes()
        spans = batch_spans(data)
    except KafkaError as e:
        return Acquired(error_code(ctx.partition_error(tp, e, ctx.image())))
    out = sp.acquire(state, member_id=member_id, batches=[(s.base, s.last) for s in spans if not s.control],
                     max_records=max_records, now_ms=share.now_ms(), limits=share.settings_for(group_id).limits)
    share.apply_partition(group_id, tp, out.records, f"member {member_id} acquired", quiet=True)
    if not out.acquired:
        return Acquired(E.NONE)
    first, last = out.acquired[0][0], out.acquired[-1][1]
    held = [s for s in spans if s.last >= first and s.base <= last]
    return Acquired(E.NONE, data[held[0].start:held[-1].end], out.acquired)


async def _load(ctx: BrokerContext, share: ShareBroker, group_id: str, tp: TopicPartition, *,
                refresh: bool = False) -> ErrorCode:
    """The share partition started here (from its durable snapshot), or the error."""
    try:
        partition = ctx.replicas.leader_partition(tp)
    except KafkaError as e:
        return error_code(ctx.partition_error(tp, e, ctx.image()))
    plog = partition.log
    return await share.load(group_id, tp, leader_epoch=partition.leader_epoch,
                            log_start_offset=plog.log_start_offset, high_watermark=plog.high_watermark,
                            refresh=refresh)


def _partition_data(m: Any, ctx: BrokerContext, tp: TopicPartition, got: Acquired, ack: ErrorCode | None) -> Any:
    # no records is b"", not null: kio's ShareFetchResponse v1 Records is not nullable, and a
    # null closed the connection on every first ShareFetch of an empty share partition
    leader_id, leader_epoch = _leader(ctx, tp)
    return build(m.PartitionData, partition_index=tp.partition, error_code=got.code,
                 acknowledge_error_code=int(ack or E.NONE), current_leader=m.LeaderIdAndEpoch(
                     leader_id=leader_id, leader_epoch=leader_epoch), records=got.records,
                 acquired_records=tuple(m.AcquiredRecords(first_offset=f, last_offset=last, delivery_count=c)
                                        for f, last, c in got.ranges))


async def share_fetch(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's ShareFetchRequest of `version` (v1: Kafka 4.1's, with max_records)."""
    m = messages.response_module(ApiKey.SHARE_FETCH, version)
    share = share_broker(ctx)
    lock = timedelta(milliseconds=share.settings_for(req.group_id).limits.record_lock_duration_ms)

    def answer(code: ErrorCode, message: str | None = None, responses: tuple[Any, ...] = ()) -> Any:
        return build(m.ShareFetchResponse, throttle_time=NO_THROTTLE, error_code=code, error_message=message,
                     acquisition_lock_timeout=lock, responses=responses, node_endpoints=())

    group_id, member_id, epoch = req.group_id or "", req.member_id or "", req.share_session_epoch
    if not group_id or not member_id:
        return answer(E.INVALID_REQUEST, "ShareFetch names no group id or member id.")
    named = _named(ctx, req.topics)
    if epoch == INITIAL_EPOCH and any(named.acks.values()):
        return answer(E.INVALID_REQUEST, "Acknowledge data is present on the initial ShareFetch.")
    session = _session(share, group_id, member_id, epoch)
    if isinstance(session, ErrorCode):
        return answer(session, f"share session of member {member_id} (epoch {epoch}): {session.name}")
    session.partitions.update(named.ids)
    image = ctx.image()
    forgotten = [TopicPartition(name, p) for f in req.forgotten_topics_data
                 if (name := topic_name(image, f.topic_id)) is not None for p in f.partitions]
    for tp in forgotten:
        session.partitions.pop(tp, None)
    share.release_member(group_id, member_id, forgotten, "it forgot the partition")
    acks = {tp: await _acknowledge(ctx, client, share, group_id, member_id, tp, batches)
            for tp, batches in named.acks.items()}
    got: dict[TopicPartition, Acquired] = {}
    if epoch == FINAL_EPOCH:
        share.close_session(group_id, member_id)
    else:
        got = await _fetch(ctx, share, group_id, member_id, session, req)
    shown = set(acks) | {tp for tp, a in got.items() if a.ranges or a.code is not E.NONE}
    if epoch == INITIAL_EPOCH:
        shown |= set(got)
    by_topic: dict[uuid.UUID, list[Any]] = {}
    for tp in sorted(shown):
        wire = named.ids.get(tp) or session.partitions.get(tp)
        if wire is not None:
            by_topic.setdefault(wire, []).append(_partition_data(m, ctx, tp, got.get(tp, Acquired(E.NONE)), acks.get(tp)))
    for wire, p in named.unknown:
        by_topic.setdefault(wire, []).append(_partition_data(m, ctx, TopicPartition("", p), Acquired(
            E.UNKNOWN_TOPIC_ID), None))
    return answer(E.NONE, None, tuple(m.ShareFetchableTopicResponse(topic_id=wire, partitions=tuple(ps))
                                      for wire, ps in by_topic.items()))


async def _fetch(ctx: BrokerContext, share: ShareBroker, group_id: str, member_id: str, session: ShareSession,
                 req: Any) -> dict[TopicPartition, Acquired]:
    """Acquire on every session partition; finding nothing, wait for an append or a lock to run
    out, up to max_wait, and try again (a bounded loop: it ends at the request's deadline)."""
    tps = sorted(session.partitions)
    max_records = req.max_records if req.max_records > 0 else DEFAULT_MAX_RECORDS
    deadline_ms = share.now_ms() + messages.milliseconds(req.max_wait)
    # a member opening its session reads each snapshot again: an admin may have altered it
    loaded = {tp: await _load(ctx, share, group_id, tp, refresh=req.share_session_epoch == INITIAL_EPOCH)
              for tp in tps}
    while True:
        budget, got = max(req.max_bytes, 1), {}
        for tp in tps:
            if loaded[tp] is not E.NONE:
                got[tp] = Acquired(loaded[tp])
                continue
            got[tp] = _acquire(ctx, share, group_id, member_id, tp, budget, max_records)
            budget = max(budget - len(got[tp].records), 1)
            max_records -= sum(last - first + 1 for first, last, _ in got[tp].ranges)
        remaining_ms = deadline_ms - share.now_ms()
        if any(a.ranges for a in got.values()) or remaining_ms <= 0 or not tps:
            return got
        locks = [d for tp in tps if (held := share.partitions.get((group_id, tp))) is not None
                 and (d := sp.next_lock_deadline(held.state)) is not None]
        wait_ms = min([remaining_ms, *(max(d - share.now_ms(), 0) + 1 for d in locks)])
        await ctx.replicas.wait_for_data(tps, wait_ms / SECOND_MS)


async def share_acknowledge(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's ShareAcknowledgeRequest of `version`."""
    m = messages.response_module(ApiKey.SHARE_ACKNOWLEDGE, version)
    share = share_broker(ctx)

    def answer(code: ErrorCode, message: str | None = None, responses: tuple[Any, ...] = ()) -> Any:
        return build(m.ShareAcknowledgeResponse, throttle_time=NO_THROTTLE, error_code=code, error_message=message,
                     responses=responses, node_endpoints=())

    group_id, member_id, epoch = req.group_id or "", req.member_id or "", req.share_session_epoch
    if not group_id or not member_id:
        return answer(E.INVALID_REQUEST, "ShareAcknowledge names no group id or member id.")
    if epoch == INITIAL_EPOCH:
        return answer(E.INVALID_SHARE_SESSION_EPOCH, "ShareAcknowledge cannot open a share session (epoch 0).")
    session = _session(share, group_id, member_id, epoch)
    if isinstance(session, ErrorCode):
        return answer(session, f"share session of member {member_id} (epoch {epoch}): {session.name}")
    named = _named(ctx, req.topics)
    by_topic: dict[uuid.UUID, list[Any]] = {}
    for tp, batches in named.acks.items():
        code = await _acknowledge(ctx, client, share, group_id, member_id, tp, batches)
        leader_id, leader_epoch = _leader(ctx, tp)
        by_topic.setdefault(named.ids[tp], []).append(build(
            m.PartitionData, partition_index=tp.partition, error_code=code,
            current_leader=m.LeaderIdAndEpoch(leader_id=leader_id, leader_epoch=leader_epoch)))
    for wire, p in named.unknown:
        by_topic.setdefault(wire, []).append(build(
            m.PartitionData, partition_index=p, error_code=E.UNKNOWN_TOPIC_ID,
            current_leader=m.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1)))
    if epoch == FINAL_EPOCH:
        share.close_session(group_id, member_id)
    return answer(E.NONE, None, tuple(m.ShareAcknowledgeTopicResponse(topic_id=wire, partitions=tuple(ps))
                                      for wire, ps in by_topic.items()))
