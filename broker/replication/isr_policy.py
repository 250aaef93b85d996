"""The ISR changes a leader proposes to the controller (AlterPartition), as pure rules.

    proposed = isr_to_shrink(isr, leader, states, now_ms, leader_leo=leo)
    at_ms, held = next_shrink_check(isr, leader, states, now_ms, leader_leo=leo)
    proposed = replicas_to_expand(replicas, isr, states, high_watermark, epoch_start)

`isr_to_shrink` and `replicas_to_expand` return the whole proposed ISR, or None when nothing
changes. Neither is applied locally: the leader keeps using its current ISR (plus proposed
additions, Kafka's "maximal" ISR, for the HW) until the controller's PartitionChangeRecord
comes back. Kafka's Partition.maybeShrinkIsr/isFollowerOutOfSync and
maybeExpandIsr/isFollowerInSync. `next_shrink_check` says when the shrink rule can next
find a member out of sync (`isr_expiration` schedules the isr-expiration pass by it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Final

from broker.replication.high_watermark import FollowerState, is_caught_up
from common.config import default_int

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

DEFAULT_REPLICA_LAG_TIME_MAX_MS: Final = default_int("replica.lag.time.max.ms")  # ms


def out_of_sync_replicas(isr: Iterable[int], leader: int,
                         follower_states: Mapping[int, FollowerState], now_ms: int, *,
                         leader_leo: int,
                         replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS
                         ) -> tuple[int, ...]:
    """ISR followers not caught up within the lag (never the leader); a follower with no
    state at all is out of sync (Kafka's getReplica(...).fold(true))."""
    out = []
    for replica in isr:
        if replica == leader:
            continue
        state = follower_states.get(replica)
        if state is None or not is_caught_up(state, leader_leo=leader_leo, now_ms=now_ms,
                                             replica_lag_time_max_ms=replica_lag_time_max_ms):
            out.append(replica)
    return tuple(out)


def isr_to_shrink(isr: Iterable[int], leader: int,
                  follower_states: Mapping[int, FollowerState], now_ms: int, *,
                  leader_leo: int,
                  replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS
                  ) -> tuple[int, ...] | None:
    """The ISR without its lagging followers, or None when every member is in sync."""
    isr = tuple(isr)
    out = out_of_sync_replicas(isr, leader, follower_states, now_ms, leader_leo=leader_leo,
                               replica_lag_time_max_ms=replica_lag_time_max_ms)
    if not out:
        return None
    return tuple(r for r in isr if r not in out)


def next_shrink_check(isr: Iterable[int], leader: int,
                      follower_states: Mapping[int, FollowerState], now_ms: int, *,
                      leader_leo: int,
                      replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS
                      ) -> tuple[int | None, bool]:
    """When `out_of_sync_replicas` can next find a member of this ISR, as (time, held).

    time: the first ms at which a member behind the leader's LEO has a last caught-up time
    older than the lag (`now_ms` when one is out of sync already, or has no state), or None
    when none is behind. held: a member is at the leader's LEO, in sync whatever the time;
    it can fall out of sync only when its LEO or the leader's moves, so the caller must look
    again at the next append or fetch (no clock tells when). The isr-expiration pass uses
    this to look only at the ISRs that can shrink: with both LEOs still, a fetch only moves
    a last caught-up time later, never this time earlier.
    """
    earliest: int | None = None
    held = False
    for replica in isr:
        if replica == leader:
            continue
        state = follower_states.get(replica)
        if state is None:
            return now_ms, held
        if state.log_end_offset == leader_leo:
            held = True
            continue
        lagging_from = state.last_caught_up_ms + replica_lag_time_max_ms + 1  # is_caught_up's "<="
        if lagging_from <= now_ms:
            return now_ms, held
        earliest = lagging_from if earliest is None else min(earliest, lagging_from)
    return earliest, held


def is_follower_in_sync(state: FollowerState, *, high_watermark: int,
                        leader_epoch_start_offset: int) -> bool:
    """Kafka's isFollowerInSync: LEO >= HW, and >= the start offset of the leader's epoch
    (else a follower holding only the previous epoch's data could join and then lead)."""
    leo = state.log_end_offset
    return leo >= 0 and leo >= high_watermark and leo >= leader_epoch_start_offset


def replicas_to_expand(replicas: Iterable[int], isr: Iterable[int],
                       follower_states: Mapping[int, FollowerState], high_watermark: int,
                       leader_epoch_start_offset: int, *,
                       is_eligible: Callable[[int], bool] = lambda _replica: True
                       ) -> tuple[int, ...] | None:
    """The ISR plus every assigned follower now in sync (in `replicas` order), or None.

    `is_eligible` is the shell's check of the metadata image: not fenced, not in
    controlled shutdown, broker epoch of the fetch matching (isReplicaIsrEligible).
    """
    isr = tuple(isr)
    joining = []
    for replica in replicas:
        state = follower_states.get(replica)
        if (replica not in isr and state is not None and is_eligible(replica)
                and is_follower_in_sync(state, high_watermark=high_watermark,
                                        leader_epoch_start_offset=leader_epoch_start_offset)):
            joining.append(replica)
    return (*isr, *joining) if joining else None
