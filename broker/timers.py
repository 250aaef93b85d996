"""The broker's one timer service: deadlines by key on an injected millisecond clock.

    timers = TimerService()                              # monotonic ms; a loop timer per earliest deadline
    timers.schedule(("session", "g1"), deadline_ms, lambda now_ms: expire(now_ms))
    timers.schedule(("session", "g1"), later_ms, ...)   # the same key: rescheduled, not added
    timers.cancel(("session", "g1"))
    timers.schedule_every("isr-expiration", 5_000, lambda now_ms: shrink())  # re-armed each run
    fake = TimerService(clock=lambda: clock[0], driven=False)   # tests: clock[0] += 10; fake.run_due()

Kafka's broker has one `SystemTimer` (a hierarchical timing wheel) behind its purgatories and
its coordinators' `CoordinatorTimer`; the controller here has one heap of (due_ms, seq, task)
on an injected clock (`quorum.controller_runtime`). This is the broker's: `TimerQueue` is the
sans-IO core, a heap of (deadline_ms, seq, key) with one live entry per key (reschedule
replaces, cancel forgets; stale heap entries are dropped as the heap is popped), and
`TimerService` the asyncio shell, which keeps one event-loop timer armed for the earliest
deadline. A deadline runs when it is due, to the millisecond: a session of 10,000 ms that
started at t expires at t + 10,000, not at the next tick of a polling loop.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Callable, Hashable
from typing import Final, Generic, TypeVar

from common.units import SECOND_MS

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
TimerAction = Callable[[int], None]  # called with the time it runs at (>= its deadline), in ms
MAX_DUE_PER_PASS: Final = 10_000  # actions run per pass before yielding to the event loop


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def wall_ms() -> int:
    """Wall-clock milliseconds: what Kafka's records and answers carry (commit timestamps,
    transaction start times); deadlines run on `monotonic_ms`."""
    return time.time_ns() // 1_000_000


class TimerQueue(Generic[K]):
    """Deadlines by key: at most one live deadline per key, popped in (deadline, seq) order.

    Memory is bounded by the live keys plus the stale entries of rescheduled or cancelled
    keys, and those are dropped once they reach the top, or all at once when more than half
    the heap is stale.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, K]] = []
        self._live: dict[K, tuple[int, int]] = {}  # key -> (deadline_ms, seq) of its one live entry
        self._seq = 0

    def schedule(self, key: K, deadline_ms: int) -> None:
        """`key` is due at `deadline_ms`, replacing any deadline it had."""
        self._seq += 1
        self._live[key] = (deadline_ms, self._seq)
        heapq.heappush(self._heap, (deadline_ms, self._seq, key))
        if len(self._heap) > 2 * len(self._live) + 64:
            self._compact()

    def cancel(self, key: K) -> bool:
        """Forget `key`'s deadline; whether it had one."""
        return self._live.pop(key, None) is not None

    def deadline(self, key: K) -> int | None:
        entry = self._live.get(key)
        return None if entry is None else entry[0]

    def next_deadline_ms(self) -> int | None:
        """The earliest live deadline; None when nothing is scheduled."""
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int, limit: int = MAX_DUE_PER_PASS) -> list[K]:
        """The keys due at `now_ms` (deadline <= now_ms), earliest first, forgotten."""
        due: list[K] = []
        while len(due) < limit:  # bounded by `limit`
            self._drop_stale()
            if not self._heap or self._heap[0][0] > now_ms:
                break
            _, _, key = heapq.heappop(self._heap)
            del self._live[key]
            due.append(key)
        return due

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, key: object) -> bool:
        return key in self._live

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap and self._live.get(heap[0][2]) != (heap[0][0], heap[0][1]):  # each pass pops one
            heapq.heappop(heap)

    def _compact(self) -> None:
        self._heap = [(d, s, k) for k, (d, s) in self._live.items()]
        heapq.heapify(self._heap)


