"""ListOffsets v0's answer: up to N segment start offsets at or before a timestamp.

Version 0 predates the time index: Kafka (UnifiedLog.legacyFetchOffsetsBefore, still in 3.9)
answers it from the segments' base offsets and their files' last-modified times, plus the log
end offset (stamped "now") when the active segment holds data, newest first. -1 starts from
the log end, -2 from the first segment, any other timestamp from the newest segment modified
at or before it. A consumer (replica id -1) never sees past the high watermark: offsets above
it are replaced by the high watermark itself (ReplicaManager.legacyFetchOffsetsForTimestamp).
Pure: the shell reads the segments' times.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from common.protocol.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)


@dataclass(frozen=True, slots=True)
class SegmentTime:
    base_offset: int
    last_modified_ms: int


def legacy_offsets_before(segments: Sequence[SegmentTime], *, log_start_offset: int, log_end_offset: int,
                          active_segment_has_data: bool, now_ms: int, timestamp: int, max_num_offsets: int,
                          high_watermark: int | None) -> tuple[int, ...]:
    """Offsets in descending order; `high_watermark` None for a replica (no limit)."""
    points = [(max(s.base_offset, log_start_offset), s.last_modified_ms) for s in segments]
    if active_segment_has_data:
        points.append((log_end_offset, now_ms))
    if timestamp == LATEST_TIMESTAMP:
        start = len(points) - 1
    elif timestamp == EARLIEST_TIMESTAMP:
        start = 0
    else:  # the newest point modified at or before the timestamp; -1 when none is
        start = next((i for i in range(len(points) - 1, -1, -1) if points[i][1] <= timestamp), -1)
    count = max(0, min(max_num_offsets, start + 1))
    offsets = sorted((points[start - j][0] for j in range(count)), reverse=True)
    if high_watermark is None or not any(o > high_watermark for o in offsets):
        return tuple(offsets)
    return (high_watermark, *(o for o in offsets if o <= high_watermark))
