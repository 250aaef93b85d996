"""The cleaner's transaction rules (broker/log/cleaner_txn.py), pure: the aborted
transactions and producers' last records a log's batches give, and Kafka's
CleanedTransactionMetadata decisions fed batch by batch."""

from __future__ import annotations

import pytest

from broker.log.cleaner_txn import (
    CleanedTransactions,
    LastRecord,
    aborted_from_markers,
    aborted_in,
    is_last_control_of_producer,
    last_records_of,
)
from broker.log.txn_index import AbortedTxn
from common.control_records import ControlType, marker_batch
from common.record_batch import RecordBatchHeader, parse_header
from common.records import build_batch

P1, P2 = 7, 8
ABORT, COMMIT = ControlType.ABORT, ControlType.COMMIT


def txn_batch(offset: int, pid: int, count: int = 1, *, epoch: int = 0,
              transactional: bool = True) -> RecordBatchHeader:
    return parse_header(build_batch([(b"k", b"v")] * count, base_offset=offset, producer_id=pid,
                                    producer_epoch=epoch, base_sequence=0,
                                    is_transactional=transactional))


def marker(offset: int, pid: int, *, commit: bool, epoch: int = 0) -> RecordBatchHeader:
    return parse_header(marker_batch(commit=commit, producer_id=pid, producer_epoch=epoch,
                                     coordinator_epoch=0, timestamp_ms=0, base_offset=offset))


def test_markers_give_aborted_transactions_with_their_lso_and_last_records() -> None:
    log = [
        (txn_batch(0, P1, 2), None),                      # P1 opens at 0
        (txn_batch(2, P2), None),                         # P2 opens at 2
        (marker(3, P1, commit=False), ABORT),         # P1 aborted: P2 still open -> LSO 2
        (marker(4, P2, commit=True, epoch=1), COMMIT),
        (marker(5, P1, commit=False), ABORT),         # an abort with no data: nothing to index
        (txn_batch(6, P1, transactional=False), None),    # idempotent data: no transaction
    ]
    assert aborted_from_markers(log) == [AbortedTxn(P1, 0, 3, 2)]
    assert last_records_of(h for h, _ in log) == {P1: LastRecord(6, 0), P2: LastRecord(2, 1)}


def test_aborted_in_is_kafkas_collect_aborted_transactions_range() -> None:
    aborted = [AbortedTxn(P1, 0, 3, 4), AbortedTxn(P2, 5, 9, 10), AbortedTxn(P1, 12, 12, 13)]
    assert aborted_in(aborted, 4, 12) == [AbortedTxn(P2, 5, 9, 10)]
    assert aborted_in(aborted, 3, 6) == aborted[:2]
    assert aborted_in(aborted, 13, 20) == []


@pytest.mark.parametrize(("last", "epoch", "expected"), [
    (None, 0, False),
    (LastRecord(None, 2), 2, True),    # no data left: its latest-epoch marker stays
    (LastRecord(None, 2), 1, False),   # an older epoch's marker may go
    (LastRecord(9, 2), 2, False),      # data left: its last data batch keeps the state
])
def test_last_control_batch_of_a_producer(last: LastRecord | None, epoch: int,
                                          expected: bool) -> None:
    records = {P1: last} if last is not None else {}
    assert is_last_control_of_producer(marker(3, P1, commit=True, epoch=epoch), records) is expected


def test_metadata_walk_discards_aborted_data_and_keeps_markers_with_data_before_them() -> None:
    txn = CleanedTransactions()
    txn.add_aborted([AbortedTxn(P1, 0, 3, 1)])
    assert txn.on_batch_read(txn_batch(0, P1)) is True     # aborted: discard
    assert txn.on_batch_read(txn_batch(1, P2)) is False    # committed later: keep
    assert txn.on_batch_read(txn_batch(2, P1, transactional=False)) is False
    assert txn.on_control_batch_read(marker(3, P1, commit=False), ABORT) is False
    assert txn.take_retained() == [AbortedTxn(P1, 0, 3, 1)]
    assert txn.on_control_batch_read(marker(4, P2, commit=True), COMMIT) is False
    # the next markers have no data read before them: free to go
    assert txn.on_control_batch_read(marker(5, P2, commit=True), COMMIT) is True
    assert txn.on_control_batch_read(marker(6, P1, commit=False), ABORT) is True
    assert txn.take_retained() == []


def test_an_aborted_transaction_seen_twice_is_one_and_an_empty_marker_may_go() -> None:
    txn = CleanedTransactions()
    entry = AbortedTxn(P1, 0, 5, 6)
    txn.add_aborted([entry])
    assert txn.on_batch_read(txn_batch(0, P1)) is True
    txn.add_aborted([entry])  # collected again for the next segment, as Kafka does
    assert txn.on_batch_read(txn_batch(4, P1)) is True
    assert txn.on_control_batch_read(marker(5, P1, commit=False), ABORT) is False
    assert txn.on_batch_read(txn_batch(6, P1)) is False  # P1's next transaction commits
    emptied = parse_header(build_batch([], base_offset=7, producer_id=P1, producer_epoch=0,
                                       is_transactional=True, is_control=True))
    assert txn.on_control_batch_read(emptied, None) is True
    assert txn.take_retained() == [entry]
