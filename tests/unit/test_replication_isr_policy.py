"""Tables for broker/replication/isr_policy.py (Kafka's maybeShrinkIsr/maybeExpandIsr)."""

from __future__ import annotations

import pytest

from broker.replication.high_watermark import FollowerState
from broker.replication.isr_policy import (
    DEFAULT_REPLICA_LAG_TIME_MAX_MS,
    isr_to_shrink,
    replicas_to_expand,
)

LEO = 20
AT_LEO = FollowerState(log_end_offset=20, last_fetch_ms=0, last_caught_up_ms=0)
RECENT = FollowerState(log_end_offset=15, last_fetch_ms=9_000, last_caught_up_ms=5_000)
STALE = FollowerState(log_end_offset=15, last_fetch_ms=9_000, last_caught_up_ms=1_000)
BEHIND_HW = FollowerState(log_end_offset=9)
AT_HW = FollowerState(log_end_offset=10)


def test_default_lag_is_kafkas():
    assert DEFAULT_REPLICA_LAG_TIME_MAX_MS == 30_000


@pytest.mark.parametrize(("isr", "states", "expected"), [
    ((1, 2, 3), {2: AT_LEO, 3: RECENT}, None),
    ((1, 2, 3), {2: AT_LEO, 3: STALE}, (1, 2)),
    ((1, 2, 3), {2: STALE, 3: STALE}, (1,)),
    ((1, 2, 3), {2: AT_LEO}, (1, 2)),           # no state at all: out of sync
    ((1,), {}, None),                            # never the leader
    ((2, 1), {2: STALE, 1: STALE}, (1,)),        # the leader's own state is ignored
])
def test_isr_to_shrink(isr, states, expected):
    assert isr_to_shrink(isr, 1, states, 1_000 + 4_001, leader_leo=LEO,
                         replica_lag_time_max_ms=4_000) == expected


# (ISR, states, HW, epoch start offset, eligible) -> proposed ISR
@pytest.mark.parametrize(("isr", "states", "hw", "start", "eligible", "expected"), [
    ((1,), {2: AT_HW, 3: BEHIND_HW}, 10, 0, None, (1, 2)),
    ((1,), {2: AT_HW, 3: AT_LEO}, 10, 0, None, (1, 2, 3)),
    ((1,), {2: AT_HW}, 10, 12, None, None),       # below the leader epoch's start offset
    ((1,), {2: AT_LEO}, 10, 12, None, (1, 2)),
    ((1,), {2: FollowerState()}, 0, 0, None, None),  # LEO unknown
    ((1, 2), {2: AT_LEO}, 10, 0, None, None),        # already in
    ((1,), {2: AT_HW, 3: AT_HW}, 10, 0, {3}, (1, 3)),  # 2 fenced / shutting down
    ((1,), {4: AT_LEO}, 10, 0, None, None),          # not an assigned replica
])
def test_replicas_to_expand(isr, states, hw, start, eligible, expected):
    check = (lambda _r: True) if eligible is None else eligible.__contains__
    assert replicas_to_expand((1, 2, 3), isr, states, hw, start, is_eligible=check) == expected
