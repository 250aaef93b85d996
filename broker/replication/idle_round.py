"""The last fetch round of a follower's fetcher, kept to be sent again while nothing moves.

A follower with thousands of partitions sends, once per replica.fetch.wait.max.ms, a fetch
naming none of them (KIP-227 fetch sessions). Building that request still walked every
partition in Python (its log end offset, log start offset, ISR seat, throttle) to find that
nothing changed: most of an idle broker's CPU at 10,000 partitions. The round is reused
instead while none of what it was built from can have moved:

- the replica manager applied no metadata since (leader epochs, ISR, partitions added to or
  removed from the fetcher, topic configs: `ReplicaManager.metadata_version`);
- the last answer carried no partition: nothing was appended, truncated or failed (each of
  those clears the round, as does any back-off or a lost connection);
- every partition of the fetcher was in it (none backing off, truncating or throttled);
- it is younger than `IDLE_ROUND_MAX_AGE_S`, which bounds how stale a follower's log start
  offset reported to its leader gets when retention moves it on an idle follower.

Pure data and one predicate; the fetcher (`replica_fetcher`) owns the round.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from broker.replication.fetcher_state import PartitionFetchState
from common.topic_partition import TopicPartition
from common.protocol import fetch

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

IDLE_ROUND_MAX_AGE_S: Final = 5.0


@dataclass(frozen=True, slots=True)
class IdleRound:
    """What `ReplicaFetcher._fetch` built: each partition's state and the log end offset sent,
    the per-partition requests, those sent in every fetch (not in the ISR)."""

    metadata_version: int
    built_at: float  # loop time
    sent: dict[TopicPartition, tuple[PartitionFetchState, int]]
    wanted: dict[TopicPartition, fetch.FetchPartition]
    not_in_isr: frozenset[TopicPartition]


def reusable(round_: IdleRound | None, *, metadata_version: int, now: float) -> IdleRound | None:
    """`round_` when it may be sent again now, else None (build a new one)."""
    if round_ is None or round_.metadata_version != metadata_version or now - round_.built_at >= IDLE_ROUND_MAX_AGE_S:
        return None
    return round_
