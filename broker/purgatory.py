"""Requests that wait: complete when satisfied, or expire at the request's one deadline.

    purgatory: Purgatory[TopicPartition, Codes] = Purgatory("Produce")
    codes = await purgatory.wait(DelayedProduce(...), keys=[tp1, tp2], timeout_s=30 * SECONDS)
    answer = purgatory.watch(DelayedProduce(...), [tp1, tp2], 30 * SECONDS, then=respond)  # a future
    purgatory.check_and_complete(tp1)     # after an append, a HW move, a role change

Kafka's DelayedOperation and DelayedOperationPurgatory. An operation is checked once when
it arrives (`try_complete`); if not satisfied it is watched under each of its keys (a
topic-partition for produces and fetches, a group id for the group coordinator's delayed
joins) and checked again whenever something happens to one of them. It completes the first
time a check succeeds, or at its deadline with `on_expiration()` — one deadline per request
whatever the number of keys, so a request over P partitions waits at most one timeout.

`DelayedOperations` is the sans-IO core: the watch sets and a heap of deadlines in integer
milliseconds of whatever clock the caller uses (`expire(now_ms)`), so a caller with its own
injected clock can drive it directly. `Purgatory` is the asyncio shell: a future per waiting
request (`watch` returns it, `wait` awaits it) and at most one timer in the broker's timer
service (`broker.timers`), at or before the earliest deadline of what waits. The operation
decides; neither holds any I/O.
`Purgatory.waited` counts how long each watched request waited until completed or expired
(issue 35: in the Produce purgatory that is an acks=all produce waiting for its ISR, the part
of its latency the follower fetch schedule decides); /metrics shows it by purgatory.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from broker.loop_stalls import PauseHistogram
from broker.timers import TimerService
from common.units import SECOND_MS

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
R = TypeVar("R")
T_co = TypeVar("T_co", covariant=True)


class DelayedOperation(Protocol[T_co]):
    """One waiting request: its answer once satisfied, or at its deadline."""

    def try_complete(self) -> T_co | None:
        """The answer if the request can complete now; None while it must keep waiting.

        Called on arrival and then after every event on one of its keys; it may keep
        progress between calls (a produce remembers which partitions are done).
        """

    def on_expiration(self) -> T_co:
        """The answer at the deadline (e.g. REQUEST_TIMED_OUT for what is still pending)."""


@dataclass(slots=True)
class _Watched(Generic[K, T]):
    operation: DelayedOperation[T]
    keys: tuple[K, ...]
    deadline_ms: int


class DelayedOperations(Generic[K, T]):
    """The sans-IO purgatory: watched operations by key and by deadline.

    Each method returns the operations it finished as (operation id, answer). Memory is
    bounded by the waiting requests: an operation leaves every structure when it completes,
    expires or is cancelled (stale heap entries are dropped as the heap is popped).
    """

    def __init__(self) -> None:
        self._pending: dict[int, _Watched[K, T]] = {}
        self._by_key: dict[K, dict[int, None]] = {}  # insertion-ordered: checked oldest first
        self._deadlines: list[tuple[int, int]] = []  # (deadline_ms, operation id)
        self._next_id = 0

    def watch(self, operation: DelayedOperation[T], keys: Iterable[K], deadline_ms: int) -> int:
        """Watch `operation` (whose arrival check failed: Kafka's tryCompleteElseWatch) under
        `keys` until `deadline_ms`; its id. ValueError without keys (nothing could wake it)."""
        unique = tuple(dict.fromkeys(keys))
        if not unique:
            raise ValueError("a delayed operation needs at least one watch key")
        op_id = self._next_id
        self._next_id += 1
        self._pending[op_id] = _Watched(operation, unique, deadline_ms)
        for key in unique:
            self._by_key.setdefault(key, {})[op_id] = None
        heapq.heappush(self._deadlines, (deadline_ms, op_id))
        return op_id

    def check_and_complete(self, key: K) -> list[tuple[int, T]]:
        """Check every operation watching `key`; those that completed now."""
        watching = self._by_key.get(key)
        if not watching:
            return []
        done = []
        for op_id in list(watching):  # a copy: completing one unwatches it from every key
            watched = self._pending.get(op_id)
            if watched is None:
                continue
            result = watched.operation.try_complete()
            if result is not None:
                self._forget(op_id)
                done.append((op_id, result))
        return done

    def expire(self, now_ms: int) -> list[tuple[int, T]]:
        """Expire every operation whose deadline is at or before `now_ms`."""
        done = []
        while self._deadlines and self._deadlines[0][0] <= now_ms:  # each pass pops one entry
            _, op_id = heapq.heappop(self._deadlines)
            watched = self._forget(op_id)
            if watched is not None:
                done.append((op_id, watched.operation.on_expiration()))
        return done

    def cancel(self, op_id: int) -> None:
        """Forget an operation nobody waits for any more (its request was abandoned)."""
        self._forget(op_id)

    def next_deadline_ms(self) -> int | None:
        """When the next expiration is due; None when nothing waits."""
        while self._deadlines and self._deadlines[0][1] not in self._pending:
            heapq.heappop(self._deadlines)  # completed or cancelled earlier
        return self._deadlines[0][0] if self._deadlines else None

    def watched(self, key: K) -> int:
        """How many operations wait on `key` (tests, metrics)."""
        return len(self._by_key.get(key, ()))

    def __len__(self) -> int:
        return len(self._pending)

    def _forget(self, op_id: int) -> _Watched[K, T] | None:
        watched = self._pending.pop(op_id, None)
        if watched is None:
            return None
        for key in watched.keys:
            watching = self._by_key.get(key)
            if watching is not None:
                watching.pop(op_id, None)
                if not watching:
                    del self._by_key[key]
        if not self._pending:
            self._deadlines.clear()  # only stale entries are left
        return watched


class Purgatory(Generic[K, T]):
    """The asyncio shell over `DelayedOperations`: a future per waiting request (`watch`), or
    `wait` until completed or expired."""

    def __init__(self, name: str, timers: TimerService | None = None) -> None:
        self.name = name
        # the broker's timer service when given; else one of its own on the monotonic clock
        self.timers = timers if timers is not None else TimerService(name=f"{name} purgatory")
        self.operations: DelayedOperations[K, T] = DelayedOperations()
        # The keys something waits on, live (read only): a caller that asks after every append
        # or follower fetch tests `key in watched_keys` before calling `check_and_complete`.
        self.watched_keys: Mapping[K, object] = self.operations._by_key
        self._waiting: dict[int, _Waiting[T, Any]] = {}
        self._timer_key = (self, "expire")  # its one timer in `timers`
        self.waited = PauseHistogram()  # watched requests: from watch to completion or expiry

    def watch(self, operation: DelayedOperation[T], keys: Iterable[K], timeout_s: float,
              then: Callable[[T], R]) -> asyncio.Future[R]:
        """A future of `then(answer)`: done now if `operation` is satisfied (or `timeout_s` is
        not positive: `on_expiration()`), else set by the first satisfied check on one of
        `keys`, or at the request's one deadline `timeout_s`.

        `then` runs where the operation completes (inside `check_and_complete`, or the deadline's
        timer), so whoever awaits the future is woken with the answer built: an acks=all produce
        needs no task or coroutine of its own to wait in (issue 35). What `then` raises goes to
        the future. A future nobody awaits any more (its connection closed) stays watched until
        it completes or expires, as a Kafka DelayedProduce does; `wait` forgets it at once."""
        return self._watch(operation, keys, timeout_s, then)[0]

    async def wait(self, operation: DelayedOperation[T], keys: Iterable[K], timeout_s: float) -> T:
        """`operation`'s answer: now if satisfied, else the first satisfied check on one of
        `keys`, else `on_expiration()` after `timeout_s` (the request's one deadline)."""
        future, op_id = self._watch(operation, keys, timeout_s, _same)
        try:
            return await future
        finally:
            if op_id >= 0 and op_id in self._waiting:  # the waiting task was cancelled: nobody wants it
                self._forget(op_id)

    def _watch(self, operation: DelayedOperation[T], keys: Iterable[K], timeout_s: float,
               then: Callable[[T], R]) -> tuple[asyncio.Future[R], int]:
        """(the future, its operation id; -1 when decided on arrival)."""
        # the consumer of the answer may hear it in the completing turn (`AnswerFuture`)
        future: asyncio.Future[R] = AnswerFuture(loop=asyncio.get_running_loop())
        result = operation.try_complete()
        if result is None and timeout_s <= 0:
            result = operation.on_expiration()
        if result is not None:
            _settle(future, then, result)
            return future, -1
        timers = self.timers
        started_ms = timers.now_ms()
        deadline_ms = started_ms + int(timeout_s * SECOND_MS)
        op_id = self.operations.watch(operation, keys, deadline_ms)
        self._waiting[op_id] = _Waiting(future, then, started_ms)
        # At most one timer per purgatory, at or before the earliest deadline of what waits
        # (Kafka's purgatory has one timing wheel; `DelayedOperations` is this one's deadline
        # index): a request whose deadline is not earlier than the armed one schedules nothing,
        # and one that completes cancels nothing, even the last (an acks=all canary empties the
        # Produce purgatory with every produce: a schedule and a cancel each). The timer of
        # requests done early fires anyway, finds nothing due and moves to the next deadline,
        # or goes when nothing waits (`_expire_until`).
        armed = timers.deadline(self._timer_key)
        if armed is None or deadline_ms < armed:
            timers.schedule(self._timer_key, deadline_ms, self._expire_until)
        return future, op_id

    def check_and_complete(self, key: K) -> int:
        """Check every operation watching `key`; the number completed now."""
        if key not in self.watched_keys:  # the usual case: every append, HW move and follower fetch asks
            return 0
        done = self.operations.check_and_complete(key)
        self._finish(done)
        return len(done)

    def watched(self, key: K) -> int:
        """How many operations wait on `key` (tests, metrics)."""
        return self.operations.watched(key)

    def _expire_until(self, now_ms: int) -> None:
        self._finish(self.operations.expire(now_ms))
        next_ms = self.operations.next_deadline_ms()
        if next_ms is not None and self.timers.deadline(self._timer_key) is None:  # (`then` may have watched)
            self.timers.schedule(self._timer_key, next_ms, self._expire_until)

    def _finish(self, done: list[tuple[int, T]]) -> None:
        if not done:
            return
        now_ms = self.timers.now_ms()
        for op_id, result in done:
            waiting = self._waiting.pop(op_id, None)
            if waiting is None:
                continue
            self.waited.observe(now_ms - waiting.started_ms)
            if not waiting.future.done():
                _settle(waiting.future, waiting.then, result)

    def _forget(self, op_id: int) -> None:
        del self._waiting[op_id]
        self.operations.cancel(op_id)


class AnswerFuture(asyncio.Future[T]):
    """`asyncio.Future` and one listener of its outcome, told at once in the setter's own turn
    (set at most once, by the one consumer of the answer; it must not raise).

    A future runs its done callbacks through `call_soon`: a handle, and one loop pass later.
    The broker's server writes an answer from the turn that makes it ready when its writer is
    idle (broker/server.py `Connection._answer_in_turn`); for an acks=all Produce, whose answer
    the high watermark's move decides inside a follower's fetch, that turn is the one that sets
    this future. So `Purgatory.watch` gives AnswerFutures, and the server, rather than adding a
    done callback, sets `listener`: the answer goes out in the follower fetch's turn, with no
    handle and no extra loop pass. Awaiting and done callbacks work as for any future;
    cancelling tells the listener nothing (whoever cancels knows)."""

    listener: Callable[[AnswerFuture[Any]], None] | None = None

    def set_result(self, result: T) -> None:
        super().set_result(result)
        listener = self.listener
        if listener is not None:
            listener(self)

    def set_exception(self, exception: type | BaseException) -> None:
        super().set_exception(exception)
        listener = self.listener
        if listener is not None:
            listener(self)


@dataclass(slots=True)
class _Waiting(Generic[T, R]):
    future: asyncio.Future[R]
    then: Callable[[T], R]
    started_ms: int


def _same(result: T) -> T:
    return result


def _settle(future: asyncio.Future[R], then: Callable[[T], R], result: T) -> None:
    try:
        answer = then(result)
    except Exception as exc:  # noqa: BLE001 - the awaiting request's failure, not the completer's
        future.set_exception(exc)
        return
    future.set_result(answer)
