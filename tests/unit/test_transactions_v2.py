"""transactions/rules.py, transactions v2 (KIP-890 part 2, Kafka 4's endTransaction): every
EndTxn v5 bumps the producer epoch, an overflow moves to the next producer id, a retried EndTxn
is answered as done while a late one from an earlier transaction is fenced; v1 is untouched."""

from __future__ import annotations

from dataclasses import replace

import pytest

from common.errors import ErrorCode
from common.protocol import api_versions, messages
from transactions import rules
from transactions.image import TransactionsImage
from transactions.records import FLEXIBLE_VALUE_VERSION, VALUE_VERSION, TransactionMetadata, encode_record
from transactions.rules import EXHAUSTED_EPOCH, MAX_PRODUCER_EPOCH, TV_2, Decision
from transactions.state import TransactionState

E = ErrorCode
S = TransactionState
NOW = 1_000_000
PARTS = frozenset({("a", 0), ("a", 1)})
BASE = TransactionMetadata("tx", 100, 5, 60_000, S.EMPTY, frozenset(), NOW - 10, -1)
ONGOING = replace(BASE, state=S.ONGOING, partitions=PARTS, start_ms=NOW - 100, client_transaction_version=TV_2)


def image(*ms: TransactionMetadata) -> TransactionsImage:
    out = TransactionsImage.EMPTY
    for m in ms:
        out = out.with_metadata(m.transactional_id, m)
    return out


def end(img: TransactionsImage, epoch: int, commit: bool = True, *, pid: int = 100,
        new_id: int | None = None) -> Decision:
    return rules.end_txn(img, "tx", pid, epoch, commit, now_ms=NOW, client_version=TV_2, new_producer_id=new_id)


def after(img: TransactionsImage, d: Decision) -> TransactionsImage:
    return rules.image_after(img, d)


def completed(img: TransactionsImage) -> TransactionsImage:
    m = img.get("tx")
    assert m is not None
    d = rules.complete(img, "tx", m.producer_id, m.producer_epoch, now_ms=NOW)
    assert d.error is E.NONE, d
    return after(img, d)


@pytest.mark.parametrize("commit", [True, False])
def test_every_end_bumps_the_epoch_and_the_markers_carry_it(commit: bool) -> None:
    d = end(image(ONGOING), 5, commit)
    assert d.error is E.NONE and d.markers and d.write is not None
    assert d.write.state is (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT)
    assert (d.write.producer_id, d.write.producer_epoch, d.write.last_producer_epoch) == (100, 6, 5)
    assert d.write.partitions == PARTS and d.write.client_transaction_version == TV_2
    assert rules.end_txn_answer(d) == (100, 6)
    done = completed(after(image(ONGOING), d)).get("tx")
    assert done is not None and (done.state, done.producer_epoch) == (
        S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT, 6)


def test_a_v1_client_keeps_its_epoch() -> None:
    d = rules.end_txn(image(replace(ONGOING, client_transaction_version=0)), "tx", 100, 5, True, now_ms=NOW)
    assert d.write is not None and d.write.producer_epoch == 5 and d.write.client_transaction_version == 0
    assert encode_record(d.write)[1][:2] == VALUE_VERSION.to_bytes(2, "big")  # type: ignore[index]


def test_a_tv2_record_is_flexible_and_replays_whole() -> None:
    d = end(image(replace(ONGOING, producer_epoch=EXHAUSTED_EPOCH)), EXHAUSTED_EPOCH, new_id=200)
    assert d.write is not None
    value = encode_record(d.write)[1]
    assert value is not None and value[:2] == FLEXIBLE_VALUE_VERSION.to_bytes(2, "big")
    replayed = TransactionsImage.EMPTY.replay(*encode_record(d.write)).get("tx")
    assert replayed == replace(d.write, last_producer_epoch=-1)


def test_a_retried_end_is_answered_as_done_and_a_late_one_is_fenced() -> None:
    img = after(image(ONGOING), end(image(ONGOING), 5, True))  # PrepareCommit at epoch 6
    # while the markers go out every EndTxn waits, before its epoch is checked (KAFKA-18464): the
    # retry, and the client's next (empty) abort at the bumped epoch, which must not be fenced
    for epoch, commit in ((5, True), (5, False), (6, False), (4, True)):
        assert end(img, epoch, commit).error is E.CONCURRENT_TRANSACTIONS
    assert end(img, 5, pid=101).error is E.INVALID_PRODUCER_ID_MAPPING
    img = completed(img)  # CompleteCommit at epoch 6
    retried = end(img, 5, True)
    assert retried.error is E.NONE and retried.write is None and rules.end_txn_answer(retried) == (100, 6)
    assert end(img, 5, False).error is E.INVALID_TXN_STATE  # a retry must repeat the same result
    assert end(img, 4, True).error is E.PRODUCER_FENCED
    # the next transaction starts at epoch 6 (the leader's verification adds a partition)
    add = rules.add_partitions(img, "tx", 100, 6, [("a", 0)], now_ms=NOW, client_version=TV_2)
    img = after(img, add)
    m = img.get("tx")
    assert m is not None and (m.state, m.producer_epoch, m.partitions) == (S.ONGOING, 6, frozenset({("a", 0)}))
    # the first transaction's EndTxn arriving late: fenced, the open transaction untouched
    late = end(img, 5, True)
    assert late.error is E.PRODUCER_FENCED and late.write is None
    assert end(img, 7, True).error is E.PRODUCER_FENCED
    assert end(img, 6, True, pid=101).error is E.INVALID_PRODUCER_ID_MAPPING


