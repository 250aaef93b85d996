"""What a power loss would take back: the writes and directory changes not yet made durable.

The FUSE layer (chaos.power.fs) passes every operation through to a backing directory at once
and tells this ledger first, so that a power loss can be undone in place afterwards (Jepsen's
LazyFS keeps unsynced data in a page cache of its own instead; undoing write-through changes
gives the same surviving bytes without a cache to read through). What is modelled:

- File data: bytes written, or cut by a truncation, since the file's last fsync/fdatasync are
  volatile. The first change of a block of the file's durable bytes saves that block
  (`BLOCK_BYTES`); the durable size is the size at the last fsync (or when the file was first
  touched since the mount: everything there at mount time is durable). A power loss writes
  the saved blocks back and cuts the file to its durable size.
- Directory entries: a create, mkdir, unlink, rmdir, rename, link or symlink is volatile until
  every directory it changed has been fsynced (ext4's rule for a new or renamed file; POSIX
  promises no more). A power loss undoes the volatile ones newest first: a create is removed
  (with its data, fsynced or not), an unlinked file or one a rename replaced comes back from
  the trash it was moved to, a rename goes back.
What is not: the order in which the kernel would have written volatile data back (a real
power loss may keep some of it, torn or not: LazyFS's "torn-seq" faults; here all of it goes),
fsync of a file making its own new directory entry durable (ext4 often does; we do not
count on it), writes through a file opened O_SYNC/O_DSYNC and syncfs(2) (they would count as
unsynced; nothing in tidelog uses them: it fsyncs), attributes (chmod, chown, times: passed
through and kept), and the backing directory's own durability (the backing files are never
fsynced: a test's host does not lose power).
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from common.units import MIB

log = logging.getLogger(__name__)

BLOCK_BYTES: Final = 4096  # the unit a first overwrite of durable bytes saves
MAX_SAVED_BYTES: Final = 256 * MIB  # saved durable blocks per mount; past it writes fail (EIO)


class UndoFull(OSError):
    """More durable bytes overwritten without an fsync than this mount keeps (MAX_SAVED_BYTES)."""


@dataclass(slots=True)
class FileUndo:
    durable_size: int
    blocks: dict[int, bytes] = field(default_factory=dict)  # block index -> its durable bytes


@dataclass(slots=True)
class EntryChange:
    """One volatile directory change and how to take it back (paths relative to the backing root)."""

    kind: str  # create, mkdir, unlink, rmdir, rename, link
    path: str
    dirs: set[str]  # directories whose fsync is still missing
    source: str | None = None  # rename: where it came from
    trash: str | None = None  # unlink / rename over a file: where the old file waits


@dataclass(frozen=True, slots=True)
class PowerLossReport:
    files_rolled_back: int
    bytes_dropped: int
    entries_undone: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        return {"files_rolled_back": self.files_rolled_back, "bytes_dropped": self.bytes_dropped,
                "entries_undone": list(self.entries_undone)}


def _parent(path: str) -> str:
    return os.path.dirname(path.rstrip("/")) or "/"


class VolatileLedger:
    """The undo state of one mount's backing directory; one FUSE thread calls it (nothreads)."""

    def __init__(self, backing: Path, trash: Path, *, max_saved_bytes: int = MAX_SAVED_BYTES) -> None:
        self.backing, self.trash = backing, trash
        self.trash.mkdir(parents=True, exist_ok=True)
        self.files: dict[int, FileUndo] = {}  # backing inode -> its undo
        self.entries: list[EntryChange] = []  # oldest first
        self.saved_bytes = 0
        self.max_saved_bytes = max_saved_bytes
        self._trashed = 0

    def real(self, path: str) -> str:
        return str(self.backing) + path

    # --- file data -------------------------------------------------------------------------
    def _undo_of(self, fd: int) -> tuple[int, FileUndo]:
        st = os.fstat(fd)
        undo = self.files.get(st.st_ino)
        if undo is None:
            undo = self.files[st.st_ino] = FileUndo(st.st_size)
        return st.st_ino, undo

    def _save(self, fd: int, undo: FileUndo, start: int, end: int) -> None:
        """Save every durable block in [start, end) not saved yet, before it changes."""
        end = min(end, undo.durable_size)
        if start >= end:
            return
        for block in range(start // BLOCK_BYTES, (end - 1) // BLOCK_BYTES + 1):
            if block in undo.blocks:
                continue
            if self.saved_bytes + BLOCK_BYTES > self.max_saved_bytes:
                raise UndoFull(5, f"over {self.max_saved_bytes} bytes of durable blocks overwritten without "
                                  "an fsync on this mount")
            data = os.pread(fd, BLOCK_BYTES, block * BLOCK_BYTES)
            undo.blocks[block] = data
            self.saved_bytes += len(data)

    def before_write(self, fd: int, offset: int, size: int) -> None:
        _, undo = self._undo_of(fd)
        self._save(fd, undo, offset, offset + size)

    def before_truncate(self, fd: int, length: int) -> None:
        _, undo = self._undo_of(fd)
        self._save(fd, undo, length, undo.durable_size)

    def synced(self, fd: int) -> None:
        """fsync/fdatasync: the file's data as it is now survives a power loss."""
        undo = self.files.pop(os.fstat(fd).st_ino, None)
        if undo is not None:
            self.saved_bytes -= sum(len(b) for b in undo.blocks.values())

    # --- directory entries --------------------------------------------------------------------
    def to_trash(self, path: str) -> str:
        """Move the backing file at `path` aside (an unlink or a replaced rename target)."""
        self._trashed += 1
        name = str(self.trash / f"{self._trashed:08d}")
        os.rename(self.real(path), name)
        return name

    def changed(self, kind: str, path: str, *, source: str | None = None, trash: str | None = None) -> None:
        dirs = {_parent(path)} | ({_parent(source)} if source is not None else set())
        self.entries.append(EntryChange(kind, path, dirs, source, trash))

    def dir_synced(self, directory: str) -> None:
        """fsync of a directory: the changes of its entries survive (the trash they freed is emptied)."""
        directory = directory.rstrip("/") or "/"
        kept: list[EntryChange] = []
        for change in self.entries:
            change.dirs.discard(directory)
            if change.dirs:
                kept.append(change)
            elif change.trash is not None:
                _remove(change.trash)
        self.entries = kept

    # --- the plug ---------------------------------------------------------------------------------
    def power_loss(self) -> PowerLossReport:
        """Take back everything volatile, newest directory change first, then the data."""
        created = 0  # bytes of the files whose very creation is taken back
        for change in self.entries:
            if change.kind in ("create", "link") and os.path.isfile(self.real(change.path)):
                created += os.path.getsize(self.real(change.path))
        undone = [self._undo_entry(change) for change in reversed(self.entries)]
        self.entries = []
        by_inode: dict[int, str] = {}
        for root, _dirs, names in os.walk(self.backing):  # bounded by the backing tree
            for name in names:
                path = os.path.join(root, name)
                by_inode.setdefault(os.lstat(path).st_ino, path)
        rolled, dropped = 0, created
        for inode, undo in sorted(self.files.items()):
            found = by_inode.get(inode)
            if found is None:
                continue  # its directory entry was volatile too and is gone
            fd = os.open(found, os.O_RDWR)
            try:
                size = os.fstat(fd).st_size
                for block, data in sorted(undo.blocks.items()):
                    os.pwrite(fd, data, block * BLOCK_BYTES)
                os.ftruncate(fd, undo.durable_size)
            finally:
                os.close(fd)
            rolled += 1
            dropped += max(0, size - undo.durable_size) + sum(len(b) for b in undo.blocks.values())
        self.files, self.saved_bytes = {}, 0
        shutil.rmtree(self.trash, ignore_errors=True)
        return PowerLossReport(rolled, dropped, tuple(undone))

    def _undo_entry(self, change: EntryChange) -> str:
        real = self.real(change.path)
        try:
            if change.kind in ("create", "link"):
                os.unlink(real)
            elif change.kind == "mkdir":
                shutil.rmtree(real)
            elif change.kind == "rmdir":
                os.mkdir(real)
            elif change.kind == "rename":
                assert change.source is not None
                os.rename(real, self.real(change.source))
            if change.trash is not None:  # unlink, or the file a rename replaced
                os.rename(change.trash, real)
        except OSError as exc:  # a later durable change took its place: say so, keep going
            log.warning("power loss: could not undo %s of %s: %s", change.kind, change.path, exc)
            return f"{change.kind} {change.path} (not undone: {exc.strerror})"
        return f"{change.kind} {change.path}" + (f" (from {change.source})" if change.source else "")

    def clean_unmount(self) -> None:
        """An orderly unmount: every volatile change is kept (nothing was lost)."""
        self.files, self.entries, self.saved_bytes = {}, [], 0
        shutil.rmtree(self.trash, ignore_errors=True)


def _remove(path: str) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass
