"""Tests for broker/log/leader_epoch_cache.py against Kafka's LeaderEpochFileCache: each
operation is a table of (given entries, operation, expected entries or result), run both
on a bare cache and on one backed by `leader-epoch-checkpoint`, whose every change must be
rewritten in Kafka's format and read back equal."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.log.checkpoint_file import CorruptCheckpointError
from broker.log.leader_epoch_cache import FILE_NAME, LeaderEpochCache, checkpoint_file
from broker.log.leader_epochs import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEndOffset,
    EpochEntry,
)

Entries = list[tuple[int, int]]
Op = Callable[[LeaderEpochCache], object]

# Named fixtures: (epoch, start offset) entries.
EMPTY: Entries = []
ONE = [(0, 0)]
THREE = [(1, 0), (3, 10), (5, 20)]  # epochs with gaps, as after unclean elections
LATE_START = [(1, 5), (3, 10), (5, 20)]  # log start offset 5
LEO = 30  # log end offset used with THREE


def cache_of(entries: Entries, directory: Path | None = None) -> LeaderEpochCache:
    epoch_entries = [EpochEntry(*e) for e in entries]
    if directory is None:
        return LeaderEpochCache(None, epoch_entries)
    cache = LeaderEpochCache(checkpoint_file(directory), epoch_entries)
    checkpoint_file(directory).write(epoch_entries)
    return cache


def kafka_format(entries: Entries) -> str:
    """Kafka's leader-epoch-checkpoint: version 0, the count, then `epoch offset` lines."""
    return "".join(f"{line}\n" for line in ["0", str(len(entries)),
                                            *(f"{e} {o}" for e, o in entries)])


def as_tuples(cache: LeaderEpochCache) -> Entries:
    return [tuple(e) for e in cache.entries]  # type: ignore[misc]


# --- the operation tables --------------------------------------------------------------

ASSIGN_CASES = [
    # (given, (epoch, start offset), expected)
    pytest.param(EMPTY, (0, 0), [(0, 0)], id="first-entry"),
    pytest.param(EMPTY, (4, 17), [(4, 17)], id="first-entry-anywhere"),
    pytest.param(ONE, (1, 10), [(0, 0), (1, 10)], id="new-epoch"),
    pytest.param(ONE, (7, 10), [(0, 0), (7, 10)], id="new-epoch-skipping-some"),
    pytest.param(THREE, (5, 20), THREE, id="same-epoch-same-offset-noop"),
    pytest.param(THREE, (5, 25), THREE, id="same-epoch-later-offset-noop"),
    pytest.param(THREE, (5, 15), [(1, 0), (3, 10), (5, 15)], id="same-epoch-earlier-offset"),
    pytest.param(THREE, (6, 20), [(1, 0), (3, 10), (6, 20)], id="new-epoch-at-latest-start"),
    pytest.param(THREE, (6, 15), [(1, 0), (3, 10), (6, 15)], id="new-epoch-starts-lower"),
    pytest.param(THREE, (6, 5), [(1, 0), (6, 5)], id="new-epoch-starts-below-two"),
    pytest.param(THREE, (4, 25), [(1, 0), (3, 10), (4, 25)], id="lower-epoch-later-offset"),
    pytest.param(THREE, (2, 25), [(1, 0), (2, 25)], id="lower-epoch-removes-higher-epochs"),
    pytest.param(THREE, (2, 5), [(1, 0), (2, 5)], id="lower-epoch-and-lower-offset"),
    pytest.param(THREE, (3, 12), [(1, 0), (3, 12)], id="older-epoch-reassigned"),
    pytest.param(THREE, (0, 0), [(0, 0)], id="everything-conflicts"),
    pytest.param(THREE, (9, 0), [(9, 0)], id="new-epoch-at-offset-zero"),
]

END_OFFSET_CASES = [
    # (given, (requested epoch, log end offset), expected (epoch, end offset))
    pytest.param(THREE, (UNDEFINED_EPOCH, LEO), (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET),
                 id="undefined-epoch"),
    pytest.param(EMPTY, (0, LEO), (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET), id="empty-cache"),
    pytest.param(THREE, (5, LEO), (5, LEO), id="latest-epoch-ends-at-log-end"),
    pytest.param(THREE, (3, LEO), (3, 20), id="older-epoch-ends-at-next-start"),
    pytest.param(THREE, (1, LEO), (1, 10), id="first-epoch"),
    pytest.param(THREE, (4, LEO), (3, 20), id="missing-epoch-between-entries"),
    pytest.param(THREE, (2, LEO), (1, 10), id="missing-epoch-between-first-two"),
    pytest.param(THREE, (0, LEO), (0, 0), id="older-than-all-gets-first-start"),
    pytest.param(LATE_START, (0, LEO), (0, 5), id="older-than-all-after-log-start"),
    pytest.param(THREE, (6, LEO), (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET), id="above-all"),
    pytest.param(ONE, (0, 0), (0, 0), id="only-epoch-on-empty-log"),
]

