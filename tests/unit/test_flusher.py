"""A roll's flush on the background flusher: the recovery point moves only once the fsyncs
returned, failures are reported, truncations void flushes in flight, and an evicted or
renamed segment's file is still the one synced."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Final

import pytest

import broker.log.partition_log as partition_log_module
from broker.log.flush_rules import MAX_FLUSHES_IN_FLIGHT
from broker.log.flusher import FlushWork, SegmentFlusher
from broker.log.partition_log import PartitionLog
from broker.log.segment_files import SegmentFileCache
from common.errors import KafkaStorageError
from common.log_config import LogConfig
from tests.log_helpers import NOW, batch, open_log

SMALL = LogConfig(segment_bytes=1000, index_interval_bytes=100)
GATE_TIMEOUT_S: Final = 30.0  # a broken test fails instead of hanging on its gate


class GatedFsync:
    """os.fsync that blocks until the test opens the gate, remembering which files it synced."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.inodes: list[int] = []
        self.fail: OSError | None = None

    def __call__(self, fd: int) -> None:
        self.inodes.append(os.fstat(fd).st_ino)
        self.entered.set()
        if not self.gate.wait(GATE_TIMEOUT_S):
            raise OSError(errno.ETIMEDOUT, "the test never opened the gate")
        if self.fail is not None:
            raise self.fail
        os.fsync(fd)


@pytest.fixture
def fsync() -> GatedFsync:
    return GatedFsync()


@pytest.fixture
def flusher(fsync: GatedFsync) -> Iterator[SegmentFlusher]:
    flusher = SegmentFlusher(fsync)
    yield flusher
    fsync.gate.set()
    flusher.shutdown()


def fill_until_roll(log: PartitionLog) -> int:
    """Append until the log rolls once; return the new segment's base offset."""
    segments = len(log.segments)
    while len(log.segments) == segments:  # bounded: SMALL rolls every ~1,000 bytes
        log.append(batch(3), now_ms=NOW)
    return log.active_segment.base_offset


def test_the_recovery_point_moves_only_after_the_fsync_returned(
        tmp_path: Path, fsync: GatedFsync, flusher: SegmentFlusher) -> None:
    log = open_log(tmp_path, SMALL, flusher=flusher)
    base = fill_until_roll(log)  # returns while the flusher's fsync is held: the loop is free
    assert fsync.entered.wait(GATE_TIMEOUT_S)
    log.append(batch(3), now_ms=NOW)
    assert log.recovery_point == 0  # a crash now must rescan the rolled segment
    fsync.gate.set()
    log.wait_for_flushes()
    assert log.recovery_point == base
    assert fsync.inodes[0] == os.stat(log.segments[0].log_path).st_ino  # the rolled segment's file


def test_a_failed_fsync_is_raised_to_the_next_append_and_retried(
        tmp_path: Path, fsync: GatedFsync, flusher: SegmentFlusher, caplog: pytest.LogCaptureFixture) -> None:
    log = open_log(tmp_path, SMALL, flusher=flusher)
    fsync.fail = OSError(errno.ENOSPC, "No space left on device")
    fsync.gate.set()
    base = fill_until_roll(log)
    log.wait_for_flushes()
    assert log.recovery_point == 0
    assert "Background flush up to offset" in caplog.text and "No space left" in caplog.text
    with pytest.raises(KafkaStorageError, match="background flush of its last roll failed"):
        log.append(batch(1), now_ms=NOW)
    fsync.fail = None
    log.append(batch(1), now_ms=NOW)  # reported once; the disk is back
    second = fill_until_roll(log)
    log.wait_for_flushes()
    assert second > base and log.recovery_point == second  # the failed range was synced again


def test_a_truncation_below_a_flush_in_flight_voids_it(
        tmp_path: Path, fsync: GatedFsync, flusher: SegmentFlusher) -> None:
    log = open_log(tmp_path, SMALL, flusher=flusher)
    base = fill_until_roll(log)
    assert fsync.entered.wait(GATE_TIMEOUT_S)
    log.truncate_to(base - 3)  # a new leader's log diverged: the synced bytes past it are gone
    log.append(batch(9), now_ms=NOW)  # new, unsynced bytes at the offsets the flush targeted
    assert log.log_end_offset > base
    fsync.gate.set()
    log.wait_for_flushes()
    assert log.recovery_point <= base - 3


def test_an_evicted_segment_is_synced_through_its_pinned_descriptor(
        tmp_path: Path, fsync: GatedFsync, flusher: SegmentFlusher) -> None:
    files = SegmentFileCache(1)  # the new segment's file evicts the rolled one's at once
    log = open_log(tmp_path, SMALL, flusher=flusher, files=files)
    base = fill_until_roll(log)
    rolled = log.segments[0]
    assert fsync.entered.wait(GATE_TIMEOUT_S)
    assert not rolled.is_cached
    fsync.gate.set()
    log.wait_for_flushes()
    assert fsync.inodes[0] == os.stat(rolled.log_path).st_ino
    assert log.recovery_point == base


def test_a_segment_deleted_during_its_flush_is_no_error(
        tmp_path: Path, fsync: GatedFsync, flusher: SegmentFlusher) -> None:
    log = open_log(tmp_path, SMALL, flusher=flusher)
    base = fill_until_roll(log)
    assert fsync.entered.wait(GATE_TIMEOUT_S)
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(base)
    assert log.delete_old_segments(NOW) == 1  # renamed .deleted: its index files leave their paths
    fsync.gate.set()
    log.wait_for_flushes()
    assert log.recovery_point == base
    log.append(batch(1), now_ms=NOW)  # nothing to report


def test_a_roll_waits_for_the_oldest_flush_past_the_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    futures: list[Future[None]] = []

    class HeldFlusher(SegmentFlusher):
        def submit(self, work: FlushWork) -> Future[None]:
            futures.append(Future())
            return futures[-1]

    waited: list[Future[None]] = []

    def wait_for(fs: list[Future[None]], return_when: str) -> None:
        waited.extend(fs)
        fs[0].set_result(None)  # the oldest returns

    monkeypatch.setattr(partition_log_module, "wait", wait_for)
    log = open_log(tmp_path, SMALL, flusher=HeldFlusher())
    bases = [fill_until_roll(log) for _ in range(MAX_FLUSHES_IN_FLIGHT)]
    assert not waited and log.recovery_point == 0
    fill_until_roll(log)
    assert waited == [futures[0]]
    assert log.recovery_point == bases[0]  # the oldest applied; the others still in flight
    assert len(futures) == MAX_FLUSHES_IN_FLIGHT + 1


def test_close_waits_for_the_flushes_in_flight(
        tmp_path: Path, fsync: GatedFsync, flusher: SegmentFlusher) -> None:
    log = open_log(tmp_path, SMALL, flusher=flusher)
    fill_until_roll(log)
    assert fsync.entered.wait(GATE_TIMEOUT_S)
    fsync.gate.set()
    log.close()
    assert log.recovery_point == log.log_end_offset


def test_the_flusher_syncs_the_log_file_its_indexes_and_the_directory(tmp_path: Path) -> None:
    synced: list[int] = []

    def record(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)

    flusher = SegmentFlusher(record)
    log = open_log(tmp_path, SMALL)
    fill_until_roll(log)
    segment = log.segments[0]
    sync = segment.prepare_sync()
    flusher.run(FlushWork((sync,), log.directory))
    expected = [os.stat(p).st_ino for p in (segment.log_path, segment.offset_index.path,
                                            segment.time_index.path, log.directory)]
    assert synced == expected  # the .txnindex was never written: skipped
