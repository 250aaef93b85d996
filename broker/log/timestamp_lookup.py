"""ListOffsets by time over one segment: the sparse time index finds the batch, one batch
is decoded to find the record (never on the append path).

`find_in_segment` answers a timestamp (the first record at or after it);
`offset_of_max_timestamp` answers MAX_TIMESTAMP (KIP-734): the first record that carries the
segment's largest timestamp.
"""

from __future__ import annotations

from broker.log.segment import FileSlice, LogSegment
from common.record_batch import TimestampType


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
    return FileSlice(segment.fd, position, length).read_bytes()
