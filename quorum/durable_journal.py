"""The metadata quorum's Raft journal and term/vote file, written so that a power loss keeps
what a voter acknowledged (issue 28): our replacement for pysyncobj's `FileJournal`.

Why pysyncobj's journal is replaced rather than wrapped (pysyncobj 0.3.17, journal.py):
- `FileJournal` appends into an mmap'd file and never syncs it (`flush()` exists, nothing
  calls it): an entry the follower acknowledged lives only in the page cache.
- Its `deleteEntriesTo` (log compaction) rewrites the live file in place from offset 0 — a
  power loss half way through loses entries the dump does not cover — and its truncations
  move the header's end offset only, so stale records of an older term stay in the file
  where a torn later append can make them look valid again (Raft's log matching breaks).
- `MetaStorer` replaces the term/vote file by renaming an un-fsynced temporary file.
All of that is private to `FileJournal` (name-mangled attributes), so this module keeps its
on-disk format (header + size-framed records; a journal written by pysyncobj loads) and
its interface, and changes how it writes:
- appends are `pwrite`s; `sync()` makes all of them durable with one fsync (the batch: one
  call per pass of pysyncobj's tick, `quorum.durability_gate` decides when);
- a truncation cuts the file (`ftruncate`) and is fsynced at once, so no stale record
  survives past the end; compaction writes a new file, fsyncs it, renames it, fsyncs the
  directory — after fsyncing the dump and the directory that make the dropped entries
  redundant;
- the term and vote are written to a temporary file, fsynced, renamed, directory fsynced,
  before `setCurrentTerm` returns (pysyncobj sends the vote or the vote request after it);
- loading stops at the first record that is not whole (size prefix and suffix, consecutive
  index, non-decreasing term) and cuts the file there: the torn tail of an append that was
  never fsynced, hence never acknowledged.
With `fsync=False` the same files are written without any fsync (the pre-issue-28 behaviour:
a killed process loses nothing, a power loss may).
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import pysyncobj.syncobj
from pysyncobj.journal import (
    APP_NAME,
    APP_VERSION,
    FIRST_RECORD_OFFSET,
    JOURNAL_FORMAT_VERSION,
    LAST_RECORD_OFFSET_OFFSET,
    NAME_SIZE,
    VERSION_SIZE,
    Journal,
)
from pysyncobj.pickle import dumps, loads

logger = logging.getLogger(__name__)

META_SUFFIX: Final = ".meta"  # pysyncobj's name for the term/vote/commit-index file
TMP_SUFFIX: Final = ".tmp"
_ENTRY_HEADER: Final = struct.Struct("<QQ")  # raft index, term
_SIZE: Final = struct.Struct("<I")
FRAME_BYTES: Final = 2 * _SIZE.size  # size prefix and suffix around each record
MAX_JOURNAL_BYTES: Final = 2**32 - 1  # the header's end offset is a u32 (pysyncobj's format)

Entry = tuple[bytes, int, int]  # (command, raft index, term), as pysyncobj hands them over


def _header(end: int) -> bytes:
    return (APP_NAME.ljust(NAME_SIZE, b"\0") + APP_VERSION.ljust(VERSION_SIZE, b"\0")
            + struct.pack("<II", JOURNAL_FORMAT_VERSION, end))


def _record(command: bytes, idx: int, term: int) -> bytes:
    body = _ENTRY_HEADER.pack(idx, term) + command
    size = _SIZE.pack(len(body))
    return size + body + size


def parse_records(data: bytes) -> tuple[list[Entry], list[int]]:
    """The whole records of a journal file and the end offset of each; stops at the first
    record that is torn or out of sequence."""
    if len(data) < FIRST_RECORD_OFFSET:
        return [], []
    (end,) = _SIZE.unpack_from(data, LAST_RECORD_OFFSET_OFFSET)
    end = min(end, len(data))
    entries: list[Entry] = []
    ends: list[int] = []
    offset = FIRST_RECORD_OFFSET
    while offset + FRAME_BYTES + _ENTRY_HEADER.size <= end:  # bounded: offset grows every pass
        (size,) = _SIZE.unpack_from(data, offset)
        stop = offset + _SIZE.size + size
        if size < _ENTRY_HEADER.size or stop + _SIZE.size > end or _SIZE.unpack_from(data, stop)[0] != size:
            break
        idx, term = _ENTRY_HEADER.unpack_from(data, offset + _SIZE.size)
        if entries and (idx != entries[-1][1] + 1 or term < entries[-1][2]):
            break
        entries.append((data[offset + _SIZE.size + _ENTRY_HEADER.size:stop], idx, term))
        offset = stop + _SIZE.size
        ends.append(offset)
    return entries, ends


def fsync_directory(path: Path, fsync: Callable[[int], None]) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path, fsync: Callable[[int], None]) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        fsync(fd)
    finally:
        os.close(fd)


def write_durably(path: Path, data: bytes, *, durable: bool, fsync: Callable[[int], None]) -> None:
    """Replace `path` by a file holding `data`: temp file, fsync, rename, directory fsync."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:  # bounded: every pass writes at least one byte or raises
            view = view[os.write(fd, view):]
        if durable:
            fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_directory(path.parent, fsync)


