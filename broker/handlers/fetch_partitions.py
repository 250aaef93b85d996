"""Fetch, per partition: naming (topic ids from v13), one partition's read (diverging epochs
from v12), grouping the answer by topic, and the leader hints of v16 (KIP-951).

`read_partition` is the one place a partition's bytes are read for a Fetch, so a limit on
what one partition may add to a response (quotas, throttling) belongs there.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Final

from broker.handlers.context import BrokerContext
from broker.handlers.leader_discovery import LeaderHint, lookup_leader, node_endpoints
from broker.replica_reads import (
    READ_COMMITTED,
    ReadResult,
    ReplicaError,
    not_leader,
    read_as_follower,
    read_committed,
)
from broker.replica_selector import NO_PREFERRED_REPLICA, preferred_read_replica
from common.topic_partition import TopicPartition
from common.errors import ErrorCode
from common.protocol import fetch
from common.protocol.leader_discovery import NodeEndpoint
from common.protocol.metadata import wire_topic_id
from common.slotted import instance_builder
from metadata.image import MetadataImage

TOPIC_IDS_VERSION: Final = 13
LEADER_HINTS_VERSION: Final = 16
FOLLOWER_FETCH_VERSION: Final = 11  # KIP-392: the request carries rack_id; consumers may read followers
# KIP-951: answers with these errors carry the current leader (and how to reach it) from v16.
# wire topic ids whose minted form is remembered: a pure function of the id, so any size is
# correct; this many covers the topics a broker's consumers fetch at once (a miss costs ~1 us)
MINTED_IDS_CACHED: Final = 4096
_LEADER_HINT_ERRORS: Final = frozenset({int(ErrorCode.NOT_LEADER_OR_FOLLOWER), int(ErrorCode.FENCED_LEADER_EPOCH)})


class Named:
    """A request's partitions by name, its forgotten ones, and topic ids it could not name.

    A plain slotted class: every fetch makes one, and a dataclass's default_factory fields made
    its __init__ ~46 bytecodes, a call per field (a consumer's fetch runs ~4,200 in all)."""

    __slots__ = ("requested", "forgotten", "unknown", "topic_ids")

    def __init__(self) -> None:
        self.requested: dict[TopicPartition, fetch.FetchPartition] = {}
        self.forgotten: list[TopicPartition] = []
        self.unknown: dict[uuid.UUID, list[int]] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}  # v13+: as the request named them


# every partition answered with data is one: built from values already checked (common.slotted),
# not through the frozen dataclass's __init__
_new_answer: Final = instance_builder(fetch.FetchPartitionResponse,
                                      tuple(fetch.FetchPartitionResponse.__dataclass_fields__))
# and every answered topic one of these (its name or id came from the request or the image)
new_topic_answer: Final = instance_builder(fetch.FetchTopicResponse, tuple(fetch.FetchTopicResponse.__dataclass_fields__))
new_tp: Final = tuple.__new__  # TopicPartition's own __new__ is a Python frame (NamedTuple)

_minted_ids: dict[int, str] = {}  # wire id (its 128-bit int) -> its form in images; see MINTED_IDS_CACHED


def _minted(topic_id: uuid.UUID) -> str:
    """The controller's form of a wire id (base64url of its 16 bytes): a fetch names its topics
    by id from v13, so this ran for every topic of every fetch. Keyed by the id's int, not the
    UUID: a decoded request's UUID is a new object, and UUID's __hash__ and __eq__ are Python
    code (an lru_cache keyed by it cost 1.6 us a call, base64 0.8 us, this 0.1 us)."""
    minted = _minted_ids.get(topic_id.int)
    if minted is None:
        if len(_minted_ids) >= MINTED_IDS_CACHED:  # a bound, not an LRU: a refill is cheap
            _minted_ids.clear()
        minted = _minted_ids[topic_id.int] = base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()
    return minted


def topic_name(image: MetadataImage, topic_id: uuid.UUID) -> str | None:
    """The topic a wire id names: the controller mints ids as base64url of the 16 bytes."""
    topic = image.topic_by_id(_minted(topic_id))
    if topic is not None:
        return topic.name
    for other in image.topics.by_id.values():  # ids in another form (hand-written test images)
        if wire_topic_id(other.topic_id) == topic_id:
            # remembered as this wire id's form: wire_topic_id is a pure function of the id, so
            # the next fetch finds it at once, not by a uuid5 per topic of the image (the
            # benches' images: it made a v13+ fetch cost ~40 % more there than in a cluster)
            _minted_ids[topic_id.int] = other.topic_id
            return other.name
    return None


