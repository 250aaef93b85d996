"""broker/replication/replication_quota.py: throttled-replicas parsing, Kafka's windowed rate,
and when a replica is throttled, on a fake clock."""

from __future__ import annotations

import pytest

from broker.replication.replication_quota import (
    FOLLOWER_THROTTLED_REPLICAS,
    LEADER_THROTTLED_REPLICAS,
    ReplicationQuota,
    ReplicationThrottles,
    WindowedRate,
    throttled_partitions,
)
from common.topic_partition import TopicPartition
from common.units import LONG_MAX


@pytest.mark.parametrize("value,broker,expected", [
    ("0:4,0:5,1:4", 4, frozenset({0, 1})),
    ("0:4,0:5,1:4", 5, frozenset({0})),
    ("0:4", 6, frozenset()),
    ("*", 6, None),
    (" 2 : 6 , bad, 3:x", 6, frozenset({2})),
    (None, 4, frozenset()),
])
def test_throttled_partitions(value, broker, expected):
    assert throttled_partitions(value, broker) == expected


def test_rate_counts_at_least_window_num_minus_one_windows():
    rate = WindowedRate(window_num=11, window_ms=1000)
    rate.record(10_000, now_ms=0)
    assert rate.measure(0) == 1000.0  # 10 kB over the minimum 10 s
    for second in range(1, 20):
        rate.record(1000, now_ms=second * 1000)
    # the 11 retained windows (9..19 s) hold 11 kB over 10 s of elapsed time, not 10 kB / 10 s + history
    assert rate.measure(19_000) == pytest.approx(1100.0)
    assert rate.measure(40_000) == 0.0  # every window expired


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


TP = TopicPartition("t", 0)
THROTTLED = {LEADER_THROTTLED_REPLICAS: "0:4,0:5", FOLLOWER_THROTTLED_REPLICAS: "0:6"}


def test_leader_throttles_only_out_of_sync_replicas_of_named_partitions_over_the_rate():
    clock = Clock()
    quota = ReplicationQuota(4, LEADER_THROTTLED_REPLICAS, lambda: 1000, now_ms=clock)
    assert quota.is_throttled(TP, THROTTLED) and not quota.is_throttled(TopicPartition("t", 1), THROTTLED)
    assert not quota.should_throttle(TP, in_sync=False, topic_config=THROTTLED)  # nothing sent yet
    quota.record(20_000)  # 2 kB/s over the first 10 s
    assert quota.should_throttle(TP, in_sync=False, topic_config=THROTTLED)
    assert not quota.should_throttle(TP, in_sync=True, topic_config=THROTTLED)  # the ISR is never slowed
    assert not quota.should_throttle(TP, in_sync=False, topic_config={})  # topic not throttled
    clock.now = 12_000
    assert not quota.should_throttle(TP, in_sync=False, topic_config=THROTTLED)  # the window moved on


def test_default_rate_is_unthrottled_and_follower_reads_its_own_list():
    clock = Clock()
    unthrottled = ReplicationQuota(6, FOLLOWER_THROTTLED_REPLICAS, lambda: LONG_MAX, now_ms=clock)
    unthrottled.record(10**12)
    assert not unthrottled.should_throttle(TP, in_sync=False, topic_config=THROTTLED)
    follower = ReplicationQuota(6, FOLLOWER_THROTTLED_REPLICAS, lambda: 10, now_ms=clock)
    follower.record(1000)
    assert follower.should_throttle(TP, in_sync=False, topic_config=THROTTLED)
    leader_side_only = ReplicationQuota(4, FOLLOWER_THROTTLED_REPLICAS, lambda: 10, now_ms=clock)
    leader_side_only.record(1000)
    assert not leader_side_only.should_throttle(TP, in_sync=False, topic_config=THROTTLED)


def test_throttles_hooks_without_quotas_are_no_ops_and_with_them_skip_in_sync_replicas():
    configs = {"t": THROTTLED}
    throttles = ReplicationThrottles(4, lambda topic: configs.get(topic, {}))
    assert throttles.leader_throttle(TP, in_sync=False) == (False, False)
    clock = Clock()
    throttles.leader = ReplicationQuota(4, LEADER_THROTTLED_REPLICAS, lambda: 100, now_ms=clock)
    assert throttles.leader_throttle(TP, in_sync=False) == (True, False)
    throttles.record_leader(10_000)
    assert throttles.leader_throttle(TP, in_sync=False) == (True, True)
    assert throttles.leader_throttle(TP, in_sync=True) == (False, False)
    assert throttles.leader_throttle(TopicPartition("other", 0), in_sync=False) == (False, False)
