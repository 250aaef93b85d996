"""transactions/rules.py: the transaction coordinator's rules as tables of (image, request,
expected error and metadata written), in Kafka's order of checks (TransactionCoordinator 3.9,
transactions v1). A rule writes at most one record; the image after it is its replay."""

from __future__ import annotations

from dataclasses import replace

import pytest

from common.errors import ErrorCode
from transactions import rules
from transactions.image import TransactionsImage
from transactions.records import TransactionMetadata, encode_record
from transactions.rules import EXHAUSTED_EPOCH, MAX_PRODUCER_EPOCH, Decision, TxnConfig
from transactions.state import TRANSITIONS, TransactionState

E = ErrorCode
S = TransactionState
NOW = 1_000_000
CFG = TxnConfig(max_timeout_ms=900_000, id_expiration_ms=10_000)
BASE = TransactionMetadata("tx", 100, 5, 60_000, S.EMPTY, frozenset(), NOW - 10, -1)
PARTS = frozenset({("a", 0), ("a", 1)})
ONGOING = replace(BASE, state=S.ONGOING, partitions=PARTS, start_ms=NOW - 100)


def image(*ms: TransactionMetadata) -> TransactionsImage:
    out = TransactionsImage.EMPTY
    for m in ms:
        out = out.with_metadata(m.transactional_id, m)
    return out


def replayed(before: TransactionsImage, d: Decision) -> TransactionsImage:
    """What loading the partition gives: the records replayed (the memory-only last epoch aside)."""
    assert d.write is not None
    return before.replay(*encode_record(d.write))


def init(img: TransactionsImage, expected: tuple[int, int] | None = None, *, new_id: int | None = None,
         timeout: int = 60_000, tid: str = "tx") -> Decision:
    return rules.init_producer_id(img, tid, timeout, expected, new_producer_id=new_id, config=CFG, now_ms=NOW)


def test_a_new_transactional_id_needs_a_producer_id_then_gets_epoch_0() -> None:
    assert init(image()).needs_producer_id
    d = init(image(), new_id=7)
    assert d.error is E.NONE and d.before is None and d.write is not None
    assert (d.write.producer_id, d.write.producer_epoch, d.write.state) == (7, 0, S.EMPTY)
    assert replayed(image(), d).get("tx") == replace(d.write, last_producer_epoch=-1)


INIT_CASES = [  # (state of "tx", expected (id, epoch), error, (producer id, epoch, last epoch) written)
    pytest.param(BASE, None, E.NONE, (100, 6, -1), id="bump"),
    pytest.param(replace(BASE, state=S.COMPLETE_COMMIT), None, E.NONE, (100, 6, -1), id="bump-after-commit"),
    pytest.param(BASE, (100, 5), E.NONE, (100, 6, 5), id="kip360-bump"),
    pytest.param(replace(BASE, last_producer_epoch=4), (100, 4), E.NONE, (100, 5, 4), id="kip360-retry"),
    pytest.param(BASE, (100, 3), E.PRODUCER_FENCED, None, id="older-epoch-fenced"),
    pytest.param(BASE, (99, 5), E.PRODUCER_FENCED, None, id="other-producer-fenced"),
    pytest.param(replace(BASE, state=S.PREPARE_COMMIT, partitions=PARTS), None, E.CONCURRENT_TRANSACTIONS, None,
                 id="markers-pending"),
    pytest.param(replace(BASE, state=S.PREPARE_ABORT, partitions=PARTS), (100, 5), E.CONCURRENT_TRANSACTIONS,
                 None, id="abort-pending"),
]


@pytest.mark.parametrize(("before", "expected", "error", "written"), INIT_CASES)
def test_init_producer_id(before: TransactionMetadata, expected: tuple[int, int] | None, error: ErrorCode,
                          written: tuple[int, int, int] | None) -> None:
    d = init(image(before), expected)
    assert d.error is error, d.reason
    if written is None:
        assert d.write is None
    else:
        assert d.write is not None
        assert (d.write.producer_id, d.write.producer_epoch, d.write.last_producer_epoch) == written
        assert (d.write.state, d.write.partitions, d.write.start_ms) == (S.EMPTY, frozenset(), -1)


