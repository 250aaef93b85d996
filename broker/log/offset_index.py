"""The `.index` file: sparse map from offset to the position of a batch in the segment.

Entries are 8 bytes, big-endian (int32 offset relative to the segment's base offset,
int32 position), as Kafka lays them out. The log writes (batch last offset, batch start
position) every `index.interval.bytes`, so a lookup lands at or before the wanted batch.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import NamedTuple

from broker.log.sparse_index import CorruptIndexError, SparseIndex

_ENTRY = struct.Struct(">ii")


class OffsetPosition(NamedTuple):
    offset: int
    position: int


class OffsetIndex(SparseIndex):
    """Sparse offset → position index of one segment."""

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        super().__init__(path, _ENTRY, "i", "i", max(1, max_index_bytes // _ENTRY.size))
        self.base_offset = base_offset

    def append(self, offset: int, position: int) -> None:
        """Record that the batch ending at `offset` starts at `position`."""
        self.append_entry(offset - self.base_offset, position)

    def lookup(self, offset: int) -> OffsetPosition:
        """The last entry at or before `offset`, or (base offset, 0) when there is none."""
        i = self.floor(offset - self.base_offset)
        if i < 0:
            return OffsetPosition(self.base_offset, 0)
        return OffsetPosition(self.base_offset + self.keys[i], self.values[i])

    @property
    def last_entry(self) -> OffsetPosition:
        if not self.keys:
            return OffsetPosition(self.base_offset, 0)
        return OffsetPosition(self.base_offset + self.keys[-1], self.values[-1])

    def truncate_to(self, offset: int) -> None:
        """Remove every entry for `offset` or later."""
        self.truncate_entries(self.floor(offset - self.base_offset - 1) + 1)

    def sanity_check(self, log_size: int) -> None:
        """Raise CorruptIndexError unless entries are increasing and inside the log file."""
        previous = -1
        for key, position in zip(self.keys, self.values):
            if key < 0 or key <= previous or position < 0 or position >= log_size:
                raise CorruptIndexError(
                    f"index file {self.path}: entry (offset {self.base_offset + key}, "
                    f"position {position}) is out of order or outside the log "
                    f"({log_size} bytes)"
                )
            previous = key
