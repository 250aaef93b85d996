"""broker/log/legacy_offsets.py: ListOffsets v0's segment offsets (Kafka's
legacyFetchOffsetsBefore and the consumer's high-watermark cut), as a table."""

from __future__ import annotations

import pytest

from broker.log.legacy_offsets import SegmentTime, legacy_offsets_before

# three segments starting at 0, 100 and 200, last modified at t=1000, 2000 and 3000; log end 250
SEGMENTS = (SegmentTime(0, 1000), SegmentTime(100, 2000), SegmentTime(200, 3000))
NOW = 5000


@pytest.mark.parametrize("timestamp, max_num, start, has_data, hw, expected", [
    (-1, 10, 0, True, None, (250, 200, 100, 0)),  # latest: the log end first, then every segment
    (-1, 1, 0, True, None, (250,)),
    (-1, 10, 0, False, None, (200, 100, 0)),  # an empty active segment adds no log end
    (-2, 10, 0, True, None, (0,)),  # earliest: the first segment only
    (-2, 10, 150, True, None, (150,)),  # ... never below the log start offset
    (2500, 10, 0, True, None, (100, 0)),  # by time: segments modified at or before it
    (2000, 1, 0, True, None, (100,)),
    (500, 10, 0, True, None, ()),  # older than every segment
    (9999, 2, 0, True, None, (250, 200)),  # newer than all: from the log end ("now")
    (-1, 10, 0, True, 220, (220, 200, 100, 0)),  # a consumer: the high watermark replaces the log end
    (-1, 10, 0, True, 250, (250, 200, 100, 0)),
    (-1, 0, 0, True, None, ()),
], ids=["latest", "latest-one", "empty-active", "earliest", "earliest-after-start", "by-time", "by-time-one",
        "too-old", "newer-than-all", "consumer-hw", "consumer-hw-at-end", "none-asked"])
def test_legacy_offsets_before(timestamp: int, max_num: int, start: int, has_data: bool, hw: int | None,
                               expected: tuple[int, ...]) -> None:
    assert legacy_offsets_before(SEGMENTS, log_start_offset=start, log_end_offset=250,
                                 active_segment_has_data=has_data, now_ms=NOW, timestamp=timestamp,
                                 max_num_offsets=max_num, high_watermark=hw) == expected
