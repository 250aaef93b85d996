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
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

# Background flushes one log may have in flight (each one segment's roll). Past it a roll waits
# for the oldest: the disk is that many segments behind, and an unbounded queue would only
# hide it (each pending flush pins one segment file's descriptor outside the file cache).
MAX_FLUSHES_IN_FLIGHT: Final = 4  # flushes per log


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
