"""tidelog/console_records.py: Kafka's console line formats and fetched records."""

from __future__ import annotations

import pytest

from common.errors import CorruptRecordError
from common.record_batch import TimestampType
from common.records import Header, Record, build_batch
from tidelog.console_records import (
    ConsumerFormat,
    FormatError,
    LineSplitter,
    ProducerFormat,
    consumer_format,
    decode_fetched,
    parse_properties,
    producer_format,
)

# (properties, --key-separator, line) -> (key, value)
PRODUCER_LINES = [
    pytest.param([], None, b"hello", (None, b"hello"), id="value-only"),
    pytest.param([], None, b"a\tb", (None, b"a\tb"), id="no-parse-key-keeps-tabs"),
    pytest.param(["parse.key=true"], None, b"k\tv", (b"k", b"v"), id="default-separator-is-tab"),
    pytest.param(["parse.key=true", "key.separator=:"], None, b"k:v:w", (b"k", b"v:w"), id="first-separator"),
    pytest.param([], ":", b"k:", (b"k", b""), id="key-separator-option-empty-value"),
    pytest.param([], "::", b"k::v", (b"k", b"v"), id="multi-byte-separator"),
    pytest.param([], "\\t", b"k\tv", (b"k", b"v"), id="escaped-tab"),
    pytest.param(["parse.key=true", "ignore.error=true"], ":", b"novalue", (None, b"novalue"), id="ignore-error"),
]


@pytest.mark.parametrize(("properties", "separator", "line", "expected"), PRODUCER_LINES)
def test_producer_format(properties: list[str], separator: str | None, line: bytes,
                         expected: tuple[bytes | None, bytes]) -> None:
    assert producer_format(properties, separator).parse(line) == expected


def test_producer_format_missing_separator_names_it() -> None:
    with pytest.raises(FormatError, match="no key separator ':'"):
        ProducerFormat(parse_key=True, key_separator=b":").parse(b"novalue")


@pytest.mark.parametrize(("items", "message"), [
    (["parse.key"], "not key=value"),
    (["=true"], "not key=value"),
    (["print.key=true"], "not a property of this tool"),
    (["parse.key=yes"], "must be true or false"),
])
def test_bad_producer_properties(items: list[str], message: str) -> None:
    with pytest.raises(FormatError, match=message):
        producer_format(items)


def test_properties_last_one_wins() -> None:
    assert parse_properties(["print.key=true", "print.key=false"], frozenset({"print.key"})) == {
        "print.key": "false"}


RECORD = Record(offset=42, timestamp=1_700_000_000_123, key=b"k1", value=b"hello",
                headers=(Header("h", b"1"), Header("n", None)))
NULLS = Record(offset=7, timestamp=5, key=None, value=None)


@pytest.mark.parametrize(("properties", "record", "kind", "line"), [
    pytest.param([], RECORD, TimestampType.CREATE_TIME, b"hello\n", id="value-only"),
    pytest.param(["print.key=true"], RECORD, TimestampType.CREATE_TIME, b"k1\thello\n", id="key"),
    pytest.param(["print.key=true", "key.separator=|"], RECORD, TimestampType.CREATE_TIME, b"k1|hello\n",
                 id="separator"),
    pytest.param(["print.timestamp=true", "print.partition=true", "print.offset=true", "print.key=true"],
                 RECORD, TimestampType.CREATE_TIME, b"CreateTime:1700000000123\tPartition:3\tOffset:42\tk1\thello\n",
                 id="kafkas-order"),
    pytest.param(["print.timestamp=true", "print.value=false"], RECORD, TimestampType.LOG_APPEND_TIME,
                 b"LogAppendTime:1700000000123\n", id="log-append-time-no-value"),
    pytest.param(["print.headers=true"], RECORD, TimestampType.CREATE_TIME, b"h:1,n:null\thello\n", id="headers"),
    pytest.param(["print.headers=true"], NULLS, TimestampType.CREATE_TIME, b"NO_HEADERS\tnull\n", id="no-headers"),
    pytest.param(["print.key=true", "null.literal=-"], NULLS, TimestampType.CREATE_TIME, b"-\t-\n", id="null-literal"),
    pytest.param(["line.separator=\\n\\n"], RECORD, TimestampType.CREATE_TIME, b"hello\n\n", id="line-separator"),
])
def test_consumer_format(properties: list[str], record: Record, kind: TimestampType, line: bytes) -> None:
    assert consumer_format(properties).render(3, record, kind) == line


def test_consumer_format_defaults_are_kafkas() -> None:
    assert consumer_format([]) == ConsumerFormat()


LINES = b"one\r\ntwo\n\nthree"


@pytest.mark.parametrize("step", [1, 2, 3, len(LINES)])
def test_line_splitter_in_any_pieces(step: int) -> None:
    splitter = LineSplitter()
    lines = []
    for i in range(0, len(LINES), step):
        lines += splitter.feed(LINES[i:i + step])
    lines += splitter.finish()
    assert lines == [b"one", b"two", b"", b"three"]
    assert splitter.finish() == []


def test_line_splitter_refuses_an_endless_line() -> None:
    splitter = LineSplitter(max_line_bytes=8)
    assert splitter.feed(b"12345678\n") == [b"12345678"]
    with pytest.raises(FormatError, match="longer than 8 bytes"):
        splitter.feed(b"123456789")


def _fetched() -> bytes:
    first = build_batch([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")], base_offset=10)
    control = build_batch([(b"\x00\x00\x00\x01", b"")], base_offset=13, is_control=True)
    last = build_batch([(None, b"4")], base_offset=14)
    return first + control + last


@pytest.mark.parametrize(("position", "offsets", "next_position"), [
    pytest.param(10, [10, 11, 12, 14], 15, id="all-control-skipped"),
    pytest.param(11, [11, 12, 14], 15, id="mid-batch-start"),
    pytest.param(14, [14], 15, id="past-the-control-batch"),
    pytest.param(15, [], 15, id="nothing-new"),
])
def test_decode_fetched(position: int, offsets: list[int], next_position: int) -> None:
    records, after = decode_fetched(_fetched(), position)
    assert [r.offset for r, _ in records] == offsets
    assert after == next_position


def test_decode_fetched_leaves_a_partial_batch_for_the_next_fetch() -> None:
    data = _fetched()
    records, after = decode_fetched(data[:-5], 10)
    assert [r.offset for r, _ in records] == [10, 11, 12]
    assert after == 14
    assert decode_fetched(None, 3) == ([], 3)


def test_decode_fetched_checks_crcs() -> None:
    data = bytearray(_fetched())
    data[70] ^= 0xFF  # inside the first batch's records
    with pytest.raises(CorruptRecordError):
        decode_fetched(bytes(data), 10)
