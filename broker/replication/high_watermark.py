"""Leader-side replication state: what the leader knows of each follower, and the HW.

    state = reset_follower_state(now_ms=now, in_isr=True)          # on becoming leader
    state = on_follower_fetch(state, fetch_offset=f, leader_leo=leo, now_ms=now)
    hw = high_watermark(leader=me, leader_leo=leo, isr=isr, follower_leos=leos,
                        current_hw=hw.offset, leader_epoch_start_offset=start)

Kafka's Replica.updateFetchState/resetReplicaState and Partition.maybeIncrementLeaderHW.
A follower's log end offset is the offset of its latest fetch: a follower fetching from
offset N holds everything below N (it has truncated by leader epoch before fetching).

On the epoch start offset: Kafka's ISR replication does *not* hold the HW back until it
reaches the start of the leader's epoch (that is KRaft's rule for its own log, which
appends a LeaderChange record in every epoch; a Kafka partition leader appends nothing, so
the HW of an idle partition would stall). Kafka uses the epoch start offset twice: a
follower joins the ISR only with LEO >= it (see `isr_policy`), and while the HW is below it
the leader's HW may be stale (inherited from its follower days) so ListOffsets answers
OFFSET_NOT_AVAILABLE (KIP-207). `HighWatermark.epoch_start_reached` carries that fact.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final, NamedTuple

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

UNKNOWN_OFFSET: Final = -1


class FollowerState(NamedTuple):
    """One follower as its leader sees it (soft state: reset on every leadership change).

    `last_caught_up_ms` is the last time the follower had fetched up to the leader's log
    end offset *as it was at that fetch* (Kafka's lastCaughtUpTimeMs).

    A NamedTuple, not a frozen dataclass: as immutable and behaviour-free, but a new one is
    made at every follower fetch (two or more per acks=all produce at RF=3), and a frozen
    dataclass with a check in __post_init__ cost several times a tuple to build. The one check
    it made (log_end_offset >= UNKNOWN_OFFSET) is `on_follower_fetch`'s, the only place an
    offset comes in.
    """

    log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_ms: int = 0
    last_caught_up_ms: int = 0
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    # The log start offset the follower sent in its latest fetch (DeleteRecords waits for it).
    log_start_offset: int = UNKNOWN_OFFSET


def reset_follower_state(*, now_ms: int, in_isr: bool) -> FollowerState:
    """A new leader forgets every follower's offsets (Kafka's resetReplicaState with
    isNewLeader): LEO unknown until its first fetch; an ISR member counts as caught up
    now, so it is not shrunk before it had a chance to fetch."""
    return FollowerState(last_caught_up_ms=now_ms if in_isr else 0)


def on_follower_fetch(state: FollowerState, *, fetch_offset: int, leader_leo: int,
                      now_ms: int, log_start_offset: int = UNKNOWN_OFFSET) -> FollowerState:
    """A follower fetched from `fetch_offset` while the leader's LEO was `leader_leo`.

    Caught up when it fetched from the leader's LEO; or, if it fetched at least up to the
    leader's LEO of its previous fetch, it was caught up at that previous fetch's time.
    `log_start_offset` is the follower's own, as its fetch carries it (Fetch v5+).
    """
    if not 0 <= fetch_offset <= leader_leo:
        raise ValueError(f"fetch offset {fetch_offset} outside [0, leader LEO {leader_leo}] "
                         "(the shell answers OFFSET_OUT_OF_RANGE before updating state)")
    caught_up_ms = state.last_caught_up_ms
    if fetch_offset >= leader_leo:
        caught_up_ms = max(caught_up_ms, now_ms)
    elif fetch_offset >= state.last_fetch_leader_log_end_offset >= 0:
        caught_up_ms = max(caught_up_ms, state.last_fetch_ms)
    return FollowerState(fetch_offset, now_ms, caught_up_ms, leader_leo, log_start_offset)


def is_caught_up(state: FollowerState, *, leader_leo: int, now_ms: int,
                 replica_lag_time_max_ms: int) -> bool:
    """Kafka's ReplicaState.isCaughtUp: at the leader's LEO, or caught up within the lag."""
    return (state.log_end_offset == leader_leo
            or now_ms - state.last_caught_up_ms <= replica_lag_time_max_ms)


class HighWatermark(NamedTuple):
    offset: int
    advanced: bool
    # False while the HW is below the leader epoch's start offset: this leader's HW may
    # still be stale, and ListOffsets answers OFFSET_NOT_AVAILABLE (KIP-207).
    epoch_start_reached: bool


def high_watermark(*, leader: int, leader_leo: int, isr: Iterable[int],
                   follower_leos: Mapping[int, int], current_hw: int,
                   leader_epoch_start_offset: int, waiting_for: Iterable[int] = ()
                   ) -> HighWatermark:
    """The leader's HW: min log end offset over the ISR, never moving backwards.

    `isr` should be Kafka's "maximal" ISR (the committed one plus pending additions).
    `waiting_for` are followers outside the ISR that are caught up and eligible to join
    it: the HW waits for them too, or they could never catch up (maybeIncrementLeaderHW).
    A follower whose LEO is unknown (no fetch in this leader epoch) holds the HW where it is.
    """
    if current_hw < 0 or current_hw > leader_leo:
        raise ValueError(f"high watermark {current_hw} outside [0, leader LEO {leader_leo}]")
    candidate = leader_leo
    # Two plain loops, no min() calls or joined tuple: the leader runs this after every append
    # and every follower fetch.
    for replica in isr:
        if replica != leader:
            leo = follower_leos.get(replica, UNKNOWN_OFFSET)
            if leo < candidate:
                candidate = leo
    for replica in waiting_for:
        if replica != leader:
            leo = follower_leos.get(replica, UNKNOWN_OFFSET)
            if leo < candidate:
                candidate = leo
    offset = candidate if candidate > current_hw else current_hw
    return HighWatermark(offset, offset > current_hw, offset >= leader_epoch_start_offset)


def follower_high_watermark(*, leader_high_watermark: int, log_end_offset: int) -> int:
    """A follower's HW after a fetch response: the leader's, capped by its own LEO."""
    return min(leader_high_watermark, log_end_offset)


def follower_log_start_offset(*, leader_log_start_offset: int, high_watermark: int) -> int:
    """Where a follower's log start offset may move after a fetch response: the leader's, but
    never past its own HW (Kafka's follower never moves its start past its HW)."""
    return min(leader_log_start_offset, high_watermark)


def follower_answer_changes_nothing(*, leader_high_watermark: int, leader_log_start_offset: int,
                                    log_end_offset: int, high_watermark: int, log_start_offset: int) -> bool:
    """Whether a fetch answer with no records moves neither the follower's HW nor its log start:
    appending it would change nothing (Kafka's appendAsFollower returns at once for no batches,
    and its HW and start-offset updates are no-ops), so the fetcher skips the append. A new
    leader answers each partition a follower moves to it once, with no records: ~16,500 such
    answers per surviving broker after a controlled shutdown at 100,000 partitions."""
    if follower_high_watermark(leader_high_watermark=leader_high_watermark,
                               log_end_offset=log_end_offset) != high_watermark:
        return False
    return follower_log_start_offset(leader_log_start_offset=leader_log_start_offset,
                                     high_watermark=high_watermark) <= log_start_offset
