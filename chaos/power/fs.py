"""A passthrough FUSE filesystem over a backing directory that remembers what is not durable.

Every call goes through to the backing directory at once (os.* on `backing + path`); before a
change, chaos.power.volatile's ledger is told, so a power loss can take back what no fsync
made durable. File handles are the backing file descriptors. The daemon runs it single-
threaded (mfusepy's `nothreads`): the ledger needs no lock, and a node's metadata log or a
few partitions are not a load that needs more.

mfusepy (ctypes over libfuse 3, or 2) is imported by the daemon only; this module's class
derives from its `Operations` when it is there.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import Any, TypeVar

from mfusepy import FuseOSError, Operations

from chaos.power.volatile import UndoFull, VolatileLedger

STAT_FIELDS = ("st_gid", "st_mode", "st_nlink", "st_size", "st_uid", "st_blocks", "st_blksize", "st_ino", "st_rdev")
TIME_FIELDS = ("st_atime", "st_mtime", "st_ctime")  # handed over in nanoseconds (use_ns)
STATVFS_FIELDS = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_flag",
                  "f_frsize", "f_namemax")

T = TypeVar("T")


def _os(call: Callable[[], T]) -> T:
    """An OSError of the backing directory becomes the same errno for the caller."""
    try:
        return call()
    except UndoFull:
        raise FuseOSError(errno.EIO) from None
    except OSError as exc:
        raise FuseOSError(exc.errno or errno.EIO) from None


class PowerLossFS(Operations):
    use_ns = True  # mfusepy hands utimens nanoseconds (its float seconds are deprecated)

    def __init__(self, ledger: VolatileLedger) -> None:
        self.ledger = ledger
        self.real = ledger.real

    # --- reads ------------------------------------------------------------------------------
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        st = _os(lambda: os.fstat(fh) if fh is not None else os.lstat(self.real(path)))
        return {**{name: getattr(st, name) for name in STAT_FIELDS},
                **{name: getattr(st, f"{name}_ns") for name in TIME_FIELDS}}

    def access(self, path: str, amode: int) -> int:
        if not os.access(self.real(path), amode):
            raise FuseOSError(errno.EACCES)
        return 0

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *_os(lambda: os.listdir(self.real(path)))]

    def readlink(self, path: str) -> str:
        return _os(lambda: os.readlink(self.real(path)))

    def statfs(self, path: str) -> dict[str, int]:
        st = _os(lambda: os.statvfs(self.real(path)))
        return {name: getattr(st, name) for name in STATVFS_FIELDS}

    def open(self, path: str, flags: int) -> int:
        # read-write underneath, whatever was asked: the ledger reads a block before changing
        # it; no O_APPEND: the kernel already gives each write its offset
        if flags & os.O_ACCMODE == os.O_WRONLY:
            flags = (flags & ~os.O_ACCMODE) | os.O_RDWR
        flags &= ~os.O_APPEND
        if flags & os.O_TRUNC:
            fd = _os(lambda: os.open(self.real(path), flags & ~os.O_TRUNC))
            self._truncate_fd(fd, 0)
            return fd
        return _os(lambda: os.open(self.real(path), flags))

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return _os(lambda: os.pread(fh, size, offset))

    # --- data changes ----------------------------------------------------------------------------
    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        def call() -> int:
            self.ledger.before_write(fh, offset, len(data))
            return os.pwrite(fh, data, offset)
        return _os(call)

    def _truncate_fd(self, fd: int, length: int) -> None:
        def call() -> None:
            self.ledger.before_truncate(fd, length)
            os.ftruncate(fd, length)
        _os(call)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        if fh is not None:
            self._truncate_fd(fh, length)
            return 0
        fd = _os(lambda: os.open(self.real(path), os.O_RDWR))
        try:
            self._truncate_fd(fd, length)
        finally:
            os.close(fd)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        _os(lambda: self.ledger.synced(fh))
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0  # close() makes nothing durable

    def release(self, path: str, fh: int) -> int:
        os.close(fh)
        return 0

    # --- directory entries --------------------------------------------------------------------------
    def create(self, path: str, mode: int, fi: Any = None) -> int:
        real = self.real(path)
        existed = os.path.lexists(real)
        fd = _os(lambda: os.open(real, os.O_RDWR | os.O_CREAT, mode))
        if not existed:
            self.ledger.changed("create", path)
        return fd

    def mknod(self, path: str, mode: int, dev: int) -> int:
        _os(lambda: os.mknod(self.real(path), mode, dev))
        self.ledger.changed("create", path)
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        _os(lambda: os.mkdir(self.real(path), mode))
        self.ledger.changed("mkdir", path)
        return 0

    def rmdir(self, path: str) -> int:
        _os(lambda: os.rmdir(self.real(path)))
        self.ledger.changed("rmdir", path)
        return 0

    def unlink(self, path: str) -> int:
        trash = _os(lambda: self.ledger.to_trash(path))
        self.ledger.changed("unlink", path, trash=trash)
        return 0

    def rename(self, old: str, new: str) -> int:
        real_new = self.real(new)
        _os(lambda: os.lstat(self.real(old)))
        trash = None
        if os.path.lexists(real_new) and not os.path.isdir(real_new):
            trash = _os(lambda: self.ledger.to_trash(new))  # the replaced file comes back on a power loss
        try:
            _os(lambda: os.rename(self.real(old), real_new))
        except FuseOSError:
            if trash is not None:
                os.rename(trash, real_new)
            raise
        self.ledger.changed("rename", new, source=old, trash=trash)
        return 0

    def link(self, target: str, source: str) -> int:
        _os(lambda: os.link(self.real(source), self.real(target)))
        self.ledger.changed("link", target)
        return 0

    def symlink(self, target: str, source: str) -> int:
        _os(lambda: os.symlink(source, self.real(target)))
        self.ledger.changed("link", target)
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        self.ledger.dir_synced(path)
        return 0

    def opendir(self, path: str) -> int:
        _os(lambda: os.lstat(self.real(path)))
        return 0

    # --- attributes: passed through, not modelled (they survive a power loss) --------------------------
    def chmod(self, path: str, mode: int) -> int:
        _os(lambda: os.chmod(self.real(path), mode))
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        _os(lambda: os.chown(self.real(path), uid, gid, follow_symlinks=False))
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        _os(lambda: os.utime(self.real(path), ns=times, follow_symlinks=False) if times is not None
            else os.utime(self.real(path), follow_symlinks=False))
        return 0
