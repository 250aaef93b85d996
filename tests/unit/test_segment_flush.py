"""A flush makes the directory entries of the files a segment created durable, once per file.

Kafka's LocalLog.flush fsyncs the log directory when the flush covers a segment created since
the last one (flushDirIfExists); without it a power loss after the flush could lose the new
file whose bytes the recovery point already claims. The background roll flush did this; the
synchronous one (no flusher: tools, tests, `flush.messages`, a clean close) did not.

A segment's `.txnindex` is created later, at its first ABORT marker, after the segment's first
flush may have fsynced the directory: below the recovery point a lost one loads as "no aborted
transaction", so the flush covering its first entry fsyncs the directory again (synchronous or
in the background), and so does the producer-state replay's durable write of a rebuilt one.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from broker.log.flusher import SegmentFlusher
from broker.log.partition_log import PartitionLog
from broker.log.txn_index import AbortedTxn
from broker.log.txn_index_file import TransactionIndex
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


def aborted(offset: int) -> AbortedTxn:
    """An aborted transaction whose ABORT marker is at `offset` (the index takes it as given)."""
    return AbortedTxn(producer_id=7, first_offset=offset, last_offset=offset, last_stable_offset=offset)


def test_a_txnindex_made_after_the_first_flush_fsyncs_the_directory_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = PartitionLog(tmp_path / "t-0", LogConfig(), now_ms=0, new=True)
    fsyncs = DirectoryFsyncs(monkeypatch, log.directory)
    log.append(BATCH, now_ms=0)
    log.flush()
    assert fsyncs.count == 1  # the new segment's files
    log.append(BATCH, now_ms=1)
    log.append_aborted_txn(aborted(1))  # the segment's first ABORT marker: its .txnindex is new
    log.flush()
    assert log.active_segment.txn_index.path.exists()
    assert fsyncs.count == 2  # the new file's entry, before the recovery point claims offset 1
    log.append(BATCH, now_ms=2)
    log.append_aborted_txn(aborted(2))
    log.flush()
    log.close()
    assert fsyncs.count == 2  # once per file, not per entry


def test_a_roll_flush_fsyncs_the_directory_for_a_txnindex_made_since_the_last_flush(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    flusher = SegmentFlusher()
    log = PartitionLog(tmp_path / "t-0", LogConfig(), now_ms=0, new=True, flusher=flusher)
    try:
        fsyncs = DirectoryFsyncs(monkeypatch, log.directory)
        log.append(BATCH, now_ms=0)
        log.flush()  # the recovery point passes the segment's base: Kafka's rule asks no dir sync
        assert fsyncs.count == 1
        log.append(BATCH, now_ms=1)
        log.append_aborted_txn(aborted(1))
        log.roll(2)  # the background flush writes the .txnindex and syncs it, and its directory
        log.wait_for_flushes()
        assert log.recovery_point == 2
        assert log.segments[0].txn_index.path.exists()
        assert fsyncs.count == 2
        log.close()
        assert fsyncs.count == 3  # the rolled-to segment's first flush, for its own new file
    finally:
        flusher.shutdown()


def test_a_durable_txnindex_write_fsyncs_the_directory_of_a_file_it_creates(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The producer-state replay writes a rebuilt .txnindex of a segment the recovery point
    already passed (a later crash does not rebuild it again)."""
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex")
    fsyncs = DirectoryFsyncs(monkeypatch, tmp_path)
    index.append(aborted(1))
    index.flush()
    assert fsyncs.count == 1
    index.append(aborted(2))
    index.flush()
    assert fsyncs.count == 1
