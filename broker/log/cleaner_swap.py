"""Swapping a cleaned group into a live log, crash-safe at every step (Kafka's
`LocalLog.replaceSegments`):

    <base>.log.cleaned + <base>.index.cleaned + <base>.timeindex.cleaned
    (+ <base>.txnindex.cleaned when it keeps an aborted transaction)  (written, fsynced)
    -> <base>.log.swap  -> old segments renamed .deleted  -> <base>.log
    -> <base>.index, <base>.timeindex, <base>.txnindex

A crash before the `.swap` rename leaves the old segments (the loader drops `.cleaned`
files); from it on the loader finishes the swap (`log_loader.complete_swaps`) and
rebuilds the swapped segment's indexes (its `.txnindex` from its markers): the log is the
old or the new one, never a mix.
The indexes go live last: a crash just before leaves a live segment without index files,
which the loader rebuilds too. `fail_point(step)` is called after every step so tests can
stop the process exactly there.

Durability: the cleaned files are fsynced where they are written. The directory is
fsynced three times: after the `.swap` rename (the commit point, durable before any old
file is renamed away), after the old segments are renamed (durable before the new file
takes the live name, so a power loss can never show both it and an old segment it
replaced) and at the end (Kafka's one `flushDir`). Kafka flushes the directory only at the
end and relies on the file system keeping renames in order; the two more are what POSIX
needs. The swapped-in segment is not read or fsynced again: its indexes and tail state
come from the cleaner (`cleaner_index`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from broker.log.checkpoint_file import fsync_directory
from broker.log.cleaner_index import CleanedIndexes
from broker.log.txn_index import TXN_INDEX_SUFFIX, AbortedTxn
from broker.log.log_loader import CLEANED_SUFFIX, SWAP_SUFFIX, open_segment
from broker.log.partition_log import PartitionLog
from broker.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    segment_file_name,
)

log = logging.getLogger(__name__)

FAIL_POINTS = ("after_cleaned", "after_swap", "mid_delete", "after_old_deleted", "after_live")


@dataclass(slots=True)
class CleanedGroup:
    """Consecutive old segments (`count` from index `first` of the snapshot) and the
    `.cleaned` file that replaces them, with its indexes (written beside it)."""

    first: int
    count: int
    path: str
    bytes_before: int
    bytes_after: int
    indexes: CleanedIndexes
    # the aborted transactions whose ABORT marker the cleaned segment keeps, in marker
    # order: its `.txnindex` entries (Kafka's cleaned segment's txnIndex)
    aborted: tuple[AbortedTxn, ...] = ()

    def txn_index_path(self) -> Path:
        """`<base>.txnindex.cleaned` (written only when `aborted` holds an entry)."""
        log_file = Path(self.path)
        base = log_file.name[: -len(LOG_SUFFIX + CLEANED_SUFFIX)]
        return log_file.with_name(base + TXN_INDEX_SUFFIX + CLEANED_SUFFIX)

    def index_paths(self) -> tuple[Path, Path]:
        """`<base>.index.cleaned` and `<base>.timeindex.cleaned`."""
        log_file = Path(self.path)
        base = log_file.name[: -len(LOG_SUFFIX + CLEANED_SUFFIX)]
        return (log_file.with_name(base + INDEX_SUFFIX + CLEANED_SUFFIX),
                log_file.with_name(base + TIME_INDEX_SUFFIX + CLEANED_SUFFIX))


def swap_in(plog: PartitionLog, old: list[LogSegment], group: CleanedGroup, now_ms: int,
            fail: Callable[[str], None]) -> None:
    """Replace `old` (segments `plog` still holds) by the group's cleaned segment."""
    directory = plog.directory
    fail("after_cleaned")
    base = old[0].base_offset
    live = directory / segment_file_name(base, LOG_SUFFIX)
    swap = live.with_name(live.name + SWAP_SUFFIX)
    os.replace(group.path, swap)
    fsync_directory(directory)
    fail("after_swap")
    for i, segment in enumerate(old):
        segment.mark_deleted()
        if i == 0:
            fail("mid_delete")
    fsync_directory(directory)
    fail("after_old_deleted")
    os.replace(swap, live)
    index, time_index = group.index_paths()
    os.replace(index, directory / segment_file_name(base, INDEX_SUFFIX))
    os.replace(time_index, directory / segment_file_name(base, TIME_INDEX_SUFFIX))
    txn_index = directory / segment_file_name(base, TXN_INDEX_SUFFIX)
    if group.aborted:
        os.replace(group.txn_index_path(), txn_index)
    else:  # none kept: no file, as Kafka creates `.txnindex` lazily
        txn_index.unlink(missing_ok=True)
    fsync_directory(directory)
    fail("after_live")
    new = open_segment(directory, base, plog.config, now_ms, create=False, files=plog.files)
    group.indexes.install(new)  # as written with the file: no re-read, no CRC pass
    new.txn_index.load()  # the aborted transactions whose markers it kept
    plog.replace_segments(old, new, now_ms)


def remove_cleaned(groups: Iterable[CleanedGroup]) -> None:
    """Remove the `.cleaned` files of groups not swapped in."""
    for group in groups:
        for path in (Path(group.path), *group.index_paths(), group.txn_index_path()):
            path.unlink(missing_ok=True)