def test_init_fences_an_ongoing_transaction_by_aborting_it_with_a_bumped_epoch() -> None:
    d = init(image(ONGOING))
    assert d.error is E.CONCURRENT_TRANSACTIONS and d.via is S.PREPARE_EPOCH_FENCE and d.markers
    assert d.write == replace(ONGOING, producer_epoch=6, state=S.PREPARE_ABORT, last_update_ms=NOW)
    # the retry waits for the markers, then bumps once more
    aborted = replace(d.write, state=S.COMPLETE_ABORT, partitions=frozenset())
    again = init(image(aborted))
    assert again.error is E.NONE and again.write is not None and again.write.producer_epoch == 7


def test_an_exhausted_epoch_gets_a_new_producer_id() -> None:
    tired = replace(BASE, producer_epoch=EXHAUSTED_EPOCH)
    assert init(image(tired)).needs_producer_id
    d = init(image(tired), (100, EXHAUSTED_EPOCH), new_id=200)
    assert d.write is not None
    assert (d.write.producer_id, d.write.producer_epoch, d.write.previous_producer_id) == (200, 0, 100)
    # the same client retrying (it never saw the answer) gets the same id and epoch (KIP-360)
    retry = init(image(d.write), (100, EXHAUSTED_EPOCH))
    assert retry.error is E.NONE and retry.write is not None
    assert (retry.write.producer_id, retry.write.producer_epoch) == (200, 0)
    # without its epoch the rotation is not recorded: an old producer's retry is fenced, as Kafka's
    blind = init(image(tired), new_id=200)
    assert blind.write is not None
    assert init(image(blind.write), (100, EXHAUSTED_EPOCH)).error is E.PRODUCER_FENCED


@pytest.mark.parametrize(("tid", "timeout", "error"), [
    ("", 60_000, E.INVALID_REQUEST), ("tx", 900_001, E.INVALID_TRANSACTION_TIMEOUT),
    ("tx", 0, E.INVALID_TRANSACTION_TIMEOUT), ("tx", 900_000, E.NONE)])
def test_init_refuses_bad_input_without_writing(tid: str, timeout: int, error: ErrorCode) -> None:
    d = init(image(BASE), tid=tid, timeout=timeout)
    assert d.error is error
    assert (d.write is None) == (error is not E.NONE)


ADD_CASES = [  # (state, producer id, epoch, error, state written)
    pytest.param(BASE, 100, 5, E.NONE, S.ONGOING, id="begin"),
    pytest.param(replace(BASE, state=S.COMPLETE_ABORT), 100, 5, E.NONE, S.ONGOING, id="begin-after-abort"),
    pytest.param(ONGOING, 100, 5, E.NONE, S.ONGOING, id="more-partitions"),
    pytest.param(ONGOING, 100, 4, E.PRODUCER_FENCED, None, id="fenced"),
    pytest.param(ONGOING, 101, 5, E.INVALID_PRODUCER_ID_MAPPING, None, id="wrong-producer"),
    pytest.param(replace(ONGOING, state=S.PREPARE_COMMIT), 100, 5, E.CONCURRENT_TRANSACTIONS, None, id="prepared"),
]


@pytest.mark.parametrize(("before", "pid", "epoch", "error", "state"), ADD_CASES)
def test_add_partitions(before: TransactionMetadata, pid: int, epoch: int, error: ErrorCode,
                        state: TransactionState | None) -> None:
    d = rules.add_partitions(image(before), "tx", pid, epoch, [("b", 0)], now_ms=NOW)
    assert d.error is error
    if state is None:
        assert d.write is None
        return
    assert d.write is not None and d.write.state is state
    assert d.write.partitions == before.partitions | {("b", 0)}
    assert d.write.start_ms == (before.start_ms if before.state is S.ONGOING else NOW)


def test_adding_partitions_already_in_the_transaction_writes_nothing() -> None:
    d = rules.add_partitions(image(ONGOING), "tx", 100, 5, [("a", 0)], now_ms=NOW)
    assert (d.error, d.write) == (E.NONE, None)
    assert rules.add_partitions(image(), "tx", 100, 5, [("a", 0)], now_ms=NOW).error is E.INVALID_PRODUCER_ID_MAPPING
    assert rules.add_partitions(image(), "", 100, 5, [("a", 0)], now_ms=NOW).error is E.INVALID_REQUEST


