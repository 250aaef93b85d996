"""Sparse, sorted, fixed-width index files: the shared machinery of `.index` and `.timeindex`.

Entries live in two in-memory arrays (the source of truth while the segment is open) and
reach the file on `flush()`, which the log calls whenever it moves its recovery point. An
unclean stop can therefore leave an index file behind its segment; recovery rebuilds the
indexes of every segment past the recovery point, so nothing reads a stale entry.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_right
from pathlib import Path

from common.errors import KafkaStorageError


class CorruptIndexError(KafkaStorageError):
    """An index file failed its sanity check; the segment's indexes must be rebuilt."""


def write_tail(path: Path, tail: bytes, offset: int, *, truncate: bool, fsync: bool, what: str) -> None:
    """Write an index file's unpersisted entries `tail` at `offset` (its persisted prefix),
    cutting the file there first when asked or when it is not exactly that long (a torn or
    stale tail). Opened per call: an index holds no descriptor between flushes. The offset,
    time and transaction indexes all write this way."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if truncate or os.fstat(fd).st_size != offset:
                os.ftruncate(fd, offset)
            if tail:
                os.pwrite(fd, tail, offset)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise KafkaStorageError(f"cannot write {what} {path}: {e}") from e


class SparseIndex:
    """Fixed-width (key, value) entries with strictly increasing keys, persisted big-endian."""

    # Whether no entry fits any more. An attribute, not a property: roll_reason asks both of a
    # segment's indexes on every append, leader's and follower's (two Python frames each time).
    # Only _count_changed sets it: the one home of the "full" rule.
    is_full: bool
    # Entries that still fit: max_entries - len(keys), set by _count_changed and counted down by
    # append_entry, which hands over to _count_changed when it takes the last one. So an append
    # pays a decrement, not the rule (a frame per append: a bulk produce indexes every batch).
    room: int

    def __init__(self, path: Path, entry: struct.Struct, key_type: str, value_type: str,
                 max_entries: int) -> None:
        self.path = path
        self._entry = entry
        self.keys = array(key_type)
        self.values = array(value_type)
        self.max_entries = max_entries
        self._persisted = 0  # entries already in the file
        self._count_changed()

    @property
    def entry_size(self) -> int:
        return self._entry.size

    def __len__(self) -> int:
        return len(self.keys)

    def _count_changed(self) -> None:
        """The entries changed: recount the room, and decide fullness (Kafka's isFull)."""
        self.room = self.max_entries - len(self.keys)
        self.is_full = self.room <= 0

    def load(self) -> None:
        """Read the file's entries; a missing file is a CorruptIndexError (it must be rebuilt)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            raise CorruptIndexError(f"index file {self.path} is missing") from None
        except OSError as e:
            raise KafkaStorageError(f"cannot read index file {self.path}: {e}") from e
        if len(data) % self.entry_size:
            raise CorruptIndexError(
                f"index file {self.path} has size {len(data)}, not a multiple of "
                f"the entry size {self.entry_size}"
            )
        self.keys = array(self.keys.typecode)
        self.values = array(self.values.typecode)
        for key, value in self._entry.iter_unpack(data):
            self.keys.append(key)
            self.values.append(value)
        self._persisted = len(self.keys)
        self._count_changed()

    def adopt(self, keys: array, values: array) -> None:
        """Take entries already in the file (the cleaner wrote and fsynced it)."""
        self.keys = array(self.keys.typecode, keys)
        self.values = array(self.values.typecode, values)
        self._persisted = len(self.keys)
        self._count_changed()

    def floor(self, key: int) -> int:
        """Index of the last entry whose key is <= `key`, or -1 when there is none."""
        return bisect_right(self.keys, key) - 1

    def append_entry(self, key: int, value: int, *, if_key_grows: bool = False) -> None:
        """Add an entry: the one place either index kind adds one. Keys strictly increase (a
        break is a bug, not input: ValueError). `if_key_grows` is the time index's rule (Kafka's
        TimeIndex.maybeAppend): a key at or below the last adds nothing, and a value below the
        last is a ValueError (its offsets stay sorted: truncate_to bisects them). The offset
        index's positions go unchecked, as Kafka's OffsetIndex.append leaves them."""
        keys = self.keys
        if keys and key <= keys[-1]:
            if if_key_grows:
                return
            raise ValueError(f"index {self.path}: key {key} after {keys[-1]}")
        values = self.values
        if if_key_grows and values and value < values[-1]:
            raise ValueError(f"index {self.path}: value {value} after {values[-1]} (key {key})")
        keys.append(key)
        values.append(value)
        room = self.room - 1
        self.room = room
        if not room:  # this entry took the last free one (a full index stays full below zero)
            self._count_changed()

    def truncate_entries(self, count: int) -> None:
        """Keep only the first `count` entries, in memory and in the file."""
        if count >= len(self.keys):
            return
        del self.keys[count:]
        del self.values[count:]
        self._count_changed()
        if self._persisted > count:
            self._persisted = count
            self._write_tail(truncate=True)

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self.keys = array(self.keys.typecode)
        self.values = array(self.values.typecode)
        self._persisted = 0
        self._count_changed()
        self._write_tail(truncate=True)

    def flush(self, *, fsync: bool = True) -> None:
        """Write entries not yet in the file, and fsync it."""
        if self._persisted == len(self.keys) and self.path.exists():
            return
        self._write_tail(truncate=False, fsync=fsync)

    def _write_tail(self, *, truncate: bool, fsync: bool = False) -> None:
        if not self.path.exists():
            self._persisted = 0  # the file went away: write every entry, never a hole
        pack = self._entry.pack
        tail = b"".join(
            pack(self.keys[i], self.values[i]) for i in range(self._persisted, len(self.keys))
        )
        write_tail(self.path, tail, self._persisted * self.entry_size, truncate=truncate, fsync=fsync,
                   what="index file")
        self._persisted = len(self.keys)

    def rename(self, path: Path) -> None:
        """Move the file (if written) to `path`, e.g. for deferred deletion."""
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        """Remove the file."""
        self.path.unlink(missing_ok=True)
