"""A cleaner running in a worker process, and its I/O budget: `Throttle`
(`log.cleaner.io.max.bytes.per.second`, clock injected) and the worker's entry points
(`init_cleaner_process`, `prepare_in_worker`) that `cleaner_manager` hands its process pool.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

from broker.log.cleaner_snapshot import LogSnapshot
from broker.log.log_cleaner import Cleaner, PreparedClean
from broker.log.offset_map import OffsetMap


class Throttle:
    """`log.cleaner.io.max.bytes.per.second` over reads and writes, clock injected.

    Its wait stays a blocking `sleep`, not a timer of the broker's timer service: it runs in
    the cleaner process (or thread) in the middle of a segment copy, where no event loop
    runs, and it is a rate limit on that copy rather than a deadline of the broker's.
    """

    def __init__(self, bytes_per_second: float, *, monotonic: Callable[[], float],
                 sleep: Callable[[float], None]) -> None:
        self.bytes_per_second = bytes_per_second
        self._monotonic, self._sleep = monotonic, sleep
        self._start = monotonic()
        self._bytes = 0

    def account(self, nbytes: int) -> None:
        self._bytes += nbytes
        elapsed = self._monotonic() - self._start
        ahead = self._bytes / self.bytes_per_second - elapsed
        if ahead > 0:
            self._sleep(ahead)
        if elapsed > 1.0:  # a fresh window, so an idle spell earns no burst
            self._start, self._bytes = self._monotonic(), 0


_worker_cleaner: Cleaner | None = None  # one per worker process, its map reused
# Compaction is background work: a cleaner process yields the CPU to the broker's produce
# and fetch path when both want it (RocksDB lowers its compaction threads' priority alike),
# and still gets every idle cycle.
CLEANER_NICENESS = 10


def init_cleaner_process() -> None:
    """A cleaner process's initializer: run at CLEANER_NICENESS, and leave the stopping to
    the broker. The broker's process group gets its SIGTERM (`tidelog down`, NodeProcess)
    and an idle pool worker waits for work holding the pool's task-queue lock; killed
    there, it never releases it and the broker's Pool.terminate() waits for it forever.
    So SIGTERM unwinds the worker (SystemExit: the lock is released on the way out), and
    SIGINT, the broker's own to handle, is ignored."""
    os.nice(CLEANER_NICENESS)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)


def prepare_in_worker(snap: LogSnapshot, *, first_dirty: int, first_uncleanable: int,
                      now_ms: int, tombstones_due: bool, map_capacity: int,
                      max_bytes_per_second: float) -> PreparedClean | None:
    """`Cleaner.prepare` in a cleaner worker process (no GIL shared with the broker)."""
    import time

    global _worker_cleaner
    if _worker_cleaner is None or _worker_cleaner.offset_map.capacity != map_capacity:
        throttle = None
        if max_bytes_per_second < float("inf"):
            throttle = Throttle(max_bytes_per_second, monotonic=time.monotonic, sleep=time.sleep)
        _worker_cleaner = Cleaner(OffsetMap(map_capacity), throttle=throttle)
    return _worker_cleaner.prepare(snap, first_dirty=first_dirty,
                                   first_uncleanable=first_uncleanable, now_ms=now_ms,
                                   tombstones_due=tombstones_due)
