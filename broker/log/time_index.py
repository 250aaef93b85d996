"""The `.timeindex` file: sparse map from timestamp to the offset of a batch.

Entries are 12 bytes, big-endian (int64 timestamp, int32 offset relative to the segment's
base offset), with strictly increasing timestamps: an entry is only added when a batch
raises the segment's maximum timestamp, as in Kafka.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from pathlib import Path
from typing import NamedTuple

from broker.log.sparse_index import CorruptIndexError, SparseIndex

_ENTRY = struct.Struct(">qi")
NO_TIMESTAMP = -1


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


class TimeIndex(SparseIndex):
    """Sparse timestamp → offset index of one segment."""

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        super().__init__(path, _ENTRY, "q", "i", max(1, max_index_bytes // _ENTRY.size))
        self.base_offset = base_offset

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add (timestamp, offset) if it raises the largest timestamp indexed so far; an offset
        below the last entry's is a ValueError (Kafka's InvalidOffsetException: truncate_to
        bisects the offsets, so they must stay sorted)."""
        self.append_entry(timestamp, offset - self.base_offset, if_key_grows=True)

    def lookup(self, timestamp: int) -> TimestampOffset:
        """The last entry with timestamp <= `timestamp`, or (-1, base offset)."""
        i = self.floor(timestamp)
        if i < 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return TimestampOffset(self.keys[i], self.base_offset + self.values[i])

    @property
    def last_entry(self) -> TimestampOffset:
        if not self.keys:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return TimestampOffset(self.keys[-1], self.base_offset + self.values[-1])

    def truncate_to(self, offset: int) -> None:
        """Remove every entry pointing at `offset` or later."""
        # offsets in a time index never decrease, so they are sorted too
        self.truncate_entries(bisect_left(self.values, offset - self.base_offset))

    def sanity_check(self, next_offset: int) -> None:
        """Raise CorruptIndexError unless timestamps increase and offsets stay in the segment."""
        previous_ts, previous_offset = NO_TIMESTAMP - 1, -1
        for timestamp, relative in zip(self.keys, self.values):
            if (timestamp <= previous_ts or relative < previous_offset or relative < 0
                    or self.base_offset + relative >= next_offset):
                raise CorruptIndexError(
                    f"time index file {self.path}: entry (timestamp {timestamp}, offset "
                    f"{self.base_offset + relative}) is out of order or past the segment"
                )
            previous_ts, previous_offset = timestamp, relative
