"""What a partition log's flush makes durable, and where its recovery point may move after one.

Kafka's `UnifiedLog.roll` does not fsync the segment it closes on the appending thread: it
schedules `flushUptoOffsetExclusive(newSegment.baseOffset)` on the background scheduler, and
the recovery point moves (`markFlushed`) only once that flush has returned. The partition log
does the same on its one event loop: these rules decide what to sync and how far the recovery
point moves; `flusher` (the shell) only fsyncs, on its own thread.

    plan = plan_flush(bases, recovery_point=rp, target=new_base)   # None: nothing to sync
    ... the flusher fsyncs segments [plan.first, plan.stop) (and the directory if asked) ...
    rp = recovery_point_after(rp, plan.target, voided=...)          # on the loop, when done

The recovery point is the one fact recovery trusts after a crash (it rescans only what lies
past it), so it never moves ahead of an fsync: a flush still in flight, or one that failed,
leaves it where it was, and a truncation below a flush's target voids that flush (the bytes
it synced are no longer the log's).

Before any flush, the active segment's bytes are handed to the kernel's writeback as the log
appends them, a few at a time (`writeback_step`; the `writeback` shell starts it on its own
thread): the fsync that moves the recovery point then finds little left to write, and the page
cache never holds gigabytes of the log's dirty pages for the kernel to write back in one burst.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from common.units import MIB

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

# Background flushes one log may have in flight (each one segment's roll). Past it a roll waits
# for the oldest: the disk is that many segments behind, and an unbounded queue would only
# hide it (each pending flush pins one segment file's descriptor outside the file cache).
MAX_FLUSHES_IN_FLIGHT: Final = 4  # flushes per log

# Bytes a log appends to its active segment between two hand-offs of them to the kernel's
# writeback (RocksDB's bytes_per_sync, at its usual 1 MiB). Smaller costs the event loop more
# hand-offs (one per MiB: ~100 a second per broker at 100 MB/s); larger leaves more dirty pages
# for each start of writeback to queue on the disk at once.
WRITEBACK_BYTES: Final = 1 * MIB


@dataclass(frozen=True, slots=True)
class FlushPlan:
    """Segments `[first, stop)` of the log hold every offset in [recovery point, `target`)."""

    first: int  # index into the log's segments
    stop: int
    target: int  # the recovery point once they are synced
    # A segment created since the last flush is among them: its directory entry must be made
    # durable too (Kafka's LocalLog.flush -> flushDirIfExists), or a power loss could lose the
    # file whose bytes the recovery point claims.
    sync_directory: bool

    def __post_init__(self) -> None:
        if not 0 <= self.first < self.stop:
            raise ValueError(f"a flush plan covers at least one segment, not [{self.first}, {self.stop})")


def plan_flush(bases: Sequence[int], *, recovery_point: int, target: int) -> FlushPlan | None:
    """The segments (by their sorted base offsets `bases`) to fsync so that the recovery point
    can move from `recovery_point` to `target`; None when it is there already."""
    if target <= recovery_point or not bases:
        return None
    first = max(bisect_right(bases, recovery_point) - 1, 0)
    stop = max(bisect_right(bases, target - 1), first + 1)  # segments starting below `target`
    return FlushPlan(first, stop, target,
                     sync_directory=any(base >= recovery_point for base in bases[first:stop]))


def recovery_point_after(recovery_point: int, flushed_to: int, *, log_end_offset: int) -> int:
    """The recovery point once a flush up to `flushed_to` returned: never backwards (a later
    synchronous flush may have passed it), never past the log's end."""
    return max(recovery_point, min(flushed_to, log_end_offset))


def still_valid(target: int, *, truncated_to: int) -> bool:
    """Whether a flush in flight up to `target` still speaks for the log after it was
    truncated to `truncated_to`: only if it synced nothing at or past the cut (bytes written
    there later are new ones its fsync never covered)."""
    return target <= truncated_to


@dataclass(frozen=True, slots=True)
class WritebackStep:
    """Hand bytes `[start, end)` of the active segment to the kernel's writeback now (none when
    `start == end`), and ask again once the segment is `due` bytes long."""

    start: int
    end: int
    due: int


def writeback_step(size: int, *, started_to: int, in_flight: bool, page: int) -> WritebackStep:
    """What to hand to writeback once the active segment is `size` bytes long and its bytes
    below `started_to` were handed already. Whole pages only: the last partial page takes the
    next append too, and a page under writeback would make that append wait for the disk (on a
    device that needs stable pages). One hand-off per log at a time (`in_flight`: the last one
    has not returned): the disk is behind, and the next one covers these bytes as well."""
    if in_flight:
        return WritebackStep(started_to, started_to, size + WRITEBACK_BYTES)
    end = max(size - size % page, started_to)
    return WritebackStep(started_to, end, end + WRITEBACK_BYTES)


def writeback_start(size: int, *, started_to: int, page: int) -> int:
    """Where the next hand-off starts once the active segment is `size` bytes long: a new or
    reopened segment (`started_to` -1) starts at its last whole page (earlier bytes were this
    process's to write back, or the kernel's); a truncated one at its cut's page, if that is
    lower (bytes past it will be written again)."""
    aligned = size - size % page
    return aligned if started_to < 0 else min(started_to, aligned)
