"""Tables for broker/replication/high_watermark.py (Kafka's ReplicaTest/PartitionTest)."""

from __future__ import annotations

import pytest

from broker.replication.high_watermark import (
    FollowerState,
    HighWatermark,
    follower_high_watermark,
    high_watermark,
    is_caught_up,
    on_follower_fetch,
    reset_follower_state,
)

NEW = FollowerState()
# Last fetch at t=1000 while the leader's LEO was 10, from offset 7; caught up at t=500.
LAGGING = FollowerState(log_end_offset=7, last_fetch_ms=1000, last_caught_up_ms=500,
                        last_fetch_leader_log_end_offset=10)


@pytest.mark.parametrize(("given", "fetch_offset", "leader_leo", "now_ms", "expected"), [
    # fetched from the leader's LEO: caught up now
    (NEW, 5, 5, 2000, FollowerState(5, 2000, 2000, 5)),
    (LAGGING, 12, 12, 2000, FollowerState(12, 2000, 2000, 12)),
    # reached the LEO of the previous fetch: caught up as of the previous fetch
    (LAGGING, 10, 15, 2000, FollowerState(10, 2000, 1000, 15)),
    # still behind the previous fetch's LEO: unchanged
    (LAGGING, 9, 15, 2000, FollowerState(9, 2000, 500, 15)),
    # a new leader's first fetch (previous LEO unknown) proves nothing
    (NEW, 3, 5, 2000, FollowerState(3, 2000, 0, 5)),
])
def test_on_follower_fetch(given, fetch_offset, leader_leo, now_ms, expected):
    assert on_follower_fetch(given, fetch_offset=fetch_offset, leader_leo=leader_leo,
                             now_ms=now_ms) == expected


@pytest.mark.parametrize("fetch_offset", [-1, 11])
def test_on_follower_fetch_rejects_offsets_outside_the_leader_log(fetch_offset):
    with pytest.raises(ValueError):
        on_follower_fetch(NEW, fetch_offset=fetch_offset, leader_leo=10, now_ms=0)


@pytest.mark.parametrize(("in_isr", "expected"), [
    (True, FollowerState(last_caught_up_ms=700)), (False, FollowerState())])
def test_reset_follower_state(in_isr, expected):
    assert reset_follower_state(now_ms=700, in_isr=in_isr) == expected


@pytest.mark.parametrize(("state", "leader_leo", "now_ms", "expected"), [
    (LAGGING, 7, 99_999, True),       # at the leader's LEO, however long ago
    (LAGGING, 10, 30_500, True),      # lag exactly replica.lag.time.max.ms
    (LAGGING, 10, 30_501, False),
])
def test_is_caught_up(state, leader_leo, now_ms, expected):
    assert is_caught_up(state, leader_leo=leader_leo, now_ms=now_ms,
                        replica_lag_time_max_ms=30_000) is expected


# (leader LEO, ISR, follower LEOs, current HW, epoch start, waiting_for) -> HighWatermark
@pytest.mark.parametrize(("leo", "isr", "leos", "hw", "start", "waiting", "expected"), [
    (10, (1,), {}, 4, 0, (), HighWatermark(10, True, True)),           # ISR = leader alone
    (10, (1, 2, 3), {2: 8, 3: 6}, 4, 0, (), HighWatermark(6, True, True)),
    (10, (1, 2, 3), {2: 8, 3: 3}, 4, 0, (), HighWatermark(4, False, True)),  # never back
    (10, (1, 2), {}, 4, 0, (), HighWatermark(4, False, True)),         # LEO unknown: hold
    (10, (1, 2), {2: 10, 3: 2}, 4, 0, (), HighWatermark(10, True, True)),  # 3 not in ISR
    (10, (1, 2), {2: 10, 3: 7}, 4, 0, (3,), HighWatermark(7, True, True)),  # 3 caught up
    (10, (1, 2), {2: 6}, 4, 8, (), HighWatermark(6, True, False)),    # below epoch start
    (10, (1, 2), {2: 9}, 4, 8, (), HighWatermark(9, True, True)),
])
def test_high_watermark(leo, isr, leos, hw, start, waiting, expected):
    assert high_watermark(leader=1, leader_leo=leo, isr=isr, follower_leos=leos,
                          current_hw=hw, leader_epoch_start_offset=start,
                          waiting_for=waiting) == expected


def test_high_watermark_rejects_a_hw_past_the_leo():
    with pytest.raises(ValueError):
        high_watermark(leader=1, leader_leo=3, isr=(1,), follower_leos={}, current_hw=4,
                       leader_epoch_start_offset=0)


@pytest.mark.parametrize(("leader_hw", "leo", "expected"), [(5, 8, 5), (9, 8, 8)])
def test_follower_high_watermark(leader_hw, leo, expected):
    assert follower_high_watermark(leader_high_watermark=leader_hw,
                                   log_end_offset=leo) == expected
