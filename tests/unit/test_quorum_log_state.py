"""Tests for quorum/log_state.py: chunking, epoch fencing on apply, dense offsets, fold, dump round trip."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from metadata.codec import MetadataRecordError
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from metadata.records import (
    AbortTransaction,
    BeginEpoch,
    BeginTransaction,
    EndTransaction,
    Config,
    ConfigResourceType,
    NoOp,
    Partition,
    PartitionChange,
    Record,
    RemoveTopic,
    Topic,
    decode_records,
    record_to_map,
    encode_records,
)
from metadata.snapshot import decode_snapshot, encode_snapshot
from quorum.controller_result import MAX_LEADERSHIPS_PER_DECISION
from quorum.log_state import (
    MAX_CHUNK_BYTES,
    AppendOutcome,
    MetadataLogState,
    OutcomeKind,
    RecordTooLargeError,
    check_epoch,
    split_records,
    transaction_chunks,
)

COMMITTED, FENCED, REJECTED = OutcomeKind.COMMITTED, OutcomeKind.FENCED, OutcomeKind.REJECTED
TOPIC = Topic("orders", "t-orders")
PARTITION = Partition("t-orders", 0, replicas=(1, 2, 3), isr=(1, 2, 3), leader=1)


def config(i: int, size: int = 10) -> Config:
    return Config(ConfigResourceType.TOPIC, "orders", f"key.{i}", "v" * size)


def state_at_epoch(epoch: int) -> MetadataLogState:
    state = MetadataLogState()
    assert state.apply_chunk(encode_records([BeginEpoch(epoch)]), epoch).committed
    return state


# --- split_records ------------------------------------------------------------------


@pytest.mark.parametrize("count,size,max_bytes,expected_chunks", [
    (0, 10, MAX_CHUNK_BYTES, 0),
    (1, 10, MAX_CHUNK_BYTES, 1),
    (100, 10, MAX_CHUNK_BYTES, 1),
    (100, 1000, MAX_CHUNK_BYTES, 4),  # ~1 KB each: 27 fit in 28 KiB
    (10, 100, 200, 10),  # one record per chunk
])
def test_split_records_keeps_order_and_bound(count: int, size: int, max_bytes: int,
                                             expected_chunks: int) -> None:
    records = [config(i, size) for i in range(count)]
    chunks = split_records(records, max_bytes)
    assert len(chunks) == expected_chunks
    assert all(len(c) <= max_bytes for c in chunks)
    assert [r for c in chunks for r in decode_records(c)] == records


def test_a_controlled_shutdowns_batch_of_leaderships_takes_few_raft_entries() -> None:
    """Each chunk is a Raft entry, and the active controller commits at most PIPELINE_WINDOW of
    them per round: a batch of MAX_LEADERSHIPS_PER_DECISION moved leaderships (leader and ISR of
    each, written in full: 115 bytes each) in at most 21 chunks of 28 KiB (c8ad164's 16 KiB: 36)."""
    moved = [PartitionChange("AbCdEfGhIjKlMnOpQrStUw", i, isr=(5, 6), leader=5)
             for i in range(MAX_LEADERSHIPS_PER_DECISION)]
    chunks = split_records(moved)
    assert len(chunks) <= 21
    assert [r for c in chunks for r in decode_records(c)] == moved


def test_split_records_refuses_a_record_larger_than_a_chunk() -> None:
    with pytest.raises(RecordTooLargeError, match="Config record of"):
        split_records([NoOp(), config(0, size=300)], max_bytes=256)


@given(st.lists(st.integers(0, 3000), max_size=60), st.integers(3100, 20_000))
def test_split_records_any_sizes(sizes: list[int], max_bytes: int) -> None:
    records = [config(i, size) for i, size in enumerate(sizes)]
    chunks = split_records(records, max_bytes)
    assert all(0 < len(c) <= max_bytes for c in chunks)
    assert [r for c in chunks for r in decode_records(c)] == records


@pytest.mark.parametrize("count", [1, 15, 16, 17, 200, 70_000])  # msgpack fixarray, array16, array32
def test_chunks_are_the_one_shot_encoding_of_their_records(count: int) -> None:
    # each record is encoded once and the chunk assembled from its bytes: the very bytes
    # encode_records writes for the same records (what brokers and snapshots read)
    records = [PARTITION, NoOp()] * (count // 2) + [TOPIC] * (count % 2)
    for chunk in split_records(records, max_bytes=2**30):
        assert chunk == encode_records(decode_records(chunk))
    framed = transaction_chunks(records * 200 if count < 200 else records)
    assert all(chunk == encode_records(decode_records(chunk)) for chunk in framed)


# --- check_epoch: the fencing decision ------------------------------------------------

EPOCH_CASES = [
    # (committed controller epoch, chunk epoch, records, expected kind or None to apply)
    (-1, 1, [BeginEpoch(1)], None),  # the first controller
    (3, 5, [BeginEpoch(5)], None),  # a new controller
    (5, 5, [BeginEpoch(5)], None),  # the same controller retrying its BeginEpoch
    (5, 4, [BeginEpoch(4)], FENCED),  # a deposed controller begins late
    (5, 5, [BeginEpoch(4)], REJECTED),  # BeginEpoch under another epoch
    (5, 5, [NoOp(), BeginEpoch(5)], REJECTED),  # BeginEpoch not first
    (5, 5, [BeginEpoch(5), BeginEpoch(5)], REJECTED),
    (5, 5, [NoOp(), TOPIC], None),  # the active controller
    (5, 4, [NoOp()], FENCED),  # a deposed controller's late append
    (5, 0, [TOPIC], FENCED),
    (5, 6, [NoOp()], REJECTED),  # its BeginEpoch never committed
    (-1, -1, [NoOp()], REJECTED),  # no controller has begun
    (-1, 0, [NoOp()], REJECTED),
    (5, 5, [AbortTransaction("x"), BeginEpoch(5)], REJECTED),  # nothing to abort (see TRANSACTION_EPOCH_CASES)
]


@pytest.mark.parametrize("controller_epoch,epoch,records,expected", EPOCH_CASES)
def test_check_epoch(controller_epoch: int, epoch: int, records: list[Record],
                     expected: OutcomeKind | None) -> None:
    verdict = check_epoch(controller_epoch, epoch, records)
    assert (verdict.kind if verdict else None) is expected
    if verdict is not None:
        assert verdict.first_offset is None and verdict.reason


@pytest.mark.parametrize("controller_epoch,epoch,records,expected", EPOCH_CASES)
def test_apply_chunk_applies_only_what_check_epoch_allows(controller_epoch: int, epoch: int,
                                                          records: list[Record],
                                                          expected: OutcomeKind | None) -> None:
    state = MetadataLogState() if controller_epoch < 0 else state_at_epoch(controller_epoch)
    before = state.image
    outcome = state.apply_chunk(encode_records(records), epoch)
    if expected is None:
        assert outcome == AppendOutcome(COMMITTED, epoch, before.offset + 1, before.offset + len(records))
    else:
        assert outcome.kind is expected and state.image is before and outcome.offsets == range(0)


# --- apply_chunk: dense offsets, all or nothing ---------------------------------------


def test_chunks_get_dense_offsets() -> None:
    state = MetadataLogState()
    outcomes = [state.apply_chunk(encode_records(rs), 2) for rs in
                ([BeginEpoch(2)], [TOPIC, PARTITION], [NoOp()], [NoOp(), NoOp(), NoOp()])]
    assert [(o.first_offset, o.last_offset) for o in outcomes] == [(0, 0), (1, 2), (3, 3), (4, 6)]
    assert state.last_offset == 6 and state.image.controller_epoch == 2
    assert state.image.partition("t-orders", 0).leader == 1
    assert [c.base_offset for c in state.chunks] == [0, 1, 3, 4]


@pytest.mark.parametrize("data,reason", [
    (b"\xc1", "undecodable"),
    (msgpack.packb({"type": 20}), "undecodable"),
    (encode_records([]), "empty chunk"),
    (encode_records([NoOp(), RemoveTopic("no-such-topic")]), "unknown topic id"),
    (encode_records([TOPIC, Topic("orders", "t-other")]), "already used"),
])
def test_a_bad_chunk_is_rejected_whole(data: bytes, reason: str) -> None:
    state = state_at_epoch(1)
    before = state.image
    outcome = state.apply_chunk(data, 1)
    assert outcome.kind is REJECTED and reason in outcome.reason
    assert state.image is before and len(state.chunks) == 1


def test_a_non_integer_epoch_is_rejected() -> None:
    outcome = state_at_epoch(1).apply_chunk(encode_records([NoOp()]), "1")  # type: ignore[arg-type]
    assert outcome.kind is REJECTED


def test_a_fenced_chunk_after_a_new_epoch() -> None:
    """The deposed controller of epoch 1 appends after epoch 2 began: fenced, nothing applied."""
    state = state_at_epoch(1)
    assert state.apply_chunk(encode_records([TOPIC]), 1).committed
    assert state.apply_chunk(encode_records([BeginEpoch(2)]), 2).committed
    late = state.apply_chunk(encode_records([RemoveTopic("t-orders")]), 1)
    assert late.kind is FENCED and "older than controller epoch 2" in late.reason
    assert state.image.topic("orders") is not None and state.last_offset == 2


# --- reads, fold and the dump ---------------------------------------------------------


def filled_state() -> tuple[MetadataLogState, list[Record]]:
    state = state_at_epoch(1)
    written: list[Record] = [BeginEpoch(1)]
    for batch in ([TOPIC, PARTITION], [NoOp()] * 3, [config(1)], [config(2), NoOp()], [BeginEpoch(2)],
                  [NoOp()]):
        epoch = batch[0].epoch if isinstance(batch[0], BeginEpoch) else state.image.controller_epoch
        assert state.apply_chunk(encode_records(batch), epoch).committed
        written.extend(batch)
    return state, written


def test_records_from_any_offset() -> None:
    state, written = filled_state()
    for start in range(len(written) + 1):
        assert state.records_from(start, 100) == list(enumerate(written))[start:]
    assert state.records_from(2, 3) == list(enumerate(written))[2:5]


def test_record_maps_from_are_the_records_maps_at_any_offset_and_limit() -> None:
    state, written = filled_state()
    for start in range(len(written) + 1):
        for limit in (1, 2, 3, 100):
            assert state.record_maps_from(start, limit) == \
                [(at, record_to_map(r)) for at, r in state.records_from(start, limit)]
    state.fold(2)
    with pytest.raises(IndexError, match="before the log start offset"):
        state.record_maps_from(state.log_start_offset - 1, 1)


@pytest.mark.parametrize("keep", [0, 1, 3, 5, 8, 100])
def test_fold_keeps_the_image_and_the_newest_records(keep: int) -> None:
    state, written = filled_state()
    image = state.image
    state.fold(keep)
    assert state.image == image
    held = len(written) - state.log_start_offset
    assert held >= min(keep, len(written))
    start = state.log_start_offset
    assert state.records_from(start, 100) == list(enumerate(written))[start:]
    folded = apply(EMPTY_IMAGE, list(enumerate(written))[:state.log_start_offset])
    assert state.base_snapshot == encode_snapshot(folded)
    if state.log_start_offset > 0:
        with pytest.raises(IndexError, match="before the log start offset"):
            state.records_from(state.log_start_offset - 1, 1)
    if keep == 0:
        assert state.chunks == () and state.log_start_offset == len(written)
    if keep >= len(written):
        assert state.log_start_offset == 0


@pytest.mark.parametrize("keep", [None, 0, 4])
def test_dump_round_trip(keep: int | None) -> None:
    state, _ = filled_state()
    if keep is not None:
        state.fold(keep)
    dump = state.encode_dump()
    restored = MetadataLogState.decode_dump(dump)
    assert restored.image == state.image
    assert restored.chunks == state.chunks
    assert restored.base_snapshot == state.base_snapshot
    assert restored.encode_dump() == dump
    # The restored state goes on exactly like the original.
    next_offset = state.last_offset + 1
    assert state.apply_chunk(encode_records([NoOp()]), 2).first_offset == next_offset
    assert restored.apply_chunk(encode_records([NoOp()]), 2).first_offset == next_offset
    assert restored.image == state.image


def test_the_dump_is_plain_msgpack() -> None:
    state, _ = filled_state()
    m = msgpack.unpackb(state.encode_dump(), raw=False)
    assert m["format"] == "tidelog-metadata-log" and isinstance(m["snapshot"], bytes)
    assert all(isinstance(base, int) and isinstance(epoch, int) and isinstance(data, bytes)
               for base, epoch, data in m["chunks"])


def _dump(**changes: object) -> bytes:
    state, _ = filled_state()
    m = msgpack.unpackb(state.encode_dump(), raw=False)
    m.update(changes)
    return msgpack.packb(m, use_bin_type=True)


@pytest.mark.parametrize("data,message", [
    (b"\xc1", "not valid msgpack"),
    (msgpack.packb([1, 2]), "expected a map"),
    (_dump(version=9), "version 9"),
    (_dump(chunks=[[0, 1]]), "chunk 0 is not"),
    (_dump(chunks=[[5, 1, encode_records([BeginEpoch(1)])]]), "does not follow offset -1"),
    (_dump(chunks=[[0, 1, encode_records([RemoveTopic("x")])]]), "unknown topic id"),
    (_dump(snapshot=b"garbage"), "snapshot"),
])
def test_a_malformed_dump_raises(data: bytes, message: str) -> None:
    with pytest.raises(MetadataRecordError, match=message):
        MetadataLogState.decode_dump(data)


@given(st.lists(st.integers(1, 4), min_size=1, max_size=12))
def test_any_split_reaches_the_same_image(splits: list[int]) -> None:
    """Replaying the records in any split of chunks reaches the same image and offsets."""
    _, written = filled_state()
    records = written[1:]
    state = state_at_epoch(1)
    i = 0
    for size in splits * 10:  # bounded: enough sizes to cover every record
        if i >= len(records):
            break
        batch = records[i:i + size]
        if any(isinstance(r, BeginEpoch) for r in batch[1:]):
            batch = batch[:next(j for j, r in enumerate(batch) if j and isinstance(r, BeginEpoch))]
        epoch = batch[0].epoch if isinstance(batch[0], BeginEpoch) else state.image.controller_epoch
        assert state.apply_chunk(encode_records(batch), epoch).committed
        i += len(batch)
    assert state.image == apply(EMPTY_IMAGE, enumerate(written))


# --- KIP-868 transactions: framing, the BeginEpoch/Abort rule, folds -----------------


def test_transaction_chunks_frames_only_what_needs_several_chunks() -> None:
    assert transaction_chunks([]) == []
    small = [config(i) for i in range(3)]
    assert [decode_records(c) for c in transaction_chunks(small)] == [tuple(small)]
    big = [config(i, 1000) for i in range(40)]
    chunks = [decode_records(c) for c in transaction_chunks(big, "alter orders")]
    assert len(chunks) > 1
    flat = [r for chunk in chunks for r in chunk]
    assert flat == [BeginTransaction("alter orders"), *big, EndTransaction()]
    assert all(len(c) <= MAX_CHUNK_BYTES for c in transaction_chunks(big))


def open_transaction(epoch: int = 5) -> MetadataLogState:
    """A log at `epoch` that ends inside a transaction which created topic orders (not yet visible)."""
    state = state_at_epoch(epoch)
    assert state.apply_chunk(encode_records([BeginTransaction("create orders"), TOPIC]), epoch).committed
    assert state.apply_chunk(encode_records([PARTITION]), epoch).committed
    return state


TRANSACTION_EPOCH_CASES = [
    # (log ends inside a transaction?, chunk, epoch, expected kind or None to apply)
    (True, [BeginEpoch(6)], 6, REJECTED),  # a new controller must abort what it found open
    (True, [AbortTransaction("failover"), BeginEpoch(6)], 6, None),
    (True, [AbortTransaction("failover"), BeginEpoch(5)], 5, None),  # the same controller re-beginning
    (True, [AbortTransaction("late"), BeginEpoch(4)], 4, FENCED),
    (True, [AbortTransaction("failed chunk")], 5, None),  # the writer aborts its own transaction
    (True, [EndTransaction()], 5, None),
    (True, [EndTransaction()], 4, FENCED),  # a deposed controller's last chunk
    (True, [BeginTransaction("nested")], 5, REJECTED),
    (True, [BeginEpoch(6), AbortTransaction("x")], 6, REJECTED),  # Abort must come first
    (False, [AbortTransaction("failover"), BeginEpoch(6)], 6, REJECTED),  # nothing to abort: retry without
    (False, [EndTransaction()], 5, REJECTED),
    (False, [AbortTransaction("x")], 5, REJECTED),
]


@pytest.mark.parametrize("open_tx,records,epoch,expected", TRANSACTION_EPOCH_CASES)
def test_transaction_rules_on_apply(open_tx: bool, records: list[Record], epoch: int,
                                    expected: OutcomeKind | None) -> None:
    state = open_transaction() if open_tx else state_at_epoch(5)
    before_image, before_last = state.image, state.last_offset
    outcome = state.apply_chunk(encode_records(records), epoch)
    if expected is not None:
        assert outcome.kind is expected, outcome
        assert state.image is before_image and state.last_offset == before_last
        assert state.in_transaction is open_tx
        return
    assert outcome == AppendOutcome(COMMITTED, epoch, before_last + 1, before_last + len(records))
    assert not state.in_transaction
    committed = isinstance(records[0], EndTransaction)
    assert (state.image.topic("orders") is not None) is committed  # End publishes, Abort drops


def test_an_open_transaction_is_invisible_until_its_end() -> None:
    state = open_transaction()
    assert state.in_transaction and state.image.topic("orders") is None
    assert state.image.offset == 0 and state.last_offset == 3  # offsets are taken, the image waits
    assert [r for _, r in state.records_from(1, 10)] == [BeginTransaction("create orders"), TOPIC, PARTITION]
    assert state.apply_chunk(encode_records([EndTransaction()]), 5).committed
    assert state.image.offset == 4 and state.image.partition("t-orders", 0) is not None


def test_a_record_the_open_transaction_refuses_rejects_its_chunk_only() -> None:
    state = open_transaction()
    bad = Partition("t-unknown", 0, replicas=(1,), isr=(1,), leader=1)
    outcome = state.apply_chunk(encode_records([bad]), 5)
    assert outcome.kind is REJECTED and state.in_transaction and state.last_offset == 3


@pytest.mark.parametrize("keep", [0, 1, 2, 3])
def test_fold_never_cuts_a_transaction(keep: int) -> None:
    state = open_transaction()
    state.fold(keep)
    assert state.log_start_offset == 1  # BeginEpoch folded at most: the transaction stays records
    assert state.in_transaction and state.image.topic("orders") is None
    restored = MetadataLogState.decode_dump(state.encode_dump())
    assert restored.in_transaction and restored.last_offset == 3
    assert restored.apply_chunk(encode_records([AbortTransaction("failover"), BeginEpoch(6)]), 6).committed
    assert restored.image.topic("orders") is None and not restored.in_transaction
    restored.fold(0)
    assert restored.log_start_offset == restored.last_offset + 1 and restored.image.controller_epoch == 6


def test_fold_folds_a_finished_transaction_whole() -> None:
    state = open_transaction()
    assert state.apply_chunk(encode_records([EndTransaction()]), 5).committed
    state.fold(0)
    assert state.log_start_offset == 5 and state.image.topic("orders") is not None
    assert decode_snapshot(state.base_snapshot).topic("orders") is not None
