"""Table tests for spark.data_loss: where a read goes on after "out of range" or no progress."""

from __future__ import annotations

import logging

import pytest

from spark.data_loss import DataLossError, no_progress, resume_point
from spark.offsets import OffsetRange

RANGE = OffsetRange("t", 0, 100, 200)


@pytest.mark.parametrize("position, low, high, expected, loss", [
    (120, 150, 300, (150, False), True),    # the head was deleted: skip to what is left
    (120, 250, 300, (200, True), True),     # everything left of the range is gone: finished
    (120, 100, 300, (120, False), False),   # the records exist: a stale leader, read again
    (120, 100, 110, (200, True), True),     # the log was truncated below us: finished
])
def test_resume_point(position: int, low: int, high: int, expected: tuple[int, bool], loss: bool,
                      caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tidelog.spark"):
        assert resume_point(RANGE, position, low, high, fail=False) == expected
    assert ("may have been lost" in caplog.text) == loss
    if loss:
        with pytest.raises(DataLossError, match="failOnDataLoss"):
            resume_point(RANGE, position, low, high, fail=True)
    else:
        assert resume_point(RANGE, position, low, high, fail=True) == expected


def test_no_progress_below_high_is_a_timeout_not_a_loss() -> None:
    with pytest.raises(TimeoutError, match="pollTimeoutMs=512"):
        no_progress(RANGE, 150, 180, 512, fail=True)


def test_no_progress_past_a_truncated_end_is_a_loss(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(DataLossError, match="now ends at 140"):
        no_progress(RANGE, 150, 140, 512, fail=True)
    with caplog.at_level(logging.WARNING, logger="tidelog.spark"):
        no_progress(RANGE, 150, 140, 512, fail=False)
    assert "offsets 150 to 199 of t-0 are gone" in caplog.text


def test_no_progress_at_the_range_end_is_a_timeout() -> None:
    with pytest.raises(TimeoutError):  # the log reaches the range's end: the records will come
        no_progress(RANGE, 150, 200, 512, fail=False)
