"""Early writeback: the log hands each MiB it appends to the kernel's writeback on the flusher's
writeback thread (one hand-off per log at a time, whole pages, from 0 again after a roll, from
the cut after a truncation), and the range handed over really leaves the page cache's dirty set."""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from broker.log.flush_rules import WRITEBACK_BYTES
from broker.log.flusher import SegmentFlusher
from broker.log.partition_log import PartitionLog
from broker.log.segment_files import SegmentHandle
from broker.log.writeback import PAGE_BYTES, SegmentWriteback, libc_sync_file_range
from common.log_config import LogConfig
from tests.log_helpers import NOW, batch, open_log

GATE_TIMEOUT_S: Final = 30.0  # a broken test fails instead of hanging on its gate
BIG = batch(60, tag="x" * 1000)  # ~62 KB: a MiB is ~17 appends
MAX_APPENDS: Final = 200  # ~12 MB: a test that waits for a size never reached fails, not fills the disk
SYS_CACHESTAT: Final = 451  # Linux >= 6.5, every architecture


class Recorder:
    """A stand-in for sync_file_range: remembers (inode, offset, bytes) of each call; it may hold
    the calls at a gate or fail them."""

    def __init__(self, *, gated: bool = False) -> None:
        self.calls: list[tuple[int, int, int]] = []
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.fail: OSError | None = None
        if not gated:
            self.gate.set()

    def __call__(self, fd: int, offset: int, nbytes: int) -> None:
        self.calls.append((os.fstat(fd).st_ino, offset, nbytes))
        self.entered.set()
        if not self.gate.wait(GATE_TIMEOUT_S):
            raise OSError(errno.ETIMEDOUT, "the test never opened the gate")
        if self.fail is not None:
            raise self.fail


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def flusher(recorder: Recorder) -> Iterator[SegmentFlusher]:
    flusher = SegmentFlusher(writeback=SegmentWriteback(recorder))
    yield flusher
    recorder.gate.set()
    flusher.shutdown()


def append_until(log: PartitionLog, size: int) -> None:
    """Append BIG batches until the active segment holds at least `size` bytes."""
    for _ in range(MAX_APPENDS):
        if log.active_segment.size >= size:
            return
        log.append(BIG, now_ms=NOW)
    raise AssertionError(f"the active segment never reached {size} bytes")


def append_mib(log: PartitionLog, flusher: SegmentFlusher) -> None:
    """Append a MiB more and let the hand-off it starts run (none is in flight after it)."""
    append_until(log, log.active_segment.size + WRITEBACK_BYTES)
    settle(flusher)


def settle(flusher: SegmentFlusher) -> None:
    """Wait until the hand-offs queued so far have run (the thread runs them in order)."""
    flusher.writeback.start(SegmentHandle(os.open(os.devnull, os.O_RDONLY)), Path(os.devnull), 0, 0).exception()


def ranges(recorder: Recorder, inode: int) -> list[tuple[int, int]]:
    return [(offset, offset + nbytes) for ino, offset, nbytes in recorder.calls if ino == inode and nbytes]


def test_each_mib_appended_is_handed_over_once_in_whole_pages(
        tmp_path: Path, recorder: Recorder, flusher: SegmentFlusher) -> None:
    log = open_log(tmp_path, flusher=flusher)
    for _ in range(3):
        append_mib(log, flusher)
    handed = ranges(recorder, os.stat(log.active_segment.log_path).st_ino)
    assert len(handed) == 3
    assert handed[0][0] == 0
    assert all(prev_end == start for (_, prev_end), (start, _) in zip(handed, handed[1:]))  # contiguous
    assert all(end % PAGE_BYTES == 0 and end - start >= WRITEBACK_BYTES for start, end in handed)
    assert handed[-1][1] <= log.active_segment.size


def test_no_second_hand_off_while_one_is_in_flight(tmp_path: Path) -> None:
    recorder = Recorder(gated=True)
    flusher = SegmentFlusher(writeback=SegmentWriteback(recorder))
    try:
        log = open_log(tmp_path, flusher=flusher)
        append_until(log, WRITEBACK_BYTES)
        assert recorder.entered.wait(GATE_TIMEOUT_S)
        append_until(log, 3 * WRITEBACK_BYTES + 1)  # the disk is behind: nothing more is queued
        assert len(recorder.calls) == 1
        first_end = recorder.calls[0][1] + recorder.calls[0][2]
        recorder.gate.set()
        settle(flusher)  # the second call: settle's own
        append_mib(log, flusher)
        assert recorder.calls[2][1] == first_end  # the next covers what was skipped meanwhile
    finally:
        recorder.gate.set()
        flusher.shutdown()


