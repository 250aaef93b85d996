"""Tests for broker/record_batch.py: header codec, framing and CRC checks, in-place rewrites,
and h11's fuzz invariant (any bytes parse or raise a KafkaError)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaError,
    UnsupportedCompressionError,
    UnsupportedMessageFormatError,
)
from common.record_batch import (
    ATTRIBUTES_POS,
    CRC_POS,
    HEADER_SIZE,
    LAST_OFFSET_DELTA_POS,
    LENGTH_POS,
    MAGIC_POS,
    MIN_BATCH_LENGTH,
    RECORDS_COUNT_POS,
    CompressionType,
    RecordBatchHeader,
    TimestampType,
    check_producer_batch,
    compute_crc,
    encode_base_offset,
    iter_batches,
    parse_header,
    read_batches,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    verify_crc,
)
from common.records import build_batch

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")

FULL = build_batch(
    [(b"k1", b"v1"), (None, b"v2"), (b"k3", None)],
    base_offset=1_000,
    timestamps=[500, 700, 600],
    compression=CompressionType.LZ4,
    producer_id=77,
    producer_epoch=4,
    base_sequence=9,
    partition_leader_epoch=12,
    is_transactional=True,
)
SMALL = build_batch([(b"k", b"v")])


def resign(buf: bytearray) -> bytes:
    _UINT32.pack_into(buf, CRC_POS, compute_crc(buf, 0, parse_header(buf)))
    return bytes(buf)


def patched(batch: bytes, pos: int, field: struct.Struct, value: int, *, sign: bool) -> bytes:
    buf = bytearray(batch)
    field.pack_into(buf, pos, value)
    return resign(buf) if sign else bytes(buf)


def test_header_round_trip() -> None:
    header = parse_header(FULL)
    verify_crc(FULL, 0, header)
    assert header == RecordBatchHeader(
        base_offset=1_000,
        batch_length=len(FULL) - 12,
        partition_leader_epoch=12,
        magic=2,
        crc=header.crc,
        attributes=int(CompressionType.LZ4) | 0x10,
        last_offset_delta=2,
        base_timestamp=500,
        max_timestamp=700,
        producer_id=77,
        producer_epoch=4,
        base_sequence=9,
        record_count=3,
    )
    assert header.size == len(FULL)
    assert (header.last_offset, header.next_offset, header.last_sequence) == (1_002, 1_003, 11)
    assert header.compression is CompressionType.LZ4
    assert header.timestamp_type is TimestampType.CREATE_TIME
    assert header.is_transactional and not header.is_control and not header.has_delete_horizon
    check_producer_batch(header)


def test_parse_at_position() -> None:
    buf = SMALL + FULL
    assert parse_header(buf, len(SMALL)) == parse_header(FULL)


def test_last_sequence_wraps() -> None:
    batch = build_batch([(None, b"v")] * 3, base_sequence=(1 << 31) - 2, producer_id=1)
    assert parse_header(batch).last_sequence == 0
    assert parse_header(SMALL).last_sequence == -1


@pytest.mark.parametrize("index", [ATTRIBUTES_POS, 30, HEADER_SIZE, len(FULL) - 1])
def test_corrupt_crc(index: int) -> None:
    buf = bytearray(FULL)
    buf[index] ^= 0x01
    header = parse_header(buf)
    with pytest.raises(CorruptRecordError, match="CRC"):
        verify_crc(buf, 0, header)
    with pytest.raises(CorruptRecordError):
        list(iter_batches(buf))
    assert [pos for pos, _ in iter_batches(buf, verify=False)] == [0]


def test_crc_field_itself_corrupt() -> None:
    buf = bytearray(FULL)
    buf[CRC_POS] ^= 0x80
    with pytest.raises(CorruptRecordError):
        verify_crc(buf, 0, parse_header(buf))


@pytest.mark.parametrize("magic", [0, 1, 3, -1])
def test_bad_magic(magic: int) -> None:
    buf = bytearray(FULL)
    buf[MAGIC_POS] = magic & 0xFF
    with pytest.raises(UnsupportedMessageFormatError):
        parse_header(buf)
    with pytest.raises(UnsupportedMessageFormatError):
        parse_header(buf[: MAGIC_POS + 1])


@pytest.mark.parametrize("missing", [1, 10, len(FULL) - HEADER_SIZE])
def test_length_past_buffer(missing: int) -> None:
    with pytest.raises(CorruptRecordError, match="remain"):
        parse_header(FULL[:-missing])


@pytest.mark.parametrize("cut", [0, 1, 12, MAGIC_POS, HEADER_SIZE - 1])
def test_truncated_header(cut: int) -> None:
    with pytest.raises(CorruptRecordError, match="truncated"):
        parse_header(FULL[:cut])


@pytest.mark.parametrize("length", [MIN_BATCH_LENGTH - 1, 0, -1, -(1 << 31)])
def test_batch_length_below_minimum(length: int) -> None:
    with pytest.raises(CorruptRecordError, match="below the minimum"):
        parse_header(patched(FULL, LENGTH_POS, _INT32, length, sign=False))


@pytest.mark.parametrize(
    ("pos", "field", "value", "error", "message"),
    [
        (LAST_OFFSET_DELTA_POS, _INT32, 5, InvalidRecordError, "must agree"),
        (LAST_OFFSET_DELTA_POS, _INT32, -1, InvalidRecordError, "must agree"),
        (RECORDS_COUNT_POS, _INT32, 2, InvalidRecordError, "must agree"),
        (RECORDS_COUNT_POS, _INT32, 0, InvalidRecordError, "at least one"),
        (RECORDS_COUNT_POS, _INT32, -3, InvalidRecordError, "at least one"),
        (ATTRIBUTES_POS, _INT16, 5, UnsupportedCompressionError, "unknown compression"),
        (ATTRIBUTES_POS, _INT16, 7, UnsupportedCompressionError, "unknown compression"),
    ],
)
def test_check_producer_batch(
    pos: int, field: struct.Struct, value: int, error: type[KafkaError], message: str
) -> None:
    batch = patched(FULL, pos, field, value, sign=True)
    header = parse_header(batch)
    verify_crc(batch, 0, header)  # framing and CRC are fine; the rule is what fails
    with pytest.raises(error, match=message):
        check_producer_batch(header)


def test_set_base_offset_and_leader_epoch_keep_crc() -> None:
    buf = bytearray(SMALL + FULL)
    set_base_offset(buf, len(SMALL), 123_456_789_012)
    set_partition_leader_epoch(buf, len(SMALL), 99)
    set_base_offset(memoryview(buf), 0, 5)
    batches = list(iter_batches(buf))
    assert [(pos, h.base_offset, h.partition_leader_epoch) for pos, h in batches] == [
        (0, 5, -1),
        (len(SMALL), 123_456_789_012, 99),
    ]
    assert buf[len(SMALL) : len(SMALL) + 8] == encode_base_offset(123_456_789_012)


def test_set_log_append_time_resigns() -> None:
    buf = bytearray(FULL)
    updated = set_log_append_time(buf, 0, parse_header(buf), 1_234_567)
    assert updated == parse_header(buf)
    verify_crc(buf, 0, updated)
    assert updated.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert updated.max_timestamp == 1_234_567
    assert updated.compression is CompressionType.LZ4 and updated.is_transactional


def test_iter_batches() -> None:
    buf = SMALL + FULL + SMALL
    assert [pos for pos, _ in iter_batches(buf)] == [0, len(SMALL), len(SMALL) + len(FULL)]
    assert list(iter_batches(b"")) == []


@pytest.mark.parametrize("cut", [1, 11, 12, 40, HEADER_SIZE, len(FULL) - 1])
def test_iter_batches_partial_tail(cut: int) -> None:
    buf = SMALL + FULL[:cut]
    assert [pos for pos, _ in iter_batches(buf, allow_partial_tail=True)] == [0]
    with pytest.raises(CorruptRecordError):
        list(iter_batches(buf))


def test_partial_tail_does_not_excuse_bad_framing() -> None:
    bad = patched(SMALL, LENGTH_POS, _INT32, 3, sign=False)
    with pytest.raises(CorruptRecordError, match="below the minimum"):
        list(iter_batches(SMALL + bad, allow_partial_tail=True))


def test_read_batches() -> None:
    buf = SMALL + FULL
    assert read_batches(buf) == list(iter_batches(buf))
    assert read_batches(memoryview(buf)) == list(iter_batches(buf))
    damaged = bytearray(buf)
    damaged[-1] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC"):
        read_batches(damaged)
    with pytest.raises(CorruptRecordError):
        read_batches(buf[:-1])


def _outcome(read: object) -> object:
    """What a read gives: its batches, or the type and message of what it raised."""
    try:
        return read()  # type: ignore[operator]
    except KafkaError as e:
        return type(e), str(e)


@pytest.mark.parametrize("buf", [
    SMALL + FULL + SMALL,
    SMALL + patched(SMALL, LENGTH_POS, _INT32, 3, sign=False),  # bad framing: no excuse
    SMALL + patched(SMALL, MAGIC_POS, struct.Struct(">b"), 1, sign=False),  # another magic
    SMALL + bytes(FULL[:CRC_POS]) + b"\x00\x00\x00\x00" + bytes(FULL[CRC_POS + 4:]),  # a bad CRC
])
def test_read_batches_partial_tail_reads_as_iter_batches(buf: bytes) -> None:
    """A follower's append reads its answer with read_batches(allow_partial_tail=True): every
    cut of these bytes gives what iter_batches' partial-tail reading gives, batches or error."""
    for cut in range(len(buf) + 1):
        data = memoryview(buf[:cut])
        assert _outcome(lambda: read_batches(data, allow_partial_tail=True)) == \
            _outcome(lambda: list(iter_batches(data, allow_partial_tail=True)))
    assert read_batches(SMALL + FULL[:40], allow_partial_tail=True) == [(0, parse_header(SMALL))]