def test_v1_answers_the_same_late_end_txn_with_a_commit() -> None:
    """Why transactions v2 exists: without the bump the late EndTxn ends the next transaction."""
    v1 = replace(ONGOING, client_transaction_version=0)
    img = completed(rules.image_after(image(v1), rules.end_txn(image(v1), "tx", 100, 5, True, now_ms=NOW)))
    img = after(img, rules.add_partitions(img, "tx", 100, 5, [("a", 0)], now_ms=NOW))
    late = rules.end_txn(img, "tx", 100, 5, True, now_ms=NOW)
    assert late.error is E.NONE and late.write is not None and late.write.state is S.PREPARE_COMMIT


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_an_abort_without_partitions_is_allowed(state: TransactionState) -> None:
    m = replace(BASE, state=state, client_transaction_version=TV_2)
    d = end(image(m), 5, False)
    assert d.error is E.NONE and d.write is not None
    assert (d.write.state, d.write.producer_epoch, d.write.partitions, d.write.start_ms) == (
        S.PREPARE_ABORT, 6, frozenset(), NOW)
    commit = end(image(m), 5, True)
    assert commit.error is E.INVALID_TXN_STATE and commit.write is None


def test_an_exhausted_epoch_moves_to_the_next_producer_id() -> None:
    m = replace(ONGOING, producer_epoch=EXHAUSTED_EPOCH)
    asked = end(image(m), EXHAUSTED_EPOCH)
    assert asked.needs_producer_id and asked.write is None
    d = end(image(m), EXHAUSTED_EPOCH, new_id=200)
    assert d.write is not None
    assert (d.write.producer_id, d.write.producer_epoch, d.write.next_producer_id) == (100, MAX_PRODUCER_EPOCH, 200)
    assert rules.end_txn_answer(d) == (200, 0)  # the client never sees Short.MaxValue
    img = completed(after(image(m), d))
    done = img.get("tx")
    assert done is not None
    assert (done.producer_id, done.producer_epoch, done.previous_producer_id, done.next_producer_id) == (
        200, 0, 100, -1)
    retried = end(img, EXHAUSTED_EPOCH, pid=100)  # the client's retry with its old id and epoch
    assert retried.error is E.NONE and retried.write is None and rules.end_txn_answer(retried) == (200, 0)
    assert end(img, EXHAUSTED_EPOCH - 1, pid=100).error is E.INVALID_PRODUCER_ID_MAPPING
    # the new producer id's first transaction
    img = after(img, rules.add_partitions(img, "tx", 200, 0, [("a", 1)], now_ms=NOW, client_version=TV_2))
    d = end(img, 0, True, pid=200)
    assert d.write is not None and (d.write.producer_id, d.write.producer_epoch) == (200, 1)


def test_add_partitions_records_the_client_version() -> None:
    v1 = rules.add_partitions(image(BASE), "tx", 100, 5, [("a", 0)], now_ms=NOW)
    v2 = rules.add_partitions(image(BASE), "tx", 100, 5, [("a", 0)], now_ms=NOW, client_version=TV_2)
    assert v1.write is not None and v1.write.client_transaction_version == 0
    assert v2.write is not None and v2.write.client_transaction_version == TV_2
    assert rules.add_partitions(image(BASE), "tx", 100, 4, [("a", 0)], now_ms=NOW,
                                client_version=TV_2).error is E.PRODUCER_FENCED


def test_api_versions_finalizes_transaction_version_2() -> None:
    """A Java client enables transactions v2 when ApiVersions (v3+) finalizes transaction.version >= 2."""
    answer = api_versions.response(3, E.NONE, (), api_versions.BROKER_FEATURES)
    raw = messages.encode(answer)
    decoded = messages.decode(type(answer), bytes(raw))
    assert ("transaction.version", 0, 2) in [(f.name, f.min_version, f.max_version)
                                             for f in decoded.supported_features]
    assert ("transaction.version", 2, 2) in [(f.name, f.min_version_level, f.max_version_level)
                                             for f in decoded.finalized_features]
    assert decoded.finalized_features_epoch >= 0  # -1 would mean none finalized
    assert not hasattr(api_versions.response(2, E.NONE, (), api_versions.BROKER_FEATURES), "finalized_features")


def test_a_timed_out_tv2_transaction_is_aborted_with_one_bump() -> None:
    """KAFKA-19367: with TV2 the fence's bump is the abort's (one bump, not two); the client's own
    EndTxn(abort) arriving afterwards is its retry (KAFKA-20090), its commit is refused."""
    late = replace(ONGOING, start_ms=NOW - 60_001)
    d = rules.abort_timed_out(image(late), "tx", 100, now_ms=NOW)
    assert d.write is not None and (d.write.state, d.write.producer_epoch) == (S.PREPARE_ABORT, 6)
    img = completed(after(image(late), d))
    assert end(img, 5, True).error is E.INVALID_TXN_STATE
    aborted = end(img, 5, False)
    assert aborted.error is E.NONE and aborted.write is None
