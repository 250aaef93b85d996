"""Waiting until this broker's metadata image has applied a metadata log offset.

The controllers answer a topic write with the offset of its last committed record; the broker
that forwarded it answers its client only once its own image holds that offset, so a client
reading through the same broker sees its own write (read-your-writes, which Kafka leaves open
for a few milliseconds). The metadata follower calls `advanced(offset)` after each replay it
publishes; waiters are woken by that call, never by polling.

    waiters = AppliedOffsetWaiters(lambda: follower.state.applied_offset)
    applied = await waiters.wait_for(offset, timeout=5.0)   # False: not within the timeout
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

log = logging.getLogger(__name__)

MAX_WAITERS: Final = 1024  # admin requests waiting at once; more are answered without waiting


class AppliedOffsetWaiters:
    """Futures resolved when the applied metadata offset reaches theirs (one event loop: no locks)."""

    def __init__(self, applied_offset: Callable[[], int], *, max_waiters: int = MAX_WAITERS) -> None:
        self._applied_offset = applied_offset
        self._max_waiters = max_waiters
        self._waiting: dict[asyncio.Future[None], int] = {}  # future -> the offset it waits for

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def advanced(self, offset: int) -> None:
        """The image now holds `offset`: wake everyone waiting for it or an earlier one."""
        # bounded: at most max_waiters entries
        for future, wanted in list(self._waiting.items()):
            if wanted <= offset:
                del self._waiting[future]
                if not future.done():
                    future.set_result(None)

    async def wait_for(self, offset: int, timeout: float) -> bool:
        """True once the applied offset is at least `offset`; False after `timeout` seconds (or at
        once when MAX_WAITERS requests already wait: the caller answers without the guarantee)."""
        if self._applied_offset() >= offset:
            return True
        if len(self._waiting) >= self._max_waiters:
            log.warning("Not waiting for metadata offset %d: %d admin requests already wait", offset,
                        len(self._waiting))
            return False
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[future] = offset
        try:
            await asyncio.wait_for(future, timeout)
            return True
        except TimeoutError:
            return self._applied_offset() >= offset
        finally:
            self._waiting.pop(future, None)