class TimerService:
    """The asyncio shell: runs each key's action at its deadline on `clock`.

    `driven=True` (the broker) keeps one event-loop timer armed for the earliest deadline
    whenever an event loop runs; `driven=False` (tests with a fake clock) leaves running to
    `run_due()`. An action that raises is logged and the others still run.
    """

    def __init__(self, clock: Callable[[], int] = monotonic_ms, *, driven: bool = True,
                 name: str = "broker") -> None:
        self.now_ms = clock
        self.name = name
        self._driven = driven
        self._queue: TimerQueue[Hashable] = TimerQueue()
        self._actions: dict[Hashable, TimerAction] = {}
        self._armed: tuple[int, asyncio.TimerHandle] | None = None

    def schedule(self, key: Hashable, deadline_ms: int, action: TimerAction) -> None:
        """Run `action(now_ms)` at `deadline_ms` (at once if past), replacing `key`'s timer."""
        self._queue.schedule(key, deadline_ms)
        self._actions[key] = action
        self._arm()

    def schedule_in(self, key: Hashable, delay_ms: int, action: TimerAction) -> None:
        """Run `action` `delay_ms` from now: how Kafka's SystemTimer and CoordinatorTimer take a
        timer, so that callers on another clock (the group coordinator's wall time) give a
        delay and every timer shares this service's one clock."""
        self.schedule(key, self.now_ms() + delay_ms, action)

    def schedule_every(self, key: Hashable, interval_ms: int, action: TimerAction, *,
                       first_delay_ms: int | None = None) -> None:
        """A periodic job: `action` every `interval_ms` (the first after `first_delay_ms`,
        default one interval) until `cancel(key)` or `close()`. It is re-armed before it
        runs, so an action that raises keeps its period and one that cancels its key stops.
        The next run is an interval after this one ran (a fixed delay, as the sleep loops it
        replaces): a pass that took long does not make the next come sooner."""
        if interval_ms <= 0:
            raise ValueError(f"timer {key!r}: interval_ms must be positive, got {interval_ms}")

        def run(now_ms: int) -> None:
            self.schedule(key, now_ms + interval_ms, run)
            action(now_ms)

        self.schedule_in(key, interval_ms if first_delay_ms is None else first_delay_ms, run)

    def run_soon(self, key: Hashable) -> bool:
        """Bring `key`'s timer forward to now, keeping its action (a periodic job asked for a
        pass at once); whether it had one."""
        action = self._actions.get(key)
        if action is None:
            return False
        self.schedule(key, self.now_ms(), action)
        return True

    def cancel(self, key: Hashable) -> bool:
        """Forget `key`'s timer; whether it had one."""
        self._actions.pop(key, None)
        cancelled = self._queue.cancel(key)
        if cancelled and not self._queue:
            self._disarm()
        return cancelled

    def deadline(self, key: Hashable) -> int | None:
        return self._queue.deadline(key)

    def __len__(self) -> int:
        return len(self._queue)

    def __contains__(self, key: object) -> bool:
        return key in self._queue

    def run_due(self, now_ms: int | None = None) -> int:
        """Run every action due at `now_ms` (default: the clock), earliest first; how many ran.
        An action may schedule more timers; those due already run in the same pass."""
        now = self.now_ms() if now_ms is None else now_ms
        ran = 0
        while ran < MAX_DUE_PER_PASS:  # bounded: the rest runs in the next pass
            due = self._queue.pop_due(now, MAX_DUE_PER_PASS - ran)
            if not due:
                break
            for key in due:
                action = self._actions.pop(key, None)
                if action is None:  # cancelled by an action that ran before it in this pass
                    continue
                try:
                    action(now)
                except Exception:  # noqa: BLE001 - one bad action must not stop the others
                    log.exception("Timer %r of the %s timer service failed", key, self.name)
            ran += len(due)
        self._arm()
        return ran

    def close(self) -> None:
        """Forget every timer (the broker stops)."""
        self._queue = TimerQueue()
        self._actions.clear()
        self._disarm()

    def _arm(self) -> None:
        if not self._driven:
            return
        deadline = self._queue.next_deadline_ms()
        if deadline is None:
            self._disarm()
            return
        if self._armed is not None:
            if self._armed[0] == deadline:
                return
            self._armed[1].cancel()
            self._armed = None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop yet: armed by the first schedule made inside one
            return
        delay_s = max(0, deadline - self.now_ms()) / SECOND_MS
        self._armed = (deadline, loop.call_later(delay_s, self._fire, deadline))

    def _disarm(self) -> None:
        if self._armed is not None:
            self._armed[1].cancel()
            self._armed = None

    def _fire(self, deadline_ms: int) -> None:
        self._armed = None
        # The loop may wake up to its clock resolution early: what was armed for this
        # deadline is due now, so the pass runs at the deadline at least.
        self.run_due(max(self.now_ms(), deadline_ms))
