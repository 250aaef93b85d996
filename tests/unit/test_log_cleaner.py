"""The cleaner shell (broker/log/log_cleaner.py) over real segment files: what a compacted
log reads back, which batches are rewritten, and a crash at every step of the swap."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from broker.log.cleaner_swap import FAIL_POINTS
from broker.log.compaction import OffsetMap
from broker.log.log_cleaner import (
    Cleaner,
    CleaningAbortedError,
    snapshot_log,
)
from broker.log.partition_log import PartitionLog
from common.errors import InvalidRecordError
from common.record_batch import CompressionType, iter_batches
from common.records import build_batch, decode_records
from common.log_config import LogConfig
from tests.log_helpers import NOW, open_log, read_all

COMPACT = LogConfig(segment_bytes=600, index_interval_bytes=100, cleanup_policy=("compact",))


class Crash(Exception):
    """Stands in for kill -9 at a fail point."""


def keyed(pairs: list[tuple[bytes | None, bytes | None]], **kw: object) -> bytes:
    return build_batch(pairs, timestamps=[NOW] * len(pairs), **kw)  # type: ignore[arg-type]


def records(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for header, data in read_all(log):
        out.extend((r.offset, r.key, r.value) for r in decode_records(data, 0, header))
    return out


def latest(log: PartitionLog) -> dict[bytes | None, tuple[int, bytes | None]]:
    return {k: (o, v) for o, k, v in records(log)}


def fill(log: PartitionLog, rounds: int, keys: int = 4, **kw: object) -> None:
    for r in range(rounds):
        log.append(keyed([(b"k%d" % k, b"r%d-%d" % (r, k)) for k in range(keys)], **kw),
                   now_ms=NOW)
    log.update_high_watermark(log.log_end_offset)


def clean(log: PartitionLog, *, capacity: int = 1000, now: int = NOW, first_dirty: int = 0,
          **kw: object) -> object:
    return Cleaner(OffsetMap(capacity), **kw).clean(  # type: ignore[arg-type]
        log, first_dirty=first_dirty, first_uncleanable=log.active_segment.base_offset,
        now_ms=now)


def test_cleaning_keeps_the_latest_value_of_each_key_and_every_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path, COMPACT)
    fill(log, 20)
    before = latest(log)
    active = log.active_segment
    leo = log.log_end_offset
    prepared = clean(log)
    assert prepared is not None
    assert latest(log) == before  # the latest value of every key, at its offset
    got = records(log)
    assert [o for o, _, _ in got] == sorted({o for o, _, _ in got})
    assert len(got) < 80 and log.log_end_offset == leo and log.active_segment is active
    # below the active segment each key appears once
    below = [k for o, k, _ in got if o < active.base_offset]
    assert len(below) == len(set(below))
    for segment in log.segments[:-1]:  # indexes rebuilt: every offset still reads
        assert segment.offset_index.path.exists()
    for offset, _, _ in got:
        header, _ = read_all(log, offset)[0]
        assert header.base_offset <= offset <= header.last_offset


def test_only_batches_that_lose_records_are_rewritten_and_the_codec_stays(tmp_path: Path) -> None:
    log = open_log(tmp_path, COMPACT)
    log.append(keyed([(b"a", b"1"), (b"b", b"1")], compression=CompressionType.ZSTD), now_ms=NOW)
    log.append(keyed([(b"c", b"1")], compression=CompressionType.GZIP), now_ms=NOW)
    log.append(keyed([(b"a", b"2")], compression=CompressionType.LZ4), now_ms=NOW)
    untouched = read_all(log)[1][1]
    log.roll(NOW)
    log.update_high_watermark(log.log_end_offset)
    clean(log)
    (h0, d0), (_, d1), (h2, _) = read_all(log)
    assert (h0.base_offset, h0.last_offset, h0.record_count) == (0, 1, 1)
    assert h0.compression is CompressionType.ZSTD
    assert [r.key for r in decode_records(d0, 0, h0)] == [b"b"]
    assert d1 == untouched and h2.compression is CompressionType.LZ4


def test_the_dedupe_buffer_bound_cleans_in_several_passes(tmp_path: Path) -> None:
    log = open_log(tmp_path, COMPACT)
    fill(log, 20)
    before = latest(log)
    first_dirty, passes = 0, 0
    while first_dirty < log.active_segment.base_offset:  # bounded: each pass moves forward
        prepared = clean(log, capacity=5, first_dirty=first_dirty)
        assert prepared is not None and prepared.end_offset > first_dirty  # type: ignore[attr-defined]
        first_dirty = prepared.end_offset  # type: ignore[attr-defined]
        passes += 1
    assert passes > 3 and latest(log) == before


def test_the_last_batch_of_each_producer_stays(tmp_path: Path) -> None:
    log = open_log(tmp_path, COMPACT)
    log.append(keyed([(b"a", b"1")], producer_id=5, producer_epoch=0, base_sequence=0), now_ms=NOW)
    log.append(keyed([(b"a", b"2")], producer_id=6, producer_epoch=0, base_sequence=0), now_ms=NOW)
    log.append(keyed([(b"a", b"3")], producer_id=6, producer_epoch=0, base_sequence=1), now_ms=NOW)
    log.roll(NOW)
    log.append(keyed([(b"a", b"4")]), now_ms=NOW)
    log.update_high_watermark(log.log_end_offset)
    clean(log)
    headers = [h for h, _ in read_all(log)]
    # producer 5's only batch stays, empty; 6's first goes, its last is the key's latest
    # in the cleaned range (offset 3 is in the active segment, which is never mapped)
    assert [(h.base_offset, h.producer_id, h.record_count, h.last_sequence) for h in headers] == [
        (0, 5, 0, 0), (2, 6, 1, 1), (3, -1, 1, -1)]


def test_tombstones_stay_until_delete_retention_after_their_cleaning(tmp_path: Path) -> None:
    config = COMPACT.replace(delete_retention_ms=1000)
    log = open_log(tmp_path, config)
    log.append(keyed([(b"a", b"1"), (b"b", b"1")]), now_ms=NOW)
    log.append(keyed([(b"a", None)]), now_ms=NOW)
    log.roll(NOW)
    log.append(keyed([(b"c", b"1")]), now_ms=NOW)
    log.update_high_watermark(log.log_end_offset)
    prepared = clean(log, now=NOW)
    assert prepared.earliest_delete_horizon == NOW + 1000  # type: ignore[attr-defined]
    assert records(log) == [(1, b"b", b"1"), (2, b"a", None), (3, b"c", b"1")]
    clean(log, now=NOW + 999, first_dirty=3)
    assert (2, b"a", None) in records(log)
    cleaner = Cleaner(OffsetMap(10))
    cleaner.clean(log, first_dirty=3, first_uncleanable=3, now_ms=NOW + 1000, tombstones_due=True)
    # the tombstone's batch was the group's last: kept as an empty batch, offset 2 stays
    assert records(log) == [(1, b"b", b"1"), (3, b"c", b"1")]
    assert [h.last_offset for h, _ in read_all(log)][:2] == [1, 2]


def test_keyless_records_are_rejected_on_a_compacted_topic(tmp_path: Path) -> None:
    log = open_log(tmp_path, COMPACT)
    with pytest.raises(InvalidRecordError, match="without key"):
        log.append(keyed([(b"a", b"1"), (None, b"x")]), now_ms=NOW)
    assert log.log_end_offset == 0
    open_log(tmp_path / "d", LogConfig()).append(keyed([(None, b"x")]), now_ms=NOW)


def test_a_follower_appends_across_gaps_and_reads_skip_them(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "l", COMPACT)
    fill(leader, 20)
    clean(leader)
    follower = open_log(tmp_path / "f", COMPACT)
    offset = 0
    while offset < leader.log_end_offset:  # bounded: each fetch moves forward
        data = leader.read(offset, 300).read_bytes()
        whole = [(p, h) for p, h in iter_batches(data, allow_partial_tail=True)]
        end = whole[-1][0] + whole[-1][1].size
        follower.append(data[:end], now_ms=NOW, assign_offsets=False)
        offset = follower.log_end_offset
    follower.update_high_watermark(follower.log_end_offset)
    assert records(follower) == records(leader)
    for log in (leader, follower):  # segments stay contiguous: recovery relies on it
        segments = log.segments
        assert len(segments) >= 2
        assert all(a.next_offset == b.base_offset for a, b in itertools.pairwise(segments))
    gaps = [o for o in range(leader.log_end_offset) if o not in {r[0] for r in records(leader)}]
    batches = [h for h, _ in read_all(leader)]
    for gap in gaps:  # a read in a gap starts at the next batch holding a later offset
        first = read_all(leader, gap)[0][0]
        assert first == next(h for h in batches if h.last_offset >= gap)
    path = follower.directory
    follower.close()
    reopened = PartitionLog(path, COMPACT, now_ms=NOW, had_clean_shutdown=False)
    assert records(reopened) == records(leader)  # recovery accepts gaps


@pytest.mark.parametrize("cleaned_below, kept", [(None, True), (0, False)])
def test_recovery_keeps_a_cleaned_log_whose_config_no_longer_says_compact(
        tmp_path: Path, cleaned_below: int | None, kept: bool) -> None:
    """After a crash the log loads with the metadata checkpoint's config, which may predate
    cleanup.policy=compact (or the topic went back to delete): the cleaner checkpoint still
    says the log was rewritten, so its gaps are not damage. Without it they would be, and
    the whole unflushed log would be cut (the rule the cleaner checkpoint lifts)."""
    log = open_log(tmp_path, COMPACT)
    fill(log, 20)
    clean(log)
    cleaned = log.active_segment.base_offset  # the cleaner checkpoint: the first dirty offset
    before = records(log)
    assert len(before) < log.log_end_offset  # there are gaps
    path = log.directory
    log.close()
    deleting = LogConfig(segment_bytes=600, index_interval_bytes=100)
    reopened = PartitionLog(path, deleting, now_ms=NOW, had_clean_shutdown=False,
                            cleaned_below=cleaned if cleaned_below is None else cleaned_below)
    assert (records(reopened) == before) is kept


def test_cleaning_aborts_when_the_log_changed_underneath(tmp_path: Path) -> None:
    log = open_log(tmp_path, COMPACT)
    fill(log, 20)
    cleaner = Cleaner(OffsetMap(100))
    snap, segments = snapshot_log(log)
    prepared = cleaner.prepare(snap, first_dirty=0, first_uncleanable=log.active_segment.base_offset,
                               now_ms=NOW)
    assert prepared is not None
    log.truncate_to(10)
    with pytest.raises(CleaningAbortedError):
        cleaner.commit(log, segments, prepared, NOW)
    assert not list(log.directory.glob("*.cleaned"))


@pytest.mark.parametrize("step", FAIL_POINTS)
def test_a_crash_at_each_swap_step_recovers_the_old_or_the_new_log(tmp_path: Path, step: str) -> None:
    # segments of 600 bytes, grouped into one cleaned segment of up to 10 kB: one swap
    grouped = COMPACT.replace(segment_bytes=10_000)
    reference = open_log(tmp_path / "ref", COMPACT)
    fill(reference, 20)
    reference.config = grouped
    pre = records(reference)
    clean(reference)
    post = records(reference)
    assert len(reference.segments) == 2 and post != pre
    log = open_log(tmp_path / "crash", COMPACT)
    fill(log, 20)
    log.flush()
    log.config = grouped

    def fail(at: str) -> None:
        if at == step:
            raise Crash(at)

    with pytest.raises(Crash):
        clean(log, fail_point=fail)
    recovered = PartitionLog(log.directory, grouped, now_ms=NOW, recovery_point=0,
                             had_clean_shutdown=False)
    got = records(recovered)  # read_all CRC-checks every batch
    expected = pre if step == "after_cleaned" else post
    assert got == expected
    assert not [p.name for p in recovered.directory.iterdir()
                if p.name.endswith((".cleaned", ".swap", ".deleted"))]
    for offset, _, _ in got:  # indexes valid: each offset reads from its batch
        header, _ = read_all(recovered, offset)[0]
        assert header.base_offset <= offset <= header.last_offset
    # and the recovered log cleans again to the same result
    clean(recovered)
    assert records(recovered) == post


def test_a_compacted_log_also_rolls_by_max_compaction_lag(tmp_path: Path) -> None:
    log = open_log(tmp_path, COMPACT.replace(segment_bytes=1 << 20, max_compaction_lag_ms=1000))
    log.append(build_batch([(b"a", b"1")], timestamps=[NOW]), now_ms=NOW)
    log.append(build_batch([(b"a", b"2")], timestamps=[NOW + 1001]), now_ms=NOW + 1001)
    assert [s.base_offset for s in log.segments] == [0, 1]
    deleting = open_log(tmp_path / "d", LogConfig(segment_bytes=1 << 20, max_compaction_lag_ms=1000))
    deleting.append(build_batch([(b"a", b"1")], timestamps=[NOW]), now_ms=NOW)
    deleting.append(build_batch([(b"a", b"2")], timestamps=[NOW + 1001]), now_ms=NOW + 1001)
    assert len(deleting.segments) == 1  # the lag means nothing without compaction


def test_dump_log_shows_a_cleaned_segment(tmp_path: Path) -> None:
    from broker.dump_log import dump_log_segment

    log = open_log(tmp_path, COMPACT)
    fill(log, 20)
    clean(log)
    lines: list[str] = []
    for segment in log.segments[:-1]:
        assert dump_log_segment(segment.log_path.read_bytes(), name="seg", emit=lines.append,
                                print_data_log=True)
    batches = [line for line in lines if line.startswith("baseOffset")]
    records = [line for line in lines if line.startswith("| offset")]
    assert len(records) == 4  # each key's latest value below the active segment
    # each segment's last batch stays, emptied: its offsets show, with no record
    assert any("count: 0" in line and "size: 61" in line for line in batches)


def test_reads_skip_a_segment_tail_of_offset_markers(tmp_path: Path) -> None:
    log = open_log(tmp_path, COMPACT)
    fill(log, 20)
    clean(log)
    first = log.segments[0]
    (_, marker), = iter_batches(first.log_path.read_bytes())  # it kept only its last offset
    assert marker.record_count == 0 and marker.last_offset == first.next_offset - 1
    got = log.read(0, 1 << 20).read_bytes()
    header = next(h for _, h in iter_batches(got))
    assert header.record_count > 0 and header.base_offset >= first.next_offset
    # a producer's empty batch is served like any batch (its producer state matters)
    log2 = open_log(tmp_path / "p", COMPACT)
    log2.append(keyed([(b"a", b"1")], producer_id=5, producer_epoch=0, base_sequence=0), now_ms=NOW)
    log2.roll(NOW)
    log2.append(keyed([(b"a", b"2")]), now_ms=NOW)
    log2.roll(NOW)
    log2.append(keyed([(b"a", b"3")]), now_ms=NOW)
    log2.update_high_watermark(log2.log_end_offset)
    clean(log2)
    header = next(h for _, h in iter_batches(log2.read(0, 1 << 20).read_bytes()))
    assert (header.base_offset, header.record_count, header.producer_id) == (0, 0, 5)


def test_the_io_throttle_sleeps_to_the_configured_rate() -> None:
    from broker.log.cleaner_worker import Throttle

    clock = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    throttle = Throttle(1000.0, monotonic=lambda: clock[0], sleep=sleep)
    throttle.account(500)  # 0.5 s worth at once: wait it out
    assert slept == [0.5]
    clock[0] += 2.0
    throttle.account(100)  # behind the rate: no wait, and the window restarts
    assert slept == [0.5]
    throttle.account(1000)  # so an idle spell earns no burst: a full second's wait
    assert slept == [0.5, 1.0]


@pytest.mark.parametrize("capacity", [1000, 9])  # 9: the map fills, cleaning stops early
def test_the_kept_scans_clean_as_a_second_scan_would(tmp_path: Path, capacity: int) -> None:
    # the filter pass on the map pass's scans writes what it writes after reading again
    logs = {}
    for cache in (0, 64 << 20):
        log = open_log(tmp_path / str(cache), COMPACT)
        for r, codec in enumerate([CompressionType.NONE, CompressionType.LZ4] * 6):
            log.append(keyed([(b"k%d" % ((r * 3 + k) % 7), None if k == r % 4 else b"v%d" % r)
                              for k in range(4)], compression=codec), now_ms=NOW)
        log.update_high_watermark(log.log_end_offset)
        assert len(log.segments) >= 3
        assert clean(log, capacity=capacity, scan_cache_bytes=cache) is not None
        logs[cache] = [(h.base_offset, data) for h, data in read_all(log)]
    assert logs[0] == logs[64 << 20]
