"""Replication throttles for reassignments: Kafka's ReplicationQuotaManager, one per side.

    leader_quota = ReplicationQuota(broker_id, LEADER_THROTTLED_REPLICAS, rate_fn, now_ms=clock_ms)
    if leader_quota.should_throttle(tp, in_sync=False, topic_config=...):  # over the rate
        ...omit the partition's records from this follower fetch...
    leader_quota.record(bytes_sent)

A partition is throttled on this broker when its topic's `leader.replication.throttled.replicas`
(leader side) or `follower.replication.throttled.replicas` (follower side) lists
"partition:<this broker>" or is "*", as kafka-reassign-partitions --throttle sets them; only
replicas outside the ISR are throttled (Kafka's shouldLeaderThrottle / shouldFollowerThrottle),
so a reassignment never slows the replicas acks=all waits for.

The rate (`leader.replication.throttled.rate` / `follower.replication.throttled.rate`, bytes/s,
default Long.MAX_VALUE: unthrottled) is read through `rate_fn` on every check so a dynamic
broker config can change it. It is measured as Kafka's Rate over `window_num` samples of
`window_ms` (replication.quota.window.num = 11, .size.seconds = 1): bytes recorded in the
retained windows over their elapsed time, that time counted as at least window_num - 1
windows, so a throttle starts by allowing a burst rather than blocking the first bytes.

Pure but for the clock, injected as `now_ms`; no I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from common.topic_partition import TopicPartition
from common.config import default_int
from common.config_schema import Config
from common.units import LONG_MAX, SECOND_MS

if TYPE_CHECKING:
    from broker.replication.partition import Partition

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

LEADER_THROTTLED_RATE: Final = "leader.replication.throttled.rate"
FOLLOWER_THROTTLED_RATE: Final = "follower.replication.throttled.rate"
LEADER_THROTTLED_REPLICAS: Final = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS: Final = "follower.replication.throttled.replicas"
DEFAULT_WINDOW_NUM: Final = default_int("replication.quota.window.num")  # samples
DEFAULT_WINDOW_MS: Final = default_int("replication.quota.window.size.seconds") * SECOND_MS
ALL_REPLICAS: Final = "*"
MAX_PARSED_VALUES: Final = 1024  # distinct config values cached; beyond it the cache starts again


def throttled_partitions(value: str | None, broker_id: int) -> frozenset[int] | None:
    """The partitions a throttled-replicas value throttles on `broker_id`; None means all ("*").
    Malformed entries are skipped (the config was validated when it was set)."""
    if value is None:
        return frozenset()
    items = [item.strip() for item in value.split(",") if item.strip()]
    if items == [ALL_REPLICAS]:
        return None
    out = set()
    for item in items:
        partition, _, broker = item.partition(":")
        if partition.strip().isdigit() and broker.strip().isdigit() and int(broker) == broker_id:
            out.add(int(partition))
    return frozenset(out)


class WindowedRate:
    """Kafka's Rate over sampled windows: bytes per second, with `now_ms` from the caller."""

    def __init__(self, window_num: int = DEFAULT_WINDOW_NUM, window_ms: int = DEFAULT_WINDOW_MS) -> None:
        if window_num < 2 or window_ms < 1:
            raise ValueError("a windowed rate needs at least 2 windows of at least 1 ms")
        self.window_num, self.window_ms = window_num, window_ms
        self._windows: deque[list[int]] = deque()  # [start_ms, bytes], oldest first; at most window_num

    def _purge(self, now_ms: int) -> None:
        horizon = now_ms - self.window_num * self.window_ms
        while self._windows and self._windows[0][0] <= horizon:  # bounded by window_num
            self._windows.popleft()

    def record(self, value: int, now_ms: int) -> None:
        self._purge(now_ms)
        if not self._windows or now_ms >= self._windows[-1][0] + self.window_ms:
            self._windows.append([now_ms, 0])
            if len(self._windows) > self.window_num:
                self._windows.popleft()
        self._windows[-1][1] += value

    def measure(self, now_ms: int) -> float:
        """Bytes per second over the retained windows (Rate.measure with Rate.windowSize)."""
        self._purge(now_ms)
        total = sum(w[1] for w in self._windows)
        oldest = self._windows[0][0] if self._windows else now_ms
        elapsed = now_ms - oldest
        full = elapsed // self.window_ms
        if full < self.window_num - 1:
            elapsed += (self.window_num - 1 - full) * self.window_ms
        return total * 1000 / elapsed


