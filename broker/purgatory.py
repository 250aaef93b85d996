"""Requests that wait: complete when satisfied, or expire at the request's one deadline.

    purgatory: Purgatory[TopicPartition] = Purgatory("Produce")
    result = await purgatory.wait(DelayedProduce(...), keys=[tp1, tp2], timeout_s=30 * SECONDS)
    purgatory.check_and_complete(tp1)     # after an append, a HW move, a role change

Kafka's DelayedOperation and DelayedOperationPurgatory. An operation is checked once when
it arrives (`try_complete`); if not satisfied it is watched under each of its keys (a
topic-partition for produces and fetches, a group id for the group coordinator's delayed
joins) and checked again whenever something happens to one of them. It completes the first
time a check succeeds, or at its deadline with `on_expiration()` — one deadline per request
whatever the number of keys, so a request over P partitions waits at most one timeout.

The operation decides (no I/O, no clock); the purgatory is the shell that holds the futures
and the timer. Everything runs on one event loop: a check never races an expiration.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable, Iterable
from typing import Generic, Protocol, TypeVar

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
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


class _Watched(Generic[T]):
    __slots__ = ("future", "operation")

    def __init__(self, operation: DelayedOperation[T], future: asyncio.Future[T]) -> None:
        self.operation = operation
        self.future = future


class Purgatory(Generic[K]):
    """Waiting operations by watch key. The watcher sets hold at most (waiting requests x
    their keys): an operation leaves every set when it completes or expires."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._watchers: dict[K, dict[int, _Watched[object]]] = {}
        self._next_id = 0

    async def wait(self, operation: DelayedOperation[T], keys: Iterable[K], timeout_s: float) -> T:
        """`operation`'s answer: now if satisfied, else the first satisfied check on one of
        `keys`, else `on_expiration()` after `timeout_s` (the request's one deadline)."""
        result = operation.try_complete()
        if result is not None:
            return result
        unique = list(dict.fromkeys(keys))
        if timeout_s <= 0 or not unique:
            return operation.on_expiration()
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        op_id = self._next_id
        self._next_id += 1
        watched: _Watched[object] = _Watched(operation, future)  # type: ignore[arg-type]
        for key in unique:
            self._watchers.setdefault(key, {})[op_id] = watched
        try:
            # One timer for the whole request, whatever the number of keys.
            return await asyncio.wait_for(asyncio.shield(future), timeout_s)
        except TimeoutError:
            if future.done():  # completed in the same loop turn as the timer fired
                return future.result()
            return operation.on_expiration()
        finally:
            if not future.done():
                future.cancel()
            for key in unique:
                self._unwatch(key, op_id)

    def check_and_complete(self, key: K) -> int:
        """Check every operation watching `key`; the number completed now."""
        watching = self._watchers.get(key)
        if not watching:
            return 0
        completed = 0
        # A copy: completing an operation removes it from the sets of all its keys.
        for op_id, watched in list(watching.items()):
            if watched.future.done():
                continue
            result = watched.operation.try_complete()
            if result is None:
                continue
            watched.future.set_result(result)
            completed += 1
            # Leave this key's set now (the waiter clears its other keys when it resumes),
            # so a second event on `key` in the same loop turn does not check it again.
            self._unwatch(key, op_id)
        return completed

    def watched(self, key: K) -> int:
        """How many operations wait on `key` (tests, metrics)."""
        return len(self._watchers.get(key, ()))

    def _unwatch(self, key: K, op_id: int) -> None:
        watching = self._watchers.get(key)
        if watching is None:
            return
        watching.pop(op_id, None)
        if not watching:
            del self._watchers[key]