def test_verify_only_answers_per_partition() -> None:
    img = image(ONGOING)
    assert rules.verify_partitions(img, "tx", 100, 5, [("a", 0), ("b", 0)]) == {
        ("a", 0): E.NONE, ("b", 0): E.INVALID_TXN_STATE}
    assert rules.verify_partitions(img, "tx", 100, 4, [("a", 0)]) == {("a", 0): E.PRODUCER_FENCED}
    assert rules.verify_partitions(image(BASE), "tx", 100, 5, [("a", 0)]) == {("a", 0): E.INVALID_TXN_STATE}


END_CASES = [  # (state, commit, error, state written)
    pytest.param(S.ONGOING, True, E.NONE, S.PREPARE_COMMIT, id="commit"),
    pytest.param(S.ONGOING, False, E.NONE, S.PREPARE_ABORT, id="abort"),
    pytest.param(S.COMPLETE_COMMIT, True, E.NONE, None, id="retried-commit"),
    pytest.param(S.COMPLETE_COMMIT, False, E.INVALID_TXN_STATE, None, id="abort-after-commit"),
    pytest.param(S.COMPLETE_ABORT, False, E.NONE, None, id="retried-abort"),
    pytest.param(S.COMPLETE_ABORT, True, E.INVALID_TXN_STATE, None, id="commit-after-abort"),
    pytest.param(S.PREPARE_COMMIT, True, E.CONCURRENT_TRANSACTIONS, None, id="commit-pending"),
    pytest.param(S.PREPARE_COMMIT, False, E.INVALID_TXN_STATE, None, id="abort-while-committing"),
    pytest.param(S.PREPARE_ABORT, False, E.CONCURRENT_TRANSACTIONS, None, id="abort-pending"),
    pytest.param(S.PREPARE_ABORT, True, E.INVALID_TXN_STATE, None, id="commit-while-aborting"),
    pytest.param(S.EMPTY, True, E.INVALID_TXN_STATE, None, id="nothing-to-commit"),
]


@pytest.mark.parametrize(("state", "commit", "error", "written"), END_CASES)
def test_end_txn(state: TransactionState, commit: bool, error: ErrorCode, written: TransactionState | None) -> None:
    before = replace(ONGOING, state=state, partitions=frozenset() if state is S.EMPTY else PARTS)
    d = rules.end_txn(image(before), "tx", 100, 5, commit, now_ms=NOW)
    assert d.error is error
    assert (None if d.write is None else d.write.state) is written
    if written is not None:
        assert d.markers and d.write is not None and d.write.partitions == PARTS


def test_end_txn_checks_the_producer_first() -> None:
    assert rules.end_txn(image(ONGOING), "tx", 100, 6, True, now_ms=NOW).error is E.PRODUCER_FENCED
    assert rules.end_txn(image(ONGOING), "tx", 1, 5, True, now_ms=NOW).error is E.INVALID_PRODUCER_ID_MAPPING
    assert rules.end_txn(image(), "tx", 100, 5, True, now_ms=NOW).error is E.INVALID_PRODUCER_ID_MAPPING


@pytest.mark.parametrize(("prepared", "done"), [(S.PREPARE_COMMIT, S.COMPLETE_COMMIT),
                                                (S.PREPARE_ABORT, S.COMPLETE_ABORT)])
def test_markers_written_complete_the_transaction(prepared: TransactionState, done: TransactionState) -> None:
    before = replace(ONGOING, state=prepared)
    d = rules.complete(image(before), "tx", 100, 5, now_ms=NOW)
    assert d.write == replace(before, state=done, partitions=frozenset(), last_update_ms=NOW)
    assert rules.complete(image(before), "tx", 100, 6, now_ms=NOW).error is E.PRODUCER_FENCED
    assert rules.complete(image(ONGOING), "tx", 100, 5, now_ms=NOW).error is E.INVALID_TXN_STATE


