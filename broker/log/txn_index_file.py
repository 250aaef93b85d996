"""The `.txnindex` file of one segment (the format and the rules are `txn_index`'s).

Entries live in memory (the source of truth while the segment is open) and reach the file on
flush, as the offset and time indexes do (`sparse_index`), so the index holds no descriptor
between calls and the broker's bounded cache of segment files (`segment_files`) counts none for
it. A segment with no aborted transaction has no `.txnindex` file, as Kafka creates it lazily.

So the file is created at a segment's first ABORT marker, after the segment's own first flush may
have fsynced its directory: that file's directory entry needs an fsync of its own, once. A segment
below the recovery point is loaded without a rescan, and a `.txnindex` a power loss took would
load as "no aborted transaction" (READ_COMMITTED consumers would then read aborted records). A
durable write (`flush()`) fsyncs the directory when it created the file; a write that leaves the
directory to its caller (the segment's flush, or the background flusher after `prepare_sync`)
says so with `new_file`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from broker.log.checkpoint_file import fsync_directory
from broker.log.sparse_index import write_tail
from broker.log.txn_index import ENTRY_SIZE, AbortedTxn, collect_aborted, decode_entries, encode_entries
from common.errors import KafkaStorageError


class TransactionIndex:
    """The aborted transactions of one segment, in memory; `flush` writes the new ones."""

    __slots__ = ("path", "entries", "_persisted", "new_file")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = []
        self._persisted = 0  # entries already in the file
        # A write created the file and no fsync of its directory followed yet: whoever fsyncs the
        # directory for it clears this (the segment's flush, or a background flush's end).
        self.new_file = False

    def __len__(self) -> int:
        return len(self.entries)

    def load(self) -> None:
        """Read the file. A missing file is an empty index: Kafka creates `.txnindex` lazily and
        most segments never hold an abort; a segment recovered past its flushed prefix rebuilds
        the entries from its batches anyway."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        except OSError as e:
            raise KafkaStorageError(f"cannot read transaction index {self.path}: {e}") from e
        self.entries = decode_entries(data, source=f"transaction index {self.path}")
        self._persisted = len(self.entries)

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry; markers come in offset order (a broken order is a bug, not input)."""
        if self.entries and txn.last_offset <= self.entries[-1].last_offset:
            raise ValueError(f"transaction index {self.path}: marker offset {txn.last_offset} "
                             f"after {self.entries[-1].last_offset}")
        self.entries.append(txn)

    def replace(self, entries: Iterable[AbortedTxn]) -> None:
        """Take a rebuilt list of entries (recovery, the cleaner); the file is rewritten on flush."""
        self.entries = list(entries)
        self._persisted = 0
        self._write(truncate=True)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at `offset` or later (TransactionIndex.truncateTo)."""
        kept = [txn for txn in self.entries if txn.last_offset < offset]
        if len(kept) == len(self.entries):
            return
        self.entries = kept
        if self._persisted > len(kept):
            self._persisted = len(kept)
            self._write(truncate=True)

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        return collect_aborted(self.entries, fetch_offset, upper_bound)

    def flush(self, *, fsync: bool = True, directory: bool = True) -> None:
        """Write entries not yet in the file (`fsync`: durably). An index with no entry has no
        file (as Kafka's lazily created one), so 10,000 partitions without aborts create no files.
        A durable write that creates the file also fsyncs its directory, unless not `directory`:
        the caller fsyncs it after (`new_file` says it owes one)."""
        if self._persisted == len(self.entries) and self.path.exists() == bool(self.entries):
            return
        self._write(truncate=False, fsync=fsync)
        if fsync and directory and self.new_file:  # once per file: it exists from now on
            try:
                fsync_directory(self.path.parent)
            except OSError as e:
                raise KafkaStorageError(f"cannot fsync directory {self.path.parent} after "
                                        f"creating {self.path.name}: {e}") from e
            self.new_file = False

    def _write(self, *, truncate: bool, fsync: bool = False) -> None:
        if not self.entries:
            self.delete()
            self._persisted = 0
            return
        if not self.path.exists():
            self._persisted = 0  # new, or the file went away: write every entry, never a hole
            self.new_file = True  # before the write: a failed one may still have created it
        write_tail(self.path, encode_entries(self.entries[self._persisted:]), self._persisted * ENTRY_SIZE,
                   truncate=truncate, fsync=fsync, what="transaction index")
        self._persisted = len(self.entries)

    def rename(self, path: Path) -> None:
        """Move the file (if written) to `path`, e.g. for deferred deletion."""
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self.new_file = False  # no file, no entry owed