def test_a_roll_starts_the_new_segment_at_its_first_byte(
        tmp_path: Path, recorder: Recorder, flusher: SegmentFlusher) -> None:
    log = open_log(tmp_path, LogConfig(segment_bytes=3 * WRITEBACK_BYTES), flusher=flusher)
    append_mib(log, flusher)
    append_mib(log, flusher)
    for _ in range(MAX_APPENDS):  # until it rolls, at 3 MiB
        if len(log.segments) > 1:
            break
        log.append(BIG, now_ms=NOW)
    append_mib(log, flusher)
    log.wait_for_flushes()
    rolled, active = (os.stat(s.log_path).st_ino for s in log.segments)
    assert len(ranges(recorder, rolled)) == 2  # its tail is the roll's fsync's
    assert ranges(recorder, active)[0][0] == 0


def test_a_truncation_hands_the_rewritten_bytes_over_again(
        tmp_path: Path, recorder: Recorder, flusher: SegmentFlusher) -> None:
    log = open_log(tmp_path, flusher=flusher)
    append_mib(log, flusher)
    append_mib(log, flusher)
    log.truncate_to(log.log_end_offset // 4)  # a new leader's log diverged: the rest is rewritten
    cut = log.active_segment.size
    assert cut < WRITEBACK_BYTES
    append_mib(log, flusher)
    handed = ranges(recorder, os.stat(log.active_segment.log_path).st_ino)
    assert handed[-1][0] == cut - cut % PAGE_BYTES


def test_a_failed_hand_off_is_logged_once_and_the_appends_go_on(
        tmp_path: Path, recorder: Recorder, flusher: SegmentFlusher,
        caplog: pytest.LogCaptureFixture) -> None:
    recorder.fail = OSError(errno.EIO, "Input/output error")
    log = open_log(tmp_path, flusher=flusher)
    for _ in range(4):
        append_mib(log, flusher)
    inode = os.stat(log.active_segment.log_path).st_ino
    assert len(ranges(recorder, inode)) == 1  # the rest of the segment is the kernel's to write
    warnings = [r for r in caplog.records if "cannot start writeback" in r.getMessage()]
    assert len(warnings) == 1 and "Input/output error" in warnings[0].getMessage()


def test_without_sync_file_range_the_log_hands_nothing_over(tmp_path: Path) -> None:
    writeback = SegmentWriteback(None)  # libc has none (not Linux)
    flusher = SegmentFlusher(writeback=writeback)
    try:
        log = open_log(tmp_path, flusher=flusher)
        append_until(log, 2 * WRITEBACK_BYTES)
        assert not writeback.available and not writeback._worker.started  # no thread was ever started
    finally:
        flusher.shutdown()


# ---- the kernel's side: a handed range leaves the dirty set ---------------------------------

def dirty_pages(fd: int, offset: int, length: int) -> int:
    """The file's dirty pages in [offset, offset + length), by cachestat(2)."""
    libc = ctypes.CDLL(None, use_errno=True)
    span = ctypes.create_string_buffer(struct.pack("=QQ", offset, length), 16)
    stat = ctypes.create_string_buffer(40)  # nr_cache, nr_dirty, nr_writeback, nr_evicted, ...
    if libc.syscall(SYS_CACHESTAT, fd, span, stat, 0) != 0:
        error = ctypes.get_errno()
        pytest.skip(f"no cachestat here: {os.strerror(error)}")
    return int(struct.unpack("=5Q", stat.raw)[1])


@pytest.mark.skipif(sys.platform != "linux", reason="sync_file_range and cachestat are Linux's")
def test_a_handed_range_leaves_the_page_cache_dirty_set(tmp_path: Path) -> None:
    half = 2 * WRITEBACK_BYTES
    fd = os.open(tmp_path / "segment.log", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    handle = SegmentHandle(fd)
    for _ in range(2 * half // len(BIG) + 1):
        os.write(fd, BIG)
    if dirty_pages(fd, 0, 2 * half) == 0:
        pytest.skip("this filesystem keeps no dirty pages for writeback (tmpfs?)")
    writeback = SegmentWriteback(libc_sync_file_range())
    try:
        writeback.start(handle, tmp_path / "segment.log", 0, half).result()
    finally:
        writeback.shutdown()
    # the handed half is written or under writeback, not dirty; the rest waits for the kernel
    # (dirty_expire_centisecs: 30 s by default)
    assert dirty_pages(fd, 0, half) == 0
    assert dirty_pages(fd, half, half) == half // PAGE_BYTES
