"""flush_rules: which segments a flush syncs, where the recovery point may move after one, and
which bytes of the active segment go to the kernel's writeback when."""

from __future__ import annotations

import pytest

from broker.log.flush_rules import (
    WRITEBACK_BYTES,
    FlushPlan,
    WritebackStep,
    plan_flush,
    recovery_point_after,
    still_valid,
    writeback_start,
    writeback_step,
)

BASES = (0, 100, 250, 400)  # four segments; the last is active


@pytest.mark.parametrize(
    ("recovery_point", "target", "expected"),
    [
        (0, 0, None),  # nothing new
        (250, 100, None),  # already past it
        (0, 100, FlushPlan(0, 1, 100, sync_directory=True)),  # a roll at 100: segment 0 only
        (100, 250, FlushPlan(1, 2, 250, sync_directory=True)),  # the next roll's segment
        (120, 250, FlushPlan(1, 2, 250, sync_directory=False)),  # its file was synced already once
        (120, 400, FlushPlan(1, 3, 400, sync_directory=True)),  # segment 2 is new since 120
        (120, 401, FlushPlan(1, 4, 401, sync_directory=True)),  # into the active segment
        (399, 400, FlushPlan(2, 3, 400, sync_directory=False)),
    ],
)
def test_plan_flush(recovery_point: int, target: int, expected: FlushPlan | None) -> None:
    assert plan_flush(BASES, recovery_point=recovery_point, target=target) == expected


def test_plan_flush_of_a_log_whose_start_passed_the_recovery_point() -> None:
    # retention deleted the segments below 100 before any flush: the first one left is synced
    assert plan_flush((100, 200), recovery_point=0, target=200) == FlushPlan(0, 1, 200, sync_directory=True)


@pytest.mark.parametrize(
    ("recovery_point", "flushed_to", "log_end_offset", "expected"),
    [
        (0, 100, 150, 100),
        (120, 100, 150, 120),  # a synchronous flush passed it meanwhile: never backwards
        (0, 100, 80, 80),  # never past the log end
    ],
)
def test_recovery_point_after(recovery_point: int, flushed_to: int, log_end_offset: int,
                              expected: int) -> None:
    assert recovery_point_after(recovery_point, flushed_to, log_end_offset=log_end_offset) == expected


@pytest.mark.parametrize(
    ("target", "truncated_to", "valid"),
    [(100, 100, True), (100, 150, True), (100, 99, False), (100, -1, False)],
)
def test_a_truncation_below_a_flush_voids_it(target: int, truncated_to: int, valid: bool) -> None:
    assert still_valid(target, truncated_to=truncated_to) is valid


def test_a_plan_covers_a_segment() -> None:
    with pytest.raises(ValueError, match="at least one segment"):
        FlushPlan(2, 2, 100, sync_directory=False)


PAGE = 4096
MIB = WRITEBACK_BYTES  # the rows read in the hand-off size


@pytest.mark.parametrize(
    ("size", "started_to", "in_flight", "expected"),
    [
        # the first MiB of a new segment: every whole page, due again one MiB later
        (MIB, 0, False, WritebackStep(0, MIB, 2 * MIB)),
        # a partial last page stays behind: the next append writes into it
        (MIB + 100, 0, False, WritebackStep(0, MIB, 2 * MIB)),
        (2 * MIB + PAGE + 1, MIB, False, WritebackStep(MIB, 2 * MIB + PAGE, 3 * MIB + PAGE)),
        # the last hand-off has not returned: none now, ask again a MiB further on
        (2 * MIB, MIB, True, WritebackStep(MIB, MIB, 3 * MIB)),
        # the one after covers what the skipped one would have
        (3 * MIB, MIB, False, WritebackStep(MIB, 3 * MIB, 4 * MIB)),
        # asked with no new whole page (a truncation lowered the size under the last hand-off)
        (MIB - 1, MIB, False, WritebackStep(MIB, MIB, 2 * MIB)),
    ],
)
def test_writeback_step(size: int, started_to: int, in_flight: bool, expected: WritebackStep) -> None:
    assert writeback_step(size, started_to=started_to, in_flight=in_flight, page=PAGE) == expected


@pytest.mark.parametrize(
    ("size", "started_to", "expected"),
    [
        (0, -1, 0),  # a new segment
        (5 * PAGE + 7, -1, 5 * PAGE),  # reopened: its earlier bytes were written back before
        (3 * PAGE + 1, 2 * MIB, 3 * PAGE),  # cut below the last hand-off: rewritten from its page
        (3 * MIB, 2 * MIB, 2 * MIB),  # cut above it: nothing handed off is rewritten
    ],
)
def test_writeback_start(size: int, started_to: int, expected: int) -> None:
    assert writeback_start(size, started_to=started_to, page=PAGE) == expected