EPOCH_FOR_CASES = [
    # (given, offset, expected epoch)
    pytest.param(EMPTY, 0, UNDEFINED_EPOCH, id="empty"),
    pytest.param(LATE_START, 4, UNDEFINED_EPOCH, id="before-first-entry"),
    pytest.param(LATE_START, 5, 1, id="on-first-start"),
    pytest.param(LATE_START, 9, 1, id="inside-first-epoch"),
    pytest.param(LATE_START, 10, 3, id="on-second-start"),
    pytest.param(LATE_START, 19, 3, id="end-of-second-epoch"),
    pytest.param(LATE_START, 20, 5, id="on-latest-start"),
    pytest.param(LATE_START, 10_000, 5, id="past-log-end"),
]

TRUNCATE_FROM_END_CASES = [
    # (given, end offset, expected)
    pytest.param(THREE, 1_000, THREE, id="far-past-log-end"),
    pytest.param(THREE, 21, THREE, id="just-after-latest-start"),
    pytest.param(THREE, 20, [(1, 0), (3, 10)], id="on-latest-start"),
    pytest.param(THREE, 15, [(1, 0), (3, 10)], id="inside-second-epoch"),
    pytest.param(THREE, 10, [(1, 0)], id="on-second-start"),
    pytest.param(THREE, 1, [(1, 0)], id="inside-first-epoch"),
    pytest.param(THREE, 0, [], id="to-zero"),
    pytest.param(EMPTY, 0, [], id="empty"),
    # Kafka ignores an undefined end offset (`endOffset >= 0`) instead of dropping all.
    pytest.param(THREE, UNDEFINED_EPOCH_OFFSET, THREE, id="undefined-offset-is-noop"),
]

TRUNCATE_FROM_START_CASES = [
    # (given, new log start offset, expected)
    pytest.param(LATE_START, 0, LATE_START, id="below-first-entry"),
    pytest.param(LATE_START, 5, LATE_START, id="on-first-start"),
    pytest.param(LATE_START, 7, [(1, 7), (3, 10), (5, 20)], id="inside-first-epoch"),
    pytest.param(LATE_START, 10, [(3, 10), (5, 20)], id="on-second-start"),
    pytest.param(LATE_START, 15, [(3, 15), (5, 20)], id="inside-second-epoch"),
    pytest.param(LATE_START, 20, [(5, 20)], id="on-latest-start"),
    pytest.param(LATE_START, 25, [(5, 25)], id="inside-latest-epoch"),
    pytest.param(LATE_START, 10_000, [(5, 10_000)], id="past-everything"),
    pytest.param(EMPTY, 5, [], id="empty"),
]

MUTATIONS = [
    *[pytest.param(given, lambda c, a=args: c.assign(*a), expected, id=f"assign-{p.id}")
      for p in ASSIGN_CASES for given, args, expected in [p.values]],
    *[pytest.param(given, lambda c, o=offset: c.truncate_from_end(o), expected,
                   id=f"truncate_from_end-{p.id}")
      for p in TRUNCATE_FROM_END_CASES for given, offset, expected in [p.values]],
    *[pytest.param(given, lambda c, o=offset: c.truncate_from_start(o), expected,
                   id=f"truncate_from_start-{p.id}")
      for p in TRUNCATE_FROM_START_CASES for given, offset, expected in [p.values]],
    pytest.param(THREE, lambda c: c.clear(), [], id="clear"),
    pytest.param(EMPTY, lambda c: c.clear(), [], id="clear-empty"),
]


@pytest.mark.parametrize(("given", "op", "expected"), MUTATIONS)
def test_mutation(given: Entries, op: Op, expected: Entries) -> None:
    cache = cache_of(given)
    op(cache)
    assert as_tuples(cache) == expected
    assert cache.latest_epoch == (expected[-1][0] if expected else UNDEFINED_EPOCH)


@pytest.mark.parametrize(("given", "op", "expected"), MUTATIONS)
def test_mutation_is_checkpointed_in_kafka_format(tmp_path: Path, given: Entries, op: Op,
                                                  expected: Entries) -> None:
    cache = cache_of(given, tmp_path)
    op(cache)
    assert (tmp_path / FILE_NAME).read_text() == kafka_format(expected)
    reread = LeaderEpochCache(checkpoint_file(tmp_path))
    assert reread.entries == cache.entries


@pytest.mark.parametrize(("given", "request_", "expected"), END_OFFSET_CASES)
def test_end_offset_for(given: Entries, request_: tuple[int, int],
                        expected: tuple[int, int]) -> None:
    assert cache_of(given).end_offset_for(*request_) == EpochEndOffset(*expected)


