"""Which leading segments of a partition log retention deletes, and why (Kafka's
deleteLogStartOffsetBreachedSegments, deleteRetentionMsBreachedSegments and
deleteRetentionSizeBreachedSegments, in that order).

A rule over the segments' counters that returns its decision; the PartitionLog deletes. Never
the active segment, never a segment holding data at or above the high watermark.

    for count, reason in retention_steps(segments, log_start_offset=..., high_watermark=..., ...):
        log.delete_first_segments(count, reason)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from broker.log.segment import LogSegment
from common.log_config import LogConfig

# (segment, base offset of the segment after it) -> delete it?
Predicate = Callable[[LogSegment, int], bool]


class RetentionStep(NamedTuple):
    segments: int  # leading segments to delete (after the earlier steps' ones)
    reason: str


def retention_steps(segments: Sequence[LogSegment], *, log_start_offset: int, high_watermark: int,
                    config: LogConfig, now_ms: int) -> list[RetentionStep]:
    """The deletions retention makes now, in order; empty when it makes none.

    First segments wholly below the log start offset (DeleteRecords, a follower's), then
    (cleanup.policy with delete) those past retention.ms, then the oldest while the log is
    over retention.bytes. A compact-only log leaves the rest to the cleaner.
    """
    steps: list[RetentionStep] = []
    start = 0

    def take(predicate: Predicate, reason: str) -> None:
        nonlocal start
        count = 0
        while len(segments) - (start + count) > 1:  # bounded by the segment count
            segment, next_base = segments[start + count], segments[start + count + 1].base_offset
            if next_base > high_watermark or not predicate(segment, next_base):
                break
            count += 1
        if count:
            steps.append(RetentionStep(count, reason))
            start += count

    take(lambda _s, next_base: next_base <= log_start_offset, "log start offset")
    if "delete" not in config.cleanup_policy:  # compact only: the cleaner's job
        return steps
    retention_ms = config.retention_ms
    if retention_ms >= 0:
        take(lambda s, _next: now_ms - s.largest_timestamp > retention_ms, f"retention.ms {retention_ms}")
    retention_bytes = config.retention_bytes
    if retention_bytes >= 0:
        excess = sum(s.size for s in segments[start:]) - retention_bytes

        def over_size(segment: LogSegment, _next: int) -> bool:
            nonlocal excess
            if excess - segment.size < 0:
                return False
            excess -= segment.size
            return True

        take(over_size, f"retention.bytes {retention_bytes}")
    return steps
