"""The broker's one timer service: deadlines by key on an injected millisecond clock.

    timers = TimerService()                              # monotonic ms; a loop timer at the earliest deadline
    timers.schedule(("session", "g1"), deadline_ms, lambda now_ms: expire(now_ms))
    timers.schedule(("session", "g1"), later_ms, ...)   # the same key: rescheduled, not added
    timers.cancel(("session", "g1"))
    timers.schedule_every("isr-expiration", 5_000, lambda now_ms: shrink())  # re-armed each run
    fake = TimerService(clock=lambda: clock[0], driven=False)   # tests: clock[0] += 10; fake.run_due()

Kafka's broker has one `SystemTimer` (a hierarchical timing wheel) behind its purgatories and
its coordinators' `CoordinatorTimer`; the controller here has one heap of (due_ms, seq, task)
on an injected clock (`quorum.controller_runtime`). This is the broker's: `TimerQueue` is the
sans-IO core, a heap of (deadline_ms, seq, key, action) with one live entry per key (reschedule
replaces, cancel forgets; stale heap entries are dropped as the heap is popped), and
`TimerService` the asyncio shell, which keeps one event-loop timer armed at or before the
earliest deadline. A deadline runs when it is due, to the millisecond: a session of 10,000 ms
that started at t expires at t + 10,000, not at the next tick of a polling loop.

Cheap enough to take one timer per waiting request (issue 35: the deadline of each parked
follower fetch, two per acks=all produce at the leader): a schedule is a heap push and a dict
store, and touches the event loop only when its deadline is earlier than the one armed; a
cancel is a dict pop. The loop timer is left armed for a cancelled key: it fires, finds nothing
due, drops the stale entries and arms at the next live deadline (a rescheduled or cancelled
key's action never runs).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Hashable
from heapq import heapify, heappop, heappush
from typing import Final, Generic, TypeVar

from common.units import SECOND_MS

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
TimerAction = Callable[[int], None]  # called with the time it runs at (>= its deadline), in ms
MAX_DUE_PER_PASS: Final = 10_000  # actions run per pass before yielding to the event loop
STALE_SLACK: Final = 64  # stale heap entries tolerated beyond the live ones before a compaction
NOT_ARMED: Final = 1 << 62  # `TimerService._armed_ms` with no loop timer: later than any deadline


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def wall_ms() -> int:
    """Wall-clock milliseconds: what Kafka's records and answers carry (commit timestamps,
    transaction start times); deadlines run on `monotonic_ms`."""
    return time.time_ns() // 1_000_000


class TimerQueue(Generic[K, V]):
    """Deadlines by key, each with a value (the shell's action): at most one live deadline per
    key, popped in (deadline, seq) order.

    A key's live entry is the very tuple pushed on the heap, so a heap entry is stale (its key
    rescheduled or cancelled since) when it is not its key's live entry: one identity test.
    Memory is bounded by the live keys plus at most as many stale entries again and
    `STALE_SLACK`: past that the heap is rebuilt from the live entries (a C-level copy and
    heapify, amortised over the pushes that made it stale).
    """

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, K, V]] = []  # (deadline_ms, seq, key, value)
        self._live: dict[K, tuple[int, int, K, V]] = {}  # key -> its one live heap entry
        self._seq = itertools.count()

    def schedule(self, key: K, deadline_ms: int, value: V) -> None:
        """`key` is due at `deadline_ms` with `value`, replacing any deadline it had."""
        # seq is unique: the heap orders ties by scheduling and never compares keys or values
        self._live[key] = entry = (deadline_ms, next(self._seq), key, value)
        heap = self._heap
        heappush(heap, entry)
        if len(heap) > 2 * len(self._live) + STALE_SLACK:  # the bound under schedule/cancel churn
            self._compact()

    def cancel(self, key: K) -> bool:
        """Forget `key`'s deadline (its heap entry goes stale); whether it had one."""
        return self._live.pop(key, None) is not None

    def deadline(self, key: K) -> int | None:
        entry = self._live.get(key)
        return None if entry is None else entry[0]

    def value(self, key: K) -> V | None:
        entry = self._live.get(key)
        return None if entry is None else entry[3]

    def next_deadline_ms(self) -> int | None:
        """The earliest live deadline; None when nothing is scheduled."""
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop(self, now_ms: int) -> tuple[K, V] | None:
        """The earliest (key, value) due at `now_ms` (deadline <= now_ms), forgotten; None when
        nothing is due. One at a time: what an action cancels or reschedules before its turn
        is seen (a cancelled key never runs)."""
        heap = self._heap
        if heap and self._live.get(heap[0][2]) is not heap[0]:
            self._drop_stale()
            heap = self._heap
        if not heap or heap[0][0] > now_ms:
            return None
        _, _, key, value = heappop(heap)
        del self._live[key]
        return key, value

    def clear(self) -> None:
        self._heap.clear()
        self._live.clear()

    def heap_size(self) -> int:
        """Live and stale entries on the heap (tests: memory under churn)."""
        return len(self._heap)

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, key: object) -> bool:
        return key in self._live

    def _drop_stale(self) -> None:
        """Drop the stale entries on top of the heap: popped one by one when they are few, else
        all at once by a rebuild from the live entries (more stale than live entries: the
        cancelled deadlines of requests answered early, e.g. two follower fetches per acks=all
        produce, since the loop timer last fired)."""
        heap, live = self._heap, self._live
        if len(heap) > 2 * len(live):
            self._compact()
            return
        while heap and live.get(heap[0][2]) is not heap[0]:  # each pass pops one
            heappop(heap)

    def _compact(self) -> None:
        self._heap = heap = list(self._live.values())
        heapify(heap)