class ReplicationQuota:
    """One side's throttle (leader or follower) on one broker."""

    def __init__(self, broker_id: int, replicas_key: str, rate_fn: Callable[[], int], *,
                 now_ms: Callable[[], int], window_num: int = DEFAULT_WINDOW_NUM,
                 window_ms: int = DEFAULT_WINDOW_MS) -> None:
        self.broker_id, self.replicas_key = broker_id, replicas_key
        self._rate_fn, self._now_ms = rate_fn, now_ms
        self._rate = WindowedRate(window_num, window_ms)
        self._parsed: dict[str | None, frozenset[int] | None] = {}

    @property
    def bound(self) -> int:
        """Bytes per second allowed; LONG_MAX (Kafka's default) means unthrottled."""
        return self._rate_fn()

    def is_throttled(self, tp: TopicPartition, topic_config: Mapping[str, str]) -> bool:
        """Whether this topic's throttled-replicas config names `tp` on this broker."""
        value = topic_config.get(self.replicas_key)
        if not value:
            return False
        if value not in self._parsed:
            if len(self._parsed) >= MAX_PARSED_VALUES:
                self._parsed.clear()
            self._parsed[value] = throttled_partitions(value, self.broker_id)
        parsed = self._parsed[value]
        return parsed is None or tp.partition in parsed

    def is_quota_exceeded(self) -> bool:
        bound = self.bound
        return bound < LONG_MAX and self._rate.measure(self._now_ms()) > bound

    def should_throttle(self, tp: TopicPartition, *, in_sync: bool, topic_config: Mapping[str, str]) -> bool:
        """Kafka's shouldLeaderThrottle / shouldFollowerThrottle: a replica outside the ISR of a
        throttled partition, while the rate is over the bound."""
        return not in_sync and self.is_throttled(tp, topic_config) and self.is_quota_exceeded()

    def record(self, value: int) -> None:
        """Bytes of throttled partitions moved (sent by the leader, fetched by the follower)."""
        if value > 0:
            self._rate.record(value, self._now_ms())

    def rate(self) -> float:
        """The measured bytes per second (tests, logs)."""
        return self._rate.measure(self._now_ms())


class ReplicationThrottles:
    """A broker's two quotas and the hooks the fetch paths call (no quota: unthrottled).
    `topic_config(topic)` gives the topic's explicit configs from the metadata image."""

    def __init__(self, broker_id: int, topic_config: Callable[[str], Mapping[str, str]]) -> None:
        self.broker_id, self._topic_config = broker_id, topic_config
        self.leader: ReplicationQuota | None = None
        self.follower: ReplicationQuota | None = None

    def leader_throttle(self, tp: TopicPartition, *, in_sync: bool) -> tuple[bool, bool]:
        """Leader answering a follower's fetch: (the replica is throttled, over the rate now:
        leave its records out). In-sync replicas are never throttled."""
        quota = self.leader
        if quota is None or in_sync or not quota.is_throttled(tp, self._topic_config(tp.topic)):
            return False, False
        return True, quota.is_quota_exceeded()

    def record_leader(self, size: int) -> None:
        if self.leader is not None:
            self.leader.record(size)

    def follower_throttled(self, partition: Partition) -> bool:
        """Leave this partition out of the next follower fetch (Kafka's shouldFollowerThrottle)."""
        quota = self.follower
        return quota is not None and quota.should_throttle(
            partition.tp, in_sync=self.broker_id in partition.isr, topic_config=self._topic_config(partition.tp.topic))

    def record_follower(self, partition: Partition, size: int) -> None:
        """A follower fetch brought `size` bytes of `partition`: count them if it is throttled."""
        quota = self.follower
        if quota is not None and size and self.broker_id not in partition.isr \
                and quota.is_throttled(partition.tp, self._topic_config(partition.tp.topic)):
            quota.record(size)


def replication_quotas(broker_id: int, config: Config, rate: Callable[[str], Callable[[], Any]], *,
                       now_ms: Callable[[], int]) -> tuple[ReplicationQuota, ReplicationQuota]:
    """(leader quota, follower quota) of a broker. `rate(key)` gives a callable reading a rate
    key's current value (the broker's dynamic config): the quotas read it on every check, so
    an IncrementalAlterConfigs of the rate applies at once."""
    window_num = config.get_int("replication.quota.window.num")
    window_ms = config.get_int("replication.quota.window.size.seconds") * SECOND_MS
    leader_rate, follower_rate = rate(LEADER_THROTTLED_RATE), rate(FOLLOWER_THROTTLED_RATE)
    leader = ReplicationQuota(broker_id, LEADER_THROTTLED_REPLICAS, lambda: int(leader_rate()),
                              now_ms=now_ms, window_num=window_num, window_ms=window_ms)
    follower = ReplicationQuota(broker_id, FOLLOWER_THROTTLED_REPLICAS, lambda: int(follower_rate()),
                                now_ms=now_ms, window_num=window_num, window_ms=window_ms)
    return leader, follower
