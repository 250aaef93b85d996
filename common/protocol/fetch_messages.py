"""Fetch (key 1) messages: what a Fetch request and its answer hold, as the codecs of
`common.protocol.fetch` read and write them (import them from there: its `__all__` is the API)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from common.protocol.leader_discovery import LeaderIdAndEpoch, NodeEndpoint
from common.protocol.primitives import RecordsPlaceholder
from common.slotted import instance_builder

ZERO_UUID = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID: "no topic id" (names before v13)

CONSUMER_REPLICA_ID = -1
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
FULL_FETCH_SESSION_EPOCH = 0
FINAL_FETCH_SESSION_EPOCH = -1


@dataclass(frozen=True, slots=True)
class FetchPartition:
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    log_start_offset: int = -1  # v5+, followers only
    current_leader_epoch: int = -1  # v9+
    last_fetched_epoch: int = -1  # v12+: the epoch of the last batch the fetcher holds
    replica_directory_id: uuid.UUID = ZERO_UUID  # v17+ (tag 0), followers only


@dataclass(frozen=True, slots=True)
class FetchTopic:
    topic: str  # "" from v13 (by id)
    partitions: tuple[FetchPartition, ...]
    topic_id: uuid.UUID = ZERO_UUID  # v13+


@dataclass(frozen=True, slots=True)
class ForgottenTopic:
    topic: str
    partitions: tuple[int, ...]
    topic_id: uuid.UUID = ZERO_UUID  # v13+


@dataclass(frozen=True, slots=True)
class FetchRequest:
    replica_id: int  # v15+: from the ReplicaState tag, -1 without it
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    topics: tuple[FetchTopic, ...]
    session_id: int = 0  # v7+
    session_epoch: int = FINAL_FETCH_SESSION_EPOCH  # v7+
    forgotten_topics_data: tuple[ForgottenTopic, ...] = ()  # v7+
    rack_id: str = ""  # v11+
    cluster_id: str | None = None  # v12+ (tag 0)
    replica_epoch: int = -1  # v15+ (ReplicaState, tag 1): the follower's broker epoch


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """DivergingEpoch (v12+, tag 0): where the leader's log ends for the fetcher's epoch."""

    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class SnapshotId:
    """SnapshotId (v12+, tag 2): KRaft's own log only; read, never sent by brokers."""

    end_offset: int
    epoch: int


Records = bytes | memoryview | RecordsPlaceholder | None


@dataclass(frozen=True, slots=True)
class FetchPartitionResponse:
    partition_index: int
    error_code: int
    high_watermark: int
    records: Records
    last_stable_offset: int = -1
    log_start_offset: int = -1  # v5+
    aborted_transactions: tuple[AbortedTransaction, ...] | None = None
    preferred_read_replica: int = -1  # v11+
    diverging_epoch: EpochEndOffset | None = None  # v12+ (tag 0)
    current_leader: LeaderIdAndEpoch | None = None  # v12+ (tag 1)
    snapshot_id: SnapshotId | None = None  # v12+ (tag 2)


@dataclass(frozen=True, slots=True)
class FetchTopicResponse:
    topic: str  # "" from v13 (by id)
    partitions: tuple[FetchPartitionResponse, ...]
    topic_id: uuid.UUID = ZERO_UUID  # v13+


@dataclass(frozen=True, slots=True)
class FetchResponse:
    throttle_time_ms: int
    responses: tuple[FetchTopicResponse, ...]
    error_code: int = 0  # v7+
    session_id: int = 0  # v7+
    node_endpoints: tuple[NodeEndpoint, ...] = ()  # v16+ (tag 0)


# A FetchPartition from its seven fields in order, values as checked: the decoders' and the
# follower fetcher's, which builds one per partition whose offsets moved, every round.
new_fetch_partition = instance_builder(FetchPartition, tuple(FetchPartition.__dataclass_fields__))
