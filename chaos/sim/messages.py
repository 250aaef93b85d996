"""The RPCs of the simulation, as frozen values (the wire codecs are tested elsewhere).

Fields follow the Kafka/KRaft requests they stand for: BrokerRegistration, BrokerHeartbeat,
AlterPartition, the metadata fetch, Fetch (replica), OffsetForLeaderEpoch and Produce.
`request_id` lets a sender drop a late or duplicated answer, as a correlation id does.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.log.leader_epochs import EpochEndOffset
from common.errors import ErrorCode
from metadata.partition_change import IsrMember
from metadata.records import LeaderRecoveryState, Record

PartitionKey = tuple[str, int]  # (topic_id, partition_id)
Entry = tuple[int, int]  # (leader epoch that wrote it, the produced value)


@dataclass(frozen=True, slots=True)
class RegisterRequest:
    broker_id: int
    incarnation_id: str
    request_id: int


@dataclass(frozen=True, slots=True)
class RegisterResponse:
    request_id: int
    error: ErrorCode
    broker_epoch: int = -1


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    broker_id: int
    broker_epoch: int
    metadata_offset: int
    want_fence: bool
    want_shutdown: bool
    request_id: int


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    request_id: int
    error: ErrorCode
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    broker_id: int
    broker_epoch: int
    partition: PartitionKey
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[IsrMember, ...]
    leader_recovery_state: LeaderRecoveryState
    request_id: int


@dataclass(frozen=True, slots=True)
class AlterPartitionResponse:
    request_id: int
    partition: PartitionKey
    error: ErrorCode
    partition_epoch: int = -1


@dataclass(frozen=True, slots=True)
class MetadataFetchRequest:
    broker_id: int
    offset: int  # the first offset wanted (applied + 1)


@dataclass(frozen=True, slots=True)
class MetadataFetchResponse:
    records: tuple[tuple[int, Record], ...]
    active_controller: str | None
    last_offset: int  # the committed end, for the first publish (broker.metadata_follower)


@dataclass(frozen=True, slots=True)
class FetchRequest:
    replica_id: int
    partition: PartitionKey
    leader_epoch: int
    fetch_offset: int
    request_id: int


@dataclass(frozen=True, slots=True)
class FetchResponse:
    request_id: int
    partition: PartitionKey
    error: ErrorCode
    entries: tuple[Entry, ...] = ()
    high_watermark: int = -1


@dataclass(frozen=True, slots=True)
class EpochRequest:
    """OffsetForLeaderEpoch for one partition."""

    replica_id: int
    partition: PartitionKey
    current_leader_epoch: int
    leader_epoch: int
    request_id: int


@dataclass(frozen=True, slots=True)
class EpochResponse:
    request_id: int
    partition: PartitionKey
    error: ErrorCode
    answer: EpochEndOffset | None = None


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    """acks=all, one record."""

    partition: PartitionKey
    value: int
    request_id: int


@dataclass(frozen=True, slots=True)
class ProduceResponse:
    request_id: int
    partition: PartitionKey
    error: ErrorCode
    offset: int = -1
