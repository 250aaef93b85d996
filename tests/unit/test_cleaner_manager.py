"""Choosing logs to clean (broker/log/cleaner_manager.py): dirty ratios and horizons, the
cleaner-offset-checkpoint across restarts, live cleanup.policy changes, metrics."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from broker.log.cleaner_checkpoint import (
    CLEANER_OFFSET_CHECKPOINT,
    read_cleaner_offsets,
)
from broker.log.cleaner_manager import (
    CleanerConfig,
    LogCleanerManager,
    cleaner_families,
    cut_offsets,
)
from broker.log.log_manager import LogManager
from common.topic_partition import TopicPartition
from common.prometheus import exposition, samples
from common.records import build_batch
from common.log_config import LogConfig
from tests.log_helpers import NOW
from common.waiting import wait_until_async

TP = TopicPartition("changelog", 0)
COMPACT = LogConfig(segment_bytes=600, index_interval_bytes=100, cleanup_policy=("compact",))


def produce(manager: LogManager, rounds: int, *, keys: int = 4, ts: int = NOW) -> None:
    plog = manager.get_or_create_log(TP, now_ms=NOW)
    for r in range(rounds):
        plog.append(build_batch([(b"k%d" % k, b"r%d" % r) for k in range(keys)],
                                timestamps=[ts] * keys), now_ms=NOW)
    plog.update_high_watermark(plog.log_end_offset)


def setup(tmp_path: Path, config: LogConfig = COMPACT) -> tuple[LogManager, LogCleanerManager]:
    manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW,
                         topic_configs={TP.topic: config})
    return manager, LogCleanerManager(manager, CleanerConfig(dedupe_buffer_size=24_000),
                                      now_ms=lambda: NOW)


def test_dirty_section_and_ratio(tmp_path: Path) -> None:
    manager, _ = setup(tmp_path)
    produce(manager, 20)
    plog = manager.logs[TP]
    ltc = cut_offsets(plog, None, NOW, None)
    assert (ltc.first_dirty, ltc.first_uncleanable) == (0, plog.active_segment.base_offset)
    assert ltc.clean_bytes == 0 and ltc.dirty_ratio == 1.0
    # the high watermark bounds the dirty section (Kafka: the last stable offset)
    plog.update_high_watermark(10)
    assert cut_offsets(plog, None, NOW, None).first_uncleanable == 10
    plog.update_high_watermark(plog.log_end_offset)
    # min.compaction.lag.ms: segments with records younger than the lag are not cleanable
    plog.config = COMPACT.replace(min_compaction_lag_ms=1000)
    assert cut_offsets(plog, None, NOW + 500, None).first_uncleanable == 0
    assert cut_offsets(plog, None, NOW + 1001, None).first_uncleanable > 0
    # max.compaction.lag.ms: due whatever the ratio
    plog.config = COMPACT.replace(max_compaction_lag_ms=1000)
    assert not cut_offsets(plog, None, NOW + 1000, None).needs_compaction_now
    assert cut_offsets(plog, None, NOW + 1001, None).needs_compaction_now
    assert cut_offsets(plog, None, NOW, NOW).tombstones_due
    manager.shutdown()


def test_clean_then_checkpoint_survives_a_restart(tmp_path: Path) -> None:
    manager, cleaners = setup(tmp_path)
    produce(manager, 20)
    cleaner = cleaners.new_cleaner()
    assert cleaners.clean_once(cleaner, NOW) == TP
    end = manager.logs[TP].active_segment.base_offset
    assert read_cleaner_offsets(tmp_path / "logs") == {TP: end}
    assert cleaners.clean_once(cleaner, NOW) is None  # clean now: ratio 0
    assert cleaners.stats.runs == 1 and cleaners.stats.bytes_cleaned > 0
    assert cleaners.stats.dirty_ratio == {TP: 0.0}
    manager.shutdown()
    manager, cleaners = setup(tmp_path)
    assert cleaners.first_dirty_offset(TP) == end
    assert cleaners.grab_filthiest(NOW) is None
    manager.shutdown()
    assert (tmp_path / "logs" / CLEANER_OFFSET_CHECKPOINT).exists()


def test_min_cleanable_dirty_ratio_decides(tmp_path: Path) -> None:
    manager, cleaners = setup(tmp_path)
    produce(manager, 10, keys=30)
    cleaner = cleaners.new_cleaner()
    assert cleaners.clean_once(cleaner, NOW) == TP
    produce(manager, 1)  # a little dirt over a larger clean section
    manager.logs[TP].roll(NOW)
    ltc = cut_offsets(manager.logs[TP], cleaners.first_dirty_offset(TP), NOW, None)
    assert 0 < ltc.dirty_ratio < 0.5
    assert cleaners.clean_once(cleaner, NOW) is None  # below min.cleanable.dirty.ratio 0.5
    manager.update_topic_config(TP.topic, COMPACT.replace(min_cleanable_dirty_ratio=0.01))
    assert cleaners.clean_once(cleaner, NOW) == TP
    manager.shutdown()


def test_a_live_cleanup_policy_change_takes_effect_at_the_next_pass(tmp_path: Path) -> None:
    manager, cleaners = setup(tmp_path, LogConfig(segment_bytes=600, index_interval_bytes=100))
    produce(manager, 20)
    cleaner = cleaners.new_cleaner()
    assert cleaners.clean_once(cleaner, NOW) is None  # delete policy: not compacted
    manager.update_topic_config(TP.topic, COMPACT)
    assert cleaners.clean_once(cleaner, NOW) == TP
    manager.update_topic_config(TP.topic, COMPACT.replace(cleanup_policy=("delete",)))
    produce(manager, 20)
    assert cleaners.clean_once(cleaner, NOW) is None
    manager.shutdown()


def test_compact_only_logs_skip_time_and_size_retention(tmp_path: Path) -> None:
    manager, _ = setup(tmp_path, COMPACT.replace(retention_ms=1, retention_bytes=1))
    produce(manager, 20)
    segments = len(manager.logs[TP].segments)
    assert manager.cleanup(NOW + 10_000) == 0 and len(manager.logs[TP].segments) == segments
    manager.update_topic_config(TP.topic, COMPACT.replace(cleanup_policy=("compact", "delete"),
                                                          retention_ms=1))
    assert manager.cleanup(NOW + 10_000) > 0
    manager.shutdown()


def test_metrics_lines(tmp_path: Path) -> None:
    manager, cleaners = setup(tmp_path)
    produce(manager, 20)
    cleaners.clean_once(cleaners.new_cleaner(), NOW)
    got = samples(exposition(cleaner_families(cleaners.stats, "t_")))
    assert got["t_log_cleaner_runs_total"] == 1
    assert got['t_log_cleaner_dirty_ratio{partition="0",topic="changelog"}'] == 0
    assert got["t_log_cleaner_max_clean_time_ms"] >= 0
    manager.shutdown()


async def with_worker(cleaners: LogCleanerManager, body: Callable[[], Awaitable[None]], *,
                      processes: bool) -> None:
    """`body` while one cleaner worker runs; the worker and its processes stopped after."""
    worker = asyncio.create_task(cleaners.run_worker("w0", processes=processes))
    try:
        await body()
    finally:
        cleaners.stop()
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)


@pytest.mark.parametrize("processes", [True, False])
def test_a_worker_prepares_off_the_loop_and_swaps_on_it(tmp_path: Path, processes: bool) -> None:
    manager, cleaners = setup(tmp_path)
    cleaners.config = CleanerConfig(dedupe_buffer_size=24_000, backoff_ms=10)
    produce(manager, 20)
    before = manager.logs[TP].size_in_bytes

    async def body() -> None:
        await wait_until_async("a cleaning", lambda: cleaners.stats.runs >= 1, 30.0)

    asyncio.run(with_worker(cleaners, body, processes=processes))
    assert manager.logs[TP].size_in_bytes < before
    assert cleaners.stats.failed == 0
    manager.shutdown()


def test_a_new_backoff_wakes_an_idle_worker(tmp_path: Path) -> None:
    """log.cleaner.backoff.ms is dynamic: a worker asleep for the old, long backoff takes the
    new one at once (Kafka restarts its cleaner threads on the change)."""
    manager, cleaners = setup(tmp_path)
    cleaners.config = CleanerConfig(dedupe_buffer_size=24_000, backoff_ms=600_000)

    async def body() -> None:
        await asyncio.sleep(0.2)  # nothing to clean: asleep for ten minutes
        produce(manager, 20)
        cleaners.reconfigure(CleanerConfig(dedupe_buffer_size=24_000, backoff_ms=10))
        await wait_until_async("a cleaning after the change", lambda: cleaners.stats.runs >= 1, 10.0)

    asyncio.run(with_worker(cleaners, body, processes=False))
    manager.shutdown()


def test_the_backoff_is_a_timer_of_the_brokers_timer_service(tmp_path: Path) -> None:
    """An idle worker looks again log.cleaner.backoff.ms after it found nothing, to the
    millisecond of the timers' clock, and its timer goes when the worker stops."""
    from broker.timers import TimerService

    clock = [NOW]
    timers = TimerService(clock=lambda: clock[0], driven=False)
    manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW, topic_configs={TP.topic: COMPACT})
    cleaners = LogCleanerManager(manager, CleanerConfig(dedupe_buffer_size=24_000, backoff_ms=15_000),
                                 now_ms=lambda: NOW, timers=timers)
    passes: list[int] = []
    grab = cleaners.grab_filthiest
    cleaners.grab_filthiest = lambda now_ms: passes.append(clock[0]) or grab(now_ms)  # type: ignore[method-assign]

    async def body() -> None:
        await wait_until_async("the first pass", lambda: len(timers) == 1, 5.0)
        assert passes == [NOW] and timers.deadline(("log-cleaner-backoff", "w0")) == NOW + 15_000
        clock[0] = NOW + 14_999
        timers.run_due()
        for _ in range(5):
            await asyncio.sleep(0)
        assert passes == [NOW]  # not a ms early
        clock[0] = NOW + 15_000
        timers.run_due()
        await wait_until_async("the pass after the backoff", lambda: len(passes) == 2, 5.0)
        assert passes == [NOW, NOW + 15_000]

    asyncio.run(with_worker(cleaners, body, processes=False))
    assert len(timers) == 0  # the stopped worker's backoff timer is gone
    manager.shutdown()