def name_partitions(req: fetch.FetchRequest, version: int, image: MetadataImage) -> Named:
    named = Named()
    by_id = version >= TOPIC_IDS_VERSION
    for t in req.topics:
        name = topic_name(image, t.topic_id) if by_id else t.topic
        if name is None:
            named.unknown.setdefault(t.topic_id, []).extend(p.partition for p in t.partitions)
            continue
        if by_id:
            named.topic_ids[name] = t.topic_id
        requested = named.requested
        for p in t.partitions:
            requested[new_tp(TopicPartition, (name, p.partition))] = p
    for f in req.forgotten_topics_data:
        name = topic_name(image, f.topic_id) if by_id else f.topic
        if name is not None:
            named.forgotten.extend(TopicPartition(name, i) for i in f.partitions)
    return named


def read_partition(ctx: BrokerContext, tp: TopicPartition, p: fetch.FetchPartition, req: fetch.FetchRequest,
                   budget: int, *, first: bool, follower_reads: bool = False, record: bool = True
                   ) -> tuple[fetch.FetchPartitionResponse, bool]:
    """One partition's answer, and whether data is left past its fetch offset.

    A follower's read records where it is (`ReplicaManager.read`) unless `record` is False:
    a fetch that waited and reads again (Kafka's DelayedFetch) was recorded on its first read.

    With a last fetched epoch (v12+) whose end in this log is below the fetch offset, or
    which this log does not have, the answer is the diverging epoch and no records (Kafka's
    Partition.fetchRecords); a follower's position is then not recorded.

    KIP-392 (`follower_reads`: Fetch v11+): a consumer naming its rack, at the leader, may be
    answered with no records and the replica to read from instead (`broker.replica_selector`);
    a consumer's fetch at a follower is read there, up to the follower's high watermark.
    """
    limit = max(min(p.partition_max_bytes, budget), 0)
    try:
        if p.last_fetched_epoch >= 0:
            diverging = _diverging_epoch(ctx, tp, p)
            if diverging is not None:
                return diverging, False
        if req.rack_id and req.replica_id < 0 and ctx.replica_selector is not None:
            preferred = _preferred_replica(ctx, tp, p, req.rack_id)
            if preferred is not None:
                return preferred, False
        try:
            if req.isolation_level == READ_COMMITTED and req.replica_id < 0:
                read = _read_committed(ctx, tp, p, limit, first=first)
            else:
                read = ctx.replicas.read(tp, p.fetch_offset, limit,
                                         current_leader_epoch=p.current_leader_epoch,
                                         min_one_batch=first,  # Kafka: progress first
                                         replica_id=req.replica_id,
                                         replica_log_start_offset=p.log_start_offset, record=record)
        except ReplicaError as e:  # not the leader: a KIP-392 consumer may read this follower
            if not follower_reads or req.replica_id >= 0 or e.code != ErrorCode.NOT_LEADER_OR_FOLLOWER:
                raise
            read = read_as_follower(ctx.replicas.partitions, ctx.broker_id, tp, p.fetch_offset, limit,
                                    current_leader_epoch=p.current_leader_epoch,
                                    isolation_level=req.isolation_level, min_one_batch=first)
            stats = ctx.follower_fetches
            stats.follower_reads += 1
            stats.follower_read_bytes += read.records.length
    except Exception as e:  # noqa: BLE001 - a failure answers this partition only
        return fetch.FetchPartitionResponse(p.partition, ctx.partition_error(tp, e, ctx.image()),
                                            -1, b"", -1, -1), False
    size = read.records.length
    if req.replica_id >= 0:
        readable_end = read.log_end_offset
    elif read.aborted_transactions is not None:  # read_committed: nothing past the LSO wakes it
        readable_end = read.last_stable_offset
    else:
        readable_end = read.high_watermark
    txns = read.aborted_transactions
    aborted = None if txns is None else tuple(
        fetch.AbortedTransaction(t.producer_id, t.first_offset) for t in txns) if txns else ()
    return _new_answer((p.partition, 0, read.high_watermark, read.records if size else b"",
                        read.last_stable_offset, read.log_start_offset, aborted, -1, None, None, None)
                       ), readable_end > p.fetch_offset


def _preferred_replica(ctx: BrokerContext, tp: TopicPartition, p: fetch.FetchPartition,
                       client_rack: str) -> fetch.FetchPartitionResponse | None:
    """The leader's answer pointing a consumer at another replica (no records, the leader's
    offsets; Kafka's readFromLog with a preferred read replica), or None to read here."""
    selector = ctx.replica_selector
    partition = ctx.replicas.get_partition(tp)
    if selector is None or partition is None or not partition.is_leader(ctx.broker_id):
        return None
    image = ctx.image()

    def rack_of(broker_id: int) -> str | None:
        registration = image.broker(broker_id)
        return None if registration is None else registration.rack

    preferred = preferred_read_replica(partition, ctx.broker_id, selector, client_rack=client_rack,
                                       fetch_offset=p.fetch_offset, now_ms=ctx.replicas.now_ms(), rack_of=rack_of)
    if preferred == NO_PREFERRED_REPLICA:
        return None
    ctx.replicas.leader_partition(tp, p.current_leader_epoch)  # a stale epoch still answers its error
    ctx.follower_fetches.preferred_replica_answers += 1
    partition_log = partition.log
    return fetch.FetchPartitionResponse(
        p.partition, 0, partition_log.high_watermark, b"", last_stable_offset=partition.last_stable_offset,
        log_start_offset=partition_log.log_start_offset, preferred_read_replica=preferred)


