"""A flush on the caller's thread makes a new segment's directory entry durable, once.

Kafka's LocalLog.flush fsyncs the log directory when the flush covers a segment created since
the last one (flushDirIfExists); without it a power loss after the flush could lose the new
file whose bytes the recovery point already claims. The background roll flush did this; the
synchronous one (no flusher: tools, tests, `flush.messages`, a clean close) did not.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from broker.log.partition_log import PartitionLog
from common.log_config import LogConfig
from common.records import build_batch

BATCH = build_batch([(b"k", b"v" * 100)], base_timestamp=1_700_000_000_000)
# Appended without a leader epoch: no leader-epoch checkpoint is written, whose own durable
# rename fsyncs the directory too and would hide the segment's.


class DirectoryFsyncs:
    """Counts os.fsync calls on `directory` (by inode: the descriptor is opened per call)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, directory: Path) -> None:
        self.inode = os.stat(directory).st_ino
        self.count = 0
        real = os.fsync

        def fsync(fd: int) -> None:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode) and st.st_ino == self.inode:
                self.count += 1
            real(fd)

        monkeypatch.setattr(os, "fsync", fsync)


def test_first_flush_of_a_new_segment_fsyncs_its_directory_once(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    log = PartitionLog(tmp_path / "t-0", LogConfig(), now_ms=0, new=True)
    fsyncs = DirectoryFsyncs(monkeypatch, log.directory)
    log.append(BATCH, now_ms=0)
    log.flush()
    assert fsyncs.count == 1
    log.append(BATCH, now_ms=1)
    log.flush()
    assert fsyncs.count == 1  # the segment's files were already in the durable directory
    log.roll(2)  # no flusher: the roll flushes the old segment on this thread; the new one is empty
    log.append(BATCH, now_ms=3)
    log.flush()
    assert fsyncs.count == 2  # the new segment's file
    log.close()
    assert fsyncs.count == 2


def test_a_loaded_segment_does_not_fsync_its_directory(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    log = PartitionLog(tmp_path / "t-0", LogConfig(), now_ms=0, new=True)
    log.append(BATCH, now_ms=0)
    log.close()
    reopened = PartitionLog(tmp_path / "t-0", LogConfig(), now_ms=1, had_clean_shutdown=True,
                            recovery_point=1)
    fsyncs = DirectoryFsyncs(monkeypatch, reopened.directory)
    reopened.append(BATCH, now_ms=2)
    reopened.flush()
    reopened.close()
    assert fsyncs.count == 0
