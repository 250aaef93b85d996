"""Tests for the metadata log's fold without replay (quorum/log_state.py's fold points,
quorum/fold_encoder.py, metadata.snapshot.snapshot_pieces).

The reference is a full replay of the same records from the empty image: a folded base must be
that replay's image at the fold point, the fold point a chunk boundary with no transaction open
and at least `keep` records behind the head, the dump must load back to the same state, and no
kept image may refer to a chunk the log no longer holds. Each random case prints its seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.records import (
    AbortTransaction,
    BeginEpoch,
    BeginTransaction,
    Config,
    ConfigResourceType,
    EndTransaction,
    NoOp,
    Partition,
    PartitionChange,
    Record,
    Topic,
    encode_records,
)
from metadata.snapshot import decode_snapshot, encode_snapshot, snapshot_pieces
from metadata.transactions import ReplayState, replay
from quorum.fold_encoder import FoldEncoder
from quorum.log_state import MAX_FOLD_POINTS, FoldPoint, MetadataLogState

EPOCH = 1
TOPICS = ("t-a", "t-b", "t-c")
PARTITIONS = 4
SEEDS = range(30)
STEPS = 100  # chunks per random case


@dataclass
class Log:
    """A MetadataLogState fed random chunks, with what the test knows about each chunk end."""

    rng: random.Random
    state: MetadataLogState
    records: list[Record] = field(default_factory=list)
    clean_ends: list[int] = field(default_factory=list)  # chunk last offsets with no transaction open
    open_tx: bool = False
    # the reference: after record i, records 0..i replayed one by one from the empty image
    replayed: list[ReplayState] = field(default_factory=list)

    def apply(self, chunk: list[Record]) -> None:
        outcome = self.state.apply_chunk(encode_records(chunk), EPOCH)
        assert outcome.committed, outcome
        for record in chunk:  # bounded by the chunk
            before = self.replayed[-1] if self.replayed else ReplayState(EMPTY_IMAGE)
            self.replayed.append(replay(before, [(len(self.records), record)]))
            self.records.append(record)
        if not self.open_tx:
            self.clean_ends.append(len(self.records) - 1)

    def random_chunk(self) -> list[Record]:
        rng = self.rng
        body: list[Record] = []
        for _ in range(rng.randint(1, 4)):  # bounded
            kind = rng.random()
            topic, partition = rng.choice(TOPICS), rng.randrange(PARTITIONS)
            if kind < 0.4:
                isr = tuple(sorted(rng.sample((1, 2, 3), rng.randint(1, 3))))
                body.append(PartitionChange(topic, partition, isr=isr, leader=isr[0]))
            elif kind < 0.8:
                body.append(Config(ConfigResourceType.TOPIC, topic, f"k{rng.randrange(5)}", str(rng.random())))
            else:
                body.append(NoOp())
        roll = rng.random()
        if not self.open_tx and roll < 0.2:
            self.open_tx = True
            return [BeginTransaction("tx"), *body]
        if self.open_tx and roll < 0.25:
            self.open_tx = False
            return [*body, EndTransaction()]
        if self.open_tx and roll < 0.35:
            self.open_tx = False
            return [AbortTransaction("writer gave up")]
        return body


def new_log(seed: int, spacing: int) -> Log:
    log = Log(random.Random(seed), MetadataLogState(fold_spacing=spacing))
    log.apply([BeginEpoch(EPOCH)])
    for name in TOPICS:
        log.apply([Topic(name, name), *(Partition(name, p, replicas=(1, 2, 3), isr=(1, 2, 3), leader=1)
                                       for p in range(PARTITIONS))])
    return log


def check_invariants(log: Log) -> None:
    """Every kept image is at a clean end of a chunk the log still holds, after its base."""
    state = log.state
    ends = {c.last_offset for c in state.chunks}
    assert len(state.fold_points) <= MAX_FOLD_POINTS
    for point in state.fold_points:
        assert point.offset in ends and point.offset >= state.log_start_offset
        assert point.offset in log.clean_ends


def check_base(log: Log) -> None:
    """The base snapshot is the full replay's image at the log start, and the rest is records."""
    state = log.state
    base = state.log_start_offset - 1
    if base < 0:
        return
    expected = log.replayed[base]
    assert not expected.in_transaction
    assert state.base_snapshot == encode_snapshot(expected.image)
    assert decode_snapshot(state.base_snapshot) == expected.image
    assert state.records_from(base + 1, 10**6) == list(enumerate(log.records))[base + 1:]


def expected_sync_fold(log: Log, keep: int) -> int:
    """The log start offset `fold(keep)` must reach: past the newest clean chunk end at least
    `keep` records behind the head, or where it was."""
    limit = len(log.records) - 1 - keep
    ends = [e for e in log.clean_ends if e <= limit]
    return max(ends[-1] + 1 if ends else 0, log.state.log_start_offset)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_logs_fold_to_the_full_replay_at_a_clean_boundary(seed: int) -> None:
    rng = random.Random(seed)
    log = new_log(seed, spacing=rng.randint(1, 8))
    pending: tuple[FoldPoint, bytes, int] | None = None  # the point, its snapshot, chunks until finish
    for _ in range(STEPS):  # bounded
        log.apply(log.random_chunk())
        check_invariants(log)
        roll = rng.random()
        if pending is not None:
            point, snapshot, wait = pending
            if wait > 0:
                pending = (point, snapshot, wait - 1)
            else:
                assert log.state.finish_fold(point, snapshot), f"seed {seed}"
                assert log.state.log_start_offset == point.offset + 1
                pending = None
        elif roll < 0.15:
            keep = rng.randint(0, 12)
            point = log.state.begin_fold(keep)
            if point is not None:
                assert point.offset in log.clean_ends and point.offset <= len(log.records) - 1 - keep
                pending = (point, encode_snapshot(point.image), rng.randint(0, 6))
        elif roll < 0.25:
            keep = rng.randint(0, 12)
            expected = expected_sync_fold(log, keep)
            log.state.fold(keep)
            assert log.state.log_start_offset == expected, f"seed {seed}"
        check_base(log)
        check_invariants(log)
        assert log.state.image == log.replayed[-1].image, f"seed {seed}"
    restored = MetadataLogState.decode_dump(log.state.encode_dump())
    assert restored.image == log.state.image and restored.chunks == log.state.chunks
    assert restored.base_snapshot == log.state.base_snapshot and restored.last_offset == log.state.last_offset


