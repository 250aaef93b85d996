"""broker/log/retention.py: which leading segments retention deletes, and why, as a table over
the segments of a real log (six segments of 100 B-ish batches, timestamps 1 s apart)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.log.partition_log import PartitionLog
from broker.log.retention import RetentionStep, retention_steps
from common.log_config import LogConfig
from tests.log_helpers import NOW, batch, open_log

SEGMENTS = 6
CONFIG = LogConfig(segment_bytes=1000, index_interval_bytes=100)


@pytest.fixture
def log(tmp_path: Path) -> Iterator[PartitionLog]:
    """Six segments: segment i holds batches with timestamps NOW + i s; the sixth is active."""
    opened = open_log(tmp_path, CONFIG)
    i = 0
    while len(opened.segments) < SEGMENTS:  # bounded: every append adds bytes, segments roll at 1000
        opened.append(batch(3, ts=NOW + 1000 * (len(opened.segments) - 1), tag=f"b{i}"), now_ms=NOW)
        i += 1
    opened.append(batch(3, ts=NOW + 1000 * (SEGMENTS - 1)), now_ms=NOW)
    try:
        yield opened
    finally:
        opened.close()


def steps(log: PartitionLog, *, log_start: int | None = None, hw: int | None = None, now_ms: int = NOW,
          **config: object) -> list[RetentionStep]:
    return retention_steps(log.segments, log_start_offset=log.log_start_offset if log_start is None else log_start,
                           high_watermark=log.log_end_offset if hw is None else hw,
                           config=CONFIG.replace(**config), now_ms=now_ms)


def base(log: PartitionLog, i: int) -> int:
    return log.segments[i].base_offset


def test_nothing_to_delete(log: PartitionLog) -> None:
    assert steps(log) == []
    assert steps(log, retention_ms=10**9, retention_bytes=10**9) == []


def test_below_the_log_start_offset(log: PartitionLog) -> None:
    # segments whose next segment starts at or below the log start offset go; a segment that
    # holds the log start offset stays
    assert steps(log, log_start=base(log, 2)) == [RetentionStep(2, "log start offset")]
    assert steps(log, log_start=base(log, 2) - 1) == [RetentionStep(1, "log start offset")]


def test_retention_ms_by_largest_timestamp(log: PartitionLog) -> None:
    # segment i's largest timestamp is NOW + i s (+ a few ms): older than 1.5 s at NOW + 3.5 s: 0, 1
    assert steps(log, retention_ms=1500, now_ms=NOW + 3500) == [RetentionStep(2, "retention.ms 1500")]


def test_never_the_active_segment_nor_data_at_or_past_the_high_watermark(log: PartitionLog) -> None:
    assert steps(log, retention_ms=0, now_ms=NOW + 10**9) == [RetentionStep(SEGMENTS - 1, "retention.ms 0")]
    assert steps(log, retention_ms=0, now_ms=NOW + 10**9, hw=base(log, 3)) == [RetentionStep(3, "retention.ms 0")]
    assert steps(log, retention_ms=0, now_ms=NOW + 10**9, hw=base(log, 3) - 1) == [RetentionStep(2, "retention.ms 0")]


def test_retention_bytes_deletes_while_the_rest_stays_at_least_that_large(log: PartitionLog) -> None:
    sizes = [s.size for s in log.segments]
    keep = sum(sizes[3:])  # the last three segments are exactly retention.bytes
    assert steps(log, retention_bytes=keep) == [RetentionStep(3, f"retention.bytes {keep}")]
    assert steps(log, retention_bytes=keep + 1) == [RetentionStep(2, f"retention.bytes {keep + 1}")]
    assert steps(log, retention_bytes=keep - 1) == [RetentionStep(3, f"retention.bytes {keep - 1}")]


def test_steps_apply_in_kafkas_order_each_after_the_last(log: PartitionLog) -> None:
    sizes = [s.size for s in log.segments]
    keep = sum(sizes[3:])
    assert steps(log, log_start=base(log, 1), retention_ms=1500, now_ms=NOW + 3500, retention_bytes=keep) == [
        RetentionStep(1, "log start offset"),
        RetentionStep(1, "retention.ms 1500"),
        RetentionStep(1, f"retention.bytes {keep}"),
    ]


def test_compact_only_leaves_time_and_size_to_the_cleaner(log: PartitionLog) -> None:
    assert steps(log, log_start=base(log, 1), cleanup_policy="compact", retention_ms=0, retention_bytes=0,
                 now_ms=NOW + 10**9) == [RetentionStep(1, "log start offset")]
