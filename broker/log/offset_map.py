"""Key -> latest offset over a dirty section (Kafka's SkimpyOffsetMap), filled and read in
bulk. No I/O.

Kafka stores a 16-byte MD5 of each key and an 8-byte offset per entry in a fixed buffer
(`log.cleaner.dedupe.buffer.size`) used as an open-addressing hash table. Here a key is
its 128-bit hash from `record_columns.hash_keys` (two 64-bit lanes), and the table is
three numpy arrays probed linearly: a chunk of keys is put or looked up in rounds, each
round one gather (and for puts one scatter) over the keys still probing, so the work per
key is a few array elements and no sort. Most keys settle in the first round: the table
is kept at most half full until it reaches the size of Kafka's buffer (`capacity` keys at
the load factor), which bounds its memory as the dedupe buffer bounds Kafka's.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from broker.log.record_columns import I64, U64, hash_key_bytes

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

# Kafka sizes the dedupe buffer for 24 bytes per entry (a 16-byte MD5 of the key and an
# 8-byte offset) and fills it to `log.cleaner.io.buffer.load.factor`.
BYTES_PER_MAP_ENTRY = 24
DEFAULT_LOAD_FACTOR = 0.9
ABSENT = -1
# The table doubles while it would be more than half full (short probe runs), from
# MIN_SLOTS up to the size of Kafka's buffer for `capacity` keys.
GROWTH_LOAD = 0.5
MIN_SLOTS = 1024
MAX_SLOTS = 1 << 32  # the home slot is (high 32 bits of the first lane * slots) >> 32
_U32 = np.uint64(32)
# layouts of every map: a slot from `put_hashes` stays its key's while the layout lasts
_LAYOUTS = itertools.count()


class OffsetMap:
    """At most `capacity` keys, each with its latest offset; `latest_offset` is the highest
    offset put (-1: empty)."""

    __slots__ = ("_count", "_h1", "_h2", "_offsets", "capacity", "latest_offset", "layout",
                 "max_slots", "seed")

    def __init__(self, capacity: int, *, seed: int = 0,
                 load_factor: float = DEFAULT_LOAD_FACTOR) -> None:
        if capacity < 1:
            raise ValueError(f"offset map capacity must be at least 1, got {capacity}")
        # one slot always stays empty, so that every probe run ends
        self.max_slots = max(capacity + 1, int(capacity / load_factor))
        if self.max_slots > MAX_SLOTS:
            raise ValueError(f"offset map capacity {capacity} is over {MAX_SLOTS} slots")
        self.capacity = capacity
        self.seed = seed
        self.clear()

    @classmethod
    def for_buffer(cls, dedupe_buffer_bytes: int, *, threads: int = 1,
                   load_factor: float = DEFAULT_LOAD_FACTOR) -> OffsetMap:
        """A map as big as Kafka's for `log.cleaner.dedupe.buffer.size` over `threads`."""
        per_thread = dedupe_buffer_bytes // max(1, threads)
        return cls(max(1, int(per_thread * load_factor) // BYTES_PER_MAP_ENTRY),
                   load_factor=load_factor)

    def __len__(self) -> int:
        return self._count

    def __contains__(self, key: object) -> bool:
        return isinstance(key, bytes) and self.get(key) != ABSENT

    @property
    def slots(self) -> int:
        return len(self._offsets)

    @property
    def is_full(self) -> bool:
        return self._count >= self.capacity

    def room_for(self, keys: int) -> bool:
        """Whether `keys` new keys still fit (an upper bound: some may be present)."""
        return self._count + keys <= self.capacity

    def clear(self) -> None:
        self._allocate(min(MIN_SLOTS, self.max_slots))
        self._count = 0
        self.latest_offset = -1

    def _allocate(self, slots: int) -> None:
        # keys move only when the table is made anew: emptied, or grown and rehashed
        self.layout = next(_LAYOUTS)
        self._h1: U64 = np.zeros(slots, np.uint64)
        self._h2: U64 = np.zeros(slots, np.uint64)
        self._offsets: I64 = np.full(slots, ABSENT, np.int64)  # ABSENT: an empty slot

    # ---- one key (tests, the per-record reference path) ----------------------------------

    def put(self, key: bytes, offset: int) -> None:
        h1, h2 = hash_key_bytes([key], self.seed)
        self.put_hashes(h1, h2, np.array([offset], np.int64))

    def get(self, key: bytes) -> int:
        """The latest offset of `key`, or -1."""
        h1, h2 = hash_key_bytes([key], self.seed)
        return int(self.lookup(h1, h2)[0])

    # ---- in bulk ------------------------------------------------------------------------

    def _home(self, h1: U64) -> I64:
        return (((h1 >> _U32) * np.uint64(self.slots)) >> _U32).astype(np.int64)

    def _next(self, slot: I64) -> I64:
        slot += 1
        slot[slot == self.slots] = 0
        return slot

    def lookup(self, h1: U64, h2: U64) -> I64:
        """The latest offset of each key (-1: absent)."""
        latest = np.full(len(h1), ABSENT, np.int64)
        if not self._count or not len(h1):
            return latest
        probing = np.arange(len(h1), dtype=np.int64)
        slot = self._home(h1)
        p1, p2 = h1, h2
        for _ in range(self.slots):  # bounded: a probe run never passes every slot
            offsets = self._offsets[slot]
            found = (self._h1[slot] == p1) & (self._h2[slot] == p2) & (offsets != ABSENT)
            latest[probing[found]] = offsets[found]
            go_on = np.flatnonzero(~found & (offsets != ABSENT))
            if not len(go_on):
                break
            probing, slot, p1, p2 = probing[go_on], self._next(slot[go_on]), p1[go_on], p2[go_on]
        return latest

    def new_keys(self, h1: U64, h2: U64) -> I64:
        """Per key, 1 where it is neither in the map nor earlier in the arrays, else 0: the
        running sum is how many entries the keys up to each one would add. (Asked only
        when the map may fill within a chunk: one sort of the chunk's keys.)"""
        new = np.zeros(len(h1), np.int64)
        if len(h1):
            groups = _group(h1, h2)
            first = np.minimum.reduceat(groups.order, groups.starts)
            new[first[self.lookup(groups.h1, groups.h2) == ABSENT]] = 1
        return new

    def put_hashes(self, h1: U64, h2: U64, offsets: I64) -> I64:
        """Map each key to its offset (offsets ascending, as in the log: the last wins)
        and return each key's slot, valid while `layout` stays the same (`at_slots`). The
        caller keeps the map within `capacity` (`room_for`)."""
        if not len(h1):
            return np.empty(0, np.int64)
        needed = self._count + len(h1)
        if needed > self.slots * GROWTH_LOAD and self.slots < self.max_slots:
            self._grow(needed)
        filled, slots = self._insert(h1, h2, offsets)
        self._count += filled
        if self._count >= self.slots:
            raise ValueError(f"offset map over its capacity {self.capacity}")
        self.latest_offset = max(self.latest_offset, int(offsets.max()))
        return slots

    def at_slots(self, slots: I64) -> I64:
        """The latest offset of the keys `put_hashes` put at `slots` under the current
        `layout`: the filter pass's lookup of keys the map pass put, without probing."""
        return self._offsets[slots]

    def _grow(self, needed: int) -> None:
        slots = self.slots
        while slots < needed / GROWTH_LOAD and slots < self.max_slots:  # bounded: doubling
            slots *= 2
        used = np.flatnonzero(self._offsets != ABSENT)
        h1, h2, offsets = self._h1[used], self._h2[used], self._offsets[used]
        self._allocate(min(slots, self.max_slots))
        self._insert(h1, h2, offsets)

    def _insert(self, h1: U64, h2: U64, offsets: I64) -> tuple[int, I64]:
        """Put the keys in, probing in rounds; return how many slots were newly filled and
        each key's slot.

        Keys claiming the same empty slot in a round (the same key, or keys sharing a home)
        are settled without relying on which write of a repeated index lands last: the
        slot takes some claimant's first lane, then some claimant of that first lane's
        second lane; the claimants equal to the key the slot then holds settle there, the
        others probe on. Offsets settle with a maximum (the latest wins)."""
        table1, table2, table_offsets = self._h1, self._h2, self._offsets
        filled = 0
        slot = self._home(h1)
        where = slot  # each key's slot, once settled (the first round settles most)
        probing: I64 | None = None  # indexes of the keys still probing (None: all)
        for _ in range(self.slots):  # bounded: a probe run never passes every slot
            claim = np.flatnonzero(table_offsets[slot] == ABSENT)
            if len(claim):
                at = slot[claim]
                table1[at] = h1[claim]
                first_lane = table1[at] == h1[claim]
                table2[at[first_lane]] = h2[claim[first_lane]]
                # slots newly filled: one claimant's mark lands in each
                mark = -2 - np.arange(len(claim), dtype=np.int64)
                table_offsets[at] = mark
                filled += int(np.count_nonzero(table_offsets[at] == mark))
                table_offsets[at] = ABSENT
            # claimants now see the key their slot holds, like any key at a full slot
            settled = (table1[slot] == h1) & (table2[slot] == h2)
            np.maximum.at(table_offsets, slot[settled], offsets[settled])
            if probing is not None:
                where[probing[settled]] = slot[settled]
            go_on = np.flatnonzero(~settled)
            if not len(go_on):
                break
            if probing is None:
                where, probing = slot, go_on  # `slot` is rebound below, never changed
            else:
                probing = probing[go_on]
            slot, h1, h2, offsets = self._next(slot[go_on]), h1[go_on], h2[go_on], offsets[go_on]
        else:
            raise ValueError(f"offset map over its capacity {self.capacity}: no empty slot")
        return filled, where


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
    order = np.lexsort((h2, h1))
    s1, s2 = h1[order], h2[order]
    boundary = np.ones(len(order), np.bool_)
    boundary[1:] = (s1[1:] != s1[:-1]) | (s2[1:] != s2[:-1])
    starts = np.flatnonzero(boundary)
    return KeyGroups(order, s1[starts], s2[starts], starts, np.cumsum(boundary) - 1)
