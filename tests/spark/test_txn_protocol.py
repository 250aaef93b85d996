"""spark/txn_protocol.py: the exactly-once sink's rules, without a cluster.

The commit log is fed hand-built logs (common.records.build_batch for the transactional
records, common.control_records.marker_batch for the markers), whole and one batch at a time.
"""

from __future__ import annotations

import json

import pytest

from common.control_records import marker_batch
from common.errors import ErrorCode
from common.records import build_batch
from spark.txn_protocol import (
    CommitLogError,
    CommitLogScan,
    EndTxnOutcome,
    commit_batch_id,
    commit_log_partition,
    commit_record,
    end_txn_outcome,
    producer_identity,
    should_skip,
    transactional_id,
)

TID = transactional_id("sink", "q1", 3)
OTHER = transactional_id("sink", "q1", 4)


def record(tid: str, batch_id: int, offset: int, producer_id: int) -> bytes:
    return build_batch([commit_record(tid, batch_id, 10)], base_offset=offset, producer_id=producer_id,
                       producer_epoch=0, base_sequence=0, is_transactional=True)


def end(offset: int, producer_id: int, *, commit: bool) -> bytes:
    return marker_batch(commit=commit, producer_id=producer_id, producer_epoch=0, coordinator_epoch=1,
                        timestamp_ms=1_700_000_000_000, base_offset=offset)


def test_transactional_ids_are_deterministic_and_distinct() -> None:
    assert TID == "sink-q1-3" == transactional_id("sink", "q1", 3)
    assert len({transactional_id("sink", q, p) for q in ("q1", "q2") for p in range(3)}) == 6
    with pytest.raises(ValueError, match="never negative"):
        transactional_id("sink", "q1", -1)
    with pytest.raises(ValueError, match="shorten option 'kafka.transactional.id'"):
        transactional_id("x" * 300, "q1", 0)
    # a stable hash (not Python's per-process one): the same partition in every task
    assert commit_log_partition(TID, 1) == 0
    assert commit_log_partition(TID, 7) == commit_log_partition("sink-q1-3", 7)
    with pytest.raises(ValueError):
        commit_log_partition(TID, 0)


def test_commit_records_round_trip_and_reject_strangers() -> None:
    key, value = commit_record(TID, 42, 10)
    assert key == TID.encode() and commit_batch_id(value) == 42
    assert json.loads(value) == {"version": 1, "batchId": 42, "records": 10}
    for bad in (None, b"", b"not json", b"[]", b'{"batchId": -1}', b'{"batchId": "3"}', b'{"batchId": true}'):
        with pytest.raises(CommitLogError):
            commit_batch_id(bad)


# (case, log as batches from offset 0, what the scan says for TID)
SCAN_CASES = [
    ("nothing of ours", [record(OTHER, 5, 0, 9), end(1, 9, commit=True)], None),
    ("committed", [record(TID, 5, 0, 7), end(1, 7, commit=True)], 5),
    ("aborted: the batch was not written", [record(TID, 5, 0, 7), end(1, 7, commit=False)], None),
    ("committed, then the replay's transaction aborted: the commit stands",
     [record(TID, 5, 0, 7), end(1, 7, commit=True), record(TID, 6, 2, 7), end(3, 7, commit=False)], 5),
    ("no marker yet: pending is not committed",
     [record(TID, 5, 0, 7), end(1, 7, commit=True), record(TID, 6, 2, 7)], 5),
    # The case a read_committed read gets wrong: another task's transaction, open and older
    # than ours, holds the LSO below our committed record.
    ("another producer's open transaction before ours does not hide it",
     [record(OTHER, 6, 0, 9), record(TID, 6, 1, 7), end(2, 7, commit=True)], 6),
    ("a newer producer id for the same transactional id (epoch exhausted)",
     [record(TID, 5, 0, 7), end(1, 7, commit=True), record(TID, 6, 2, 8), end(3, 8, commit=True)], 6),
    ("a marker of another producer does not end ours",
     [record(TID, 5, 0, 7), end(1, 9, commit=True)], None),
]


