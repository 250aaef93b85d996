"""Kafka record batch v2 (magic 2): the header codec, validation and in-place rewrites.

The broker treats a batch as opaque bytes plus this 61-byte header. Nothing here looks at
individual records (see `common.records` for that), so every function costs the same
whether a batch holds one record or ten thousand.

    baseOffset: int64            0   ┐ outside the CRC: the broker rewrites these
    batchLength: int32           8   │ (bytes after this field)
    partitionLeaderEpoch: int32 12   ┘
    magic: int8                 16
    crc: uint32                 17   CRC-32C of attributes..end
    attributes: int16           21
    lastOffsetDelta: int32      23
    baseTimestamp: int64        27
    maxTimestamp: int64         35
    producerId: int64           43
    producerEpoch: int16        51
    baseSequence: int32         53
    recordCount: int32          57
    records                     61
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from enum import IntEnum
from typing import NamedTuple

from crc32c import crc32c

from common.errors import (
    CorruptRecordError,
    InvalidRecordError,
    UnsupportedCompressionError,
    UnsupportedMessageFormatError,
)

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

MAGIC_V2 = 2
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part of a batch not counted in batchLength
HEADER_SIZE = 61
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD

BASE_OFFSET_POS = 0
LENGTH_POS = 8
PARTITION_LEADER_EPOCH_POS = 12
MAGIC_POS = 16
CRC_POS = 17
ATTRIBUTES_POS = 21
LAST_OFFSET_DELTA_POS = 23
MAX_TIMESTAMP_POS = 35
RECORDS_COUNT_POS = 57

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

_HEADER = struct.Struct(">qiibIhiqqqhii")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
assert _HEADER.size == HEADER_SIZE


class CompressionType(IntEnum):
    """The codec in attribute bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(IntEnum):
    """Attribute bit 3: who set `maxTimestamp`."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class RecordBatchHeader(NamedTuple):
    """The fixed 61-byte header of one v2 batch.

    A NamedTuple rather than a dataclass: it is built once per batch on the append path,
    and tuple construction is several times cheaper than a frozen dataclass's.
    """

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> CompressionType:
        try:
            return CompressionType(self.attributes & COMPRESSION_MASK)
        except ValueError:
            raise UnsupportedCompressionError(
                f"batch at offset {self.base_offset} names unknown compression codec "
                f"{self.attributes & COMPRESSION_MASK}"
            ) from None

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType((self.attributes & TIMESTAMP_TYPE_MASK) >> 3)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record, wrapping at 2^31 as Kafka's producer does."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


def parse_header(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, require_body: bool = True
) -> RecordBatchHeader:
    """Parse and frame-check the batch starting at `pos`: magic 2, sane length, fully present.

    Raises CorruptRecordError (or UnsupportedMessageFormatError for another magic); the CRC
    is not checked here (see `verify_crc`). `require_body=False` accepts a buffer holding
    only the header, for callers that read headers alone from a file.
    """
    available = len(buf) - pos
    if available < HEADER_SIZE:
        if available >= MAGIC_POS + 1 and buf[pos + MAGIC_POS] != MAGIC_V2:
            _raise_bad_magic(buf[pos + MAGIC_POS], pos)
        raise CorruptRecordError(
            f"truncated record batch at position {pos}: {available} bytes, "
            f"a batch header needs {HEADER_SIZE}"
        )
    header = RecordBatchHeader._make(_HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC_V2:
        _raise_bad_magic(header.magic, pos)
    if header.batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"record batch at position {pos} has batchLength {header.batch_length}, "
            f"below the minimum {MIN_BATCH_LENGTH}"
        )
    if require_body and header.batch_length + LOG_OVERHEAD > available:
        raise CorruptRecordError(
            f"record batch at position {pos} claims {header.batch_length + LOG_OVERHEAD} "
            f"bytes but only {available} remain"
        )
    return header


def _raise_bad_magic(magic: int, pos: int) -> None:
    raise UnsupportedMessageFormatError(
        f"record batch at position {pos} has magic {magic}; only magic 2 (record batch v2) "
        "is supported"
    )


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, header: RecordBatchHeader) -> int:
    """CRC-32C of the batch's attributes..end, as it should appear in the `crc` field."""
    with memoryview(buf) as view:
        return crc32c(view[pos + ATTRIBUTES_POS : pos + header.size])


def verify_crc(buf: bytes | bytearray | memoryview, pos: int, header: RecordBatchHeader) -> None:
    """Raise CorruptRecordError unless the stored CRC matches the batch's bytes."""
    actual = compute_crc(buf, pos, header)
    if actual != header.crc:
        raise CorruptRecordError(
            f"record batch at offset {header.base_offset} (position {pos}) is corrupt: "
            f"stored CRC {header.crc} != computed {actual}"
        )


def check_producer_batch(header: RecordBatchHeader) -> None:
    """Rules a batch from a producer must keep beyond framing (Kafka's LogValidator)."""
    if header.record_count <= 0:
        raise InvalidRecordError(
            f"record batch has record count {header.record_count}; a produced batch holds "
            "at least one record"
        )
    if header.last_offset_delta + 1 != header.record_count:
        raise InvalidRecordError(
            f"record batch has lastOffsetDelta {header.last_offset_delta} but record count "
            f"{header.record_count}: the offset range and the count must agree"
        )
    header.compression  # raises for an unknown codec


_LENGTH = struct.Struct(">i")


