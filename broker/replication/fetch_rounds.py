"""Which partitions a follower's fetcher must look at in its next round, and when.

    rounds = FetchRounds()
    rounds.add(tp, state)                    # joins (truncating first, or fetching at once)
    rounds.touch(tp)                         # its registration, offsets or answer changed
    rounds.back_off(tp, state, retry_at)     # left alone (and out of the session) until then
    rounds.due(now)                          # the backed-off partitions whose time came
    for tp, state in rounds.to_refresh(now): # only these: their entry is built again
        rounds.fetching(tp, entry, in_isr=...)
    plan = rounds.build()                    # the Fetch (`FetchSessionHandler`, KIP-227)

A fetcher following 100,000 partitions used to walk all of them every round (each
partition's log offsets, ISR seat, throttle, and the session's diff of the whole set), and
every slice of metadata applied while topics were created forced such a round: creating N
partitions cost O(N^2 / slice size) on every follower (issue 35). Here a round costs what
changed: partitions added, removed or moved, touched (registration changed, an answer's
error or moved log start, a truncation done), due after a back-off; plus those outside the
ISR, which every fetch names (the leader reconsiders the ISR; only they can be throttled). An
answer with records sets its partition's new entry at once (`fetching`), its partition at hand.
The earliest retry is a heap's top, not a scan.

Pure bookkeeping (time is the caller's `now`); the fetcher (`replica_fetcher`) reads the
logs and builds the entries.
"""

from __future__ import annotations

import heapq

from broker.replication.fetch_session_handler import FetchSessionHandler, SessionFetch
from broker.replication.fetcher_state import PartitionFetchState
from common.protocol.fetch import FetchPartition
from common.topic_partition import TopicPartition

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)


class FetchRounds:
    """One fetcher's partitions, sorted by what their next round needs of them."""

    def __init__(self) -> None:
        self.partitions: dict[TopicPartition, PartitionFetchState] = {}
        self.session = FetchSessionHandler()  # holds each fetching partition's entry
        # Dicts used as ordered sets: rounds visit partitions in the same order on every run.
        self._dirty: dict[TopicPartition, None] = {}  # entry to build again next round
        self._truncating: dict[TopicPartition, PartitionFetchState] = {}  # asking OffsetForLeaderEpoch
        self.not_in_isr: dict[TopicPartition, None] = {}  # named in every fetch, refreshed every round
        # (retry_at, seq, tp, state) of backed-off partitions. An entry is stale when the state
        # moved on (removed, added again, backed off again); stale entries leave when due, so
        # the heap holds at most the back-offs of one back-off delay.
        self._retry: list[tuple[float, int, TopicPartition, PartitionFetchState]] = []
        self._seq = 0

    def add(self, tp: TopicPartition, state: PartitionFetchState) -> None:
        """`tp` joins (or joins again with a new leader epoch): truncating if `state` says so."""
        self.partitions[tp] = state
        self.session.remove(tp)
        self.not_in_isr.pop(tp, None)
        if state.truncation is not None:
            self._dirty.pop(tp, None)
            self._truncating[tp] = state
        else:
            self._truncating.pop(tp, None)
            self._dirty[tp] = None

    def remove(self, tp: TopicPartition) -> PartitionFetchState | None:
        self.session.remove(tp)
        self._dirty.pop(tp, None)
        self._truncating.pop(tp, None)
        self.not_in_isr.pop(tp, None)
        return self.partitions.pop(tp, None)

    def touch(self, tp: TopicPartition) -> None:
        """Build `tp`'s entry again next round (ignored when it is not ours, or not fetching)."""
        if tp in self.partitions:
            self._dirty[tp] = None

    def back_off(self, tp: TopicPartition, state: PartitionFetchState, retry_at: float) -> None:
        """Leave `tp` alone until `retry_at`; meanwhile no fetch covers it (Kafka's delayed
        partitions leave the session the same way)."""
        state.retry_at = retry_at
        if self.partitions.get(tp) is not state:
            return  # moved on during an await: the new state is not backing off
        self.session.remove(tp)
        self._dirty.pop(tp, None)
        self.not_in_isr.pop(tp, None)
        if self._truncating.get(tp) is state:
            del self._truncating[tp]
        self._seq += 1
        heapq.heappush(self._retry, (retry_at, self._seq, tp, state))

    def due(self, now: float) -> None:
        """Back-offs that ended by `now`: truncate again, or build the entry again."""
        retry = self._retry
        while retry and retry[0][0] <= now:  # bounded by the heap (each entry once)
            retry_at, _, tp, state = heapq.heappop(retry)
            if self.partitions.get(tp) is not state or state.retry_at != retry_at:
                continue  # stale
            if state.truncation is not None:
                self._truncating[tp] = state
            else:
                self._dirty[tp] = None

    def next_retry(self) -> float | None:
        """When the earliest back-off ends (possibly a stale one: waking early is harmless)."""
        return self._retry[0][0] if self._retry else None

    def is_truncating(self) -> bool:
        return bool(self._truncating)

    def truncating(self) -> dict[TopicPartition, PartitionFetchState]:
        """The partitions to ask OffsetForLeaderEpoch for now (a copy: the round awaits)."""
        return dict(self._truncating) if self._truncating else {}

    def truncated(self, tp: TopicPartition, state: PartitionFetchState) -> None:
        """After a truncation round: `tp` fetches now if its truncation finished."""
        if self._truncating.get(tp) is state and state.truncation is None:
            del self._truncating[tp]
            self._dirty[tp] = None

    def has_fetch_work(self) -> bool:
        return bool(self._dirty or self.session.wanted or self.not_in_isr)

    def to_refresh(self, now: float) -> list[tuple[TopicPartition, PartitionFetchState]]:
        """The partitions whose entry this round builds again: the touched ones and those
        outside the ISR; never one backing off or truncating."""
        dirty, not_in_isr = self._dirty, self.not_in_isr
        if not dirty and not not_in_isr:  # most rounds: an answer's records set their entries at once
            return []
        self._dirty = {}
        partitions = self.partitions
        # in ISR, as followers mostly are, only `dirty`
        tps = [*dirty, *(tp for tp in not_in_isr if tp not in dirty)] if not_in_isr else dirty
        return [(tp, state) for tp in tps
                if (state := partitions.get(tp)) is not None and state.truncation is None and state.retry_at <= now]

    def fetching(self, tp: TopicPartition, entry: FetchPartition, *, in_isr: bool) -> None:
        """`tp` is fetched with `entry` (sent when it differs from what the session holds)."""
        self.session.set(tp, entry)
        if in_isr:
            self.not_in_isr.pop(tp, None)
        else:
            self.not_in_isr[tp] = None

    def build(self) -> SessionFetch:
        return self.session.build(always=self.not_in_isr)