def test_a_fold_point_is_the_newest_far_enough_behind_and_replaces_nothing_it_keeps() -> None:
    log = new_log(0, spacing=1)
    for _ in range(10):  # bounded: plain chunks, every end clean
        log.apply([NoOp(), NoOp()])
    ends = [p.offset for p in log.state.fold_points]
    assert ends == log.clean_ends[-MAX_FOLD_POINTS:]
    point = log.state.begin_fold(3)
    assert point is not None and point.offset == log.clean_ends[-3]  # 4 records after it, 2 after the next
    image = log.state.image
    assert log.state.finish_fold(point, encode_snapshot(point.image))
    assert log.state.image is image and log.state.log_start_offset == point.offset + 1
    assert [p.offset for p in log.state.fold_points] == log.clean_ends[-2:]


def test_no_fold_point_inside_a_transaction() -> None:
    log = new_log(0, spacing=1)
    log.open_tx = True
    log.apply([BeginTransaction("big"), NoOp()])
    for _ in range(MAX_FOLD_POINTS + 2):  # bounded
        log.apply([NoOp()])
    assert all(p.offset < len(log.records) - MAX_FOLD_POINTS - 3 for p in log.state.fold_points)
    assert log.state.begin_fold(0) is not None and log.state.begin_fold(0).offset in log.clean_ends
    check_invariants(log)


def test_finish_fold_refuses_a_point_it_did_not_choose_last() -> None:
    log = new_log(0, spacing=1)
    for _ in range(6):  # bounded
        log.apply([NoOp()])
    first = log.state.begin_fold(2)
    second = log.state.begin_fold(0)
    assert first is not None and second is not None and first is not second
    start = log.state.log_start_offset
    assert not log.state.finish_fold(first, encode_snapshot(first.image))
    other = new_log(0, spacing=1)
    for _ in range(6):  # bounded
        other.apply([NoOp()])
    stranger = other.state.begin_fold(0)
    assert stranger is not None and not log.state.finish_fold(stranger, b"not ours")
    assert log.state.log_start_offset == start
    assert log.state.finish_fold(second, encode_snapshot(second.image))
    assert not log.state.finish_fold(second, encode_snapshot(second.image))  # once


def test_a_sync_fold_drops_the_points_it_covers_and_a_pending_fold_with_them() -> None:
    log = new_log(0, spacing=1)
    for _ in range(6):  # bounded
        log.apply([NoOp()])
    point = log.state.begin_fold(3)
    assert point is not None
    log.state.fold(0)
    assert log.state.fold_points == () and log.state.log_start_offset == len(log.records)
    assert not log.state.finish_fold(point, encode_snapshot(point.image))
    check_base(log)


def test_kept_points_are_bounded_and_keep_the_one_being_encoded() -> None:
    log = new_log(0, spacing=1)
    log.apply([NoOp()])
    point = log.state.begin_fold(0)
    assert point is not None
    for _ in range(3 * MAX_FOLD_POINTS):  # bounded
        log.apply([NoOp()])
        assert len(log.state.fold_points) <= MAX_FOLD_POINTS
        assert point in log.state.fold_points
    assert log.state.finish_fold(point, encode_snapshot(point.image))
    check_base(log)
    check_invariants(log)


def image_of(seed: int) -> MetadataImage:
    log = new_log(seed, spacing=1)
    for _ in range(30):  # bounded
        log.apply(log.random_chunk())
    return log.state.image


@pytest.mark.parametrize("image", [EMPTY_IMAGE, image_of(1), image_of(2)], ids=["empty", "busy-1", "busy-2"])
def test_snapshot_pieces_join_to_the_snapshot_and_the_encoder_slices_them(image: MetadataImage) -> None:
    pieces = list(snapshot_pieces(image))
    assert b"".join(pieces) == encode_snapshot(image)
    assert len(pieces) >= 2 + len(image.topics.by_id)  # the map header, then at least a piece a topic
    state = MetadataLogState()
    encoder = FoldEncoder(state, FoldPoint(image))
    now = iter(range(10**6))  # a clock that moves one second per reading: one piece a slice
    # the last slice finds the pieces exhausted
    results = [encoder.step(0.5, clock=lambda: float(next(now))) for _ in range(len(pieces) + 1)]
    assert results[:-1] == [None] * len(pieces)
    assert results[-1] == encode_snapshot(image) and encoder.slices == len(pieces) + 1
    whole = FoldEncoder(state, FoldPoint(image))
    assert whole.step(60.0) == encode_snapshot(image) and whole.slices == 1
