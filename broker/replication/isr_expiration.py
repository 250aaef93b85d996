"""Which led partitions the isr-expiration pass must look at: those whose ISR can shrink now.

    schedule: IsrExpirationSchedule[Partition] = IsrExpirationSchedule()
    schedule.check_at(partition, now_ms)          # a new or changed leadership: look at the next pass
    due = schedule.take_due(now_ms)               # the pass: only these can have a lagging member
    schedule.checked(partition, *next_shrink_check(...))  # after looking: when to look again
    schedule.moved(partition, now_ms)             # a leader append or a follower fetch on it
    schedule.forget(partition)                    # no longer led here

Kafka's isr-expiration task (every replica.lag.time.max.ms / 2) walks every partition the
broker leads: in Python, 43-71 ms of CPU per pass at 30,000 led partitions
(bench/idle_passes.py, issue 35), while almost no ISR can shrink. A member falls out of sync
only when it is behind the leader's LEO and its last caught-up time is older than the lag;
with both LEOs still, that time only moves later (a fetch never makes it earlier). So a
partition is looked at when the lag of its earliest member behind the leader runs out
(`isr_policy.next_shrink_check`), and one whose members are at the leader's LEO (an idle
partition: the followers' incremental fetch sessions leave it out and its caught-up times go
stale, yet nothing is missing) waits for the next append or fetch on it, not for a clock. A
pass then shrinks exactly the ISRs Kafka's walk would: a partition not looked at has no
member out of sync. Keyed by the Partition object (its identity hash is C's; a
TopicPartition's is a Python call).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import Final, Generic, TypeVar

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

K = TypeVar("K", bound=Hashable)  # a led partition (the broker's Partition object)
# A pass looks at partitions due up to this much after it (found not due: put back at their
# time): a few extra looks, and a bucket per second instead of a heap entry per partition.
DEFAULT_RESOLUTION_MS: Final = 1000


class IsrExpirationSchedule(Generic[K]):
    """Led partitions by the time the isr-expiration pass must next look at them."""

    __slots__ = ("resolution_ms", "_times", "_buckets", "_held")

    def __init__(self, resolution_ms: int = DEFAULT_RESOLUTION_MS) -> None:
        if resolution_ms < 1:
            raise ValueError(f"resolution_ms must be at least 1, got {resolution_ms}")
        self.resolution_ms = resolution_ms
        # Times rounded down to the resolution, each with the partitions to look at from then:
        # a pass takes whole buckets (list extends, in C), never one heap entry per partition.
        # A partition may sit in several (scheduled again earlier): the pass looks at it once.
        self._times: list[int] = []  # a heap of the buckets' times
        self._buckets: dict[int, list[K]] = {}
        # Partitions with a member at the leader's LEO: an append or a fetch (`moved`) makes
        # them due, no time does.
        self._held: set[K] = set()

    def __len__(self) -> int:
        """Partitions waiting for a time or for a move (tests)."""
        return len({key for keys in self._buckets.values() for key in keys} | self._held)

    def check_at(self, key: K, at_ms: int) -> None:
        """Look at `key` in the first pass at or after `at_ms`, or in one up to `resolution_ms`
        earlier (early only: a look finds it not due and puts it back, exactly timed)."""
        bucket = at_ms - at_ms % self.resolution_ms
        keys = self._buckets.get(bucket)
        if keys is None:
            self._buckets[bucket] = [key]
            heapq.heappush(self._times, bucket)
        else:
            keys.append(key)

    def moved(self, key: K, now_ms: int) -> None:
        """The leader's or a follower's LEO of `key` may have moved (an append, a follower
        fetch): a member held in sync by the LEO may be out of sync now. O(1): the produce
        and fetch paths call it."""
        if key in self._held:
            self._held.discard(key)
            self.check_at(key, now_ms)

    def take_due(self, now_ms: int) -> list[K]:
        """The partitions to look at in a pass at `now_ms`, each once; they leave the schedule
        until `checked` (or `check_at`) puts them back. Some may no longer be led here (the
        pass skips those) or not be due yet (the pass puts them back)."""
        times, due = self._times, []
        while times and times[0] <= now_ms:  # bounded by the buckets
            due.extend(self._buckets.pop(heapq.heappop(times)))
        if not due:
            return due
        self._held.difference_update(due)
        return list(dict.fromkeys(due))

    def checked(self, key: K, next_at_ms: int | None, held: bool) -> None:
        """`key` was looked at: `next_shrink_check`'s answer says when to look again."""
        if held:
            self._held.add(key)
        else:
            self._held.discard(key)
        if next_at_ms is not None:
            self.check_at(key, next_at_ms)

    def forget(self, key: K) -> None:
        """No longer led here: no move brings it back (a time already set may still: the
        pass skips a partition it does not lead)."""
        self._held.discard(key)
