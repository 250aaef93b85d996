"""What a follower's fetcher keeps: its settings, each partition's fetch state, its owner;
plain data that `broker.replication.replica_fetcher` (the loop and its requests) works on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from broker.replication.truncation import AskLeader
from common.protocol.fetch import FetchPartition
from common.units import MIB

if TYPE_CHECKING:  # the owner's annotation only: the fetch state stays plain data
    from broker.replica_manager import ReplicaManager

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    """Kafka's replica.fetch.* and replica.socket.timeout.ms, and whom we are."""

    broker_id: int
    listener_name: str | None = None
    max_wait_ms: int = 500
    min_bytes: int = 1
    partition_max_bytes: int = 1 * MIB
    response_max_bytes: int = 10 * MIB
    backoff_ms: int = 1000
    socket_timeout_ms: int = 30_000
    local_host: str | None = None  # connections to leaders leave from it (the broker's listener host)


@dataclass(slots=True, eq=False)
class PartitionFetchState:
    """One partition in a fetcher: the epoch it follows, and its truncation if unfinished."""

    leader_epoch: int
    truncation: AskLeader | None  # None: fetching from the log end offset
    retry_at: float = 0.0  # loop time before which this partition is left alone (backoff)
    # Consecutive "the leader has not caught up with the metadata yet" answers: retried
    # quickly at first (it is usually milliseconds behind us), backing off to the full delay.
    leader_behind: int = 0
    # The last Fetch entry built for it, reused while offsets and epoch stay (the fetch
    # session compares entries by identity first).
    request: FetchPartition | None = None


class FetcherOwner(Protocol):
    """What a fetcher needs from its manager (broker.replication.fetcher_manager)."""

    settings: FetcherSettings
    replicas: ReplicaManager

    def leader_address(self, leader_id: int) -> tuple[str, int] | None: ...