def _read_committed(ctx: BrokerContext, tp: TopicPartition, p: fetch.FetchPartition, limit: int, *,
                    first: bool) -> ReadResult:
    """A read_committed consumer's read: the leader's partition (as ReplicaManager.read finds it
    for a consumer), up to its last stable offset, with the aborted transactions."""
    partition = ctx.replicas.leader_partition(tp, p.current_leader_epoch)
    if partition.is_recovering:
        raise not_leader(tp, "elected uncleanly and not yet recovered")
    return read_committed(partition, p.fetch_offset, limit, min_one_batch=first)


def _diverging_epoch(ctx: BrokerContext, tp: TopicPartition, p: fetch.FetchPartition
                     ) -> fetch.FetchPartitionResponse | None:
    partition = ctx.replicas.leader_partition(tp, p.current_leader_epoch)
    end = partition.log.end_offset_for_epoch(p.last_fetched_epoch)
    if end.leader_epoch >= p.last_fetched_epoch and end.end_offset >= p.fetch_offset:
        return None
    partition_log = partition.log
    return fetch.FetchPartitionResponse(
        p.partition, 0, partition_log.high_watermark, b"", partition_log.high_watermark,
        partition_log.log_start_offset, diverging_epoch=fetch.EpochEndOffset(end.leader_epoch, end.end_offset))


def size_of(answer: fetch.FetchPartitionResponse) -> int:
    records = answer.records
    if records is None:
        return 0
    # bytes first: isinstance against RecordsPlaceholder, a runtime-checkable Protocol, walks
    # its members on every call - a tenth of a fetch's Python time when it was asked first
    if isinstance(records, bytes | bytearray | memoryview):
        return len(records)
    return records.length


def by_topic(answers: Mapping[TopicPartition, fetch.FetchPartitionResponse], version: int,
             image: MetadataImage, topic_ids: Mapping[str, uuid.UUID],
             unknown: Mapping[uuid.UUID, list[int]] | None = None) -> tuple[fetch.FetchTopicResponse, ...]:
    """Answers grouped by topic (named by id from v13: `topic_ids`, else the image's)."""
    by_id = version >= TOPIC_IDS_VERSION
    if len(answers) == 1 and not unknown:  # a consumer's usual fetch: one partition, no dict of lists
        for (name, _), answer in answers.items():  # the one item
            if by_id:
                return (new_topic_answer(("", (answer,), topic_ids.get(name) or _image_id(image, name))),)
            return (new_topic_answer((name, (answer,), fetch.ZERO_UUID)),)
    topics: dict[str, list[fetch.FetchPartitionResponse]] = {}
    for tp, answer in answers.items():
        topics.setdefault(tp.topic, []).append(answer)
    out = []
    for name, parts in topics.items():
        if by_id:
            out.append(fetch.FetchTopicResponse("", tuple(parts), topic_ids.get(name) or _image_id(image, name)))
        else:
            out.append(fetch.FetchTopicResponse(name, tuple(parts)))
    for topic_id, partitions in (unknown or {}).items():
        out.append(fetch.FetchTopicResponse("", tuple(
            fetch.FetchPartitionResponse(i, int(ErrorCode.UNKNOWN_TOPIC_ID), -1, b"", -1, -1)
            for i in partitions), topic_id))
    return tuple(out)


def _image_id(image: MetadataImage, name: str) -> uuid.UUID:
    topic = image.topic(name)
    return fetch.ZERO_UUID if topic is None else wire_topic_id(topic.topic_id)


def with_leader_hints(ctx: BrokerContext, answers: dict[TopicPartition, fetch.FetchPartitionResponse],
                      image: MetadataImage) -> tuple[NodeEndpoint, ...]:
    """KIP-951 (v16+): the current leader on each NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH
    answer (in place), and the endpoints of those leaders."""
    hints: list[LeaderHint] = []
    for tp, answer in answers.items():
        if answer.error_code not in _LEADER_HINT_ERRORS:
            continue
        hint = lookup_leader(ctx, image, tp.topic, tp.partition)
        if hint is None:
            continue
        answers[tp] = replace(answer, current_leader=hint.leader)
        hints.append(hint)
    return node_endpoints(hints) if hints else ()  # nearly every fetch: no error, nothing to hint
