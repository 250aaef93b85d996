"""Early writeback: hands what the log appended to the kernel's writeback from a thread of its own.

Why (issue 35, measured on ext4 with the kernel's default dirty limits): a broker writing
~100 MB/s leaves its segments' pages dirty until the page cache holds the background threshold
(dirty_background_ratio, 10 % of memory: 2.4 GB on a 24 GB box), and the kernel's flusher
then writes gigabytes at once. Delayed allocation makes ext4 allocate the blocks in that
writeback, holding the file's `i_data_sem`; an allocation that starts a new block group reads
its bitmap from the disk, behind the burst's queue, for up to a second (wchan
`ext4_wait_block_bitmap`). The broker's next append to that file needs the same lock for its
own new blocks (`ext4_da_get_block_prep`, down_write) and its event loop waits as long: a
follower's stall of ~1 s, and the acks=all tail with it.

Starting writeback of each few MiB as it is appended (RocksDB's bytes_per_sync) keeps the
dirty pages at a few MiB per active segment and the disk's queue short, so an allocation's
bitmap read waits for little. `sync_file_range(SYNC_FILE_RANGE_WRITE)` starts the writes and
returns without waiting for them; it may still wait for the disk's queue or for the file's
lock, so it runs here, never on the event loop:

    step = writeback_step(segment.size, ...)                  # flush_rules, on the loop
    future = writeback.start(handle, path, step.start, step.end)   # this thread: the syscall

Nothing here is a durability promise: a roll's fsync (`flusher`) still makes the segment
durable and moves the recovery point. Python has no os.sync_file_range; this binds libc's
with ctypes (which releases the GIL for the call). Where libc has none (not Linux), `available`
is False and the log leaves writeback to the kernel, as before.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Final

from broker.log.flush_rules import WRITEBACK_BYTES, writeback_start, writeback_step
from broker.log.io_worker import IoWorker
from broker.log.segment_files import SegmentHandle

if TYPE_CHECKING:  # segment.py imports flusher.py, which imports this
    from broker.log.segment import LogSegment

log = logging.getLogger(__name__)

# <linux/fs.h>: start writeback of the range's dirty pages not under writeback already; wait
# for none of it (neither SYNC_FILE_RANGE_WAIT_BEFORE nor _WAIT_AFTER).
SYNC_FILE_RANGE_WRITE: Final = 2
PAGE_BYTES: Final = mmap.PAGESIZE  # hand-offs end on a page boundary (flush_rules.writeback_step)
# The active segment's writeback is due at this size when there is none to start (no flusher,
# no sync_file_range, or a hand-off failed, until the next roll): no segment reaches it.
NO_WRITEBACK: Final = 1 << 62

StartWriteback = Callable[[int, int, int], None]  # (fd, offset, bytes): raises OSError


def libc_sync_file_range() -> StartWriteback | None:
    """libc's sync_file_range(fd, offset, nbytes, SYNC_FILE_RANGE_WRITE) as a function, or
    None where libc has none."""
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    function.restype = ctypes.c_int

    def start_writeback(fd: int, offset: int, nbytes: int) -> None:
        if function(fd, offset, nbytes, SYNC_FILE_RANGE_WRITE) != 0:
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error))

    return start_writeback


class SegmentWriteback:
    """One thread starting writeback of segment byte ranges in submission order.

    Its queue holds at most one range per log (`flush_rules.writeback_step` asks for no second
    while the first has not returned), so it is bounded by the number of logs appending."""

    def __init__(self, start_writeback: StartWriteback | None) -> None:
        """`start_writeback`: the syscall (`libc_sync_file_range()`; a test's stand-in; None:
        not available here)."""
        self._start = start_writeback
        self._worker = IoWorker("log-writeback")  # its thread starts at the first hand-off

    @property
    def available(self) -> bool:
        return self._start is not None

    # ---- a log's side, on the event loop: what each log keeps is (from, due, pending) ----------

    def restart(self, size: int, *, started_to: int) -> tuple[int, int]:
        """A log's active segment is new or reopened (`started_to` -1) or was cut to `size`
        bytes: where its next hand-off starts, and the size at which it is due."""
        if not self.available:
            return 0, NO_WRITEBACK
        start = writeback_start(size, started_to=started_to, page=PAGE_BYTES)
        return start, start + WRITEBACK_BYTES

    def hand_off(self, segment: LogSegment, *, started_to: int, pending: Future[None] | None,
                 name: str) -> tuple[int, int, Future[None] | None]:
        """The active `segment` reached its due size: hand its new whole pages over (unless the
        log's last hand-off, `pending`, is still running). Returns the log's new (from, due,
        pending)."""
        if pending is not None and pending.done():
            error = pending.exception()
            if error is not None:
                # Not a durability matter (the roll's fsync is, and reports its own failure):
                # one line, and the kernel writes the rest of this segment back on its schedule.
                log.warning("%s%s; the rest of this segment is left to the kernel's writeback",
                            name, error)
                return started_to, NO_WRITEBACK, None
            pending = None
        step = writeback_step(segment.size, started_to=started_to, in_flight=pending is not None,
                              page=PAGE_BYTES)
        if step.end > step.start:
            pending = self.start(segment.file(), segment.log_path, step.start, step.end)
        return step.end, step.due, pending

    def start(self, handle: SegmentHandle, path: Path, start: int, end: int) -> Future[None]:
        """Start writeback of bytes [start, end) of the file behind `handle` (pinned until
        done); the future ends with an OSError naming the file if the call failed (the log's
        next `hand_off` reports it)."""
        return self._worker.submit(partial(self._run, handle, path, start, end))

    def _run(self, handle: SegmentHandle, path: Path, start: int, end: int) -> None:
        assert self._start is not None  # PartitionLog hands nothing over when not `available`
        try:
            self._start(handle.fd, start, end - start)
        except OSError as e:
            raise OSError(e.errno, f"cannot start writeback of bytes [{start}, {end}) of {path}: "
                          f"{e.strerror}") from e

    def shutdown(self) -> None:
        """Wait for the hand-offs in flight (each returns once its writes are queued)."""
        self._worker.close()
