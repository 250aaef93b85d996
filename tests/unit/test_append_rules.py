"""broker/log/append_rules.py: offsets a leader assigns and a replica keeps, and why a segment
rolls (Kafka's shouldRoll), as tables over real batch headers and a real segment."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log.append_rules import assign_offsets, check_replica_offsets, roll_reason
from broker.log.segment import MAX_RELATIVE_OFFSET, LogSegment
from common.topic_partition import TopicPartition
from common.errors import OffsetsOutOfOrderError, RecordTooLargeError
from common.record_batch import RecordBatchHeader, read_batches
from common.log_config import LogConfig
from tests.log_helpers import NOW, batch

TP = TopicPartition("topic", 0)


def headers(*batches: bytes) -> list[tuple[int, RecordBatchHeader]]:
    data = b"".join(batches)
    return read_batches(memoryview(data))


@pytest.mark.parametrize(("counts", "next_offset", "expected_bases"), [
    ((1,), 0, [0]),
    ((3, 2, 5), 10, [10, 13, 15]),
])
def test_a_leader_assigns_consecutive_offsets_from_the_log_end(counts: tuple[int, ...], next_offset: int,
                                                                expected_bases: list[int]) -> None:
    found = assign_offsets(headers(*(batch(c, ts=NOW + 10 * i) for i, c in enumerate(counts))), next_offset,
                           max_message_bytes=1_000_000, tp=TP)
    assert found.bases == expected_bases
    last = expected_bases[-1] + counts[-1] - 1
    assert found.last_offset == last
    assert (found.max_timestamp, found.offset_of_max_timestamp) == (NOW + 10 * (len(counts) - 1) + counts[-1] - 1,
                                                                     last)


def test_a_leader_refuses_a_batch_over_max_message_bytes() -> None:
    one = batch(20)
    with pytest.raises(RecordTooLargeError, match="max.message.bytes"):
        assign_offsets(headers(one), 0, max_message_bytes=len(one) - 1, tp=TP)
    assert assign_offsets(headers(one), 0, max_message_bytes=len(one), tp=TP).bases == [0]


@pytest.mark.parametrize(("bases", "log_end", "error"), [
    ((5, 8), 5, None),
    ((7, 20), 5, None),  # gaps a compacted leader leaves are kept
    ((4,), 5, OffsetsOutOfOrderError),  # below the log end
    ((5, 6), 5, OffsetsOutOfOrderError),  # overlaps the previous batch (3 records at 5..7)
])
def test_a_replica_keeps_increasing_offsets(bases: tuple[int, ...], log_end: int, error: type | None) -> None:
    batches = headers(*(batch(3, base_offset=b) for b in bases))
    if error is not None:
        with pytest.raises(error):
            check_replica_offsets(batches, log_end, tp=TP)
        return
    found = check_replica_offsets(batches, log_end, tp=TP)
    assert found.bases == list(bases)
    assert found.last_offset == bases[-1] + 2  # 3 records each


def segment_with(tmp_path: Path, data: bytes, *, created_ms: int = NOW, index_bytes: int = 1024) -> LogSegment:
    segment = LogSegment(tmp_path, 0, index_interval_bytes=1, max_index_bytes=index_bytes, created_ms=created_ms,
                         create=True)
    batches = headers(data)
    segment.append(memoryview(data), batches, [0], None, len(data))
    return segment


@pytest.mark.parametrize(("config", "incoming", "max_ts", "last_offset", "expected"), [
    (LogConfig(), 100, NOW, 1, None),
    (LogConfig(segment_bytes=200), 150, NOW, 1, "segment.bytes 200"),
    (LogConfig(segment_ms=1000), 10, NOW + 1001, 1, "segment.ms 1000"),
    (LogConfig(segment_ms=1000), 10, NOW + 1000, 1, None),  # not older than segment.ms yet
    (LogConfig(), 10, NOW, MAX_RELATIVE_OFFSET + 1, "relative offsets would overflow int32"),
])
def test_roll_reason(tmp_path: Path, config: LogConfig, incoming: int, max_ts: int, last_offset: int,
                     expected: str | None) -> None:
    segment = segment_with(tmp_path, batch(1))
    try:
        assert roll_reason(segment, config, TP, incoming=incoming, max_timestamp=max_ts,
                           last_offset=last_offset, now_ms=NOW) == expected
    finally:
        segment.close()


def test_an_empty_segment_never_rolls(tmp_path: Path) -> None:
    segment = LogSegment(tmp_path, 0, index_interval_bytes=1, max_index_bytes=1024, created_ms=0, create=True)
    try:
        assert roll_reason(segment, LogConfig(segment_bytes=10, segment_ms=1), TP, incoming=100,
                           max_timestamp=NOW, last_offset=MAX_RELATIVE_OFFSET + 5, now_ms=NOW) is None
    finally:
        segment.close()


def test_a_segment_without_timestamps_ages_by_the_wall_clock(tmp_path: Path) -> None:
    segment = segment_with(tmp_path, batch(1, ts=-1), created_ms=NOW - 5000)
    try:
        assert roll_reason(segment, LogConfig(segment_ms=1000), TP, incoming=10, max_timestamp=-1,
                           last_offset=1, now_ms=NOW) == "segment.ms 1000"
    finally:
        segment.close()
