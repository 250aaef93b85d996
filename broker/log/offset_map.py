"""Key -> latest offset over a dirty section (Kafka's SkimpyOffsetMap), filled and read in
bulk. No I/O.

Kafka stores a 16-byte MD5 of each key and an 8-byte offset per entry in a fixed buffer
(`log.cleaner.dedupe.buffer.size`). Here a key is its 128-bit hash from
`record_columns.hash_keys` (two 64-bit lanes), kept in three numpy arrays sorted by the
first lane: a chunk of keys is merged in with one sort of the chunk and one linear insert,
and looked up with one binary search, no Python work per key. Identical first lanes with
different second lanes (a 64-bit collision, ~never) are resolved exactly, one by one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from broker.log.record_columns import I64, U64, hash_key_bytes

# Kafka sizes the dedupe buffer for 24 bytes per entry (a 16-byte MD5 of the key and an
# 8-byte offset) and fills it to `log.cleaner.io.buffer.load.factor`.
BYTES_PER_MAP_ENTRY = 24
DEFAULT_LOAD_FACTOR = 0.9
ABSENT = -1


class OffsetMap:
    """At most `capacity` keys, each with its latest offset; `latest_offset` is the highest
    offset put (-1: empty)."""

    __slots__ = ("_h1", "_h2", "_offsets", "capacity", "latest_offset", "seed")

    def __init__(self, capacity: int, *, seed: int = 0) -> None:
        if capacity < 1:
            raise ValueError(f"offset map capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.seed = seed
        self.clear()

    @classmethod
    def for_buffer(cls, dedupe_buffer_bytes: int, *, threads: int = 1,
                   load_factor: float = DEFAULT_LOAD_FACTOR) -> OffsetMap:
        """A map as big as Kafka's for `log.cleaner.dedupe.buffer.size` over `threads`."""
        per_thread = dedupe_buffer_bytes // max(1, threads)
        return cls(max(1, int(per_thread * load_factor) // BYTES_PER_MAP_ENTRY))

    def __len__(self) -> int:
        return len(self._h1)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, bytes) and self.get(key) != ABSENT

    @property
    def is_full(self) -> bool:
        return len(self) >= self.capacity

    def room_for(self, keys: int) -> bool:
        """Whether `keys` new keys still fit (an upper bound: some may be present)."""
        return len(self) + keys <= self.capacity

    def clear(self) -> None:
        self._h1: U64 = np.empty(0, np.uint64)
        self._h2: U64 = np.empty(0, np.uint64)
        self._offsets: I64 = np.empty(0, np.int64)
        self.latest_offset = -1

    # ---- one key (tests, the per-record reference path) ----------------------------------

    def put(self, key: bytes, offset: int) -> None:
        h1, h2 = hash_key_bytes([key], self.seed)
        self.put_hashes(h1, h2, np.array([offset], np.int64))

    def get(self, key: bytes) -> int:
        """The latest offset of `key`, or -1."""
        h1, h2 = hash_key_bytes([key], self.seed)
        return int(self.lookup(h1, h2)[0])

    # ---- in bulk ------------------------------------------------------------------------

    def find(self, h1: U64, h2: U64) -> I64:
        """Index in the map of each key (-1: absent); fastest with `h1` sorted."""
        keys, n = self._h1, len(self._h1)
        if not n:
            return np.full(len(h1), ABSENT, np.int64)
        left = np.searchsorted(keys, h1)
        at = np.minimum(left, n - 1)
        hit = keys[at] == h1
        index = np.where(hit & (self._h2[at] == h2), at, ABSENT).astype(np.int64)
        following = np.minimum(at + 1, n - 1)
        in_run = hit & (following != at) & (keys[following] == h1)
        for i in np.flatnonzero(in_run):  # first-lane collisions in the map only: ~never
            j = int(at[i])
            while j < n and keys[j] == h1[i]:  # bounded by the run's length
                if self._h2[j] == h2[i]:
                    index[i] = j
                    break
                j += 1
        return index

    def lookup(self, h1: U64, h2: U64) -> I64:
        """The latest offset of each key (-1: absent). The keys are searched in sorted
        order (binary searches that walk the map forward), without grouping equal ones."""
        if not len(self._h1) or not len(h1):
            return np.full(len(h1), ABSENT, np.int64)
        order = np.argsort(h1)
        index = self.find(h1[order], h2[order])
        latest = np.empty(len(h1), np.int64)
        latest[order] = np.where(index >= 0, self._offsets[np.maximum(index, 0)], ABSENT)
        return latest

    def new_keys(self, h1: U64, h2: U64) -> I64:
        """Per key, 1 where it is neither in the map nor earlier in the arrays, else 0: the
        running sum is how many entries the keys up to each one would add."""
        new = np.zeros(len(h1), np.int64)
        if len(h1):
            groups = _group(h1, h2)
            first = np.minimum.reduceat(groups.order, groups.starts)
            new[first[self.find(groups.h1, groups.h2) < 0]] = 1
        return new

    def put_hashes(self, h1: U64, h2: U64, offsets: I64) -> None:
        """Map each key to its offset (offsets ascending, as in the log: the last wins)."""
        if not len(h1):
            return
        groups = _group(h1, h2)
        latest = np.maximum.reduceat(offsets[groups.order], groups.starts)
        index = self.find(groups.h1, groups.h2)
        present = index >= 0
        self._offsets[index[present]] = latest[present]
        fresh = ~present
        at = np.searchsorted(self._h1, groups.h1[fresh])
        self._h1 = np.insert(self._h1, at, groups.h1[fresh])
        self._h2 = np.insert(self._h2, at, groups.h2[fresh])
        self._offsets = np.insert(self._offsets, at, latest[fresh])
        self.latest_offset = max(self.latest_offset, int(offsets.max()))


@dataclass(frozen=True, slots=True)
class KeyGroups:
    """Keys sorted by hash (`order`: their indexes), grouped: each distinct key's lanes,
    where its group starts in sorted order, and each sorted key's group."""

    order: I64
    h1: U64
    h2: U64
    starts: I64
    group_of_sorted: I64


def _group(h1: U64, h2: U64) -> KeyGroups:
    order = np.argsort(h1)
    s1, s2 = h1[order], h2[order]
    if np.any((s1[1:] == s1[:-1]) & (s2[1:] != s2[:-1])):
        # keys sharing a first lane (a 64-bit collision): sort by both lanes
        order = np.lexsort((h2, h1))
        s1, s2 = h1[order], h2[order]
    boundary = np.ones(len(order), np.bool_)
    boundary[1:] = (s1[1:] != s1[:-1]) | (s2[1:] != s2[:-1])
    starts = np.flatnonzero(boundary)
    return KeyGroups(order, s1[starts], s2[starts], starts, np.cumsum(boundary) - 1)
