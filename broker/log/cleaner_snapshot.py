"""What a cleaning reads: a snapshot of a log's segments, taken on the log's owner, and
the segment files opened read-only from it - in a cleaner process, which has no
LogSegment objects, or on a thread.

The snapshot is plain data (it crosses to the cleaner process); the owner keeps the
segment objects it names, so that the swap can check the log still holds them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from broker.log.partition_log import PartitionLog
from broker.log.txn_index import AbortedTxn, marker_type
from common.control_records import ControlType
from broker.log.segment import LogSegment
from common.record_batch import HEADER_SIZE, RecordBatchHeader, parse_header
from common.log_config import LogConfig
from common.units import MIB

HEADERS_READ_BYTES = 1 * MIB


class CleaningAbortedError(Exception):
    """The log changed under the cleaner (truncation, retention, deletion); nothing swapped."""


@dataclass(frozen=True, slots=True)
class SegmentSnapshot:
    """One segment as the owner saw it when a cleaning began (sent to a worker process)."""

    path: str
    base_offset: int
    size: int
    next_offset: int
    index_entries: int
    # its `.txnindex` entries (None: being rebuilt after recovery, not to be trusted yet)
    aborted: tuple[AbortedTxn, ...] | None = ()


@dataclass(frozen=True, slots=True)
class LogSnapshot:
    """What a cleaning reads: the log's segments (active last) and settings."""

    directory: str
    segments: tuple[SegmentSnapshot, ...]
    config: LogConfig


def snapshot_log(plog: PartitionLog) -> tuple[LogSnapshot, tuple[LogSegment, ...]]:
    """The log's snapshot, and the segment objects it names (for `commit`)."""
    segments = plog.segments
    return LogSnapshot(str(plog.directory), tuple(
        SegmentSnapshot(str(s.log_path), s.base_offset, s.size, s.next_offset,
                        len(s.offset_index),
                        None if s.txn_index_stale else tuple(s.txn_index.entries))
        for s in segments), plog.config), segments


class SegmentFile:
    """A snapshot segment opened read-only (a worker process has no LogSegment)."""

    def __init__(self, snap: SegmentSnapshot) -> None:
        self.log_path = Path(snap.path)
        self.base_offset, self.size = snap.base_offset, snap.size
        self.next_offset, self.index_entries = snap.next_offset, snap.index_entries
        try:
            self.fd = os.open(snap.path, os.O_RDONLY)
        except FileNotFoundError:
            raise CleaningAbortedError(f"{snap.path} was removed while cleaning") from None

    def headers(self) -> Iterator[RecordBatchHeader]:
        """Every batch header, read HEADERS_READ_BYTES at a time (not one read per batch)."""
        for _, header in self.positioned_headers():
            yield header

    def marker(self, position: int, header: RecordBatchHeader) -> ControlType | None:
        """The marker the control batch `header` at `position` holds (None: emptied, or
        another control type)."""
        if not header.record_count:
            return None
        batch = os.pread(self.fd, header.size, position)
        if len(batch) < header.size:
            raise CleaningAbortedError(f"{self.log_path}: a control batch at {position} runs "
                                       f"past the segment's end")
        return marker_type(batch, header)

    def positioned_headers(self) -> Iterator[tuple[int, RecordBatchHeader]]:
        """`headers`, each with its file position."""
        position = 0
        while position < self.size:  # bounded: each chunk moves `position` forward
            chunk = os.pread(self.fd, min(HEADERS_READ_BYTES, self.size - position), position)
            at = 0
            while at + HEADER_SIZE <= len(chunk):  # bounded: each header moves `at` forward
                header = parse_header(chunk, at, require_body=False)
                yield position + at, header
                at += header.size
            if not at:  # fewer bytes than a header left: parse_header says what is wrong
                parse_header(chunk, 0, require_body=False)
                raise CleaningAbortedError(f"{self.log_path}: a torn batch header at {position}")
            position += at

    def close(self) -> None:
        os.close(self.fd)