def complete_prefix(records: bytes | memoryview) -> int:
    """Bytes of `records` holding whole batches: a Fetch response may end in a cut one (Kafka
    sends up to the byte limit, and the client drops the tail). Frames only, no checks."""
    pos, size = 0, len(records)
    while pos + LOG_OVERHEAD <= size:  # bounded: every step moves forward by >= LOG_OVERHEAD
        length = _LENGTH.unpack_from(records, pos + LENGTH_POS)[0]
        if length <= 0 or pos + LOG_OVERHEAD + length > size:
            break
        pos += LOG_OVERHEAD + length
    return pos


def read_batches(buf: bytes | bytearray | memoryview, *,
                 allow_partial_tail: bool = False) -> list[tuple[int, RecordBatchHeader]]:
    """(position, header) of every batch in `buf`, framed and CRC-checked; any flaw raises.

    The append path's loop: one header parse and one C CRC call per batch, nothing per
    record. A bulk producer's request holds one batch per partition, so this runs once per
    partition: the header is made by tuple.__new__ (C) rather than `_make` (a Python frame),
    and the checks read the unpacked fields by index. With `allow_partial_tail` (a follower's
    fetch answer, which may end inside a batch) a truncated last batch ends the list quietly,
    as `iter_batches`' does: a follower's round read its one batch through that generator,
    parse_header and compute_crc (~140 opcodes; issue 35).
    """
    batches = []
    pos, end = 0, len(buf)
    unpack, new = _HEADER.unpack_from, tuple.__new__
    with memoryview(buf) as view:
        while pos < end:
            # the common, valid case inline; parse_header/verify_crc name what is wrong
            if end - pos < HEADER_SIZE:
                _raise_unless_partial_tail(view, pos, allow_partial_tail)
                break
            header = new(RecordBatchHeader, unpack(view, pos))
            length = header[1]  # batch_length
            if header[3] != MAGIC_V2 or length < MIN_BATCH_LENGTH or pos + length + LOG_OVERHEAD > end:
                _raise_unless_partial_tail(view, pos, allow_partial_tail)
                break
            next_pos = pos + length + LOG_OVERHEAD
            if crc32c(view[pos + ATTRIBUTES_POS : next_pos]) != header[4]:  # crc
                verify_crc(view, pos, header)
            batches.append((pos, header))
            pos = next_pos
    return batches


def _raise_unless_partial_tail(view: memoryview, pos: int, allow_partial_tail: bool) -> None:
    """The batch at `pos` does not frame: parse_header's error for it, unless it is a partial
    last batch that `allow_partial_tail` accepts (`iter_batches`' rule)."""
    try:
        parse_header(view, pos)
    except CorruptRecordError:
        if allow_partial_tail and _is_partial_tail(view, pos):
            return
        raise
    raise AssertionError(f"the batch at position {pos} frames after all")  # read_batches' checks are parse_header's


def iter_batches(
    buf: bytes | bytearray | memoryview, *, verify: bool = True, allow_partial_tail: bool = False
) -> Iterator[tuple[int, RecordBatchHeader]]:
    """Yield (position, header) for each batch in `buf`, frame- and (optionally) CRC-checked.

    With `allow_partial_tail` a truncated last batch ends the iteration quietly, as a
    Kafka fetch response may legitimately end in one; otherwise it is an error.
    """
    pos = 0
    end = len(buf)
    while pos < end:
        try:
            header = parse_header(buf, pos)
        except CorruptRecordError:
            if allow_partial_tail and _is_partial_tail(buf, pos):
                return
            raise
        if verify:
            verify_crc(buf, pos, header)
        yield pos, header
        pos += header.size


def _is_partial_tail(buf: bytes | bytearray | memoryview, pos: int) -> bool:
    remaining = len(buf) - pos
    if remaining < LOG_OVERHEAD:
        return True
    (length,) = _INT32.unpack_from(buf, pos + LENGTH_POS)
    return bool(length + LOG_OVERHEAD > remaining)


def encode_base_offset(offset: int) -> bytes:
    """The 8 bytes that replace a batch's baseOffset field."""
    return _INT64.pack(offset)


def encode_int32(value: int) -> bytes:
    """A big-endian int32, as the batchLength and partitionLeaderEpoch fields hold."""
    return _INT32.pack(value)


def set_base_offset(buf: bytearray | memoryview, pos: int, offset: int) -> None:
    """Rewrite baseOffset in place. It lies outside the CRC, so the CRC stays valid."""
    _INT64.pack_into(buf, pos + BASE_OFFSET_POS, offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Rewrite partitionLeaderEpoch in place; also outside the CRC."""
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_POS, epoch)


def set_log_append_time(
    buf: bytearray | memoryview, pos: int, header: RecordBatchHeader, timestamp: int
) -> RecordBatchHeader:
    """Mark the batch LogAppendTime with `maxTimestamp = timestamp` and re-sign the CRC.

    Unlike offset and epoch these fields are inside the CRC, so this is the one rewrite
    that recomputes it (one C call over the batch, still no per-record work).
    """
    attributes = header.attributes | TIMESTAMP_TYPE_MASK
    _INT16.pack_into(buf, pos + ATTRIBUTES_POS, attributes)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_POS, timestamp)
    updated = header._replace(attributes=attributes, max_timestamp=timestamp)
    crc = compute_crc(buf, pos, updated)
    _UINT32.pack_into(buf, pos + CRC_POS, crc)
    return updated._replace(crc=crc)
