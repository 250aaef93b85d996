"""The broker <-> controller RPC messages under /rpc/, as frozen dataclasses whose fields are
Kafka's request and response field names in snake_case; `common.rpc` encodes and decodes them
(with the limits the decoders hold). Pure data: no I/O, no behaviour.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

MAX_FETCH_RECORDS: Final = 5000  # records in one MetadataFetch answer


# --- The messages -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RpcStatus:
    """Every reply's envelope."""

    error_code: int = 0
    error_message: str | None = None
    field: str | None = None  # the request field at fault
    controller_id: int | None = None  # with NOT_CONTROLLER: the active controller, if known
    controller_address: str | None = None


@dataclass(frozen=True, slots=True)
class ListenerData:
    name: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class BrokerRegistrationRequest:
    broker_id: int
    incarnation_id: str
    listeners: tuple[ListenerData, ...]
    rack: str | None = None
    cluster_id: str | None = None


@dataclass(frozen=True, slots=True)
class BrokerRegistrationReply:
    broker_epoch: int  # the offset of the broker's RegisterBroker record


@dataclass(frozen=True, slots=True)
class OfflineReplicaTopic:
    """The replicas of one topic this broker could not open (create, open, lead or follow)."""

    topic_id: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatRequest:
    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool = False
    want_shut_down: bool = False
    # Not Kafka's field: Kafka reports whole failed log dirs (OfflineLogDirs); tidelog reports
    # the failed replicas themselves, every heartbeat, until the broker restarts.
    offline_replicas: tuple[OfflineReplicaTopic, ...] = ()


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatReply:
    is_caught_up: bool
    is_fenced: bool
    should_shut_down: bool
    shutdown_requested: bool = False  # not Kafka's: an operator's POST /v1/brokers/{id}/shutdown


@dataclass(frozen=True, slots=True)
class IsrMemberData:
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class AlterPartitionData:
    partition_index: int
    leader_epoch: int
    partition_epoch: int
    new_isr_with_epochs: tuple[IsrMemberData, ...]
    leader_recovery_state: int = 0


@dataclass(frozen=True, slots=True)
class AlterPartitionTopic:
    topic_id: str
    partitions: tuple[AlterPartitionData, ...]


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    broker_id: int
    broker_epoch: int
    topics: tuple[AlterPartitionTopic, ...]


@dataclass(frozen=True, slots=True)
class AlterPartitionPartitionReply:
    """One partition's answer (Kafka's AlterPartitionResponse.PartitionData): its state after the
    change when error_code is 0, only the error otherwise."""

    partition_index: int
    error_code: int = 0
    error_message: str | None = None
    leader_id: int | None = None
    leader_epoch: int | None = None
    isr: tuple[int, ...] | None = None
    partition_epoch: int | None = None
    leader_recovery_state: int | None = None


@dataclass(frozen=True, slots=True)
class AlterPartitionTopicReply:
    topic_id: str
    partitions: tuple[AlterPartitionPartitionReply, ...]


@dataclass(frozen=True, slots=True)
class AlterPartitionReply:
    topics: tuple[AlterPartitionTopicReply, ...]


@dataclass(frozen=True, slots=True)
class BrokerIdAndEpoch:
    """AllocateProducerIds' request: who asks."""

    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class AllocateProducerIdsReply:
    producer_id_start: int
    producer_id_len: int


@dataclass(frozen=True, slots=True)
class MetadataFetchRequest:
    offset: int
    max_wait_ms: int = 0
    max_records: int = MAX_FETCH_RECORDS
    broker_id: int = -1  # who asks, for nobody but the reader of a capture


@dataclass(frozen=True, slots=True)
class MetadataFetchReply:
    """Committed records from the asked offset, or a snapshot; and the active controller as the
    answering voter knows it, with its Raft term (brokers learn the leader from the quorum)."""

    records: tuple[tuple[int, Mapping[str, Any]], ...]
    last_offset: int
    log_start_offset: int
    snapshot: bytes | None = None
    snapshot_offset: int | None = None
    controller_id: int | None = None
    controller_address: str | None = None
    raft_term: int = -1
    # the HTTP API addresses of the quorum's voters as the answering controller's log has them
    # (KIP-853): a broker follows the voter set, not only its static controller.api.voters
    controller_voters: tuple[str, ...] = ()