class DurableJournal(Journal):
    """pysyncobj's Journal interface over one file, durable on `sync()` (module docstring)."""

    def __init__(self, path: Path, *, dump_path: Path, durable: bool,
                 fsync: Callable[[int], None] = os.fsync) -> None:
        self.path = path
        self._dump_path = dump_path
        self.durable = durable
        self._fsync = fsync
        self._meta_path = path.with_name(path.name + META_SUFFIX)
        self._meta: dict[str, Any] = self._load_meta()
        self._meta_saved = True
        self._dirty = False
        self.syncs = 0  # fsync batches so far (the bench reports entries per batch)
        self.synced_entries = 0
        self._unsynced_entries = 0
        existed = path.exists()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        with open(path, "rb") as f:
            data = f.read()
        if len(data) < FIRST_RECORD_OFFSET:  # a new journal (or one cut before its header)
            data = _header(FIRST_RECORD_OFFSET)
            os.pwrite(self._fd, data, 0)
            if durable:
                fsync(self._fd)
        self._entries, self._ends = parse_records(data)
        end = self._ends[-1] if self._ends else FIRST_RECORD_OFFSET
        (recorded,) = _SIZE.unpack_from(data, LAST_RECORD_OFFSET_OFFSET)
        if recorded != end:
            logger.warning("Metadata journal %s: cut at byte %d after %d whole entries (its header said "
                           "%d): the torn tail of an append that was never fsynced",
                           path, end, len(self._entries), recorded)
        if recorded != end or len(data) != end:
            self._cut(end)
        if not existed and durable:
            fsync_directory(path.parent, fsync)

    # -- durability ------------------------------------------------------------------

    @property
    def dirty(self) -> bool:
        """Whether something written since the last `sync()` is not yet on stable storage."""
        return self._dirty

    def sync(self) -> None:
        """Make every write so far durable: one fsync for all of them."""
        if not self._dirty:
            return
        self._fsync(self._fd)
        self._dirty = False
        self.syncs += 1
        self.synced_entries += self._unsynced_entries
        self._unsynced_entries = 0

    def _written(self) -> None:
        if self.durable:
            self._dirty = True

    def _cut(self, end: int) -> None:
        """Drop everything from `end` on, header and file, durably at once: a later append must
        never sit next to a stale record of the cut tail (module docstring)."""
        os.pwrite(self._fd, _SIZE.pack(end), LAST_RECORD_OFFSET_OFFSET)
        os.ftruncate(self._fd, end)
        if self.durable:
            self._fsync(self._fd)
            self._dirty = False

    def _end(self) -> int:
        return self._ends[-1] if self._ends else FIRST_RECORD_OFFSET

    # -- pysyncobj's Journal interface (its names) -------------------------------------

    def add(self, command: bytes, idx: int, term: int) -> None:
        record = _record(bytes(command), idx, term)
        start = self._end()
        if start + len(record) > MAX_JOURNAL_BYTES:
            raise OSError(f"metadata journal {self.path} would exceed {MAX_JOURNAL_BYTES} bytes")
        os.pwrite(self._fd, record, start)
        # the header after the record: a killed process (page cache kept) never sees an end
        # past a record it did not write; after a power loss `parse_records` checks each one
        os.pwrite(self._fd, _SIZE.pack(start + len(record)), LAST_RECORD_OFFSET_OFFSET)
        self._entries.append((bytes(command), idx, term))
        self._ends.append(start + len(record))
        self._unsynced_entries += 1
        self._written()

    def clear(self) -> None:
        # pysyncobj clears the journal when it installs a dump it received or loaded: that dump
        # must be durable before the entries it replaces go
        self._sync_dump()
        self._entries, self._ends = [], []
        self._cut(FIRST_RECORD_OFFSET)

    def deleteEntriesFrom(self, entryFrom: int) -> None:  # pysyncobj's name
        if entryFrom >= len(self._entries):
            return
        del self._entries[entryFrom:]
        del self._ends[entryFrom:]
        self._cut(self._end())

    def deleteEntriesTo(self, entryTo: int) -> None:  # pysyncobj's name
        """Drop the first `entryTo` entries (a dump covers them): a new file, renamed in."""
        self._sync_dump()
        kept = self._entries[entryTo:]
        records = [_record(*entry) for entry in kept]
        data = bytearray(_header(FIRST_RECORD_OFFSET))
        ends = []
        for record in records:
            data += record
            ends.append(len(data))
        data[LAST_RECORD_OFFSET_OFFSET:FIRST_RECORD_OFFSET] = _SIZE.pack(len(data))
        write_durably(self.path, bytes(data), durable=self.durable, fsync=self._fsync)
        old, self._fd = self._fd, os.open(self.path, os.O_RDWR)
        os.close(old)
        self._entries, self._ends = kept, ends
        self._dirty = False  # the new file was fsynced whole (or fsync is off)

    def _sync_dump(self) -> None:
        if self.durable and self._dump_path.exists():
            fsync_file(self._dump_path, self._fsync)
            fsync_directory(self._dump_path.parent, self._fsync)

    def __getitem__(self, item: Any) -> Any:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def _destroy(self) -> None:
        self.sync()
        if not self._meta_saved:
            self._store_meta()
        os.close(self._fd)

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:  # pysyncobj's name
        # not needed for safety (a restarted voter learns the commit index again); stored once a
        # second like pysyncobj does
        self._meta["raftCommitIndex"] = raftCommitIndex
        self._meta_saved = False

    def getRaftCommitIndex(self) -> int:  # pysyncobj's name
        value = self._meta.get("raftCommitIndex", 1)
        return value if isinstance(value, int) else 1

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:  # pysyncobj's name
        """Durable before returning: pysyncobj answers the vote / asks for votes right after."""
        self._meta["currentTerm"] = term
        self._meta["votedForNodeId"] = votedForNodeId
        self._store_meta()

    def getCurrentTerm(self) -> int:  # pysyncobj's name
        value = self._meta.get("currentTerm", 0)
        return value if isinstance(value, int) else 0

    def getVotedForNodeId(self) -> Any:  # pysyncobj's name
        return self._meta.get("votedForNodeId")

    def onOneSecondTimer(self) -> None:  # pysyncobj's name
        if not self._meta_saved:
            self._store_meta()

    def _store_meta(self) -> None:
        write_durably(self._meta_path, dumps(self._meta), durable=self.durable, fsync=self._fsync)
        self._meta_saved = True

    def _load_meta(self) -> dict[str, Any]:
        try:
            meta = loads(self._meta_path.read_bytes())
        except FileNotFoundError:
            return {}
        except Exception as exc:  # the file is written by rename: a bad one is not ours to guess at
            raise OSError(f"cannot read the quorum term/vote file {self._meta_path}: {exc!r}") from exc
        if not isinstance(meta, dict):
            raise OSError(f"the quorum term/vote file {self._meta_path} does not hold a map")
        return meta


# -- handing our journal to SyncObj.__init__ ---------------------------------------------
# SyncObj.__init__ builds its journal with the module-level `createJournal(journalFile)` and
# has no parameter for another class. We replace that name in pysyncobj.syncobj once, with a
# function that returns the journal the calling thread announced for that file and falls
# back to pysyncobj's own otherwise (other SyncObj users in this process are unchanged).

_announced = threading.local()
_pysyncobj_create_journal: Final = pysyncobj.syncobj.createJournal


def _create_journal(journalFile: str | None = None) -> Any:
    journal = getattr(_announced, "journal", None)
    if journal is not None and journalFile == str(journal.path):
        _announced.journal = None
        return journal
    return _pysyncobj_create_journal(journalFile)


pysyncobj.syncobj.createJournal = _create_journal


@contextlib.contextmanager
def journal_for_syncobj(journal: DurableJournal) -> Iterator[None]:
    """While this block runs SyncObj.__init__ on this thread, it gets `journal`."""
    _announced.journal = journal
    try:
        yield
    finally:
        _announced.journal = None