def test_timeout_fences_and_aborts() -> None:
    late = replace(ONGOING, start_ms=NOW - 60_001)
    assert rules.timed_out(image(late, replace(ONGOING, transactional_id="fresh")), NOW) == [late]
    d = rules.abort_timed_out(image(late), "tx", 100, now_ms=NOW)
    assert d.via is S.PREPARE_EPOCH_FENCE and d.write is not None
    assert (d.write.state, d.write.producer_epoch) == (S.PREPARE_ABORT, 6)
    assert rules.abort_timed_out(image(ONGOING), "tx", 100, now_ms=NOW).write is None  # not yet
    assert rules.abort_timed_out(image(late), "tx", 99, now_ms=NOW).write is None  # another producer now
    at_max = replace(late, producer_epoch=MAX_PRODUCER_EPOCH)
    written = rules.abort_timed_out(image(at_max), "tx", 100, now_ms=NOW).write
    assert written is not None and written.producer_epoch == MAX_PRODUCER_EPOCH


@pytest.mark.parametrize("state", list(S))
def test_expiration(state: TransactionState) -> None:
    if state is S.DEAD:
        return  # never held in an image
    old = replace(ONGOING, state=state, partitions=frozenset() if state is S.EMPTY else PARTS,
                  last_update_ms=NOW - CFG.id_expiration_ms)
    d = rules.expire(image(old), "tx", now_ms=NOW, config=CFG)
    expirable = S.DEAD in TRANSITIONS[state]
    assert (d.write is not None) == expirable
    assert (rules.expired(image(old), NOW, CFG) == [old]) == expirable
    if d.write is not None:
        assert encode_record(d.write)[1] is None and rules.image_after(image(old), d).get("tx") is None
    recent = replace(old, last_update_ms=NOW - CFG.id_expiration_ms + 1)
    assert rules.expire(image(recent), "tx", now_ms=NOW, config=CFG).write is None


def test_list_filters() -> None:
    a = replace(ONGOING, transactional_id="a", start_ms=NOW - 5_000)
    b = replace(BASE, transactional_id="b", producer_id=200)
    img = image(a, b)

    def names(**kw: object) -> list[str]:
        args: dict[str, object] = {"states": frozenset(), "producer_ids": frozenset(), "min_duration_ms": -1}
        args.update(kw)
        return [m.transactional_id for m in rules.list_transactions(img, now_ms=NOW, **args)]  # type: ignore[arg-type]

    assert names() == ["a", "b"]
    assert names(states=frozenset({"Ongoing"})) == ["a"]
    assert names(producer_ids=frozenset({200})) == ["b"]
    assert names(min_duration_ms=4_999, states=frozenset({"Ongoing"})) == ["a"]
    assert names(min_duration_ms=5_000, states=frozenset({"Ongoing"})) == []


@pytest.mark.parametrize("case", ["init", "add", "end", "complete", "abort", "expire"])
def test_every_write_replays_to_the_same_image(case: str) -> None:
    """Only replay changes state: the image after a decision is its record replayed, except the
    memory-only last producer epoch."""
    late = replace(ONGOING, start_ms=NOW - 60_001)
    img = image(BASE if case in ("init", "add") else late)
    d = {
        "init": lambda: init(img),
        "add": lambda: rules.add_partitions(img, "tx", 100, 5, [("z", 1)], now_ms=NOW),
        "end": lambda: rules.end_txn(img, "tx", 100, 5, True, now_ms=NOW),
        "complete": lambda: rules.complete(image(replace(late, state=S.PREPARE_ABORT)), "tx", 100, 5, now_ms=NOW),
        "abort": lambda: rules.abort_timed_out(img, "tx", 100, now_ms=NOW),
        "expire": lambda: rules.expire(image(replace(BASE, last_update_ms=0)), "tx", now_ms=NOW, config=CFG),
    }[case]()
    assert d.write is not None
    after = rules.image_after(img, d)
    again = img.replay(*encode_record(d.write))
    strip = {k: replace(v, last_producer_epoch=-1) for k, v in after.by_id.items()}
    assert strip == dict(again.by_id)
