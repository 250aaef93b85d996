"""ListOffsets by time: over a log's segments (`offset_for_timestamp`), and over one segment,
where the sparse time index finds the batch and one batch is decoded to find the record (never
on the append path).

`find_in_segment` answers a timestamp (the first record at or after it);
`offset_of_max_timestamp` answers MAX_TIMESTAMP (KIP-734): the first record that carries the
segment's largest timestamp.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from broker.log.leader_epoch_cache import LeaderEpochCache
from broker.log.segment import LogSegment
from common.protocol.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from common.record_batch import NO_TIMESTAMP, TimestampType


class TimestampAndOffset(NamedTuple):
    timestamp: int
    offset: int
    leader_epoch: int


def offset_for_timestamp(segments: Sequence[LogSegment], timestamp: int, *, log_start_offset: int,
                         log_end_offset: int, epochs: LeaderEpochCache) -> TimestampAndOffset | None:
    """ListOffsets by time over a log's segments: the first offset whose record timestamp is
    >= `timestamp`; -2 earliest, -1 latest, -3 the record with the largest timestamp."""
    epoch_for = epochs.epoch_for
    if timestamp == EARLIEST_TIMESTAMP:
        return TimestampAndOffset(NO_TIMESTAMP, log_start_offset, epoch_for(log_start_offset))
    if timestamp == LATEST_TIMESTAMP:
        return TimestampAndOffset(NO_TIMESTAMP, log_end_offset, epochs.latest_epoch)
    if timestamp == MAX_TIMESTAMP:
        best = max(segments, key=lambda s: s.max_timestamp)
        if best.max_timestamp < 0:
            return None
        offset = offset_of_max_timestamp(best)
        return TimestampAndOffset(best.max_timestamp, offset, epoch_for(offset))
    for segment in segments:
        if segment.max_timestamp >= timestamp:
            found = find_in_segment(segment, timestamp, log_start_offset)
            if found is not None:
                return TimestampAndOffset(found[0], found[1], epoch_for(found[1]))
    return None


def find_in_segment(segment: LogSegment, timestamp: int,
                     start_offset: int) -> tuple[int, int] | None:
    """(timestamp, offset) of the first record at or after `timestamp` in `segment`."""
    from common.records import decode_records  # tools-grade decoding, off the hot path

    entry = segment.time_index.lookup(timestamp)
    found = segment.translate_offset(max(entry.offset, start_offset))
    if found is None:
        return None
    for position, header in segment.headers_from(found[0]):
        if header.max_timestamp < timestamp:
            continue
        batch = segment_bytes(segment, position, header.size)
        for record in decode_records(batch, 0, header):
            if record.timestamp >= timestamp and record.offset >= start_offset:
                return record.timestamp, record.offset
    return None


def offset_of_max_timestamp(segment: LogSegment) -> int:
    """The offset of the first record carrying the segment's largest timestamp (KIP-734).

    The segment (and its time index) knows the batch, not the record: found here, when asked,
    as Kafka does since KAFKA-16310 — decode the one batch whose max timestamp it is and take
    its first record with that timestamp. Appends stay free of per-record work.
    """
    from common.records import decode_records  # tools-grade decoding, off the hot path

    found = segment.translate_offset(segment.offset_of_max_timestamp)
    if found is None:
        return segment.offset_of_max_timestamp
    for position, header in segment.headers_from(found[0]):
        if header.max_timestamp != segment.max_timestamp:
            continue
        if header.timestamp_type is TimestampType.LOG_APPEND_TIME:
            return header.base_offset  # every record carries the batch's append time
        batch = segment_bytes(segment, position, header.size)
        for record in decode_records(batch, 0, header):
            if record.timestamp == segment.max_timestamp:
                return record.offset
        break
    return segment.offset_of_max_timestamp


def segment_bytes(segment: LogSegment, position: int, length: int) -> bytes:
    """Read `length` bytes of a segment file."""
    return segment.pread(position, length)