@pytest.mark.parametrize(("log", "expected"), [c[1:] for c in SCAN_CASES], ids=[c[0] for c in SCAN_CASES])
def test_the_commit_log_scan(log: list[bytes], expected: int | None) -> None:
    whole = CommitLogScan(TID, 0)
    assert whole.feed(b"".join(log)) == len(log)
    assert whole.last_committed == expected
    one_by_one = CommitLogScan(TID, 0)
    for batch in log:  # what a fetch of one batch per answer feeds
        one_by_one.feed(batch)
    assert (one_by_one.last_committed, one_by_one.next_offset) == (expected, len(log))


def test_the_scan_ignores_what_lies_before_its_start_and_repeats() -> None:
    log = b"".join([record(TID, 5, 0, 7), end(1, 7, commit=True), record(TID, 6, 2, 7), end(3, 7, commit=True)])
    late = CommitLogScan(TID, 2)
    assert late.feed(log) == 4 and late.last_committed == 6
    # a window starting between a record and its marker does not invent a commit
    cut = CommitLogScan(TID, 1)
    cut.feed(log[:len(record(TID, 5, 0, 7)) + len(end(1, 7, commit=True))])
    assert cut.last_committed is None
    # an answer cut inside its last batch (Fetch's byte limit): the cut batch waits for the next fetch
    cut_answer = CommitLogScan(TID, 0)
    assert cut_answer.feed(log[:-5]) == 3 and cut_answer.last_committed == 5
    assert cut_answer.feed(log[len(log) - len(end(3, 7, commit=True)):]) == 4 and cut_answer.last_committed == 6
    # an answer repeating batches already fed (Fetch returns whole batches) changes nothing
    again = CommitLogScan(TID, 0)
    again.feed(log)
    assert again.feed(log) == 4 and again.last_committed == 6


@pytest.mark.parametrize(("last", "batch_id", "skip"), [
    (None, 0, False), (None, 9, False), (4, 5, False), (5, 5, True), (6, 5, True),
])
def test_a_replayed_batch_is_skipped(last: int | None, batch_id: int, skip: bool) -> None:
    assert should_skip(last, batch_id) is skip


@pytest.mark.parametrize(("stats", "identity"), [
    ('{"eos": {"producer_id": 4001, "producer_epoch": 2, "txn_state": "InTransaction"}}', (4001, 2)),
    ('{"eos": {"producer_id": -1, "producer_epoch": -1}}', None),
    ('{"name": "rdkafka#producer-1"}', None),
    ("not json", None),
    ('{"eos": []}', None),
])
def test_producer_identity_from_librdkafka_statistics(stats: str, identity: tuple[int, int] | None) -> None:
    assert producer_identity(stats) == identity


@pytest.mark.parametrize(("code", "outcome"), [
    (ErrorCode.NONE, EndTxnOutcome.DONE),
    (ErrorCode.CONCURRENT_TRANSACTIONS, EndTxnOutcome.RETRY),
    (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, EndTxnOutcome.RETRY),
    (ErrorCode.NOT_COORDINATOR, EndTxnOutcome.FIND_COORDINATOR),
    (ErrorCode.COORDINATOR_NOT_AVAILABLE, EndTxnOutcome.FIND_COORDINATOR),
    (ErrorCode.INVALID_PRODUCER_EPOCH, EndTxnOutcome.LOST),
    (ErrorCode.PRODUCER_FENCED, EndTxnOutcome.LOST),
    (ErrorCode.INVALID_TXN_STATE, EndTxnOutcome.LOST),
])
def test_end_txn_answers(code: ErrorCode, outcome: EndTxnOutcome) -> None:
    assert end_txn_outcome(code) is outcome


@pytest.mark.parametrize("code", [ErrorCode.UNKNOWN_SERVER_ERROR, 9999])
def test_end_txn_answers_that_stop_the_commit(code: int) -> None:
    with pytest.raises(ValueError, match="EndTxn answered"):
        end_txn_outcome(code)
