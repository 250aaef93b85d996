"""The log cleaner's file I/O helpers: its read buffers, reused from one cleaning to the
next (as Kafka's cleaner keeps its I/O buffers for life), a chunk's whole batches, writes.

A buffer fresh from the allocator costs a page fault per page on its first write; at 16
MiB chunks read from the page cache that fault work costs as much as the copy itself, and
under memory pressure far more. A cleaning holds its chunk buffers until it ends (the
filter pass reuses the map pass's scans), then hands them all back. Bounded: the pool
keeps at most `max_bytes` of idle buffers and frees the rest.
"""

from __future__ import annotations

import os
import threading

import numpy as np

from broker.log.record_columns import U8
from common.record_batch import HEADER_SIZE, parse_header


class BufferPool:
    """Idle byte buffers, handed out whole to one cleaning at a time (thread-safe)."""

    def __init__(self, *, max_bytes: int, min_buffer_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.min_buffer_bytes = min_buffer_bytes
        self._idle: list[U8] = []
        self._lock = threading.Lock()

    @property
    def idle_bytes(self) -> int:
        with self._lock:
            return sum(b.nbytes for b in self._idle)

    def take(self, nbytes: int) -> U8:
        """A buffer of at least `nbytes` (its contents undefined), the caller's until
        `give_back`."""
        with self._lock:
            fitting = [i for i, b in enumerate(self._idle) if b.nbytes >= nbytes]
            if fitting:
                best = min(fitting, key=lambda i: self._idle[i].nbytes)
                return self._idle.pop(best)
        return np.empty(max(nbytes, self.min_buffer_bytes), np.uint8)

    def give_back(self, buffers: list[U8]) -> None:
        """Buffers no longer read by anyone: kept for reuse within `max_bytes`."""
        with self._lock:
            for buffer in sorted(buffers, key=lambda b: -b.nbytes):
                held = sum(b.nbytes for b in self._idle)
                if held + buffer.nbytes <= self.max_bytes:  # bounded: the pool's size
                    self._idle.append(buffer)


def batch_size_at(fd: int, position: int) -> int:
    return parse_header(os.pread(fd, HEADER_SIZE, position), require_body=False).size


def whole_batches_length(view: memoryview) -> int:
    """Bytes of the whole batches at the start of `view` (a chunk may end mid-batch)."""
    position = 0
    while position + 12 <= len(view):  # bounded: each batch moves `position` forward
        size = int.from_bytes(view[position + 8 : position + 12], "big", signed=True) + 12
        if size <= 12 or position + size > len(view):  # cut short (or a bad length)
            break
        position += size
    return position


def write_all(fd: int, data: bytes | bytearray) -> int:
    view = memoryview(data)
    while view:  # bounded: each write consumes bytes or raises
        view = view[os.write(fd, view):]
    return len(data)
