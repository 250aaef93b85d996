"""broker/log/txn_index.py: Kafka's .txnindex format, the pure rebuild and the fetch search."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log.txn_index_file import TransactionIndex
from broker.log.txn_index import (
    ENTRY_SIZE,
    AbortedTxn,
    CompletedTxn,
    CorruptTxnIndexError,
    collect_aborted,
    decode_entries,
    encode_entries,
    marker_type,
    scan_transactions,
)
from common.control_records import ControlType, marker_batch
from common.record_batch import parse_header
from common.records import build_batch

ABORT, COMMIT = ControlType.ABORT, ControlType.COMMIT


def data(pid: int, base: int, count: int = 1, *, transactional: bool = True):
    raw = build_batch([(b"k", b"v")] * count, base_offset=base, producer_id=pid, producer_epoch=0,
                      base_sequence=0, is_transactional=transactional)
    return parse_header(raw), None


def marker(pid: int, offset: int, kind: ControlType):
    raw = marker_batch(commit=kind is COMMIT, producer_id=pid, producer_epoch=0, coordinator_epoch=0,
                       timestamp_ms=0, base_offset=offset)
    header = parse_header(raw)
    return header, marker_type(raw, header)


def test_entry_is_kafkas_34_bytes_big_endian() -> None:
    raw = encode_entries([AbortedTxn(7, 100, 105, 106)])
    assert ENTRY_SIZE == 34 and len(raw) == 34
    assert raw == (b"\x00\x00" + (7).to_bytes(8, "big") + (100).to_bytes(8, "big")
                   + (105).to_bytes(8, "big") + (106).to_bytes(8, "big"))


def test_round_trip_and_corruption() -> None:
    entries = [AbortedTxn(7, 100, 105, 106), AbortedTxn(9, 101, 110, 111)]
    raw = encode_entries(entries)
    assert decode_entries(raw) == entries
    with pytest.raises(CorruptTxnIndexError):
        decode_entries(raw[:-1])
    with pytest.raises(CorruptTxnIndexError):
        decode_entries(b"\x00\x01" + raw[2:34])  # version 1
    with pytest.raises(CorruptTxnIndexError):
        decode_entries(encode_entries([AbortedTxn(1, 5, 5, 6)]).replace(
            (5).to_bytes(8, "big") + (5).to_bytes(8, "big"), (5).to_bytes(8, "big") + (4).to_bytes(8, "big")))


def test_marker_type_reads_the_control_record() -> None:
    assert marker(1, 0, ABORT)[1] is ABORT
    assert marker(1, 0, COMMIT)[1] is COMMIT
    header, kind = data(1, 0)
    assert kind is None and marker_type(b"", header) is None


@pytest.mark.parametrize("batches, ongoing, completed, aborted, still_open", [
    # one producer: data at 0..1, abort at 2 -> LSO after it is 3
    ([data(7, 0, 2), marker(7, 2, ABORT)], {},
     [CompletedTxn(7, 0, 2, True)], [AbortedTxn(7, 0, 2, 3)], {}),
    # an interleaved open transaction of another producer holds the LSO at its start
    ([data(7, 0), data(9, 1), data(7, 2), marker(7, 3, ABORT)], {},
     [CompletedTxn(7, 0, 3, True)], [AbortedTxn(7, 0, 3, 1)], {9: 1}),
    # a commit makes no index entry; a transaction open before the run keeps its first offset
    ([data(7, 10), marker(7, 11, COMMIT), marker(9, 12, ABORT)], {9: 4},
     [CompletedTxn(7, 10, 11, False), CompletedTxn(9, 4, 12, True)], [AbortedTxn(9, 4, 12, 13)], {}),
    # a marker with no open transaction completes and indexes nothing (Kafka 3.x), as appends do
    ([marker(7, 5, ABORT)], {}, [], [], {}),
    # idempotent (non-transactional) batches open nothing
    ([data(7, 0, transactional=False)], {}, [], [], {}),
])
def test_scan_transactions(batches, ongoing, completed, aborted, still_open) -> None:
    scan = scan_transactions(batches, ongoing)
    assert list(scan.completed) == completed
    assert list(scan.aborted) == aborted
    assert dict(scan.ongoing) == still_open


def test_collect_aborted_overlap_and_completeness() -> None:
    entries = [AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 3, 10, 11), AbortedTxn(3, 20, 25, 26)]
    assert collect_aborted(entries, 6, 15) == ([entries[1]], True)  # entry 3's LSO 26 >= 15
    assert collect_aborted(entries, 0, 4) == (entries[:2], True)
    assert collect_aborted(entries, 26, 40) == ([], False)  # keep searching later segments


def test_file_is_written_on_flush_truncated_and_reloaded(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(path)
    index.flush()
    assert not path.exists()  # no abort, no file
    index.append(AbortedTxn(1, 0, 5, 6))
    index.append(AbortedTxn(2, 3, 10, 11))
    assert not path.exists()
    index.flush()
    assert path.stat().st_size == 2 * ENTRY_SIZE
    with pytest.raises(ValueError):
        index.append(AbortedTxn(3, 0, 9, 10))
    index.truncate_to(10)
    assert path.stat().st_size == ENTRY_SIZE
    reloaded = TransactionIndex(path)
    reloaded.load()
    assert reloaded.entries == [AbortedTxn(1, 0, 5, 6)]
    reloaded.truncate_to(0)
    assert not path.exists()
    missing = TransactionIndex(tmp_path / "1.txnindex")
    missing.load()
    assert len(missing) == 0
