"""Sending a segment slice (fd, position, length) down a client connection with sendfile(2).

    sent = await send_slice(writer, records)     # a FileSlice: == its length, or ShortReadError
    data = pread_slice(records)                  # a small one, coalesced with other chunks

Why sendfile and not os.pread + transport.write: pread copies the page cache into a Python
bytes object and the socket write copies it again into the kernel; sendfile hands the page
cache pages to the socket, one copy fewer and no Python object per piece. On a consume this
is most of the broker's CPU per GB (bench/sendfile_vs_pread.py measures both).

How: while the transport has nothing buffered, the socket is ours to write, so the first
os.sendfile goes straight to it (on loopback it usually takes the whole slice); the server
makes that attempt from the reader's own turn for a Fetch answered at once (`send_slice_now`). What did not
fit is sent by `loop.sendfile`, which waits for the socket to drain between pieces (it pauses
reading on this connection meanwhile; the reader task only needs it between requests).
Event loops without a native sendfile (uvloop) fall back to the pread path.

The safety the pread path had against a file truncated under a response is kept: sendfile
stops at the end of the file, so a slice that comes up short raises ShortReadError and the
connection ends instead of sending a frame of the wrong size.

The descriptor stays valid for the whole send: `send_slice` takes the slice's segment file
handle when the send starts and holds it until the send ends; the handle closes the
descriptor only when its last reference goes (broker.log.segment_files), however long the
send waits for the socket and whatever the segment file cache evicts or retention deletes
meanwhile. A descriptor closed early would be worse than a short read: the kernel reuses its
number, and the send would read another file's bytes. Taking the handle at send time, not at
read time, keeps a response of thousands of partitions from holding a descriptor for each.
"""

from __future__ import annotations

import asyncio
import errno
import os
from dataclasses import replace
from typing import Final

from broker.log.segment import FileSlice
from broker.log.segment_files import BorrowedFile, SegmentHandle
from common.errors import KafkaStorageError
from common.units import MIB

# pread fallback: bytes read and written at a time (bounded memory per connection)
PREAD_CHUNK: Final = 1 * MIB


class ShortReadError(OSError):
    """A records slice was shorter on disk than promised (the segment was truncated under us)."""


class _SegmentFile:
    """What `loop.sendfile` needs of a file: its descriptor, opened for binary reading.

    The segment's descriptor is shared with appends (O_APPEND) and preads, which ignore the
    file position that loop.sendfile moves when it finishes, so no descriptor is duplicated.
    It is not ours to close (nothing here calls close(): only `fileno` is used).
    """

    __slots__ = ("_fd",)
    mode = "rb"

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd


async def send_slice(writer: asyncio.StreamWriter, records: FileSlice) -> int:
    """Send a segment slice; its file handle is held (the descriptor open) until the end."""
    if records.length <= 0:
        return 0
    handle = _file_of(records)
    return await send_file_slice(writer, handle.fd, records.position, records.length)


def pread_slice(records: FileSlice) -> bytes:
    """A (small) segment slice's bytes, for coalescing with the response's other chunks."""
    if records.length <= 0:
        return b""
    handle = _file_of(records)
    return pread_exact(handle.fd, records.position, records.length)


def _file_of(records: FileSlice) -> SegmentHandle | BorrowedFile:
    try:
        return records.file()
    except KafkaStorageError as e:  # deleted past file.delete.delay.ms: as a closed descriptor
        raise ShortReadError(f"records file gone before sending: {e}") from None


async def send_file_slice(writer: asyncio.StreamWriter, fd: int, position: int, length: int) -> int:
    """Send bytes [position, position + length) of `fd` on `writer`; return the count sent.

    Raises ShortReadError when the file holds fewer bytes than that, or its descriptor was
    closed (the segment was deleted) under us.
    """
    if length <= 0:
        return 0
    await writer.drain()
    transport = writer.transport
    sent = 0
    if transport.get_write_buffer_size() == 0 and not transport.is_closing():
        sent = _sendfile_now(transport.get_extra_info("socket").fileno(), fd, position, length)
    if sent < length:
        sent += await _send_rest(writer, fd, position + sent, length - sent)
    if sent != length:
        raise ShortReadError(f"records file truncated while sending: sent {sent} of {length} bytes "
                             f"from position {position}")
    return sent


def send_slice_now(sock_fd: int, records: FileSlice) -> FileSlice | None:
    """As much of a slice as the socket `sock_fd` takes now, without waiting: None when all of
    it went, else the slice of what is left (the whole slice when the socket is full). The
    caller owns the socket's writes (its transport has nothing buffered) and sends the rest
    later. ShortReadError when the file ends before the slice."""
    if records.length <= 0:
        return None
    handle = _file_of(records)  # held (the descriptor open) for the call
    sent = _sendfile_now(sock_fd, handle.fd, records.position, records.length)
    return None if sent == records.length else replace(records, position=records.position + sent,
                                                        length=records.length - sent)


def _sendfile_now(sock_fd: int, fd: int, position: int, length: int) -> int:
    try:
        sent = os.sendfile(sock_fd, fd, position, length)
    except BlockingIOError:
        return 0  # the socket is full: the caller waits for room
    except OSError as exc:
        _raise_if_file_gone(exc)
        raise
    if sent == 0:  # sendfile at or past the end of the file sends nothing
        raise ShortReadError(f"records file truncated while sending: nothing at position {position}, "
                             f"{length} bytes promised")
    return sent


async def _send_rest(writer: asyncio.StreamWriter, fd: int, position: int, length: int) -> int:
    loop = asyncio.get_running_loop()
    if writer.transport.is_closing():
        raise ConnectionResetError("connection closed while sending records")
    try:
        return await loop.sendfile(writer.transport, _SegmentFile(fd), position, length,  # type: ignore[arg-type]
                                   fallback=False)
    except (NotImplementedError, RuntimeError):  # no native sendfile for this loop or transport
        return await _pread_and_write(writer, fd, position, length)
    except OSError as exc:
        _raise_if_file_gone(exc)
        raise


async def _pread_and_write(writer: asyncio.StreamWriter, fd: int, position: int, length: int) -> int:
    """The slice read with os.pread and written in PREAD_CHUNKs (loops without sendfile)."""
    sent = 0
    while sent < length:  # bounded: each pass sends a full piece or raises
        want = min(length - sent, PREAD_CHUNK)
        writer.write(pread_exact(fd, position + sent, want))
        sent += want
        await writer.drain()
    return sent


def pread_exact(fd: int, position: int, length: int) -> bytes:
    """`length` bytes of a segment at `position`; ShortReadError when the file holds fewer
    (truncated) or its descriptor was closed (deleted) under us."""
    if length <= 0:  # an empty slice names no descriptor (segment.NO_FD)
        return b""
    try:
        data = os.pread(fd, length, position)
    except OSError as exc:
        _raise_if_file_gone(exc)
        raise
    if len(data) != length:
        raise ShortReadError(f"records file truncated while sending: read {len(data)} of {length} "
                             f"bytes at position {position}")
    return data


def _raise_if_file_gone(exc: OSError) -> None:
    if exc.errno == errno.EBADF:  # the segment was closed (deleted) under us
        raise ShortReadError(f"records file closed while sending ({exc.strerror})") from None
