"""The indexes of a cleaned segment, built while the cleaner writes it.

Kafka's cleaner appends offset- and time-index entries as it writes the cleaned batches,
so the swap installs a finished segment. Ours did not: the swap re-read the cleaned file
with `LogSegment.recover` (CRCs and all) on the broker's event loop, ~15 % of a clean.
`CleanedIndexes` applies exactly the rule of `LogSegment._index_batch` (an offset entry and
a time entry once more than `index.interval.bytes` were written since the last entry, the
largest timestamp so far) to the batches as they are written, in the cleaner's process;
the result crosses back to the owner with the prepared clean, is written beside the
`.cleaned` log as `.index.cleaned` / `.timeindex.cleaned` and fsynced with it, and the
swap gives it to the new segment without reading the log again.
"""

from __future__ import annotations

import os
import struct
from array import array
from dataclasses import dataclass, field
from pathlib import Path

from broker.log.segment import NO_TIMESTAMP, LogSegment
from common.errors import KafkaStorageError
from common.record_batch import LAST_OFFSET_DELTA_POS, LOG_OVERHEAD, MAX_TIMESTAMP_POS

# baseOffset, batchLength, then lastOffsetDelta at 23 and maxTimestamp at 35 of the header
_FRAME = struct.Struct(">qi")
_LAST_DELTA = struct.Struct(">i")
_MAX_TIMESTAMP = struct.Struct(">q")
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


@dataclass(slots=True)
class CleanedIndexes:
    """Both sparse indexes of one cleaned segment and the tail state `LogSegment` keeps,
    grown batch by batch as the segment is written (plain data: it is pickled back from
    the cleaner process)."""

    base_offset: int
    index_interval_bytes: int
    offset_keys: array = field(default_factory=lambda: array("i"))  # relative last offsets
    offset_values: array = field(default_factory=lambda: array("i"))  # positions
    time_keys: array = field(default_factory=lambda: array("q"))  # timestamps
    time_values: array = field(default_factory=lambda: array("i"))  # relative offsets
    max_timestamp: int = NO_TIMESTAMP
    offset_of_max_timestamp: int = -1
    first_batch_timestamp: int | None = None
    next_offset: int = -1
    size: int = 0
    bytes_since_index_entry: int = 0

    def add(self, data: bytes | bytearray | memoryview) -> None:
        """Index the whole batches of `data`, written at file position `self.size`."""
        at, end = 0, len(data)
        while at < end:  # bounded: each batch moves `at` forward (the writer framed them)
            base, length = _FRAME.unpack_from(data, at)
            size = length + LOG_OVERHEAD
            last = base + _LAST_DELTA.unpack_from(data, at + LAST_OFFSET_DELTA_POS)[0]
            timestamp = _MAX_TIMESTAMP.unpack_from(data, at + MAX_TIMESTAMP_POS)[0]
            self._index_batch(self.size + at, last, timestamp, size)
            self.next_offset = last + 1
            at += size
        self.size += end

    def _index_batch(self, position: int, last_offset: int, max_timestamp: int,
                     size: int) -> None:
        # LogSegment._index_batch, entry for entry (the loader's sanity checks hold alike)
        if self.offset_of_max_timestamp < 0:
            self.offset_of_max_timestamp = self.base_offset
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = max_timestamp
        if self.bytes_since_index_entry > self.index_interval_bytes:
            self.offset_keys.append(last_offset - self.base_offset)
            self.offset_values.append(position)
            self._maybe_append_time(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_index_entry = 0
        self.bytes_since_index_entry += size

    def _maybe_append_time(self, timestamp: int, offset: int) -> None:
        if self.time_keys and timestamp <= self.time_keys[-1]:
            return
        self.time_keys.append(timestamp)
        self.time_values.append(offset - self.base_offset)

    def finish(self) -> None:
        """`LogSegment.on_become_inactive`: the last time entry is the largest timestamp."""
        if self.max_timestamp >= 0:
            self._maybe_append_time(self.max_timestamp, self.offset_of_max_timestamp)

    def write(self, index_path: Path, time_index_path: Path) -> None:
        """Write both files and fsync them (before the swap makes them live)."""
        write_fsynced(index_path, b"".join(
            _OFFSET_ENTRY.pack(k, v) for k, v in zip(self.offset_keys, self.offset_values)))
        write_fsynced(time_index_path, b"".join(
            _TIME_ENTRY.pack(k, v) for k, v in zip(self.time_keys, self.time_values)))

    def install(self, segment: LogSegment) -> None:
        """Give `segment` (the cleaned file opened live, its index files in place) these
        indexes and tail state, as `recover` would have rebuilt them from the file."""
        if segment.size != self.size:
            raise KafkaStorageError(f"cleaned segment {segment.log_path} has {segment.size} "
                                    f"bytes, {self.size} were written")
        segment.offset_index.adopt(self.offset_keys, self.offset_values)
        segment.time_index.adopt(self.time_keys, self.time_values)
        segment.max_timestamp = self.max_timestamp
        segment.offset_of_max_timestamp = (self.offset_of_max_timestamp
                                           if self.offset_of_max_timestamp >= 0
                                           else self.base_offset)
        segment.first_batch_timestamp = self.first_batch_timestamp
        segment.next_offset = self.next_offset if self.next_offset >= 0 else self.base_offset
        # (its bytes since the last index entry only matter to appends: never to it, inactive)
        segment.mark_durable()  # the file was fsynced before its rename


def write_fsynced(path: Path, data: bytes) -> None:
    """Write a cleaned index file whole and fsync it (before the swap makes it live)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:  # bounded: each write consumes bytes or raises
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise KafkaStorageError(f"cannot write index file {path}: {e}") from e
