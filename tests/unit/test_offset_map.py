"""The cleaner's key -> latest offset map in bulk (broker/log/offset_map.py): it answers as
a dict of the keys would, first-lane hash collisions included."""

from __future__ import annotations

import numpy as np
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
