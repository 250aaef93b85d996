"""spark.fetch_columns: a Fetch response's record batches -> the source's Arrow batch.

The oracle is common.records.decode_records (the record-at-a-time reference decoder):
every codec, null keys and values, records of every size class (1-, 2- and 3-byte length
prefixes, the equal-size runs and the record-by-record walk), cuts at the range's ends,
control batches, aborted transactions under read_committed, LogAppendTime, headers, a
partial last batch, and corrupt batches.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from common.control_records import marker_batch
from common.errors import CorruptRecordError
from common.protocol.fetch import AbortedTransaction
from common.record_batch import (
    CRC_POS,
    CompressionType,
    RecordBatchHeader,
    TimestampType,
    complete_prefix,
    compute_crc,
    parse_header,
)
from common.records import Record, build_batch, decode_records
from spark.arrow_schema import ARROW_SCHEMA, ARROW_SCHEMA_WITH_HEADERS
from spark.fetch_columns import (
    FetchedRecords,
    binary_column,
    decode_fetched,
)

TOPIC = "t"
PARTITION = 5
BASE_MS = 1_700_000_000_000
COMMIT, ABORT = 1, 0


def batch(count: int, *, base: int, value: Any = lambda i: b"v" * 100, key: Any = lambda i: b"%08d" % i,
          **kwargs: Any) -> bytes:
    pairs = [(key(base + i), value(base + i)) for i in range(count)]
    return build_batch(pairs, base_offset=base, timestamps=[BASE_MS + base + i for i in range(count)], **kwargs)


def marker(offset: int, producer_id: int, kind: int) -> bytes:
    return build_batch([(struct.pack(">hh", 0, kind), b"\0\0\0\0\0\0")], base_offset=offset,
                       producer_id=producer_id, producer_epoch=0, is_transactional=True, is_control=True)


def oracle(records: bytes, start: int, end: int) -> list[dict[str, Any]]:
    """What Spark's Kafka source shows for the data batches in `records`."""
    rows = []
    view = memoryview(records)
    pos = 0
    while pos < complete_prefix(records):
        header = parse_header(view, pos)
        if not header.is_control:
            for r in decode_records(view, pos, header):
                if start <= r.offset < end:
                    rows.append(row_of(r, header.timestamp_type))
        pos += header.size
    return rows


def row_of(r: Record, kind: TimestampType) -> dict[str, Any]:
    return {"key": r.key, "value": r.value, "topic": TOPIC, "partition": PARTITION, "offset": r.offset,
            "timestamp_us": r.timestamp * 1000, "timestampType": int(kind)}


def shown(got: FetchedRecords) -> list[dict[str, Any]]:
    if got.batch is None:
        return []
    assert got.batch.schema.equals(ARROW_SCHEMA)
    rows = got.batch.to_pylist()
    stamps = got.batch.column("timestamp").cast(pa.int64()).to_pylist()
    for row, us in zip(rows, stamps, strict=True):
        del row["timestamp"]
        row["timestamp_us"] = us
    return rows


def decode(records: bytes | None, start: int = 0, end: int = 1 << 62, **kwargs: Any) -> FetchedRecords:
    return decode_fetched(records, topic=TOPIC, partition=PARTITION, start=start, end=end, **kwargs)


@pytest.mark.parametrize("codec", list(CompressionType))
def test_every_codec_decodes_as_the_reference(codec: CompressionType) -> None:
    records = batch(300, base=0, compression=codec) + batch(200, base=300) + batch(7, base=500, compression=codec)
    got = decode(records)
    assert shown(got) == oracle(records, 0, 1 << 62)
    assert got.next_offset == 507


@pytest.mark.parametrize(("name", "value"), [
    ("empty values", lambda i: b""),
    ("1-byte length prefixes", lambda i: b"x" * (i % 40)),
    ("odd sizes: the record-by-record walk", lambda i: b"y" * (i * 7919 % 300)),
    ("3-byte length prefixes", lambda i: bytes([i % 256]) * (9000 + i % 3)),
    ("null values", lambda i: None if i % 3 == 0 else b"z" * (i % 5)),
    ("runs of sizes", lambda i: b"r" * (10 if i < 150 else 500)),
])
def test_record_sizes(name: str, value: Any) -> None:
    records = batch(400, base=10, value=value, key=lambda i: None if i % 4 == 0 else b"k%d" % i)
    assert shown(decode(records, 10, 410)) == oracle(records, 10, 410), name


