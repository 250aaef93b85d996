"""A fast scan of a v2 batch's records for the cleaner: offset, timestamp, key, whether
the value is null, and where each record's bytes lie. No I/O, no state.

`common.records.decode_records` builds a validated `Record` per record, headers and
value included; the cleaner needs neither, and scans every record of a log twice (once to
map keys, once to filter), so this reads only the fields it needs. The positions let a
rewrite splice the kept records' bytes unchanged into the new batch: a record's offset and
timestamp are stored as deltas from the batch's base offset and base timestamp, which a
rewrite keeps.
"""

from __future__ import annotations

from typing import NamedTuple

from common.compression import decompress
from common.errors import CorruptRecordError
from common.record_batch import (
    HEADER_SIZE,
    CompressionType,
    RecordBatchHeader,
    TimestampType,
)

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)


class ScannedRecord(NamedTuple):
    """One record: absolute offset and timestamp, key, null value, bytes [start, end) of
    the records section (its length prefix included)."""

    offset: int
    timestamp: int
    key: bytes | None
    is_tombstone: bool
    start: int
    end: int


class ScannedBatch(NamedTuple):
    """The (decompressed) records section of a batch and its records."""

    section: bytes
    records: list[ScannedRecord]


def scan_batch(batch: bytes | bytearray | memoryview, header: RecordBatchHeader) -> ScannedBatch:
    """Scan the batch `batch` (exactly one batch, header included); CorruptRecordError on
    any malformation."""
    codec = header.compression
    with memoryview(batch) as view:
        section = bytes(view[HEADER_SIZE : header.size])
    if codec is not CompressionType.NONE:
        section = decompress(codec, section)
    try:
        records = _scan(section, header)
    except IndexError:
        raise CorruptRecordError(
            f"batch at offset {header.base_offset}: a record runs past the records section"
        ) from None
    return ScannedBatch(section, records)


def _scan(section: bytes, header: RecordBatchHeader) -> list[ScannedRecord]:
    # The hot loop of the cleaner: the one-byte varint case is decoded inline (most
    # timestamp and offset deltas, key and value lengths are small), the rest by _varint.
    base_offset, base_ts = header.base_offset, header.base_timestamp
    fixed_ts = header.max_timestamp if header.timestamp_type is TimestampType.LOG_APPEND_TIME \
        else None
    end_of_section = len(section)
    records: list[ScannedRecord] = []
    append = records.append
    make = ScannedRecord
    varint = _varint
    pos = 0
    # bounded: record_count iterations, each advancing `pos` past one record or raising
    for _ in range(header.record_count):
        start = pos
        b = section[pos]
        if b < 0x80:
            length, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            length, pos = varint(section, pos)
        end = pos + length
        if length <= 0 or end > end_of_section:
            raise CorruptRecordError(
                f"batch at offset {base_offset}: record length {length} at byte {start} "
                f"does not fit the records section")
        pos += 1  # the attributes byte
        b = section[pos]
        if b < 0x80:
            ts_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            ts_delta, pos = varint(section, pos)
        b = section[pos]
        if b < 0x80:
            offset_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            offset_delta, pos = varint(section, pos)
        b = section[pos]
        if b < 0x80:
            key_length, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            key_length, pos = varint(section, pos)
        if key_length >= 0:
            key: bytes | None = section[pos : pos + key_length]
            pos += key_length
        else:
            key = None
        # a null value is the varint -1: the single byte 0x01
        is_tombstone = section[pos] == 0x01
        if pos >= end:
            raise CorruptRecordError(
                f"batch at offset {base_offset}: record at byte {start} overruns its length")
        append(make(base_offset + offset_delta,
                    base_ts + ts_delta if fixed_ts is None else fixed_ts,
                    key, is_tombstone, start, end))
        pos = end
    if pos != end_of_section:
        raise CorruptRecordError(
            f"batch at offset {base_offset} has {end_of_section - pos} bytes after its "
            f"{header.record_count} records")
    return records


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint/varlong at `pos`: (value, position after it)."""
    byte = buf[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    result = byte & 0x7F
    shift = 7
    pos += 1
    while True:  # bounded: at most 10 bytes (64 bits)
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError(f"varint at byte {pos} is longer than 10 bytes")