@pytest.mark.parametrize(("given", "offset", "expected"), EPOCH_FOR_CASES)
def test_epoch_for(given: Entries, offset: int, expected: int) -> None:
    assert cache_of(given).epoch_for(offset) == expected


# --- assign: argument checks and logging -----------------------------------------------

@pytest.mark.parametrize("entry", [(-1, 0), (0, -1), (-2, -2)])
def test_assign_rejects_negative_entries(tmp_path: Path, entry: tuple[int, int]) -> None:
    cache = cache_of(THREE, tmp_path)
    with pytest.raises(ValueError, match="invalid epoch entry"):
        cache.assign(*entry)
    assert as_tuples(cache) == THREE
    assert (tmp_path / FILE_NAME).read_text() == kafka_format(THREE)


@pytest.mark.parametrize(("given", "entry", "warns"), [
    pytest.param(THREE, (6, 30), False, id="plain-append"),
    pytest.param(THREE, (6, 20), False, id="replaces-latest-at-same-start"),
    pytest.param(THREE, (6, 15), True, id="removes-entry-at-later-start"),
    pytest.param(THREE, (2, 25), True, id="removes-two-entries"),
])
def test_assign_warns_only_on_real_conflicts(caplog: pytest.LogCaptureFixture, given: Entries,
                                             entry: tuple[int, int], warns: bool) -> None:
    cache = cache_of(given)
    with caplog.at_level(logging.WARNING, logger="broker.log.leader_epoch_cache"):
        cache.assign(*entry)
    warnings = [r for r in caplog.records if "caused truncation" in r.getMessage()]
    assert bool(warnings) == warns


# --- persistence -----------------------------------------------------------------------

def test_missing_checkpoint_is_an_empty_cache(tmp_path: Path) -> None:
    cache = LeaderEpochCache(checkpoint_file(tmp_path))
    assert cache.entries == []
    assert cache.latest_epoch == UNDEFINED_EPOCH
    assert not (tmp_path / FILE_NAME).exists()


def test_every_change_rewrites_the_checkpoint(tmp_path: Path) -> None:
    """A replica's life: epochs assigned, a divergent tail truncated, retention, then a
    full truncation; after each step a new cache reading the file equals the live one."""
    cache = LeaderEpochCache(checkpoint_file(tmp_path))
    steps: list[tuple[Op, Entries]] = [
        (lambda c: c.assign(0, 0), [(0, 0)]),
        (lambda c: c.assign(2, 40), [(0, 0), (2, 40)]),
        (lambda c: c.assign(3, 75), [(0, 0), (2, 40), (3, 75)]),
        (lambda c: c.truncate_from_end(60), [(0, 0), (2, 40)]),
        (lambda c: c.assign(4, 60), [(0, 0), (2, 40), (4, 60)]),
        (lambda c: c.truncate_from_start(50), [(2, 50), (4, 60)]),
        (lambda c: c.clear(), []),
        (lambda c: c.assign(5, 90), [(5, 90)]),
    ]
    for op, expected in steps:
        op(cache)
        assert (tmp_path / FILE_NAME).read_text() == kafka_format(expected)
        assert LeaderEpochCache(checkpoint_file(tmp_path)).entries == cache.entries
    assert not list(tmp_path.glob("*.tmp"))


def test_no_op_does_not_write(tmp_path: Path) -> None:
    cache = LeaderEpochCache(checkpoint_file(tmp_path))
    cache.truncate_from_end(10)
    cache.truncate_from_start(10)
    cache.clear()
    assert not (tmp_path / FILE_NAME).exists()


def test_reads_a_checkpoint_written_by_kafka(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text("0\n3\n0 0\n2 1500\n7 98765\n")
    cache = LeaderEpochCache(checkpoint_file(tmp_path))
    assert as_tuples(cache) == [(0, 0), (2, 1500), (7, 98765)]
    assert cache.end_offset_for(2, 100_000) == EpochEndOffset(2, 98765)


CORRUPT_CHECKPOINTS = [
    # (file text, line named in the error)
    pytest.param("1\n1\n0 0\n", 1, id="unknown-version"),
    pytest.param("0\ntwo\n0 0\n0 5\n", 2, id="bad-count"),
    pytest.param("0\n2\n0 0\nx 5\n", 4, id="epoch-not-a-number"),
    pytest.param("0\n1\n0 zero\n", 3, id="offset-not-a-number"),
    pytest.param("0\n1\n7\n", 3, id="missing-offset"),
    pytest.param("0\n1\n7 100 3\n", 3, id="extra-field"),
]


@pytest.mark.parametrize(("text", "line"), CORRUPT_CHECKPOINTS)
def test_corrupt_checkpoint_names_file_and_line(tmp_path: Path, text: str, line: int) -> None:
    path = tmp_path / FILE_NAME
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError) as info:
        LeaderEpochCache(checkpoint_file(tmp_path))
    assert str(path) in str(info.value)
    assert f"line {line}" in str(info.value)