def test_parse_header_without_body() -> None:
    assert parse_header(FULL[:HEADER_SIZE], require_body=False) == parse_header(FULL)
    with pytest.raises(CorruptRecordError):
        parse_header(FULL[: HEADER_SIZE - 1], require_body=False)


def _mutated(batch: bytes, flips: list[tuple[int, int]], cut: int) -> bytes:
    buf = bytearray(batch)
    for index, value in flips:
        buf[index % len(buf)] = value
    return bytes(buf[: cut % (len(buf) + 1)])


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(max_size=200)
    | st.builds(
        _mutated,
        st.sampled_from([SMALL, FULL, SMALL + FULL]),
        st.lists(st.tuples(st.integers(0, 500), st.integers(0, 255)), max_size=3),
        st.integers(0, 500),
    ),
    verify=st.booleans(),
    allow_partial_tail=st.booleans(),
)
def test_any_bytes_parse_or_raise_kafka_error(
    data: bytes, verify: bool, allow_partial_tail: bool
) -> None:
    try:
        batches = iter_batches(data, verify=verify, allow_partial_tail=allow_partial_tail)
        for pos, header in batches:
            assert pos + header.size <= len(data)
            check_producer_batch(header)
    except KafkaError:
        pass
    try:
        read_batches(data)
    except KafkaError:
        pass
