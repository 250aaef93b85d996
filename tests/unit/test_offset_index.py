"""Tests for broker/log/offset_index.py (and the SparseIndex machinery under it): lookups at
every boundary, key ordering, truncation in memory and on disk, flush/load round trips,
fullness and the sanity checks run when a segment is loaded."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log.offset_index import OffsetIndex, OffsetPosition
from broker.log.sparse_index import CorruptIndexError
from common.errors import KafkaStorageError

ENTRY = struct.Struct(">ii")  # relative offset, position: Kafka's .index layout
BASE = 100
MAX_INDEX_BYTES = 10 * 1024 * 1024
NEVER_WRITTEN = Path("no-such-directory")
# (batch last offset, batch start position), as the log appends them.
ENTRIES = [(104, 0), (109, 350), (120, 900)]
LOG_SIZE = 1_200  # bytes in the segment the entries point into


def new_index(path: Path, entries: list[tuple[int, int]] = ENTRIES, *,
              base: int = BASE, max_index_bytes: int = MAX_INDEX_BYTES) -> OffsetIndex:
    index = OffsetIndex(path / f"{base:020d}.index", base, max_index_bytes)
    for offset, position in entries:
        index.append(offset, position)
    return index


def loaded(index: OffsetIndex) -> OffsetIndex:
    """A fresh index over the same file, loaded from disk."""
    other = OffsetIndex(index.path, index.base_offset, MAX_INDEX_BYTES)
    other.load()
    return other


def entries_of(index: OffsetIndex) -> list[tuple[int, int]]:
    return [(index.base_offset + k, v) for k, v in zip(index.keys, index.values)]


def raw(entries: list[tuple[int, int]], base: int = BASE) -> bytes:
    return b"".join(ENTRY.pack(offset - base, position) for offset, position in entries)


# --- lookup ----------------------------------------------------------------------------

LOOKUP_CASES = [
    pytest.param(ENTRIES, 0, (BASE, 0), id="below-base-offset"),
    pytest.param(ENTRIES, BASE, (BASE, 0), id="base-offset-before-first-entry"),
    pytest.param(ENTRIES, 103, (BASE, 0), id="just-before-first-entry"),
    pytest.param(ENTRIES, 104, (104, 0), id="on-first-entry"),
    pytest.param(ENTRIES, 105, (104, 0), id="just-after-first-entry"),
    pytest.param(ENTRIES, 108, (104, 0), id="just-before-second-entry"),
    pytest.param(ENTRIES, 109, (109, 350), id="on-second-entry"),
    pytest.param(ENTRIES, 115, (109, 350), id="between-entries"),
    pytest.param(ENTRIES, 119, (109, 350), id="just-before-last-entry"),
    pytest.param(ENTRIES, 120, (120, 900), id="on-last-entry"),
    pytest.param(ENTRIES, 121, (120, 900), id="just-after-last-entry"),
    pytest.param(ENTRIES, BASE + 2**31 - 1, (120, 900), id="largest-relative-offset"),
    pytest.param([], BASE, (BASE, 0), id="empty-at-base"),
    pytest.param([], 5_000, (BASE, 0), id="empty-far-after"),
    pytest.param([(BASE, 0)], BASE, (BASE, 0), id="entry-at-base-offset"),
]


@pytest.mark.parametrize(("entries", "target", "expected"), LOOKUP_CASES)
def test_lookup(tmp_path: Path, entries: list[tuple[int, int]], target: int,
                expected: tuple[int, int]) -> None:
    index = new_index(tmp_path, entries)
    assert index.lookup(target) == OffsetPosition(*expected)
    index.flush()
    assert loaded(index).lookup(target) == OffsetPosition(*expected)


@pytest.mark.parametrize(("entries", "expected"), [
    pytest.param([], (BASE, 0), id="empty"),
    pytest.param(ENTRIES, (120, 900), id="three-entries"),
])
def test_last_entry(tmp_path: Path, entries: list[tuple[int, int]],
                    expected: tuple[int, int]) -> None:
    assert new_index(tmp_path, entries).last_entry == OffsetPosition(*expected)


# --- append ----------------------------------------------------------------------------

@pytest.mark.parametrize("offset", [
    pytest.param(120, id="equal-to-last"),
    pytest.param(119, id="below-last"),
    pytest.param(BASE, id="base-offset"),
])
def test_append_requires_strictly_increasing_offsets(tmp_path: Path, offset: int) -> None:
    index = new_index(tmp_path)
    with pytest.raises(ValueError, match=f"key {offset - BASE} after {120 - BASE}"):
        index.append(offset, 1_000)
    assert entries_of(index) == ENTRIES


def test_append_stores_relative_offsets_big_endian(tmp_path: Path) -> None:
    index = new_index(tmp_path, [], base=2**40)
    index.append(2**40 + 7, 4096)
    index.flush()
    assert index.path.read_bytes() == ENTRY.pack(7, 4096) == bytes.fromhex("0000000700001000")


# --- truncate_to -----------------------------------------------------------------------

TRUNCATE_CASES = [
    pytest.param(0, [], id="below-base-offset"),
    pytest.param(BASE, [], id="base-offset"),
    pytest.param(104, [], id="on-first-entry"),
    pytest.param(105, ENTRIES[:1], id="just-after-first-entry"),
    pytest.param(109, ENTRIES[:1], id="on-second-entry"),
    pytest.param(110, ENTRIES[:2], id="just-after-second-entry"),
    pytest.param(120, ENTRIES[:2], id="on-last-entry"),
    pytest.param(121, ENTRIES, id="just-after-last-entry"),
    pytest.param(10_000, ENTRIES, id="far-after-last-entry"),
]


@pytest.mark.parametrize(("offset", "expected"), TRUNCATE_CASES)
def test_truncate_to_in_memory(tmp_path: Path, offset: int,
                               expected: list[tuple[int, int]]) -> None:
    index = new_index(tmp_path)
    index.truncate_to(offset)
    assert entries_of(index) == expected
    assert len(index) == len(expected)


@pytest.mark.parametrize(("offset", "expected"), TRUNCATE_CASES)
def test_truncate_to_after_flush_shrinks_the_file(tmp_path: Path, offset: int,
                                                  expected: list[tuple[int, int]]) -> None:
    index = new_index(tmp_path)
    index.flush()
    index.truncate_to(offset)
    assert index.path.read_bytes() == raw(expected)  # cut in the file, without a flush
    index.flush()
    assert entries_of(loaded(index)) == expected


@pytest.mark.parametrize(("offset", "expected"), TRUNCATE_CASES)
def test_truncate_to_with_some_entries_unflushed(tmp_path: Path, offset: int,
                                                 expected: list[tuple[int, int]]) -> None:
    index = new_index(tmp_path, ENTRIES[:2])
    index.flush()
    index.append(*ENTRIES[2])  # in memory only
    index.truncate_to(offset)
    index.flush()
    assert entries_of(index) == expected
    assert index.path.read_bytes() == raw(expected)


def test_append_after_truncate_then_flush_rewrites_the_tail(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    index.flush()
    index.truncate_to(105)
    index.append(106, 120)
    index.append(130, 700)
    index.flush()
    expected = [(104, 0), (106, 120), (130, 700)]
    assert index.path.read_bytes() == raw(expected)
    assert entries_of(loaded(index)) == expected


def test_reset_empties_memory_and_file(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    index.flush()
    index.reset()
    assert len(index) == 0
    assert index.path.read_bytes() == b""


# --- flush and load --------------------------------------------------------------------

@pytest.mark.parametrize("entries", [
    pytest.param([], id="empty"),
    pytest.param([(BASE, 0)], id="entry-at-base"),
    pytest.param(ENTRIES, id="three-entries"),
    pytest.param([(BASE + 2**31 - 1, 2**31 - 1)], id="int32-limits"),
])
def test_flush_load_round_trip(tmp_path: Path, entries: list[tuple[int, int]]) -> None:
    index = new_index(tmp_path, entries)
    index.flush()
    assert index.path.read_bytes() == raw(entries)
    again = loaded(index)
    assert entries_of(again) == entries
    assert again.last_entry == index.last_entry


def test_flush_in_steps_appends_only_the_new_entries(tmp_path: Path) -> None:
    index = new_index(tmp_path, ENTRIES[:1])
    index.flush()
    for entry in ENTRIES[1:]:
        index.append(*entry)
        index.flush()
    assert index.path.read_bytes() == raw(ENTRIES)


def test_flush_of_an_empty_index_creates_the_file(tmp_path: Path) -> None:
    index = new_index(tmp_path, [])
    index.flush()
    assert index.path.read_bytes() == b""
    assert entries_of(loaded(index)) == []


def test_loaded_index_continues_appending(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    index.flush()
    again = loaded(index)
    with pytest.raises(ValueError):
        again.append(120, 1_000)
    again.append(125, 1_000)
    again.flush()
    assert again.path.read_bytes() == raw([*ENTRIES, (125, 1_000)])


# --- is_full ---------------------------------------------------------------------------

@pytest.mark.parametrize(("max_index_bytes", "max_entries"), [
    pytest.param(24, 3, id="exact-multiple"),
    pytest.param(31, 3, id="rounds-down"),
    pytest.param(8, 1, id="one-entry"),
    pytest.param(4, 1, id="smaller-than-an-entry-still-holds-one"),
])
def test_is_full_at_max_entries(tmp_path: Path, max_index_bytes: int, max_entries: int) -> None:
    index = new_index(tmp_path, [], max_index_bytes=max_index_bytes)
    assert index.max_entries == max_entries
    for i in range(max_entries):
        assert not index.is_full
        index.append(BASE + i, 10 * i)
    assert index.is_full


# --- load and sanity_check -------------------------------------------------------------

def write_index(tmp_path: Path, data: bytes) -> OffsetIndex:
    index = new_index(tmp_path, [])
    index.path.write_bytes(data)
    index.load()
    return index


SANE_CASES = [
    pytest.param(b"", LOG_SIZE, id="empty"),
    pytest.param(raw(ENTRIES), LOG_SIZE, id="three-entries"),
    pytest.param(raw([(BASE, 0)]), 1, id="entry-at-base-offset-position-0"),
    pytest.param(raw([(104, 0), (109, LOG_SIZE - 1)]), LOG_SIZE, id="last-byte-of-log"),
]


@pytest.mark.parametrize(("data", "log_size"), SANE_CASES)
def test_sanity_check_accepts(tmp_path: Path, data: bytes, log_size: int) -> None:
    write_index(tmp_path, data).sanity_check(log_size)


CORRUPT_CASES = [
    pytest.param(raw([(109, 350), (104, 0)]), LOG_SIZE, id="offsets-decrease"),
    pytest.param(raw([(104, 0), (104, 350)]), LOG_SIZE, id="offset-repeats"),
    pytest.param(raw([(BASE - 1, 0)]), LOG_SIZE, id="offset-below-base"),
    pytest.param(raw([(104, 0), (109, LOG_SIZE)]), LOG_SIZE, id="position-at-log-size"),
    pytest.param(raw([(104, 0), (109, LOG_SIZE + 50)]), LOG_SIZE, id="position-past-log"),
    pytest.param(raw([(104, -1)]), LOG_SIZE, id="negative-position"),
    pytest.param(raw([(104, 0)]), 0, id="entry-into-empty-log"),
]


@pytest.mark.parametrize(("data", "log_size"), CORRUPT_CASES)
def test_sanity_check_rejects(tmp_path: Path, data: bytes, log_size: int) -> None:
    index = write_index(tmp_path, data)
    with pytest.raises(CorruptIndexError, match=str(index.path)):
        index.sanity_check(log_size)


@pytest.mark.parametrize("size", [1, 4, 7, 12, 17])
def test_load_rejects_a_partial_entry(tmp_path: Path, size: int) -> None:
    data = (raw(ENTRIES) * 2)[:size]
    with pytest.raises(CorruptIndexError, match=f"size {size}, not a multiple"):
        write_index(tmp_path, data)


def test_load_of_a_missing_file_is_corrupt(tmp_path: Path) -> None:
    index = new_index(tmp_path, [])
    with pytest.raises(CorruptIndexError, match="missing"):
        index.load()


def test_corrupt_index_is_a_storage_error() -> None:
    assert issubclass(CorruptIndexError, KafkaStorageError)


# --- property: lookup is a floor search ------------------------------------------------

@settings(deadline=None)
@given(
    base=st.integers(0, 2**40),
    keys=st.lists(st.integers(0, 5_000), unique=True, max_size=40).map(sorted),
    targets=st.lists(st.integers(-100, 5_100), min_size=1, max_size=20),
)
def test_lookup_is_a_floor_search(base: int, keys: list[int],
                                  targets: list[int]) -> None:
    entries = [(base + key, 10 * key + 3) for key in keys]
    index = new_index(NEVER_WRITTEN, entries, base=base)  # lookups never touch the file
    for relative in targets:
        target = base + relative
        below = [entry for entry in entries if entry[0] <= target]
        expected = below[-1] if below else (base, 0)
        assert index.lookup(target) == expected


@settings(deadline=None)
@given(
    keys=st.lists(st.integers(0, 5_000), unique=True, max_size=40).map(sorted),
    target=st.integers(-100, 5_100),
)
def test_truncate_to_keeps_exactly_the_entries_below(keys: list[int], target: int) -> None:
    entries = [(BASE + key, 10 * key) for key in keys]
    index = new_index(NEVER_WRITTEN, entries)
    index.truncate_to(BASE + target)  # never flushed, so the file is not touched
    assert entries_of(index) == [entry for entry in entries if entry[0] < BASE + target]


def test_is_full_is_an_attribute_every_change_of_the_entries_keeps(tmp_path: Path) -> None:
    """roll_reason reads is_full on every append: an attribute (no Python frame), which an
    append, a truncation, a reset, a load and an adoption each set."""
    index = new_index(tmp_path, [], max_index_bytes=16)  # two entries
    assert "is_full" in vars(index)
    index.append(BASE, 0)
    index.append(BASE + 1, 10)
    full = index.is_full
    index.flush()
    index.truncate_to(BASE + 1)
    truncated = index.is_full
    again = OffsetIndex(index.path, BASE, 16)
    again.load()  # truncate_to rewrote the file with its one entry
    loaded_one = again.is_full
    index.append(BASE + 1, 10)
    index.flush()
    again.load()
    loaded_two = again.is_full
    again.reset()
    reset = again.is_full
    again.adopt(index.keys, index.values)
    assert (full, truncated, loaded_one, loaded_two, reset, again.is_full) == (True, False, False, True, False, True)
