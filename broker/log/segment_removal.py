"""Removes deleted segments' files, and deleted logs' directories, on a thread of its own, off the
event loop.

Why (issue 35): freeing a file's blocks is synchronous on a filesystem mounted with `discard`
(ext4 here issues the discards inside the unlink, blkdev_issue_discard -> submit_bio_wait):
unlinking a written segment of 256 MiB took 80-95 ms on this box, and retention removed its
segments on the event loop (`PartitionLog.reap_deleted_segments`), one such wait per segment,
every request in flight waiting as long. Kafka deletes segments on its scheduler
(`asyncDeleteSegment`), never on a request thread; so do we:

    removal = segment.removal()               # loop: the handle taken from the file cache
    remover.remove(removal, name)             # this thread: the unlinks, then the handle goes

The loop keeps every piece of log state: the segment left the log when it was renamed
`.deleted` (`file.delete.delay.ms` ago), and this thread only makes the syscalls. The blocks
are freed by whichever comes last, the unlink or the close of the last descriptor: the removal
holds the cache's handle, so the close comes after the unlinks, here; a slice in flight holds
its own reference and reads its file until it is sent (then its close frees the blocks).

A file that cannot be removed is one error line naming it (the next start's load deletes what
`.deleted` files are left); the others are still removed.

A deleted log (`LogManager.delete_log`, a topic deletion applied on the event loop) is the same
wait many times over: a topic of 16 partitions of 32 MiB held the loop 0.56-1.13 s (its logs'
closing fsyncs, then the unlinks; bench/segment_delete_stall.py --topic-partitions, load 7.7),
now 2-3 ms. The loop renames the directory `<topic>-<n>.<random>-delete` (the name is free at
once for a re-created topic) and this thread fsyncs the parent (the rename durable before any
file goes: a crash never leaves a partly removed log under its live name) and removes the tree:

    os.replace(directory, doomed)             # loop
    remover.remove_directory(doomed)          # this thread: fsync the parent, rmtree

One that cannot be removed is one error line naming it; the next start's load removes what
`-delete` directories are left. Other small removals off the loop (old producer snapshots at a
roll) take `submit`.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from broker.log.checkpoint_file import fsync_directory
from broker.log.io_worker import IoWorker
from broker.log.segment_files import SegmentHandle

log = logging.getLogger(__name__)

Unlink = Callable[[Path], None]  # removes a file (raises OSError; FileNotFoundError: none there)


def os_unlink(path: Path) -> None:
    """os.unlink, looked up when it runs (a test that patches os.unlink reaches this thread)."""
    os.unlink(path)


@dataclass(frozen=True, slots=True)
class SegmentRemoval:
    """One deleted segment's files (log first) and the descriptor the file cache held for it
    (None: not open), let go of once they are unlinked."""

    paths: tuple[Path, ...]
    handle: SegmentHandle | None


class SegmentRemover:
    """One thread removing segments' files in submission order. Thread-safe `remove`."""

    def __init__(self, unlink: Unlink = os_unlink) -> None:
        """`unlink`: what removes a file (a test's stand-in may record or fail it)."""
        self._unlink = unlink
        self._worker = IoWorker("log-delete")  # its thread starts at the first removal

    def remove(self, removal: SegmentRemoval, name: str) -> Future[None]:
        """Start removing `removal`'s files; `name` prefixes its error lines (the log's)."""
        return self._worker.submit(partial(self.run, removal, name),
                                   what=f"{name}removing {removal.paths[0]}")

    def run(self, removal: SegmentRemoval, name: str) -> None:
        """Remove the files on the calling thread (the worker's; a log without a remover, the I/O
        pool's close, and tests call it directly)."""
        remove_files(removal.paths, name, self._unlink)
        # `removal` (the caller's reference to the handle) goes with the job: the close, and
        # the blocks' release if the unlink could not, happens here unless a slice still reads.

    def remove_directory(self, doomed: Path) -> Future[None]:
        """Start removing the renamed directory `doomed` of a deleted log (the module's doc)."""
        return self._worker.submit(partial(remove_directory, doomed),
                                   what=f"deleting the directory {doomed} of a deleted log (the "
                                        f"next start's load retries)")

    def submit(self, job: Callable[[], None], *, what: str) -> Future[None]:
        """Run another removal `job` on this thread, in order; `what` names it in its error line."""
        return self._worker.submit(job, what=what)

    def shutdown(self) -> None:
        """Wait for the removals in flight (at most io_worker.CLOSE_WAIT_S) and stop the thread."""
        self._worker.close()


def remove_directory(doomed: Path) -> None:
    """fsync `doomed`'s parent (its rename durable first), then remove its tree."""
    fsync_directory(doomed.parent)
    shutil.rmtree(doomed)


def remove_files(paths: tuple[Path, ...], name: str, unlink: Unlink = os_unlink) -> None:
    """Unlink each of `paths` (one missing is no error), one error line for each that fails."""
    for path in paths:
        try:
            unlink(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            log.error("%sCannot remove deleted segment file %s: %s; the next start's load "
                      "removes it", name, path, e)
