"""The cleaned segment's indexes, built as it is written (broker/log/cleaner_index.py): the
same entries and tail state `LogSegment.recover` rebuilds from the file, in memory and on
disk, so the swap need not read the cleaned segment again."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log.cleaner_index import CleanedIndexes
from broker.log.compaction import OffsetMap
from broker.log.log_cleaner import Cleaner, abort, snapshot_log
from broker.log.log_loader import open_segment
from broker.log.partition_log import PartitionLog
from broker.log.segment import LogSegment
from common.record_batch import CompressionType
from common.records import build_batch
from common.log_config import LogConfig
from tests.log_helpers import NOW, open_log

COMPACT = LogConfig(segment_bytes=2_000, index_interval_bytes=60, cleanup_policy=("compact",))


class Crash(Exception):
    """Stands in for kill -9 at a fail point."""


def fill(log: PartitionLog, rounds: int, timestamps: list[int],
         codec: CompressionType = CompressionType.NONE) -> None:
    """`rounds` batches of 5 of 120 keys; batch r has timestamps[r % len] (not monotonic)."""
    for r in range(rounds):
        ts = NOW + timestamps[r % len(timestamps)]
        log.append(build_batch([(b"k%d" % ((5 * r + k) % 120), b"v%d-%d" % (r, k)) for k in range(5)],
                               timestamps=[ts + k for k in range(5)], compression=codec),
                   now_ms=NOW)
    log.update_high_watermark(log.log_end_offset)


def rebuilt(directory: Path, segment: LogSegment, config: LogConfig) -> LogSegment:
    """The same file reopened and recovered: what the swap used to do."""
    fresh = open_segment(directory, segment.base_offset, config, NOW, create=False)
    assert not fresh.recover(allow_gaps=True).truncated_bytes
    fresh.on_become_inactive()
    return fresh


def state(segment: LogSegment) -> tuple[object, ...]:
    return (list(segment.offset_index.keys), list(segment.offset_index.values),
            list(segment.time_index.keys), list(segment.time_index.values),
            segment.max_timestamp, segment.offset_of_max_timestamp,
            segment.first_batch_timestamp, segment.next_offset, segment.size)


@pytest.mark.parametrize("timestamps", [[0], [0, 5, 3, 9, 9, 2], [-NOW - 1]])
@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.GZIP])
def test_the_swapped_in_segment_has_the_indexes_recovery_would_build(
        tmp_path: Path, timestamps: list[int], codec: CompressionType) -> None:
    log = open_log(tmp_path, COMPACT)
    fill(log, 60, timestamps, codec)
    before = list(log.segments)
    Cleaner(OffsetMap(1000)).clean(log, first_dirty=0,
                                   first_uncleanable=log.active_segment.base_offset, now_ms=NOW)
    assert not set(log.segments[:-1]) & set(before)  # every inactive segment swapped
    entries = 0
    for segment in log.segments[:-1]:
        fresh = open_segment(log.directory, segment.base_offset, COMPACT, NOW, create=False)
        fresh.offset_index.load()  # the files the cleaner wrote, as the loader reads them
        fresh.time_index.load()
        fresh.offset_index.sanity_check(fresh.size)
        fresh.time_index.sanity_check(segment.next_offset)
        files = (list(fresh.offset_index.keys), list(fresh.offset_index.values),
                 list(fresh.time_index.keys), list(fresh.time_index.values))
        fresh.close()
        reference = rebuilt(log.directory, segment, COMPACT)
        assert state(segment) == state(reference)
        assert files == state(reference)[:4]
        entries += len(segment.offset_index)
        reference.close()
    assert entries > len(log.segments)  # the interval made several entries per segment
    assert not [p for p in log.directory.iterdir() if p.name.endswith(".cleaned")]


def test_a_log_reopened_after_the_swap_trusts_the_cleaner_written_indexes(tmp_path: Path) -> None:
    log = open_log(tmp_path, COMPACT)
    fill(log, 60, [0, 7, 1])
    Cleaner(OffsetMap(1000)).clean(log, first_dirty=0,
                                   first_uncleanable=log.active_segment.base_offset, now_ms=NOW)
    expected = [state(s) for s in log.segments[:-1]]
    log.flush()
    log.close()
    reopened = PartitionLog(log.directory, COMPACT, now_ms=NOW,
                            recovery_point=log.log_end_offset, had_clean_shutdown=True)
    assert [state(s) for s in reopened.segments[:-1]] == expected


def test_a_crash_before_the_indexes_go_live_rebuilds_them(tmp_path: Path) -> None:
    log = open_log(tmp_path, COMPACT)
    fill(log, 60, [0, 7, 1])
    log.flush()
    end = log.log_end_offset

    def fail(step: str) -> None:
        if step == "after_old_deleted":
            raise Crash(step)

    with pytest.raises(Crash):
        Cleaner(OffsetMap(1000), fail_point=fail).clean(
            log, first_dirty=0, first_uncleanable=log.active_segment.base_offset, now_ms=NOW)
    # the log file is renamed live but the kill comes before its indexes follow it
    swap = next(log.directory.glob("*.log.swap"))
    swap.replace(swap.with_name(swap.name[: -len(".swap")]))
    reopened = PartitionLog(log.directory, COMPACT, now_ms=NOW, recovery_point=end,
                            had_clean_shutdown=False)
    assert not [p for p in reopened.directory.iterdir() if p.name.endswith(".cleaned")]
    for segment in reopened.segments[:-1]:
        assert state(segment)[:4] == state(rebuilt(reopened.directory, segment, COMPACT))[:4]


def test_abort_removes_the_cleaned_indexes_too(tmp_path: Path) -> None:
    log = open_log(tmp_path, COMPACT)
    fill(log, 60, [0])
    snap, _ = snapshot_log(log)
    prepared = Cleaner(OffsetMap(1000)).prepare(
        snap, first_dirty=0, first_uncleanable=log.active_segment.base_offset, now_ms=NOW)
    assert prepared is not None
    assert len(list(log.directory.glob("*.index.cleaned"))) == len(prepared.groups)
    abort(prepared)
    assert not [p for p in log.directory.iterdir() if p.name.endswith(".cleaned")]


def test_an_empty_build_indexes_nothing() -> None:
    indexes = CleanedIndexes(100, 4096)
    indexes.finish()
    assert (len(indexes.offset_keys), len(indexes.time_keys), indexes.size) == (0, 0, 0)
