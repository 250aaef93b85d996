"""The segment files a broker keeps open: one bounded LRU cache of descriptors per broker.

A broker hosting thousands of partitions cannot keep one descriptor per segment open under
the usual 1,024 (or even 65,536) open-file limit, so segments open their file on demand:

    files = SegmentFileCache(max_open=10_000)        # LogManager owns it, logs share it
    handle = files.get(key, path)                    # a hit is a dict move_to_end
    os.pwrite(handle.fd, ...)                        # valid while `handle` is referenced

Correctness rests on who closes a descriptor. The kernel reuses descriptor numbers at once,
so closing one that a pending send still uses would send another file's bytes. Here nothing
closes a descriptor explicitly: a `SegmentHandle` closes its own in `__del__` (as io.FileIO
does) when its last reference goes. The cache holds one reference; every `FileSlice` handed
to the network layer holds another, so a slice sent after its segment was evicted, renamed
`.deleted` or closed still reads its own file, and the descriptor closes once the slice is
sent. CPython's reference counting makes that immediate and deterministic.

Thread-safe: logs are created and closed on the LogManager's I/O pool while the event loop
reads and appends. The lock covers only dict operations; files are opened and evicted
handles released outside it.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from common.errors import KafkaStorageError
from common.prometheus import Metric, counter, gauge, unlabelled

# Flags every segment descriptor has: appends go to the end whatever the file position
# (sendfile moves it), reads use pread.
SEGMENT_OPEN_FLAGS: Final = os.O_RDWR | os.O_APPEND
_KEYS = itertools.count()  # segment keys: unique for the process's life, never reused


def new_key() -> int:
    """A key for one segment's entry (not its path: a cleaner swap puts a new segment at the
    path of one renamed `.deleted`, and both may be open at once)."""
    return next(_KEYS)


class BorrowedFile:
    """A descriptor someone else owns and closes, in a SegmentHandle's shape."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd


class SegmentHandle:
    """One open descriptor of a segment file, closed when the last reference to it goes."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __del__(self) -> None:
        # No one else closes it (see the module doc); a failed close leaves nothing to do.
        try:
            os.close(self.fd)
        except OSError:
            pass

    def __repr__(self) -> str:
        return f"SegmentHandle(fd={self.fd})"


@dataclass(slots=True)
class SegmentFileStats:
    """Counters for /metrics; `open_files` is the cache's (slices in flight may hold a few more)."""

    max_open: int
    open_files: int = 0
    opens: int = 0  # files opened for a new or loaded segment
    reopens: int = 0  # files opened again after eviction
    evictions: int = 0


class SegmentFileCache:
    """At most `max_open` segment descriptors, least recently used evicted first."""

    def __init__(self, max_open: int) -> None:
        if max_open < 1:
            raise ValueError(f"a segment file cache must hold at least one file, not {max_open}")
        self.max_open = max_open
        self._handles: OrderedDict[int, SegmentHandle] = OrderedDict()
        self._lock = threading.Lock()
        self._opens = 0
        self._reopens = 0
        self._evictions = 0

    def __len__(self) -> int:
        return len(self._handles)

    def __contains__(self, key: int) -> bool:
        return key in self._handles

    @property
    def stats(self) -> SegmentFileStats:
        return SegmentFileStats(self.max_open, len(self._handles), self._opens, self._reopens,
                                self._evictions)

    def add(self, key: int, handle: SegmentHandle) -> None:
        """Cache the descriptor a segment opened (created or loaded) itself."""
        with self._lock:
            self._opens += 1
            evicted = self._insert(key, handle)
        del evicted  # closed here, outside the lock, if nothing else holds them

    def get(self, key: int, path: Path) -> SegmentHandle:
        """The segment's handle: cached, or its file at `path` opened again."""
        # The hit (every append) takes no lock: OrderedDict's C methods are each atomic under
        # the GIL, and an eviction between the two calls only leaves the handle unmarked.
        handle = self._handles.get(key)
        if handle is not None:
            try:
                self._handles.move_to_end(key)
            except KeyError:  # evicted by another thread meanwhile: ours is still valid
                pass
            return handle
        try:
            # no O_CREAT: a segment whose file is gone is an error, not an empty segment
            handle = SegmentHandle(os.open(path, SEGMENT_OPEN_FLAGS))
        except OSError as e:
            raise KafkaStorageError(f"cannot reopen segment {path}: {e}") from e
        with self._lock:
            raced = self._handles.get(key)  # another thread reopened it meanwhile: use that one
            if raced is not None:
                self._handles.move_to_end(key)
                return raced
            self._reopens += 1
            evicted = self._insert(key, handle)
        del evicted
        return handle

    def drop(self, key: int) -> None:
        """Forget the segment's handle (closed, renamed or deleted); slices keep theirs."""
        with self._lock:
            handle = self._handles.pop(key, None)
        del handle

    def take(self, key: int) -> SegmentHandle | None:
        """Forget the segment's handle and return it (None: not open), for a caller that lets
        go of it later (a removal closes it after the unlinks, on its own thread)."""
        with self._lock:
            return self._handles.pop(key, None)

    def resize(self, max_open: int) -> None:
        """Change the bound, evicting at once if it shrank."""
        if max_open < 1:
            raise ValueError(f"a segment file cache must hold at least one file, not {max_open}")
        with self._lock:
            self.max_open = max_open
            evicted = self._evict_over(max_open)
        del evicted

    def _insert(self, key: int, handle: SegmentHandle) -> list[SegmentHandle]:
        self._handles[key] = handle
        self._handles.move_to_end(key)
        return self._evict_over(self.max_open)

    def _evict_over(self, bound: int) -> list[SegmentHandle]:
        evicted = []
        while len(self._handles) > bound:  # bounded: each pass removes one entry
            evicted.append(self._handles.popitem(last=False)[1])
            self._evictions += 1
        return evicted


def segment_file_families(stats: SegmentFileStats, prefix: str) -> list[Metric]:
    """The cache's metrics (part of the broker's /metrics)."""
    p = prefix
    return [
        gauge(f"{p}open_segment_files", "Segment files the broker keeps open (its file cache).",
              unlabelled(stats.open_files)),
        gauge(f"{p}open_segment_files_max", "Most segment files kept open (log.open.files.max, "
              "capped by half the open-file limit).", unlabelled(stats.max_open)),
        counter(f"{p}segment_file_opens_total", "Segment files opened when created or loaded.",
                unlabelled(stats.opens)),
        counter(f"{p}segment_file_reopens_total", "Segment files opened again after eviction.",
                unlabelled(stats.reopens)),
        counter(f"{p}segment_file_evictions_total", "Segment files closed by the cache to stay "
                "within its bound.", unlabelled(stats.evictions)),
    ]