def test_explicit_entries_take_precedence_over_the_file(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text(kafka_format(THREE))
    cache = LeaderEpochCache(checkpoint_file(tmp_path), [EpochEntry(8, 3)])
    assert as_tuples(cache) == [(8, 3)]


@pytest.mark.parametrize("op", [lambda c: c.truncate_from_end(10, write=False),
                                lambda c: c.truncate_from_start(12, write=False)],
                         ids=["from-end", "from-start"])
def test_a_cut_without_write_changes_memory_and_the_next_change_writes_it_all(tmp_path: Path, op: Op) -> None:
    """A log's load cuts in memory only; the next real change writes the whole cache."""
    cache = cache_of(THREE, tmp_path)
    before = (tmp_path / FILE_NAME).read_bytes()
    op(cache)
    assert [tuple(e) for e in cache.entries] != THREE
    assert (tmp_path / FILE_NAME).read_bytes() == before
    cache.assign(7, LEO)
    assert checkpoint_file(tmp_path).read() == cache.entries


# ---- durability: rewritten at once, fsynced when the log manager asks -------------------

def test_a_change_is_rewritten_at_once_and_fsynced_only_by_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new leadership costs a write and a rename, no fsync (the log manager syncs before its
    recovery-point checkpoint); what was written reads back at once, as after a process crash."""
    synced: list[str] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")) or real_fsync(fd))
    cache = LeaderEpochCache(checkpoint_file(tmp_path), [])
    assert not cache.needs_sync
    cache.assign(3, 10)
    cache.truncate_from_end(5)
    cache.assign(4, 5)
    assert synced == [] and cache.needs_sync
    assert checkpoint_file(tmp_path).read() == [EpochEntry(4, 5)]  # a crash now reads the last change
    cache.sync()
    assert synced == [str(tmp_path / FILE_NAME), str(tmp_path)] and not cache.needs_sync
    cache.sync()  # nothing owed: no fsync
    assert len(synced) == 2
    LeaderEpochCache(None, []).sync()  # a cache without a file owes nothing


def test_a_rewrite_during_a_sync_stays_owed(tmp_path: Path) -> None:
    """The log manager syncs on an I/O thread while the event loop may rewrite the checkpoint:
    the sync clears only the rewrites it covered."""
    file = checkpoint_file(tmp_path)
    cache = LeaderEpochCache(file, [])
    cache.assign(1, 0)
    real_sync = file.sync

    def sync_while_a_leader_epoch_starts() -> None:
        real_sync()
        cache.assign(2, 4)  # the event loop, between the fsync and the end of `sync`

    file.sync = sync_while_a_leader_epoch_starts  # type: ignore[method-assign]
    cache.sync()
    assert cache.needs_sync
    file.sync = real_sync  # type: ignore[method-assign]
    cache.sync()
    assert not cache.needs_sync and file.read() == [EpochEntry(1, 0), EpochEntry(2, 4)]


# ---- a new leadership: in memory at once, in the file at its epoch's first append ---------

def test_an_assign_without_write_is_owed_until_written_and_a_failed_write_stays_owed(tmp_path: Path) -> None:
    file = checkpoint_file(tmp_path)
    cache = LeaderEpochCache(file, [EpochEntry(*e) for e in THREE])
    file.write(cache.entries)
    cache.assign(7, LEO, write=False)
    assert as_tuples(cache) == [*THREE, (7, LEO)] and cache.owes_write and not cache.needs_sync
    assert cache.end_offset_for(6, LEO) == EpochEndOffset(5, LEO)  # answered from memory at once
    assert file.read() == [EpochEntry(*e) for e in THREE]
    real_write = file.write

    def full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    file.write = full_disk  # type: ignore[method-assign]
    with pytest.raises(OSError):
        cache.write_owed()
    assert cache.owes_write
    file.write = real_write  # type: ignore[method-assign]
    cache.write_owed()
    assert file.read() == cache.entries and not cache.owes_write and cache.needs_sync
    cache.write_owed()  # nothing owed: no write
    assert cache.needs_sync


@pytest.mark.parametrize("op", [lambda c: c.assign(8, LEO + 5), lambda c: c.truncate_from_start(12)],
                         ids=["assign", "truncate-from-start"])
def test_any_other_write_carries_the_owed_entry(tmp_path: Path, op: Op) -> None:
    cache = cache_of(THREE, tmp_path)
    cache.assign(7, LEO, write=False)
    op(cache)
    assert checkpoint_file(tmp_path).read() == cache.entries and not cache.owes_write
