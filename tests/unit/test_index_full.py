"""The indexes' one "full" rule (broker/log/sparse_index.py `_count_changed`, Kafka's isFull): an
offset index and a time index are full exactly at max_entries whichever way their entries came
(appended, loaded, truncated, adopted), and a segment rolls exactly when either fills."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log.offset_index import OffsetIndex
from broker.log.sparse_index import SparseIndex
from broker.log.time_index import TimeIndex
from common.log_config import LogConfig
from tests.log_helpers import NOW, batch, open_log

BASE = 100
T0 = 1_700_000_000_000
INDEX_BYTES = 24  # offset index: 3 entries of 8 bytes; time index: 2 entries of 12 bytes


def add(index: SparseIndex, i: int) -> None:
    """The i-th entry, as the log adds it to each kind."""
    if isinstance(index, TimeIndex):
        index.maybe_append(T0 + i, BASE + i)
    else:
        assert isinstance(index, OffsetIndex)
        index.append(BASE + i, 10 * i)


KINDS = [pytest.param(OffsetIndex, "00000000000000000100.index", 3, id="offset-index"),
         pytest.param(TimeIndex, "00000000000000000100.timeindex", 2, id="time-index")]


@pytest.mark.parametrize(("kind", "name", "max_entries"), KINDS)
def test_full_exactly_at_max_entries_however_the_entries_came(tmp_path: Path, kind: type[OffsetIndex] | type[TimeIndex],
                                                              name: str, max_entries: int) -> None:
    index = kind(tmp_path / name, BASE, INDEX_BYTES)
    assert index.max_entries == max_entries
    seen = []
    for i in range(max_entries):
        seen.append(index.is_full)
        add(index, i)
    seen.append(index.is_full)  # appended up to the limit
    add(index, max_entries)  # past it (a recovery rebuilds without rolling): still full
    seen.append(index.is_full)
    index.flush(fsync=False)
    loaded = kind(index.path, BASE, INDEX_BYTES)
    loaded.load()
    seen.append(loaded.is_full)  # loaded over the limit
    index.truncate_entries(max_entries - 1)
    seen.append(index.is_full)  # one below it again
    add(index, max_entries - 1)
    seen.append(index.is_full)  # and up to it
    index.reset()
    seen.append(index.is_full)
    index.adopt(loaded.keys[:max_entries], loaded.values[:max_entries])
    seen.append(index.is_full)  # adopted at the limit
    assert seen == [False] * max_entries + [True, True, True, False, True, False, True]


@pytest.mark.parametrize(("attribute", "timestamp_step", "full_at"), [
    # constant timestamps: the time index keeps its first entry, the offset index fills (3 entries)
    pytest.param("offset_index", 0, 3, id="offset-index-fills"),
    # growing timestamps: every indexed batch adds to both, the time index fills first (2 entries)
    pytest.param("time_index", 10, 2, id="time-index-fills"),
])
def test_a_segment_rolls_exactly_when_an_index_is_full(tmp_path: Path, attribute: str, timestamp_step: int,
                                                       full_at: int) -> None:
    log = open_log(tmp_path, LogConfig(segment_index_bytes=INDEX_BYTES, index_interval_bytes=0))
    for i in range(4 * (full_at + 1) + 1):  # index.interval.bytes 0: every batch but a segment's first is indexed
        log.append(batch(1, ts=NOW + timestamp_step * i, tag=f"b{i}"), now_ms=NOW)
    rolled = log.segments[:-1]
    assert len(rolled) == 4
    assert [len(getattr(segment, attribute)) for segment in rolled] == [full_at] * 4
    assert [segment.next_offset - segment.base_offset for segment in rolled] == [full_at + 1] * 4
