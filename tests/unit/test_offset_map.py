"""The cleaner's key -> latest offset map in bulk (broker/log/offset_map.py): it answers as
a dict of the keys would, first-lane hash collisions included."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log.offset_map import OffsetMap
from broker.log.record_columns import hash_key_bytes

CHUNKS = st.lists(st.lists(st.integers(0, 30), max_size=40), max_size=6)


@settings(max_examples=200, deadline=None)
@given(chunks=CHUNKS, probes=st.lists(st.integers(0, 40), max_size=30))
def test_bulk_map_answers_as_a_dict(chunks: list[list[int]], probes: list[int]) -> None:
    offset_map, model = OffsetMap(1000), {}
    offset = 0
    for chunk in chunks:
        keys = [b"k%d" % k for k in chunk]
        offsets = np.arange(offset, offset + len(keys), dtype=np.int64)
        h1, h2 = hash_key_bytes(keys)
        new = offset_map.new_keys(h1, h2)
        seen = set(model)
        expected_new = []
        for key in keys:
            expected_new.append(0 if key in seen else 1)
            seen.add(key)
        assert new.tolist() == expected_new
        offset_map.put_hashes(h1, h2, offsets)
        model.update(zip(keys, offsets.tolist()))
        offset += len(keys)
    assert len(offset_map) == len(model)
    asked = [b"k%d" % k for k in probes]
    h1, h2 = hash_key_bytes(asked)
    assert offset_map.lookup(h1, h2).tolist() == [model.get(k, -1) for k in asked]


def test_keys_sharing_a_first_hash_lane_stay_apart() -> None:
    offset_map = OffsetMap(10)
    h1 = np.array([5, 5, 5, 9], np.uint64)
    h2 = np.array([1, 2, 3, 1], np.uint64)
    offset_map.put_hashes(h1[:2], h2[:2], np.array([10, 11], np.int64))
    assert offset_map.new_keys(h1, h2).tolist() == [0, 0, 1, 1]
    offset_map.put_hashes(h1, h2, np.array([20, 21, 22, 23], np.int64))
    offset_map.put_hashes(h1[1:2], h2[1:2], np.array([30], np.int64))
    assert len(offset_map) == 4
    assert offset_map.lookup(np.array([5, 5, 5, 5, 9, 7], np.uint64),
                             np.array([3, 2, 1, 4, 1, 1], np.uint64)).tolist() == [
        22, 30, 20, -1, 23, -1]
    assert offset_map.latest_offset == 30


def test_single_keys_and_clear() -> None:
    offset_map = OffsetMap(3)
    offset_map.put(b"a", 1)
    offset_map.put(b"a", 4)
    assert offset_map.get(b"a") == 4 and offset_map.get(b"b") == -1 and b"a" in offset_map
    offset_map.clear()
    assert len(offset_map) == 0 and offset_map.latest_offset == -1 and offset_map.get(b"a") == -1


def test_keys_sharing_a_home_slot_and_wrapping_past_the_tables_end() -> None:
    # first lanes whose high 32 bits are all ones: every key's home is the last slot, so
    # the keys probe on from it around to slot 0, 1, ...
    offset_map = OffsetMap(100)
    h1 = np.array([0xFFFFFFFF_00000000 + i for i in range(6)], np.uint64)
    h2 = np.arange(6, dtype=np.uint64)
    offset_map.put_hashes(h1, h2, np.arange(6, dtype=np.int64))
    # the same keys again, twice each in one call: the later offset wins
    offset_map.put_hashes(np.repeat(h1, 2), np.repeat(h2, 2), np.arange(10, 22, dtype=np.int64))
    assert len(offset_map) == 6
    assert offset_map.lookup(h1, h2).tolist() == [11, 13, 15, 17, 19, 21]
    assert offset_map.lookup(h1[:1], np.array([99], np.uint64)).tolist() == [-1]


def test_the_table_grows_with_its_keys_up_to_kafkas_buffer_and_no_further() -> None:
    capacity = 5000
    offset_map = OffsetMap(capacity)
    assert offset_map.slots <= 1024
    keys = [b"key-%d" % i for i in range(capacity)]
    h1, h2 = hash_key_bytes(keys)
    for start in range(0, capacity, 700):  # chunks of keys, as the cleaner puts them
        offset_map.put_hashes(h1[start:start + 700], h2[start:start + 700],
                              np.arange(start, min(capacity, start + 700), dtype=np.int64))
    assert len(offset_map) == capacity and offset_map.is_full and not offset_map.room_for(1)
    # Kafka's buffer for `capacity` entries at load factor 0.9: the table's bound
    assert offset_map.slots <= capacity / 0.9 + 1
    assert offset_map.lookup(h1, h2).tolist() == list(range(capacity))
    offset_map.clear()
    assert offset_map.slots <= 1024 and len(offset_map) == 0


def test_a_full_table_refuses_keys_instead_of_losing_them() -> None:
    offset_map = OffsetMap(2)
    h1, h2 = hash_key_bytes([b"a", b"b", b"c", b"d"])
    offset_map.put_hashes(h1[:2], h2[:2], np.array([0, 1], np.int64))
    with pytest.raises(ValueError):
        offset_map.put_hashes(h1[2:], h2[2:], np.array([2, 3], np.int64))
