"""Tests for broker/log/time_index.py: entries only when the max timestamp grows, lookups
at every boundary, truncation in memory and on disk, flush/load round trips, fullness and
the sanity checks run when a segment is loaded."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log.sparse_index import CorruptIndexError
from broker.log.time_index import NO_TIMESTAMP, TimeIndex, TimestampOffset

ENTRY = struct.Struct(">qi")  # timestamp, relative offset: Kafka's .timeindex layout
BASE = 100
MAX_INDEX_BYTES = 10 * 1024 * 1024
NEVER_WRITTEN = Path("no-such-directory")
T0 = 1_700_000_000_000
# (max timestamp so far, offset of that timestamp), as the log appends them.
ENTRIES = [(T0, 104), (T0 + 5, 109), (T0 + 10, 120)]
NEXT_OFFSET = 125  # the segment's log end offset


def new_index(path: Path, entries: list[tuple[int, int]] = ENTRIES, *,
              base: int = BASE, max_index_bytes: int = MAX_INDEX_BYTES) -> TimeIndex:
    index = TimeIndex(path / f"{base:020d}.timeindex", base, max_index_bytes)
    for timestamp, offset in entries:
        index.maybe_append(timestamp, offset)
    return index


def loaded(index: TimeIndex) -> TimeIndex:
    """A fresh index over the same file, loaded from disk."""
    other = TimeIndex(index.path, index.base_offset, MAX_INDEX_BYTES)
    other.load()
    return other


def entries_of(index: TimeIndex) -> list[tuple[int, int]]:
    return [(k, index.base_offset + v) for k, v in zip(index.keys, index.values)]


def raw(entries: list[tuple[int, int]], base: int = BASE) -> bytes:
    return b"".join(ENTRY.pack(timestamp, offset - base) for timestamp, offset in entries)


# --- maybe_append ----------------------------------------------------------------------

APPEND_CASES = [
    pytest.param((T0 + 11, 121), [*ENTRIES, (T0 + 11, 121)], id="larger-timestamp-appends"),
    pytest.param((T0 + 10, 121), ENTRIES, id="same-timestamp-ignored"),
    pytest.param((T0 + 7, 122), ENTRIES, id="smaller-timestamp-ignored"),
    pytest.param((NO_TIMESTAMP, 122), ENTRIES, id="no-timestamp-ignored"),
    pytest.param((T0 + 11, 120), [*ENTRIES, (T0 + 11, 120)], id="same-offset-larger-timestamp"),
]


@pytest.mark.parametrize(("append", "expected"), APPEND_CASES)
def test_maybe_append(tmp_path: Path, append: tuple[int, int],
                      expected: list[tuple[int, int]]) -> None:
    index = new_index(tmp_path)
    index.maybe_append(*append)
    assert entries_of(index) == expected


def test_maybe_append_on_empty_index_takes_any_timestamp(tmp_path: Path) -> None:
    index = new_index(tmp_path, [])
    index.maybe_append(0, BASE)
    assert entries_of(index) == [(0, BASE)]


def test_maybe_append_rejects_an_offset_below_the_last_entry(tmp_path: Path) -> None:
    # Kafka's TimeIndex.maybeAppend throws InvalidOffsetException here: truncate_to bisects
    # the offsets, so they must stay sorted.
    index = new_index(tmp_path)
    with pytest.raises(ValueError):
        index.maybe_append(T0 + 20, 110)
    assert entries_of(index) == ENTRIES


@pytest.mark.parametrize("timestamp", [T0 + 10, T0])
def test_append_entry_requires_strictly_increasing_timestamps(tmp_path: Path,
                                                              timestamp: int) -> None:
    index = new_index(tmp_path)
    with pytest.raises(ValueError, match=f"key {timestamp} after {T0 + 10}"):
        index.append_entry(timestamp, 30)
    assert entries_of(index) == ENTRIES


# --- lookup ----------------------------------------------------------------------------

LOOKUP_CASES = [
    pytest.param(ENTRIES, 0, (NO_TIMESTAMP, BASE), id="long-before-first-entry"),
    pytest.param(ENTRIES, T0 - 1, (NO_TIMESTAMP, BASE), id="just-before-first-entry"),
    pytest.param(ENTRIES, T0, (T0, 104), id="on-first-entry"),
    pytest.param(ENTRIES, T0 + 1, (T0, 104), id="just-after-first-entry"),
    pytest.param(ENTRIES, T0 + 4, (T0, 104), id="just-before-second-entry"),
    pytest.param(ENTRIES, T0 + 5, (T0 + 5, 109), id="on-second-entry"),
    pytest.param(ENTRIES, T0 + 7, (T0 + 5, 109), id="between-entries"),
    pytest.param(ENTRIES, T0 + 10, (T0 + 10, 120), id="on-last-entry"),
    pytest.param(ENTRIES, T0 + 11, (T0 + 10, 120), id="just-after-last-entry"),
    pytest.param(ENTRIES, 2**63 - 1, (T0 + 10, 120), id="max-long"),
    pytest.param([], T0, (NO_TIMESTAMP, BASE), id="empty"),
]


@pytest.mark.parametrize(("entries", "target", "expected"), LOOKUP_CASES)
def test_lookup(tmp_path: Path, entries: list[tuple[int, int]], target: int,
                expected: tuple[int, int]) -> None:
    index = new_index(tmp_path, entries)
    assert index.lookup(target) == TimestampOffset(*expected)
    index.flush()
    assert loaded(index).lookup(target) == TimestampOffset(*expected)


@pytest.mark.parametrize(("entries", "expected"), [
    pytest.param([], (NO_TIMESTAMP, BASE), id="empty"),
    pytest.param(ENTRIES, (T0 + 10, 120), id="three-entries"),
])
def test_last_entry(tmp_path: Path, entries: list[tuple[int, int]],
                    expected: tuple[int, int]) -> None:
    assert new_index(tmp_path, entries).last_entry == TimestampOffset(*expected)


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


@pytest.mark.parametrize(("offset", "expected"), TRUNCATE_CASES)
def test_truncate_to_after_flush_shrinks_the_file(tmp_path: Path, offset: int,
                                                  expected: list[tuple[int, int]]) -> None:
    index = new_index(tmp_path)
    index.flush()
    index.truncate_to(offset)
    assert index.path.read_bytes() == raw(expected)
    index.flush()
    assert entries_of(loaded(index)) == expected


@pytest.mark.parametrize(("offset", "expected"), TRUNCATE_CASES)
def test_truncate_to_with_some_entries_unflushed(tmp_path: Path, offset: int,
                                                 expected: list[tuple[int, int]]) -> None:
    index = new_index(tmp_path, ENTRIES[:2])
    index.flush()
    index.maybe_append(*ENTRIES[2])
    index.truncate_to(offset)
    index.flush()
    assert entries_of(index) == expected
    assert index.path.read_bytes() == raw(expected)


def test_truncate_then_append_a_smaller_timestamp(tmp_path: Path) -> None:
    """After truncation the largest timestamp is the surviving entry's, so a timestamp
    below the removed ones is indexed again."""
    index = new_index(tmp_path)
    index.flush()
    index.truncate_to(109)
    index.maybe_append(T0 + 2, 110)
    index.flush()
    expected = [(T0, 104), (T0 + 2, 110)]
    assert entries_of(loaded(index)) == expected


# --- flush and load --------------------------------------------------------------------

@pytest.mark.parametrize("entries", [
    pytest.param([], id="empty"),
    pytest.param([(0, BASE)], id="timestamp-zero-at-base"),
    pytest.param(ENTRIES, id="three-entries"),
    pytest.param([(2**63 - 1, BASE + 2**31 - 1)], id="long-and-int32-limits"),
])
def test_flush_load_round_trip(tmp_path: Path, entries: list[tuple[int, int]]) -> None:
    index = new_index(tmp_path, entries)
    index.flush()
    assert index.path.read_bytes() == raw(entries)
    again = loaded(index)
    assert entries_of(again) == entries
    assert again.last_entry == index.last_entry


def test_file_layout_is_big_endian_long_then_relative_int(tmp_path: Path) -> None:
    index = new_index(tmp_path, [(0x0102030405060708, BASE + 9)])
    index.flush()
    assert index.path.read_bytes() == bytes.fromhex("0102030405060708" "00000009")


# --- is_full ---------------------------------------------------------------------------

@pytest.mark.parametrize(("max_index_bytes", "max_entries"), [
    pytest.param(36, 3, id="exact-multiple"),
    pytest.param(47, 3, id="rounds-down"),
    pytest.param(12, 1, id="one-entry"),
    pytest.param(8, 1, id="smaller-than-an-entry-still-holds-one"),
])
def test_is_full_at_max_entries(tmp_path: Path, max_index_bytes: int, max_entries: int) -> None:
    index = new_index(tmp_path, [], max_index_bytes=max_index_bytes)
    assert index.max_entries == max_entries
    for i in range(max_entries):
        assert not index.is_full
        index.maybe_append(T0 + i, BASE + i)
    assert index.is_full


# --- load and sanity_check -------------------------------------------------------------

def write_index(tmp_path: Path, data: bytes) -> TimeIndex:
    index = new_index(tmp_path, [])
    index.path.write_bytes(data)
    index.load()
    return index


SANE_CASES = [
    pytest.param(b"", NEXT_OFFSET, id="empty"),
    pytest.param(raw(ENTRIES), NEXT_OFFSET, id="three-entries"),
    pytest.param(raw(ENTRIES), 121, id="last-offset-just-below-next-offset"),
    pytest.param(raw([(T0, 104), (T0 + 1, 104)]), NEXT_OFFSET, id="offset-repeats"),
    pytest.param(raw([(0, BASE)]), BASE + 1, id="timestamp-zero-at-base"),
]


@pytest.mark.parametrize(("data", "next_offset"), SANE_CASES)
def test_sanity_check_accepts(tmp_path: Path, data: bytes, next_offset: int) -> None:
    write_index(tmp_path, data).sanity_check(next_offset)


CORRUPT_CASES = [
    pytest.param(raw([(T0 + 5, 104), (T0, 109)]), NEXT_OFFSET, id="timestamps-decrease"),
    pytest.param(raw([(T0, 104), (T0, 109)]), NEXT_OFFSET, id="timestamp-repeats"),
    pytest.param(raw([(T0, 109), (T0 + 5, 104)]), NEXT_OFFSET, id="offsets-decrease"),
    pytest.param(raw([(T0, BASE - 1)]), NEXT_OFFSET, id="offset-below-base"),
    pytest.param(raw(ENTRIES), 120, id="offset-at-next-offset"),
    pytest.param(raw(ENTRIES), 110, id="offset-past-next-offset"),
    pytest.param(raw([(T0, BASE)]), BASE, id="entry-in-empty-segment"),
]


@pytest.mark.parametrize(("data", "next_offset"), CORRUPT_CASES)
def test_sanity_check_rejects(tmp_path: Path, data: bytes, next_offset: int) -> None:
    index = write_index(tmp_path, data)
    with pytest.raises(CorruptIndexError, match=str(index.path)):
        index.sanity_check(next_offset)


@pytest.mark.parametrize("size", [1, 8, 11, 13, 30])
def test_load_rejects_a_partial_entry(tmp_path: Path, size: int) -> None:
    data = (raw(ENTRIES) * 2)[:size]
    with pytest.raises(CorruptIndexError, match=f"size {size}, not a multiple"):
        write_index(tmp_path, data)


def test_load_of_a_missing_file_is_corrupt(tmp_path: Path) -> None:
    index = new_index(tmp_path, [])
    with pytest.raises(CorruptIndexError, match="missing"):
        index.load()


# --- property: lookup is a floor search ------------------------------------------------

@settings(deadline=None)
@given(
    base=st.integers(0, 2**40),
    timestamps=st.lists(st.integers(0, 10_000), unique=True, max_size=40).map(sorted),
    targets=st.lists(st.integers(-100, 10_100), min_size=1, max_size=20),
)
def test_lookup_is_a_floor_search(base: int, timestamps: list[int],
                                  targets: list[int]) -> None:
    entries = [(T0 + ts, base + i) for i, ts in enumerate(timestamps)]
    index = new_index(NEVER_WRITTEN, entries, base=base)  # lookups never touch the file
    for relative in targets:
        target = T0 + relative
        below = [entry for entry in entries if entry[0] <= target]
        expected = below[-1] if below else (NO_TIMESTAMP, base)
        assert index.lookup(target) == expected


@settings(deadline=None)
@given(
    offsets=st.lists(st.integers(0, 5_000), unique=True, max_size=40).map(sorted),
    target=st.integers(-100, 5_100),
)
def test_truncate_to_keeps_exactly_the_entries_below(offsets: list[int], target: int) -> None:
    entries = [(T0 + 7 * i, BASE + offset) for i, offset in enumerate(offsets)]
    index = new_index(NEVER_WRITTEN, entries)
    index.truncate_to(BASE + target)  # never flushed, so the file is not touched
    assert entries_of(index) == [entry for entry in entries if entry[1] < BASE + target]