def test_the_range_cuts_records_and_the_position_follows_the_batches() -> None:
    records = batch(100, base=0) + batch(100, base=100) + batch(100, base=200)
    got = decode(records, start=50, end=150)
    assert [r["offset"] for r in shown(got)] == list(range(50, 150))
    assert got.next_offset == 150  # never past the end, although the batch goes on
    got = decode(records, start=150, end=1000)
    assert [r["offset"] for r in shown(got)] == list(range(150, 300)) and got.next_offset == 300


def test_gaps_from_compaction_are_crossed() -> None:
    # a compacted batch keeps its offset span (lastOffsetDelta) with records missing inside
    kept = [Record(offset=o, timestamp=BASE_MS, key=b"k", value=b"v") for o in (10, 14, 19)]
    records = build_batch(kept, base_offset=10) + batch(5, base=40)
    got = decode(records, start=11, end=45)
    assert [r["offset"] for r in shown(got)] == [14, 19, 40, 41, 42, 43, 44]
    assert got.next_offset == 45


def test_nothing_fetched() -> None:
    assert decode(None, start=7) == FetchedRecords(None, 7)
    assert decode(b"", start=7) == FetchedRecords(None, 7)


def test_a_partial_last_batch_is_left_for_the_next_fetch() -> None:
    whole = batch(50, base=0)
    records = whole + batch(50, base=50)[:-9]
    assert complete_prefix(records) == len(whole)
    got = decode(records)
    assert [r["offset"] for r in shown(got)] == list(range(50)) and got.next_offset == 50
    assert decode(records[:30]) == FetchedRecords(None, 0)


def test_control_batches_are_skipped_but_passed() -> None:
    records = batch(3, base=0, producer_id=9, producer_epoch=0, is_transactional=True) + marker(3, 9, COMMIT)
    got = decode(records)
    assert [r["offset"] for r in shown(got)] == [0, 1, 2] and got.next_offset == 4
    only_marker = decode(marker(3, 9, COMMIT), start=3)
    assert only_marker == FetchedRecords(None, 4)


def test_read_committed_hides_aborted_transactions() -> None:
    records = b"".join([
        batch(2, base=0, producer_id=7, producer_epoch=0, is_transactional=True),   # aborted below
        batch(2, base=2, producer_id=8, producer_epoch=0, is_transactional=True),   # committed
        batch(1, base=4),                                                            # not transactional
        marker(5, 7, ABORT), marker(6, 8, COMMIT),
        batch(2, base=7, producer_id=7, producer_epoch=0, is_transactional=True),   # a later, open one
    ])
    aborted = [AbortedTransaction(producer_id=7, first_offset=0)]
    committed = decode(records, read_committed=True, aborted=aborted)
    assert [r["offset"] for r in shown(committed)] == [2, 3, 4, 7, 8]
    assert committed.next_offset == 9
    uncommitted = decode(records, read_committed=False, aborted=aborted)
    assert [r["offset"] for r in shown(uncommitted)] == [0, 1, 2, 3, 4, 7, 8]


def txn_batch(count: int, base: int, producer_id: int, epoch: int = 0) -> bytes:
    return batch(count, base=base, producer_id=producer_id, producer_epoch=epoch, is_transactional=True)


def end_marker(offset: int, producer_id: int, *, commit: bool, epoch: int = 0) -> bytes:
    """The control batch a leader appends for WriteTxnMarkers (common.control_records)."""
    return marker_batch(commit=commit, producer_id=producer_id, producer_epoch=epoch, coordinator_epoch=3,
                        timestamp_ms=BASE_MS, base_offset=offset)


# (case, records, fetch start, aborted list, offsets a read_committed reader is shown, next offset)
ABORTED_CASES = [
    ("the same producer aborts, commits, aborts again: only the committed transaction shows",
     txn_batch(2, 0, 7) + end_marker(2, 7, commit=False) + txn_batch(2, 3, 7) + end_marker(5, 7, commit=True)
     + txn_batch(2, 6, 7) + end_marker(8, 7, commit=False),
     0, [AbortedTransaction(7, 0), AbortedTransaction(7, 6)], [3, 4], 9),
    ("a fetch starting inside an aborted transaction: its batch is still skipped",
     txn_batch(4, 0, 7) + batch(1, base=4) + end_marker(5, 7, commit=False),
     2, [AbortedTransaction(7, 0)], [4], 6),
    ("an aborted transaction interleaved with another producer's committed one",
     txn_batch(1, 0, 7) + txn_batch(1, 1, 8) + txn_batch(1, 2, 7) + txn_batch(1, 3, 8)
     + end_marker(4, 8, commit=True) + end_marker(5, 7, commit=False),
     0, [AbortedTransaction(7, 0)], [1, 3], 6),
    ("a listed abort that starts after this response changes nothing in it",
     txn_batch(2, 0, 7) + end_marker(2, 7, commit=True),
     0, [AbortedTransaction(7, 10)], [0, 1], 3),
    ("only control batches: no rows, but the position moves past them",
     end_marker(0, 7, commit=True) + end_marker(1, 8, commit=False),
     0, [], [], 2),
]


