"""Tests for broker/records.py: varints, build -> decode round trips, and every malformed
records section raising CorruptRecordError."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import CorruptRecordError
from common.record_batch import (
    CRC_POS,
    HEADER_SIZE,
    CompressionType,
    TimestampType,
    check_producer_batch,
    compute_crc,
    parse_header,
    set_log_append_time,
    verify_crc,
)
from common.records import (
    DEFAULT_TIMESTAMP,
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    Header,
    Record,
    build_batch,
    decode_records,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
)

# --- varints: one table drives encoder and decoder ---------------------------------------

VARINT_CASES = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (8191, "fe7f"),
    (-8193, "818001"),
    (INT32_MAX, "feffffff0f"),
    (INT32_MIN, "ffffffff0f"),
]
VARLONG_CASES = VARINT_CASES + [
    (INT32_MAX + 1, "8080808010"),
    (INT64_MAX, "feffffffffffffffff01"),
    (INT64_MIN, "ffffffffffffffffff01"),
]
CODECS = {
    "varint": (encode_varint, decode_varint, VARINT_CASES),
    "varlong": (encode_varlong, decode_varlong, VARLONG_CASES),
}
ROWS = [
    pytest.param(kind, value, bytes.fromhex(encoded), id=f"{kind}-{value}")
    for kind, (_, _, cases) in CODECS.items()
    for value, encoded in cases
]


@pytest.mark.parametrize(("kind", "value", "encoded"), ROWS)
def test_varint_table(kind: str, value: int, encoded: bytes) -> None:
    encode, decode, _ = CODECS[kind]
    assert encode(value) == encoded
    assert decode(encoded) == (value, len(encoded))
    assert decode(b"\xaa" + encoded + b"trailing", 1) == (value, 1 + len(encoded))
    for cut in range(len(encoded)):
        with pytest.raises(CorruptRecordError, match="past the end"):
            decode(encoded[:cut])
    with pytest.raises(CorruptRecordError):
        decode(encoded, 0, len(encoded) - 1)


@pytest.mark.parametrize(
    ("encode", "value"),
    [
        (encode_varint, INT32_MAX + 1),
        (encode_varint, INT32_MIN - 1),
        (encode_varlong, INT64_MAX + 1),
        (encode_varlong, INT64_MIN - 1),
    ],
)
def test_encode_out_of_range(encode: object, value: int) -> None:
    with pytest.raises(ValueError):
        encode(value)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("decode", "encoded", "message"),
    [
        (decode_varint, "ffffffff1f", "overflows"),
        (decode_varint, "ffffffffff01", "longer than"),
        (decode_varlong, "ffffffffffffffffff03", "overflows"),
        (decode_varlong, "ffffffffffffffffffff01", "longer than"),
    ],
)
def test_decode_too_wide(decode: object, encoded: str, message: str) -> None:
    with pytest.raises(CorruptRecordError, match=message):
        decode(bytes.fromhex(encoded))  # type: ignore[operator]


@settings(max_examples=200, deadline=None)
@given(st.integers(INT32_MIN, INT32_MAX), st.integers(INT64_MIN, INT64_MAX))
def test_varint_round_trip(small: int, large: int) -> None:
    assert decode_varint(encode_varint(small)) == (small, len(encode_varint(small)))
    assert decode_varlong(encode_varlong(large)) == (large, len(encode_varlong(large)))


# --- build -> decode ---------------------------------------------------------------------


def decode(batch: bytes) -> list[Record]:
    header = parse_header(batch)
    verify_crc(batch, 0, header)
    return decode_records(batch, 0, header)


def test_simple_pairs() -> None:
    batch = build_batch([(b"k", b"v"), (None, b"v2")], base_offset=40)
    header = parse_header(batch)
    check_producer_batch(header)
    assert (header.record_count, header.last_offset_delta) == (2, 1)
    assert header.base_timestamp == header.max_timestamp == DEFAULT_TIMESTAMP
    assert decode(batch) == [
        Record(40, DEFAULT_TIMESTAMP, b"k", b"v"),
        Record(41, DEFAULT_TIMESTAMP, None, b"v2"),
    ]


def test_records_keep_offsets_timestamps_and_headers() -> None:
    records = [
        Record(100, 5_000, b"a", None, (Header("h", b"1"), Header("n", None)), attributes=0),
        Record(103, 4_000, None, b"", ()),
    ]
    batch = build_batch(records, base_offset=100)
    header = parse_header(batch)
    assert (header.last_offset_delta, header.record_count) == (3, 2)
    assert (header.base_timestamp, header.max_timestamp) == (5_000, 5_000)
    assert decode(batch) == records


def test_header_tuples_and_timestamps() -> None:
    batch = build_batch(
        [(b"k", b"v"), (b"k2", b"v2")],
        timestamps=[20, 10],
        headers=[[("trace", b"x"), Header("empty", b"")], None],
    )
    header = parse_header(batch)
    assert (header.base_timestamp, header.max_timestamp) == (20, 20)
    assert decode(batch) == [
        Record(0, 20, b"k", b"v", (Header("trace", b"x"), Header("empty", b""))),
        Record(1, 10, b"k2", b"v2"),
    ]


def test_header_fields() -> None:
    batch = build_batch(
        [(b"k", b"v")] * 3,
        base_offset=7,
        base_timestamp=1_000,
        compression=CompressionType.ZSTD,
        producer_id=42,
        producer_epoch=3,
        base_sequence=10,
        partition_leader_epoch=5,
        is_transactional=True,
        is_control=True,
    )
    header = parse_header(batch)
    assert header.compression is CompressionType.ZSTD
    assert header.is_transactional and header.is_control
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 10)
    assert (header.partition_leader_epoch, header.base_offset, header.last_offset) == (5, 7, 9)
    assert [r.timestamp for r in decode(batch)] == [1_000] * 3


def test_empty_batch() -> None:
    header = parse_header(build_batch([]))
    assert (header.record_count, header.last_offset_delta) == (0, -1)
    assert decode(build_batch([])) == []


@pytest.mark.parametrize(
    ("records", "options"),
    [
        ([Record(5, 0, None, None), Record(5, 0, None, None)], {"base_offset": 0}),
        ([Record(3, 0, None, None)], {"base_offset": 4}),
        ([(b"k", b"v")], {"timestamps": [1, 2]}),
        ([(b"k", b"v")], {"headers": []}),
        ([(b"k", b"v")], {"producer_epoch": 1 << 15}),
        ([(b"k", b"v")], {"timestamps": [INT64_MAX], "base_timestamp": -1}),
    ],
)
def test_build_rejects_bad_input(records: list[object], options: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        build_batch(records, **options)  # type: ignore[arg-type]


def test_record_validates_types() -> None:
    with pytest.raises(TypeError):
        Record(0, 0, "key", None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Record(0, 0, None, None, [Header("a", None)])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Header(b"key", None)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Record(0, 0, None, None, attributes=128)


optional_bytes = st.none() | st.binary(max_size=40)
headers_strategy = st.lists(
    st.builds(Header, st.text(max_size=8), optional_bytes), max_size=3
).map(tuple)


@settings(max_examples=200, deadline=None)
@given(
    pairs=st.lists(st.tuples(optional_bytes, optional_bytes, headers_strategy), max_size=8),
    timestamps=st.data(),
    base_offset=st.integers(0, 1 << 40),
    codec=st.sampled_from(list(CompressionType)),
)
def test_round_trip(
    pairs: list[tuple[bytes | None, bytes | None, tuple[Header, ...]]],
    timestamps: st.DataObject,
    base_offset: int,
    codec: CompressionType,
) -> None:
    count = len(pairs)
    stamps = timestamps.draw(st.lists(st.integers(0, 1 << 50), min_size=count, max_size=count))
    batch = build_batch(
        [(key, value) for key, value, _ in pairs],
        base_offset=base_offset,
        timestamps=stamps,
        headers=[h for _, _, h in pairs],
        compression=codec,
    )
    expected = [
        Record(base_offset + i, stamps[i], key, value, headers)
        for i, (key, value, headers) in enumerate(pairs)
    ]
    header = parse_header(batch)
    assert header.size == len(batch)
    assert header.compression is codec
    if pairs:
        assert header.max_timestamp == max(stamps)
        check_producer_batch(header)
    assert decode(batch) == expected
    assert decode(build_batch(expected, base_offset=base_offset, compression=codec)) == expected


# --- LogAppendTime -------------------------------------------------------------------------


def test_log_append_time_from_builder() -> None:
    batch = build_batch(
        [(b"a", b"1"), (b"b", b"2")],
        timestamps=[10, 30],
        timestamp_type=TimestampType.LOG_APPEND_TIME,
    )
    assert parse_header(batch).timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in decode(batch)] == [30, 30]


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name)
def test_log_append_time_set_by_broker(codec: CompressionType) -> None:
    pairs = [(b"a", b"1"), (b"b", b"2")]
    buf = bytearray(build_batch(pairs, timestamps=[10, 20], compression=codec))
    set_log_append_time(buf, 0, parse_header(buf), 99_999)
    assert [r.timestamp for r in decode(bytes(buf))] == [99_999, 99_999]


# --- malformed records sections --------------------------------------------------------------


def resign(buf: bytearray) -> bytes:
    _UINT32.pack_into(buf, CRC_POS, compute_crc(buf, 0, parse_header(buf)))
    return bytes(buf)


_UINT32 = struct.Struct(">I")
_INT32 = struct.Struct(">i")


def with_section(section: bytes, count: int) -> bytes:
    """A valid, signed batch whose records section is `section` claiming `count` records."""
    buf = bytearray(build_batch([])[:HEADER_SIZE]) + section
    _INT32.pack_into(buf, 8, len(buf) - 12)  # batchLength
    _INT32.pack_into(buf, 23, count - 1)  # lastOffsetDelta
    _INT32.pack_into(buf, 57, count)  # recordCount
    return resign(buf)


def record(*fields: bytes, length: int | None = None) -> bytes:
    body = b"".join(fields)
    return encode_varint(len(body) if length is None else length) + body


V = encode_varint
GOOD_FIELDS = (b"\x00", encode_varlong(0), V(0), V(1), b"k", V(1), b"v", V(0))
GOOD = record(*GOOD_FIELDS)
SECOND = record(b"\x00", encode_varlong(-5), V(1), V(-1), V(0), V(0))

MALFORMED = {
    "count above records": (GOOD, 2, "holds only 1"),
    "count below records": (GOOD + GOOD, 1, "trailing bytes"),
    "trailing garbage": (GOOD + b"\x00", 1, "trailing bytes"),
    "negative count": (b"", -1, "negative record count"),
    "negative record length": (V(-3) + b"\x00" * 10, 1, "record length -3"),
    "record past section": (record(*GOOD_FIELDS, length=50), 1, "record length 50"),
    "empty record": (record(), 1, "empty"),
    "record length varint cut": (b"\x80", 1, "past the end"),
    "key length -2": (record(b"\x00", V(0), V(0), V(-2), V(0), V(0)), 1, "key length -2"),
    "key past record": (record(b"\x00", V(0), V(0), V(9), b"k", V(0), V(0)), 1, "key length 9"),
    "value past record": (record(b"\x00", V(0), V(0), V(-1), V(5), b"v"), 1, "value length 5"),
    "fields short of length": (record(*GOOD_FIELDS, b"\x00\x00"), 1, "length says"),
    "fields past length": (record(*GOOD_FIELDS[:-1]), 1, "past the end"),
    "negative header count": (record(*GOOD_FIELDS[:-1], V(-1)), 1, "negative header count"),
    "header count too high": (record(*GOOD_FIELDS[:-1], V(2), V(1), b"a", V(-1)), 1, "past"),
    "null header key": (record(*GOOD_FIELDS[:-1], V(1), V(-1), V(-1)), 1, "null header key"),
    "header key not utf-8": (
        record(*GOOD_FIELDS[:-1], V(1), V(1), b"\xff", V(-1)),
        1,
        "not UTF-8",
    ),
    "header value -2": (record(*GOOD_FIELDS[:-1], V(1), V(1), b"a", V(-2)), 1, "length -2"),
    "timestamp varlong too long": (record(b"\x00", b"\xff" * 11), 1, "longer than"),
}


def test_good_section_decodes() -> None:
    assert decode(with_section(GOOD + SECOND, 2)) == [
        Record(0, DEFAULT_TIMESTAMP, b"k", b"v"),
        Record(1, DEFAULT_TIMESTAMP - 5, None, b""),
    ]


@pytest.mark.parametrize(("section", "count", "message"), MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_section(section: bytes, count: int, message: str) -> None:
    batch = with_section(section, count)
    with pytest.raises(CorruptRecordError, match=message):
        decode(batch)


def test_buffer_trailing_bytes_are_not_the_batch() -> None:
    batch = build_batch([(b"k", b"v")])
    assert decode_records(batch + b"next batch", 0, parse_header(batch)) == decode(batch)


def test_header_not_matching_buffer() -> None:
    batch = build_batch([(b"k", b"v")])
    header = parse_header(batch)
    with pytest.raises(CorruptRecordError):
        decode_records(batch[:-1], 0, header)
    with pytest.raises(CorruptRecordError):
        decode_records(batch, 5, header)


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name)
def test_every_truncation_is_corrupt(codec: CompressionType) -> None:
    batch = build_batch(
        [(b"key", b"value" * 20), (None, b"x"), (b"k", None)],
        headers=[[("h", b"v")], None, [("a", None)]],
        compression=codec,
    )
    for cut in range(len(batch)):
        with pytest.raises(CorruptRecordError):
            parse_header(batch[:cut])
    section = batch[HEADER_SIZE:]
    for cut in range(len(section)):
        truncated = bytearray(with_section(section[:cut], 3))
        truncated[21:23] = batch[21:23]  # keep the codec
        with pytest.raises(CorruptRecordError):
            decode(resign(truncated))


@settings(max_examples=200, deadline=None)
@given(
    section=st.binary(max_size=120)
    | st.lists(st.sampled_from([GOOD, SECOND, b"\x00", b"\x80", b"\x01", V(5)])).map(b"".join),
    count=st.integers(-2, 6),
    codec=st.sampled_from(list(CompressionType)),
)
def test_any_section_decodes_or_raises_corrupt(
    section: bytes, count: int, codec: CompressionType
) -> None:
    buf = bytearray(with_section(section, count))
    buf[22] = int(codec)
    try:
        decode(resign(buf))
    except CorruptRecordError:
        pass
