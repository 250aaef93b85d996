"""Opening a partition directory: find the segments, trust or rebuild their indexes, and
after an unclean stop validate everything past the recovery point.

A clean stop (the log directory's clean-shutdown marker) means every segment was flushed
with its indexes, so only a sanity check runs. Otherwise each segment from the one that
holds the recovery point onward is rescanned batch by batch; the first bad or partial
batch ends the log, and later segments are deleted. Every cut is logged with its reason.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from broker.log.checkpoint_file import fsync_directory
from broker.log.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    segment_file_name,
)
from broker.log.segment_files import SegmentFileCache
from broker.log.sparse_index import CorruptIndexError
from broker.log.txn_index import TXN_INDEX_SUFFIX
from common.errors import KafkaStorageError
from common.record_batch import HEADER_SIZE, parse_header
from common.log_config import LogConfig

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"  # a cleaner's output being written: dropped on load
SWAP_SUFFIX = ".swap"  # a cleaner's complete output: the swap is finished on load
_LEFTOVER_SUFFIXES = (DELETED_SUFFIX, ".tmp", CLEANED_SUFFIX)


@dataclass(slots=True)
class LoadedSegments:
    segments: list[LogSegment]
    recovered_bytes_truncated: int


def open_segment(directory: Path, base_offset: int, config: LogConfig, now_ms: int,
                 *, create: bool, files: SegmentFileCache | None = None,
                 defer_file: bool = False) -> LogSegment:
    """A LogSegment with this log's index settings, its file in the broker's cache `files`
    (`defer_file`: created at its first use, see `LogSegment`)."""
    return LogSegment(directory, base_offset, index_interval_bytes=config.index_interval_bytes,
                      max_index_bytes=config.segment_index_bytes, created_ms=now_ms,
                      create=create, files=files, defer_file=defer_file)


def load_segments(directory: Path, config: LogConfig, *, now_ms: int, recovery_point: int,
                  log_start_offset: int, had_clean_shutdown: bool, name: str,
                  epoch_for: Callable[[int], int] | None, fresh: bool = False,
                  files: SegmentFileCache | None = None, cleaned_below: int = 0) -> LoadedSegments:
    """Open every segment of `directory`, recovering as the shutdown state requires.

    `epoch_for` (the leader-epoch cache's lookup, None when the cache is empty) lets
    recovery reject batches whose epoch field was damaged. `fresh`: the caller just created
    `directory`, so it holds nothing to scan: one new segment. `files`: the broker's cache of
    open segment files (each segment is opened here once; a later reopen re-reads nothing).
    `cleaned_below`: the log's cleaner checkpoint; segments starting below it were rewritten by
    the cleaner and may have offset gaps, whatever the log's config says now.
    """
    # A new log's segment, and that of a directory without one (a log never written to, or
    # whose file a crash took with nothing in it), is empty: its file waits for its first use.
    if fresh:
        return LoadedSegments([open_segment(directory, log_start_offset, config, now_ms, create=True,
                                            files=files, defer_file=True)], 0)
    # One listing of the directory serves every step below (at 100,000 logs, its three globs,
    # an iterdir and an existence check per index file were a third of a start's CPU).
    names = _remove_leftovers(directory, name, _list(directory))
    swapped = complete_swaps(directory, name, names)
    if swapped:
        names = _list(directory)  # the swaps renamed and removed files
    bases = _segment_bases(directory, names)
    present = set(names)
    segments = [open_segment(directory, base, config, now_ms, create=False, files=files)
                for base in bases]
    truncated_total = 0
    for i, segment in enumerate(segments):
        following = segments[i + 1].base_offset if i + 1 < len(segments) else None
        unflushed = following is None or following > recovery_point
        if segment.base_offset in swapped:
            log.info("%sRebuilding the indexes of swapped-in segment %s", name,
                     segment.log_path.name)
        # An empty last segment (every partition without data, most of a 100,000-partition
        # broker's) holds nothing to validate, marker or not: its stale index files go, as on a
        # clean load; rebuilding its indexes cost each such log three writes and stats at a start
        # after a crash. An empty segment with one after it is a gap: recovery below says so.
        elif had_clean_shutdown or not unflushed or (following is None and segment.size == 0):
            problem = _load_indexes(segment, present)
            if problem is None:
                segment.mark_durable()
                continue
            log.warning("%sRebuilding the indexes of segment %s: %s", name,
                        segment.log_path.name, problem)
        # A gap inside unflushed data of a log that is not compacted is damage (a base
        # offset field, outside the CRC); in a compacted, cleaned or flushed segment it may
        # be the cleaner's.
        result = segment.recover(epoch_for, allow_gaps=config.compact or not unflushed
                                 or segment.base_offset in swapped
                                 or segment.base_offset < cleaned_below)
        # Each segment ends where the next begins, even with compaction: a replica rolls
        # at its log end offset and the cleaner keeps each group's last batch. So a
        # shorter segment lost its tail.
        gap = following is not None and result.next_offset != following
        if not result.truncated_bytes and not gap:
            continue
        truncated_total += result.truncated_bytes
        if result.truncated_bytes:
            log.warning(
                "%sTruncated %d bytes at position %d of %s (log now ends at offset %d): %s",
                name, result.truncated_bytes, result.valid_bytes, segment.log_path.name,
                result.next_offset, result.reason or "partial batch")
        else:
            log.warning("%sSegment %s ends at offset %d but the next segment starts at %d",
                        name, segment.log_path.name, result.next_offset, following)
        for later in segments[i + 1 :]:
            log.warning("%sDeleting segment %s after the truncation point (%d bytes, "
                        "base offset %d)", name, later.log_path.name, later.size,
                        later.base_offset)
            truncated_total += later.size
            later.delete()
        del segments[i + 1 :]
        break
    if not segments:
        segments.append(open_segment(directory, log_start_offset, config, now_ms, create=True,
                                     files=files, defer_file=True))
    return LoadedSegments(segments, truncated_total)


def _load_indexes(segment: LogSegment, present: set[str]) -> str | None:
    """Load both indexes and restore tail state; a reason string when a rebuild is needed.
    `present`: the names in the segment's directory."""
    if segment.size == 0:
        # Nothing to index, and an empty segment's index files are never written
        # (`LogSegment.flush`): its indexes are empty; files a crash left are stale. Only those
        # listed are removed: three failed unlinks per empty log were 27,000 syscalls per 10,000.
        for index in (segment.offset_index, segment.time_index, segment.txn_index):
            if index.path.name in present:
                index.delete()
        return None
    try:
        segment.offset_index.load()
        segment.time_index.load()
        segment.txn_index.load()
        segment.offset_index.sanity_check(segment.size)
        next_offset = segment.scan_tail()
        segment.time_index.sanity_check(next_offset)
    except CorruptIndexError as e:
        return str(e)
    except KafkaStorageError as e:  # a batch header past the last index entry is unreadable
        return str(e)
    return None


def _list(directory: Path) -> list[str]:
    """The names in a partition directory."""
    try:
        return os.listdir(directory)
    except OSError as e:
        raise KafkaStorageError(f"cannot list partition directory {directory}: {e}") from e


def _segment_bases(directory: Path, names: list[str]) -> list[int]:
    """The base offsets of the `.log` files among `names` (the directory's), ascending."""
    bases = []
    for file_name in names:
        if not file_name.endswith(LOG_SUFFIX):
            continue
        stem = file_name[: -len(LOG_SUFFIX)]
        if len(stem) == 20 and stem.isdigit():
            bases.append(int(stem))
        else:
            raise KafkaStorageError(f"unexpected file {directory / file_name} in a partition directory")
    return sorted(bases)


def complete_swaps(directory: Path, name: str, names: list[str]) -> set[int]:
    """Finish the cleaner swaps a crash interrupted; return the swapped-in base offsets.

    A `<base>.log.swap` is only ever a complete, fsynced cleaned segment (the cleaner
    renames `.cleaned` to `.swap` after its fsync), so it wins: the live segments it
    replaces - those with base offsets in [base, its next offset) - go, and it becomes
    `<base>.log`. The cleaner keeps the last batch of every group it cleans, so that range
    covers exactly the segments it replaced. Its indexes are rebuilt by the caller.
    """
    swapped: set[int] = set()
    for swap in sorted(directory / n for n in names if n.endswith(LOG_SUFFIX + SWAP_SUFFIX)):
        stem = swap.name[: -len(LOG_SUFFIX + SWAP_SUFFIX)]
        if not (len(stem) == 20 and stem.isdigit()):
            raise KafkaStorageError(f"unexpected swap file {swap}")
        base = int(stem)
        end = _next_offset_of(swap)
        if end < 0:  # cannot happen (a cleaned group keeps its last batch); keep the old
            log.warning("%sRemoving empty swap file %s", name, swap.name)
            swap.unlink()
            continue
        for old in _segment_bases(directory, _list(directory)):
            if base <= old < end:
                log.info("%sDeleting segment %s replaced by the cleaned segment %s", name,
                         segment_file_name(old, LOG_SUFFIX), swap.name)
                for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                    (directory / segment_file_name(old, suffix)).unlink(missing_ok=True)
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            (directory / segment_file_name(base, suffix)).unlink(missing_ok=True)
        swap.replace(directory / segment_file_name(base, LOG_SUFFIX))
        log.info("%sCompleted the interrupted swap of cleaned segment %s (offsets %d..%d)",
                 name, swap.name, base, end - 1)
        swapped.add(base)
    if swapped:
        fsync_directory(directory)
    return swapped


def _next_offset_of(path: Path) -> int:
    """One past the last offset of the batches in a segment file (headers only)."""
    next_offset = -1
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        position = 0
        while position < size:  # bounded: each header moves `position` forward
            header = parse_header(os.pread(f.fileno(), HEADER_SIZE, position),
                                  require_body=False)
            next_offset = header.next_offset
            position += header.size
    return next_offset


def _remove_leftovers(directory: Path, name: str, names: list[str]) -> list[str]:
    """Delete what an interrupted delete/write left, and indexes with no segment; the names of
    `names` (the directory's) that are kept."""
    present = set(names)
    kept = []
    for file_name in names:
        if file_name.endswith(_LEFTOVER_SUFFIXES):
            log.info("%sRemoving leftover file %s", name, file_name)
            (directory / file_name).unlink()
            continue
        stem, dot, suffix = file_name.rpartition(".")
        if dot and "." + suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX) and not (
                stem.isdigit() and segment_file_name(int(stem), LOG_SUFFIX) in present):
            log.info("%sRemoving index %s that has no segment", name, file_name)
            (directory / file_name).unlink()
            continue
        kept.append(file_name)
    return kept


def make_new_directory(directory: Path) -> bool:
    """Create `directory`; False when it already existed or its parent is missing (the
    caller then creates it the general way)."""
    try:
        os.mkdir(directory)
    except (FileExistsError, FileNotFoundError):
        return False
    return True