@pytest.mark.parametrize(("records", "start", "aborted", "offsets", "next_offset"),
                         [case[1:] for case in ABORTED_CASES], ids=[case[0] for case in ABORTED_CASES])
def test_read_committed_filters_aborted_batches(records: bytes, start: int, aborted: list[AbortedTransaction],
                                                offsets: list[int], next_offset: int) -> None:
    got = decode(records, start=start, read_committed=True, aborted=aborted)
    assert [r["offset"] for r in shown(got)] == offsets
    assert got.next_offset == next_offset
    # read_uncommitted shows every data record at or after the start, markers never
    every = [r["offset"] for r in oracle(records, start, 1 << 62)]
    assert [r["offset"] for r in shown(decode(records, start=start, aborted=aborted))] == every


def test_read_committed_filters_the_same_fed_a_batch_at_a_time() -> None:
    """A reader fetching one batch per response (a small max.bytes) keeps no state between
    responses: each response's aborted list is enough."""
    [(records, _, aborted, offsets, _)] = [case[1:] for case in ABORTED_CASES[:1]]
    last_offsets = {0: 2, 6: 8}  # each aborted transaction's marker: the broker lists those overlapping the fetch
    view, pos, shown_offsets = memoryview(records), 0, []
    while pos < len(records):  # bounded: one batch per pass
        header = parse_header(view, pos)
        overlapping = [a for a in aborted
                       if a.first_offset <= header.last_offset and last_offsets[a.first_offset] >= header.base_offset]
        got = decode(bytes(view[pos:pos + header.size]), start=header.base_offset, read_committed=True,
                     aborted=overlapping)
        shown_offsets += [r["offset"] for r in shown(got)]
        pos += header.size
    assert shown_offsets == offsets


def test_log_append_time_is_the_batch_time_for_every_record() -> None:
    records = bytearray(batch(3, base=0, timestamp_type=TimestampType.LOG_APPEND_TIME))
    rows = shown(decode(bytes(records)))
    header = parse_header(records, 0)
    assert {r["timestamp_us"] for r in rows} == {header.max_timestamp * 1000}
    assert {r["timestampType"] for r in rows} == {1}
    assert {r["timestampType"] for r in shown(decode(batch(3, base=0)))} == {0}


def test_headers() -> None:
    headers = [[("a", b"1"), ("b", None)], None, [("ü", b"")]]
    records = build_batch([(b"k", b"v")] * 3, headers=headers, timestamps=[BASE_MS] * 3)
    got = decode(records, include_headers=True)
    assert got.batch is not None and got.batch.schema.equals(ARROW_SCHEMA_WITH_HEADERS)
    assert got.batch.column("headers").to_pylist() == [
        [{"key": "a", "value": b"1"}, {"key": "b", "value": None}], None, [{"key": "ü", "value": b""}]]
    assert decode(records).batch.schema.equals(ARROW_SCHEMA)  # type: ignore[union-attr]


def resign(buf: bytearray) -> bytes:
    """The batch with its CRC recomputed after an edit (so the decoder, not the CRC, must object)."""
    header = RecordBatchHeader._make(struct.unpack_from(">qiibIhiqqqhii", buf, 0))
    struct.pack_into(">I", buf, CRC_POS, compute_crc(buf, 0, header))
    return bytes(buf)


@pytest.mark.parametrize(("name", "edit"), [
    ("more records counted than present", lambda b: struct.pack_into(">i", b, 57, 4)),
    ("fewer records counted than present", lambda b: struct.pack_into(">i", b, 57, 2)),
    ("a record length past its batch", lambda b: b.__setitem__(61, 0x7E)),
])
def test_corrupt_batches_are_refused(name: str, edit: Any) -> None:
    buf = bytearray(batch(3, base=0, value=lambda i: b"v" * 10))
    edit(buf)
    with pytest.raises(CorruptRecordError):
        decode(resign(buf))


def test_a_bad_crc_is_refused() -> None:
    buf = bytearray(batch(3, base=0))
    buf[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        decode(bytes(buf))


def test_binary_column_takes_slices_in_order() -> None:
    buf = np.frombuffer(b"..abc.de..f" + bytes(16), np.uint8)
    column = binary_column(buf, np.array([2, 6, 8, 10]), np.array([3, 2, -1, 1]))
    assert column.to_pylist() == [b"abc", b"de", None, b"f"]
