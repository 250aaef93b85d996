"""The broker's background flusher: fsyncs rolled segments on its own thread, off the event loop.

A segment roll used to fsync the closed segment on the event loop: with 16 MiB segments under
~74 MB/s of load the brokers' loops were blocked in fsync 4 % of the time, and every request in
flight waited as long (issue 35). Kafka schedules that flush on its background scheduler
(`UnifiedLog.roll` -> "flush-log"); so do we. The split (`flush_rules` decides):

    sync = segment.prepare_sync()                 # loop: index entries written, descriptor pinned
    future = flusher.submit(FlushWork((sync,), directory, epoch_sync))   # thread: the fsyncs
    ... later, on the loop, once future.done(): the log moves its recovery point (or reports)

The thread only fsyncs: it changes no log state, so the loop stays the one owner of every
offset. A segment's descriptor is pinned by the `SegmentHandle` the work holds (the handle
closes its descriptor only when its last reference goes), so the file cache may evict the
segment, retention rename it `.deleted` or a truncation cut it meanwhile and the fsync still
reaches the right file. Index files are opened by path here: one renamed away meanwhile left
the log with its segment, and nothing is owed for it.

One thread (an `IoWorker`): fsyncs to one disk gain little from running side by side, and in
order they complete oldest first, as each log applies them. The early writeback of active
segments (`writeback`) runs on a second one: a roll's fsync never waits behind it, nor it behind
one; the removal of deleted segments and logs (`segment_removal`, up to ~0.35 ms per MiB on a
`discard` mount) on a third, for the same reason.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from broker.log.io_worker import IoWorker
from broker.log.segment_files import SegmentHandle
from broker.log.segment_removal import SegmentRemover
from broker.log.writeback import SegmentWriteback, libc_sync_file_range
from common.errors import KafkaStorageError

Fsync = Callable[[int], None]  # os.fsync, or a test's stand-in


def os_fsync(fd: int) -> None:
    """os.fsync, looked up when it runs, not bound when this module is imported: a test that
    patches os.fsync reaches the flusher's thread as it reaches every other fsync of the log."""
    os.fsync(fd)


@dataclass(frozen=True, slots=True)
class SegmentSync:
    """One segment's files to fsync: its log file through the pinned `handle` (`size` bytes
    written when it was taken) and its index files by path (a missing one is skipped).
    `directory_owed`: one of them was created since the last fsync of its directory (the
    segment is new, or its `.txnindex` was made at its first ABORT marker since)."""

    handle: SegmentHandle
    log_path: Path  # for messages
    size: int
    index_paths: tuple[Path, ...]
    directory_owed: bool = False


@dataclass(frozen=True, slots=True)
class FlushWork:
    """What one background flush makes durable: segments, then (if new ones are among them)
    their directory, after the leader-epoch checkpoint when a rewrite of it is owed (durable
    data must never outlive its epoch's entry)."""

    segments: tuple[SegmentSync, ...]
    directory: Path | None
    epoch_sync: Callable[[], None] | None = None


class SegmentFlusher:
    """A single thread running FlushWork in submission order. Thread-safe `submit`."""

    def __init__(self, fsync: Fsync = os_fsync, writeback: SegmentWriteback | None = None,
                 remover: SegmentRemover | None = None) -> None:
        """`fsync`: what syncs a descriptor (a test's stand-in may hold or fail it).
        `writeback`: what starts the early writeback of the logs' active segments (default:
        libc's sync_file_range on a thread of its own). `remover`: what removes deleted
        segments' files (default: os.unlink on a thread of its own)."""
        self._fsync = fsync
        self._worker = IoWorker("log-flush")  # its thread starts at the first roll
        self.writeback = SegmentWriteback(libc_sync_file_range()) if writeback is None else writeback
        self.remover = SegmentRemover() if remover is None else remover

    def submit(self, work: FlushWork) -> Future[None]:
        """Start `work`; the future ends when every file is synced, or with the
        KafkaStorageError of the first that could not be (the log reports it)."""
        return self._worker.submit(partial(self.run, work))

    def run(self, work: FlushWork) -> None:
        """Do `work` on the calling thread (the worker's; tests call it directly)."""
        if work.epoch_sync is not None:
            work.epoch_sync()
        for segment in work.segments:
            try:
                self._fsync(segment.handle.fd)  # syncs the file, whichever descriptor wrote it
            except OSError as e:
                raise KafkaStorageError(f"cannot fsync {segment.log_path}: {e}") from e
            for path in segment.index_paths:
                self._fsync_path(path)
        if work.directory is not None:
            self._fsync_path(work.directory)

    def _fsync_path(self, path: Path) -> None:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            # Never written (an index with no entry), or renamed away with its segment (retention,
            # a cleaner swap) or its whole directory (topic deletion): nothing owed for it.
            return
        except OSError as e:
            raise KafkaStorageError(f"cannot open {path} to fsync it: {e}") from e
        try:
            self._fsync(fd)
        except OSError as e:
            raise KafkaStorageError(f"cannot fsync {path}: {e}") from e
        finally:
            os.close(fd)

    def shutdown(self) -> None:
        """Wait for the flushes, writeback hand-offs and removals in flight (each thread for at
        most io_worker.CLOSE_WAIT_S) and stop the threads."""
        self.writeback.shutdown()
        self.remover.shutdown()
        self._worker.close()
