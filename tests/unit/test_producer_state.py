"""Tests for broker/producer_state.py: Kafka's idempotent-producer checks, header by header."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.producer_state import (
    INT32_MAX,
    INVALID_PRODUCER_EPOCH,
    INVALID_RECORD,
    NUM_BATCHES_TO_RETAIN,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    AppendCheck,
    AppendOutcome,
    BatchMetadata,
    ProducerStateEntry,
    ProducerStateManager,
    in_sequence,
)
from common.record_batch import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    RecordBatchHeader,
    parse_header,
)
from common.records import build_batch

APPEND, DUPLICATE, REJECT = AppendOutcome.APPEND, AppendOutcome.DUPLICATE, AppendOutcome.REJECT
PID = 1000
TS = 1_700_000_000_000


def hdr(
    seq: int,
    count: int = 2,
    *,
    epoch: int = 0,
    pid: int = PID,
    offset: int = 0,
    timestamp: int = TS,
    control: bool = False,
    transactional: bool = False,
) -> RecordBatchHeader:
    """The header of a real v2 batch, built and parsed by the record-batch codec."""
    batch = build_batch(
        [(None, b"v")] * count,
        base_offset=offset,
        base_timestamp=timestamp,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_control=control,
        is_transactional=transactional,
    )
    return parse_header(batch)


def manager_after(*headers: RecordBatchHeader) -> ProducerStateManager:
    """A manager that appended `headers` back to back from offset 0."""
    manager, leo = ProducerStateManager(), 0
    for h in headers:
        manager.update(h, leo, leo + h.last_offset_delta)
        leo += h.last_offset_delta + 1
    return manager


# Seven 2-record batches of epoch 0: seq 0-1 @ offsets 0-1, ..., seq 12-13 @ 12-13.
# The last five (seq 4..13) are retained.
SEVEN = tuple(hdr(2 * i) for i in range(7))
# Epoch 3, ending exactly at Int.MAX: seq MAX-3..MAX-2 @ 0-1, MAX-1..MAX @ 2-3.
AT_MAX = (hdr(INT32_MAX - 3, epoch=3), hdr(INT32_MAX - 1, epoch=3))
# Epoch 3, one batch straddling the wrap: seq MAX-1, MAX, 0 @ offsets 0-2.
ACROSS_MAX = (hdr(INT32_MAX - 1, 3, epoch=3),)
# Epoch 0 data, then an epoch-1 transaction marker: epoch known, no retained batch.
MARKER_BUMP = (hdr(0), hdr(0, 1, epoch=1, control=True))


def ok() -> tuple:
    return (APPEND, 0, None)


def dup(first: int, last: int) -> tuple:
    return (DUPLICATE, 0, (first, last))


def err(code: int) -> tuple:
    return (REJECT, code, None)


CHECK_CASES = [
    # (id, history, incoming batch, (outcome, error code, duplicate offsets))
    ("non-idempotent, empty", (), hdr(-1, pid=NO_PRODUCER_ID, epoch=NO_PRODUCER_EPOCH), ok()),
    ("non-idempotent, busy", SEVEN, hdr(-1, pid=NO_PRODUCER_ID, epoch=NO_PRODUCER_EPOCH), ok()),
    ("first batch at 0", (), hdr(0), ok()),
    ("unknown producer, non-zero seq (KIP-360)", (), hdr(42), ok()),
    ("unknown producer, new epoch", (), hdr(0, epoch=7), ok()),
    ("other producer unaffected", SEVEN, hdr(5, pid=PID + 1), ok()),
    ("consecutive", SEVEN, hdr(14), ok()),
    ("consecutive, one record", SEVEN, hdr(14, 1), ok()),
    ("duplicate of 5th newest", SEVEN, hdr(4), dup(4, 5)),
    ("duplicate of 4th newest", SEVEN, hdr(6), dup(6, 7)),
    ("duplicate of 3rd newest", SEVEN, hdr(8), dup(8, 9)),
    ("duplicate of 2nd newest", SEVEN, hdr(10), dup(10, 11)),
    ("duplicate of newest", SEVEN, hdr(12), dup(12, 13)),
    ("duplicate of 6th newest (not retained)", SEVEN, hdr(2), err(OUT_OF_ORDER_SEQUENCE_NUMBER)),
    ("duplicate of 7th newest (not retained)", SEVEN, hdr(0), err(OUT_OF_ORDER_SEQUENCE_NUMBER)),
    ("same first seq, shorter range", SEVEN, hdr(12, 1), err(OUT_OF_ORDER_SEQUENCE_NUMBER)),
    ("overlaps the newest", SEVEN, hdr(13), err(OUT_OF_ORDER_SEQUENCE_NUMBER)),
    ("gap of one", SEVEN, hdr(15), err(OUT_OF_ORDER_SEQUENCE_NUMBER)),
    ("far gap", SEVEN, hdr(1_000_000), err(OUT_OF_ORDER_SEQUENCE_NUMBER)),
    ("restart at 0, same epoch", SEVEN, hdr(0, 3), err(OUT_OF_ORDER_SEQUENCE_NUMBER)),
    ("epoch bump at 0", SEVEN, hdr(0, epoch=1), ok()),
    ("epoch jump at 0", SEVEN, hdr(0, epoch=9), ok()),
    ("epoch bump continuing seq", SEVEN, hdr(14, epoch=1), err(OUT_OF_ORDER_SEQUENCE_NUMBER)),
    ("epoch bump at 4, a retained range", SEVEN, hdr(4, epoch=1),
     err(OUT_OF_ORDER_SEQUENCE_NUMBER)),
    ("fenced: older epoch, next seq", AT_MAX, hdr(0, epoch=2), err(INVALID_PRODUCER_EPOCH)),
    ("fenced: older epoch, retained range", AT_MAX, hdr(INT32_MAX - 1, epoch=2),
     err(INVALID_PRODUCER_EPOCH)),
    ("wrap: Int.MAX then 0", AT_MAX, hdr(0, epoch=3), ok()),
    ("wrap: Int.MAX then 1", AT_MAX, hdr(1, epoch=3), err(OUT_OF_ORDER_SEQUENCE_NUMBER)),
    ("wrap: duplicate ending at Int.MAX", AT_MAX, hdr(INT32_MAX - 1, epoch=3), dup(2, 3)),
    ("wrap: after a straddling batch", ACROSS_MAX, hdr(1, epoch=3), ok()),
    ("wrap: duplicate of a straddling batch", ACROSS_MAX, hdr(INT32_MAX - 1, 3, epoch=3),
     dup(0, 2)),
    ("wrap: 0 after a straddling batch", ACROSS_MAX, hdr(0, epoch=3),
     err(OUT_OF_ORDER_SEQUENCE_NUMBER)),
    ("marker bumped epoch, seq 0", MARKER_BUMP, hdr(0, epoch=1), ok()),
    ("marker bumped epoch, seq 3", MARKER_BUMP, hdr(3, epoch=1), err(OUT_OF_ORDER_SEQUENCE_NUMBER)),
    ("marker bumped epoch, old epoch", MARKER_BUMP, hdr(2), err(INVALID_PRODUCER_EPOCH)),
    ("idempotent batch without sequence", SEVEN, hdr(-1), err(INVALID_RECORD)),
    ("control batch from a client", SEVEN, hdr(0, 1, epoch=1, control=True), err(INVALID_RECORD)),
    ("transactional batch, same rules", SEVEN, hdr(14, transactional=True), ok()),
]


@pytest.mark.parametrize(
    "history, incoming, expected", [c[1:] for c in CHECK_CASES], ids=[c[0] for c in CHECK_CASES]
)
def test_check(history, incoming, expected):
    manager = manager_after(*history)
    before = dict(manager.entries)
    result = manager.check(incoming)
    outcome, code, offsets = expected
    assert (result.outcome, result.error_code) == (outcome, code), result.message
    got = None if result.duplicate is None else (
        result.duplicate.first_offset, result.duplicate.last_offset
    )
    assert got == offsets
    assert (result.message != "") == (outcome is REJECT)
    assert dict(manager.entries) == before  # check never changes state


@pytest.mark.parametrize(
    "last_seq, next_seq, expected",
    [(-1, 0, True), (0, 1, True), (5, 7, False), (5, 5, False),
     (INT32_MAX, 0, True), (INT32_MAX - 1, INT32_MAX, True), (INT32_MAX, 1, False)],
)
def test_in_sequence(last_seq, next_seq, expected):
    assert in_sequence(last_seq, next_seq) is expected


def test_duplicate_carries_original_timestamp():
    manager = manager_after(hdr(0, timestamp=TS + 5))
    result = manager.check(hdr(0, timestamp=TS + 99))
    assert result.duplicate == BatchMetadata(0, 1, 0, 1, TS + 5)


# ---- update ---------------------------------------------------------------------------

def _ranges(entry: ProducerStateEntry) -> list[tuple[int, int, int, int]]:
    return [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in entry.batches]


UPDATE_CASES = [
    # (id, history, (epoch, retained (first_seq, last_seq, first_offset, last_offset)))
    ("one batch", (hdr(0),), (0, [(0, 1, 0, 1)])),
    ("retains the last five", SEVEN,
     (0, [(4, 5, 4, 5), (6, 7, 6, 7), (8, 9, 8, 9), (10, 11, 10, 11), (12, 13, 12, 13)])),
    ("epoch bump forgets old batches", (*SEVEN, hdr(0, 1, epoch=1)), (1, [(0, 0, 14, 14)])),
    ("marker bump forgets old batches", MARKER_BUMP, (1, [])),
    ("same-epoch marker keeps batches", (hdr(0), hdr(2, 1, control=True)), (0, [(0, 1, 0, 1)])),
    ("wrapped last sequence", ACROSS_MAX, (3, [(INT32_MAX - 1, 0, 0, 2)])),
    ("replicated older epoch is trusted", (hdr(0, epoch=5), hdr(0, epoch=4)),
     (4, [(0, 1, 2, 3)])),
]


@pytest.mark.parametrize(
    "history, expected", [c[1:] for c in UPDATE_CASES], ids=[c[0] for c in UPDATE_CASES]
)
def test_update(history, expected):
    entry = manager_after(*history).last_entry(PID)
    assert (entry.producer_epoch, _ranges(entry)) == expected
    assert len(entry.batches) <= NUM_BATCHES_TO_RETAIN


def test_update_ignores_non_idempotent_batches():
    manager = manager_after(hdr(-1, pid=NO_PRODUCER_ID, epoch=NO_PRODUCER_EPOCH))
    assert dict(manager.entries) == {}


def test_update_tracks_last_timestamp_and_offset():
    entry = manager_after(hdr(0, timestamp=TS), hdr(2, timestamp=TS + 7)).last_entry(PID)
    assert (entry.last_timestamp, entry.last_offset) == (TS + 7, 3)


# ---- truncate_to / rebuild / expire -----------------------------------------------------

TRUNCATE_CASES = [
    # (id, history, truncate offset, expected retained first offsets or None: forgotten)
    ("above the end", SEVEN, 14, [4, 6, 8, 10, 12]),
    ("drops the newest", SEVEN, 12, [4, 6, 8, 10]),
    ("inside a batch drops it whole", SEVEN, 11, [4, 6, 8]),
    ("keeps only the oldest retained", SEVEN, 6, [4]),
    ("below every retained batch", SEVEN, 4, None),
    ("to zero", SEVEN, 0, None),
    ("marker above the point, batches below", (hdr(0), hdr(2, 1, control=True)), 2, [0]),
    ("epoch-bump marker above the point", MARKER_BUMP, 2, None),
]


@pytest.mark.parametrize(
    "history, offset, expected",
    [c[1:] for c in TRUNCATE_CASES],
    ids=[c[0] for c in TRUNCATE_CASES],
)
def test_truncate_to(history, offset, expected):
    manager = manager_after(*history)
    manager.truncate_to(offset)
    entry = manager.last_entry(PID)
    if expected is None:
        assert entry is None
        return
    assert [b.first_offset for b in entry.batches] == expected
    assert entry.last_offset == entry.batches[-1].last_offset < offset


def test_truncate_then_next_sequence_is_checked_against_what_remains():
    manager = manager_after(*SEVEN)
    manager.truncate_to(10)  # seq 10..13 are gone from the log
    assert manager.check(hdr(10)).outcome is APPEND
    assert manager.check(hdr(12)).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER


def _log_headers(history) -> list[RecordBatchHeader]:
    """`history` as the log stores it: each header carries its own base offset."""
    headers, leo = [], 0
    for h in history:
        headers.append(h._replace(base_offset=leo))
        leo += h.last_offset_delta + 1
    return headers


@pytest.mark.parametrize("history", [SEVEN, AT_MAX, ACROSS_MAX, MARKER_BUMP, ()])
def test_rebuild_matches_incremental_updates(history):
    manager = manager_after(hdr(0, pid=PID + 9))  # forgotten by rebuild
    manager.rebuild(_log_headers(history))
    assert dict(manager.entries) == dict(manager_after(*history).entries)


def test_rebuild_after_truncation_is_exact():
    headers = _log_headers(SEVEN)
    manager = ProducerStateManager()
    manager.rebuild(h for h in headers if h.last_offset < 4)  # the log after truncate(4)
    assert manager.check(hdr(4)).outcome is APPEND
    assert manager.check(hdr(2)).duplicate == BatchMetadata(2, 3, 2, 3, TS)


EXPIRE_CASES = [
    # (id, now_ms, expiration ms, expired ids)
    ("nothing idle long enough", TS + 99, 100, []),
    ("exactly the expiration", TS + 100, 100, [PID]),
    ("both", TS + 10_000, 100, [PID, PID + 1]),
]


@pytest.mark.parametrize(
    "now_ms, expiration_ms, expected",
    [c[1:] for c in EXPIRE_CASES],
    ids=[c[0] for c in EXPIRE_CASES],
)
def test_expire(now_ms, expiration_ms, expected):
    manager = manager_after(hdr(0, pid=PID + 1, timestamp=TS + 50), hdr(0, timestamp=TS))
    assert manager.expire(now_ms, expiration_ms) == expected
    assert sorted(manager.entries) == sorted({PID, PID + 1} - set(expected))


@pytest.mark.parametrize(
    "kwargs",
    [dict(outcome=REJECT), dict(outcome=APPEND, error_code=45),
     dict(outcome=DUPLICATE), dict(outcome=APPEND, duplicate=BatchMetadata(0, 0, 0, 0, 0))],
)
def test_append_check_rejects_inconsistent_fields(kwargs):
    with pytest.raises(ValueError):
        AppendCheck(**kwargs)


def test_an_update_whose_offsets_run_backwards_is_refused():
    # the check BatchMetadata made when it was a frozen dataclass, where the offsets come in
    # (retaining at most five is UPDATE_CASES' "retains the last five")
    manager = manager_after(hdr(0))
    with pytest.raises(ValueError):
        manager.update(hdr(2), 5, 3)
    assert _ranges(manager.entries[PID]) == [(0, 1, 0, 1)]


# ---- property: a valid stream with client retries is appended exactly once ------------

_START_SEQS = st.sampled_from([0, 1, 17, INT32_MAX - 4, INT32_MAX])
_ACTION = st.tuples(
    st.integers(0, 2),  # producer
    st.sampled_from(["send", "send", "send", "retry", "retry", "bump", "retry_old"]),
    st.integers(1, 4),  # records in a new batch / how far back a retry reaches
)


@settings(max_examples=300, deadline=None)
@given(start_seqs=st.lists(_START_SEQS, min_size=3, max_size=3),
       actions=st.lists(_ACTION, max_size=60))
def test_retries_give_exactly_once_offsets(start_seqs, actions):
    manager, log = ProducerStateManager(), []
    epoch, next_seq = [0, 0, 0], list(start_seqs)
    sent = [[], [], []]  # per producer: (epoch, header, (first_offset, last_offset))
    for p, action, n in actions:
        pid = PID + p
        current = [s for s in sent[p] if s[0] == epoch[p]]
        older = [s for s in sent[p] if s[0] != epoch[p]]
        if action == "send":
            header = hdr(next_seq[p], n, epoch=epoch[p], pid=pid)
            result = manager.check(header)
            assert result.outcome is APPEND, result.message
            leo = log[-1].last_offset + 1 if log else 0
            log.append(header._replace(base_offset=leo))
            manager.update(header, leo, leo + n - 1)
            sent[p].append((epoch[p], header, (leo, leo + n - 1)))
            next_seq[p] = (next_seq[p] + n) % (INT32_MAX + 1)
        elif action == "retry" and current:
            # max.in.flight.requests.per.connection <= 5: a client retries only these
            _, header, offsets = current[-min(n, len(current), NUM_BATCHES_TO_RETAIN)]
            result = manager.check(header)
            assert result.outcome is DUPLICATE, result.message
            assert (result.duplicate.first_offset, result.duplicate.last_offset) == offsets
        elif action == "retry_old" and older and current:
            # fenced once the partition saw the new epoch (InitProducerId alone tells it
            # nothing: until then the old epoch's retries are still duplicates)
            _, header, _ = older[-1]
            assert manager.check(header).error_code == INVALID_PRODUCER_EPOCH
        elif action == "bump":
            epoch[p] += 1
            next_seq[p] = 0
    # every batch sent once is in the log once, in send order, at contiguous offsets
    appended = sorted((o, h.producer_id, h.base_sequence) for s in sent for _, h, o in s)
    assert [(h.base_offset, h.last_offset) for h in log] == [a[0] for a in appended]
    assert [(h.producer_id, h.base_sequence) for h in log] == [a[1:] for a in appended]
    # recovery from the log reaches the same state
    recovered = ProducerStateManager()
    recovered.rebuild(log)
    assert dict(recovered.entries) == dict(manager.entries)


# ---- transactions (ProducerAppendInfo.appendDataBatch / appendEndTxnMarker) --------------------

from broker.producer_state import CompletedTxn  # noqa: E402
from broker.producer_state import (  # noqa: E402
    INVALID_TXN_STATE,
    NO_TXN,
    TRANSACTION_COORDINATOR_FENCED,
)
from common.control_records import ControlType  # noqa: E402

ABORT, COMMIT = ControlType.ABORT, ControlType.COMMIT


def marker_hdr(offset: int, *, epoch: int = 0, pid: int = PID) -> RecordBatchHeader:
    return hdr(-1, 1, epoch=epoch, pid=pid, offset=offset, control=True, transactional=True)


def test_a_transactional_batch_opens_a_transaction_a_marker_ends_it() -> None:
    m = ProducerStateManager()
    assert m.update(hdr(0, 2, offset=10, transactional=True), 10, 11) is None
    assert m.update(hdr(2, 2, offset=12, transactional=True), 12, 13) is None
    assert m.last_entry(PID).current_txn_first_offset == 10
    assert dict(m.ongoing) == {PID: 10}
    assert m.last_stable_offset(14) == 10
    done = m.update(marker_hdr(14), 14, 14, (ABORT, 3))
    assert done == CompletedTxn(PID, 10, 14, True)
    entry = m.last_entry(PID)
    assert entry.current_txn_first_offset == NO_TXN and entry.coordinator_epoch == 3
    assert dict(m.ongoing) == {}
    # the ended transaction holds the LSO until the high watermark passes its marker
    assert m.last_stable_offset(14) == 10
    assert m.last_stable_offset(15) == 15
    assert m.first_unstable_offset(15) is None


def test_a_marker_with_no_data_here_ends_nothing() -> None:
    m = ProducerStateManager()
    assert m.update(marker_hdr(0), 0, 0, (COMMIT, 0)) is None
    assert m.last_stable_offset(1) == 1


def test_lso_is_the_oldest_open_transaction() -> None:
    m = ProducerStateManager()
    m.update(hdr(0, 1, offset=5, transactional=True), 5, 5)
    m.update(hdr(0, 1, pid=PID + 1, offset=6, transactional=True), 6, 6)
    assert m.last_stable_offset(7) == 5
    m.update(marker_hdr(7), 7, 7, (COMMIT, 0))
    assert m.last_stable_offset(8) == 6
    assert m.last_stable_offset(3) == 3  # never above the high watermark


@pytest.mark.parametrize("epoch, coordinator_epoch, code", [
    (1, 5, 0),
    (2, 5, 0),
    (0, 5, INVALID_PRODUCER_EPOCH),  # a marker for an older producer epoch
    (1, 4, TRANSACTION_COORDINATOR_FENCED),  # from an older coordinator
])
def test_marker_checks(epoch: int, coordinator_epoch: int, code: int) -> None:
    m = ProducerStateManager()
    m.update(hdr(0, 1, epoch=1, offset=0, transactional=True), 0, 0)
    m.update(marker_hdr(1, epoch=1), 1, 1, (COMMIT, 5))
    m.update(hdr(1, 1, epoch=1, offset=2, transactional=True), 2, 2)
    verdict = m.check_marker(marker_hdr(3, epoch=epoch), coordinator_epoch)
    assert verdict.error_code == code


def test_a_non_transactional_batch_inside_a_transaction_is_refused() -> None:
    m = manager_after(hdr(0, 2, offset=0, transactional=True))
    assert m.check(hdr(2, 1, offset=2)).error_code == INVALID_TXN_STATE
    assert m.check(hdr(2, 1, offset=2, transactional=True)).outcome is APPEND


def test_rebuild_keeps_open_transactions_and_expire_spares_them() -> None:
    headers = [hdr(0, 1, offset=0, transactional=True), hdr(0, 1, pid=PID + 1, offset=1, transactional=True),
               marker_hdr(2)]
    m = ProducerStateManager()
    m.rebuild(headers, {2: (ABORT, 0)})
    assert dict(m.ongoing) == {PID + 1: 1}
    assert m.last_stable_offset(3) == 1
    assert m.expire(TS + 10**12, 1) == [PID]  # the ended one goes, the open one stays
    assert PID + 1 in m.entries


def test_truncation_below_a_transaction_start_closes_it() -> None:
    m = manager_after(hdr(0, 2, offset=0), hdr(2, 2, offset=2, transactional=True))
    m.truncate_to(2)
    assert dict(m.ongoing) == {}
    assert m.last_entry(PID).current_txn_first_offset == NO_TXN