class TimerService:
    """The asyncio shell: runs each key's action at its deadline on `clock`.

    `driven=True` (the broker) keeps one event-loop timer armed at or before the earliest
    deadline whenever an event loop runs; `driven=False` (tests with a fake clock) leaves
    running to `run_due()`. An action that raises is logged and the others still run. A
    driven service serves one event loop: the broker runs one for its life (a test that runs
    another after the first closed `close()`s the service, or builds a new one).
    """

    def __init__(self, clock: Callable[[], int] = monotonic_ms, *, driven: bool = True,
                 name: str = "broker") -> None:
        self.now_ms = clock
        self.name = name
        self._driven = driven
        self._queue: TimerQueue[Hashable, TimerAction] = TimerQueue()
        self._armed: asyncio.TimerHandle | None = None
        self._armed_ms = NOT_ARMED  # the deadline the loop timer is armed for
        # The queue's own methods, not a frame around each (the purgatories and the fetch
        # sessions ask and cancel per request): forget `key`'s timer, whether it had one; its deadline.
        self.cancel: Callable[[Hashable], bool] = self._queue.cancel
        self.deadline: Callable[[Hashable], int | None] = self._queue.deadline

    def schedule(self, key: Hashable, deadline_ms: int, action: TimerAction) -> None:
        """Run `action(now_ms)` at `deadline_ms` (at once if past), replacing `key`'s timer."""
        self._queue.schedule(key, deadline_ms, action)
        if deadline_ms < self._armed_ms:  # else the loop timer fires first and arms for it
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
        action = self._queue.value(key)
        if action is None:
            return False
        self.schedule(key, self.now_ms(), action)
        return True

    def __len__(self) -> int:
        return len(self._queue)

    def __contains__(self, key: object) -> bool:
        return key in self._queue

    def run_due(self, now_ms: int | None = None) -> int:
        """Run every action due at `now_ms` (default: the clock), earliest first; how many ran.
        An action may schedule more timers; those due already run in the same pass."""
        ran = self._run(self.now_ms() if now_ms is None else now_ms)
        self._arm()
        return ran

    def _run(self, now_ms: int) -> int:
        pop = self._queue.pop
        ran = 0
        while ran < MAX_DUE_PER_PASS:  # bounded: the rest runs in the next pass
            due = pop(now_ms)
            if due is None:
                break
            key, action = due
            ran += 1
            try:
                action(now_ms)
            except Exception:  # noqa: BLE001 - one bad action must not stop the others
                log.exception("Timer %r of the %s timer service failed", key, self.name)
        return ran

    def close(self) -> None:
        """Forget every timer (the broker stops)."""
        self._queue.clear()
        self._disarm()

    def _arm(self) -> None:
        """Arm the loop timer at the earliest live deadline if it is earlier than the one armed
        (or none is): a later one waits for the armed timer, whose pass arms for it."""
        if not self._driven:
            return
        deadline = self._queue.next_deadline_ms()
        if deadline is None or deadline >= self._armed_ms:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop yet: armed by the first schedule made inside one
            return
        self._disarm()
        delay_s = max(0, deadline - self.now_ms()) / SECOND_MS
        self._armed = loop.call_later(delay_s, self._fire, deadline)
        self._armed_ms = deadline

    def _disarm(self) -> None:
        if self._armed is not None:
            self._armed.cancel()
            self._armed = None
        self._armed_ms = NOT_ARMED

    def _fire(self, deadline_ms: int) -> None:
        self._armed = None
        # While the pass runs, what its actions schedule arms nothing (the entries still due
        # would arm the loop for now); the pass arms once, at its end.
        self._armed_ms = -NOT_ARMED
        try:
            # The loop may wake up to its clock resolution early: what was armed for this
            # deadline is due now, so the pass runs at the deadline at least.
            self._run(max(self.now_ms(), deadline_ms))
        finally:
            self._armed_ms = NOT_ARMED
            self._arm()
