"""broker/slice_sender.py over real loopback sockets: a slice arrives byte-exact whether the first
sendfile takes it whole or the socket fills (a small send buffer, a reader that starts late); a
file truncated or closed under the slice raises ShortReadError and never sends bytes it does not
have; the pread path (loops without sendfile) sends the same bytes. A segment slice takes its
file when sent and holds it to the end, through eviction and deletion. Every socket is closed."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from broker import slice_sender
from broker.log.partition_log import PartitionLog
from broker.log.segment_files import SegmentFileCache
from broker.slice_sender import ShortReadError, send_file_slice
from common.records import build_batch
from common.log_config import LogConfig
from common.units import KIB, MIB

IO_TIMEOUT_S = 10.0
FILE_BYTES = 6 * MIB + 321


@pytest.fixture
def data_file(tmp_path: Path) -> AsyncIterator[tuple[int, bytes]]:
    content = os.urandom(FILE_BYTES)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(content)
    fd = os.open(path, os.O_RDWR | os.O_APPEND)
    yield fd, content  # type: ignore[misc]
    try:
        os.close(fd)
    except OSError:
        pass  # a test closed it on purpose


class Pair:
    """A loopback connection: our asyncio writer and a raw socket reading the other end."""

    def __init__(self, writer: asyncio.StreamWriter, peer: socket.socket) -> None:
        self.writer, self.peer = writer, peer

    async def receive(self, count: int, *, delay_s: float = 0.0) -> bytes:
        """`count` bytes (or fewer, at EOF) read in a thread, after `delay_s`."""
        def read() -> bytes:
            if delay_s:
                import time
                time.sleep(delay_s)
            got = bytearray()
            self.peer.settimeout(IO_TIMEOUT_S)
            while len(got) < count:  # bounded by count and the socket timeout
                chunk = self.peer.recv(min(count - len(got), MIB))
                if not chunk:
                    break
                got += chunk
            return bytes(got)
        return await asyncio.to_thread(read)


@pytest.fixture
async def pair() -> AsyncIterator[Pair]:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    loop = asyncio.get_running_loop()
    connect = asyncio.ensure_future(asyncio.open_connection(*listener.getsockname()))
    peer, _ = await asyncio.wait_for(loop.sock_accept(listener), IO_TIMEOUT_S)
    peer.setblocking(True)
    _, writer = await asyncio.wait_for(connect, IO_TIMEOUT_S)
    try:
        yield Pair(writer, peer)
    finally:
        writer.close()
        peer.close()
        listener.close()


@pytest.mark.parametrize(("position", "length"), [(0, 0), (0, 1), (7, 100 * KIB), (5, FILE_BYTES - 5)])
async def test_slices_arrive_byte_exact(pair: Pair, data_file: tuple[int, bytes], position: int,
                                        length: int) -> None:
    fd, content = data_file
    receiving = asyncio.ensure_future(pair.receive(length + 3))
    sent = await asyncio.wait_for(send_file_slice(pair.writer, fd, position, length), IO_TIMEOUT_S)
    pair.writer.write(b"end")  # what follows the slice on the connection comes after it
    assert sent == length
    assert await asyncio.wait_for(receiving, IO_TIMEOUT_S) == content[position:position + length] + b"end"


async def test_a_full_socket_is_waited_for_not_copied(pair: Pair, data_file: tuple[int, bytes]) -> None:
    fd, content = data_file
    sock = pair.writer.transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * KIB)  # the first sendfile cannot take it all
    pair.writer.write(b"head")  # something may still be buffered in the transport
    loop = asyncio.get_running_loop()
    native = loop.sendfile
    waited: list[int] = []

    async def counting(*args: Any, **kwargs: Any) -> int:
        waited.append(args[3])
        return await native(*args, **kwargs)
    loop.sendfile = counting  # type: ignore[method-assign]
    try:
        receiving = asyncio.ensure_future(pair.receive(4 + FILE_BYTES, delay_s=0.2))
        sent = await asyncio.wait_for(send_file_slice(pair.writer, fd, 0, FILE_BYTES), IO_TIMEOUT_S)
    finally:
        del loop.sendfile  # type: ignore[method-assign]
    assert sent == FILE_BYTES
    assert await asyncio.wait_for(receiving, IO_TIMEOUT_S) == b"head" + content
    assert len(waited) == 1 and 0 < waited[0] <= FILE_BYTES  # the rest went by loop.sendfile, not pread


@pytest.mark.parametrize(("truncate_to", "position", "length"), [
    pytest.param(1000, 500, 1000, id="ends-inside"),
    pytest.param(1000, 1000, 10, id="starts-at-end"),
    pytest.param(0, 0, 10, id="empty-file"),
])
async def test_a_truncated_file_raises_and_sends_only_what_it_has(
        pair: Pair, data_file: tuple[int, bytes], truncate_to: int, position: int, length: int) -> None:
    fd, content = data_file
    os.ftruncate(fd, truncate_to)
    with pytest.raises(ShortReadError):
        await asyncio.wait_for(send_file_slice(pair.writer, fd, position, length), IO_TIMEOUT_S)
    pair.writer.close()
    got = await asyncio.wait_for(pair.receive(length), IO_TIMEOUT_S)
    assert got == content[position:truncate_to]


async def test_a_closed_descriptor_raises_short_read(pair: Pair, data_file: tuple[int, bytes]) -> None:
    fd, _ = data_file
    os.close(fd)
    with pytest.raises(ShortReadError, match="closed"):
        await asyncio.wait_for(send_file_slice(pair.writer, fd, 0, 10), IO_TIMEOUT_S)


async def test_the_pread_path_sends_the_same_bytes_and_checks_length(pair: Pair, data_file: tuple[int, bytes]
                                                                    ) -> None:
    fd, content = data_file
    length = 2 * slice_sender.PREAD_CHUNK + 17
    receiving = asyncio.ensure_future(pair.receive(length))
    assert await slice_sender._pread_and_write(pair.writer, fd, 3, length) == length
    assert await asyncio.wait_for(receiving, IO_TIMEOUT_S) == content[3:3 + length]
    with pytest.raises(ShortReadError):
        await slice_sender._pread_and_write(pair.writer, fd, FILE_BYTES - 10, 20)


# ---- segment slices (send_slice): the descriptor is taken at send time, held to the end ----


def big_log(tmp_path: Path, cache: SegmentFileCache) -> PartitionLog:
    """A log of 8 batches of ~512 KiB random values (4 MiB: more than a socket buffer)."""
    log = PartitionLog(tmp_path / "big-0", LogConfig(file_delete_delay_ms=0), now_ms=0, files=cache)
    for _ in range(8):
        log.append(build_batch([(b"k", os.urandom(512 * KIB))]), now_ms=0)
    return log


async def test_a_segment_evicted_and_deleted_mid_send_still_sends_its_bytes(
        pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()
    native = loop.sendfile
    waiting = asyncio.Event()

    async def marked(*args: Any, **kwargs: Any) -> int:  # the send waits for the full socket here
        waiting.set()
        return await native(*args, **kwargs)

    monkeypatch.setattr(loop, "sendfile", marked)
    cache = SegmentFileCache(1)
    log = big_log(tmp_path, cache)
    other = PartitionLog(tmp_path / "other-0", LogConfig(), now_ms=0, files=cache)
    try:
        data = log.read(0, 8 * MIB)
        expected = data.read_bytes()
        pair.writer.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * KIB)
        sending = asyncio.ensure_future(slice_sender.send_slice(pair.writer, data))
        await asyncio.wait_for(waiting.wait(), IO_TIMEOUT_S)
        log.truncate_fully_and_start_at(100, now_ms=0)  # renamed, deleted at once
        log.reap_deleted_segments(0)
        other.append(build_batch([(b"k", b"other")]), now_ms=0)  # evicts, reuses descriptors
        fresh = [os.open(tmp_path / "other-0", os.O_RDONLY) for _ in range(8)]
        try:
            got = await asyncio.wait_for(pair.receive(len(expected)), IO_TIMEOUT_S)
            assert await asyncio.wait_for(sending, IO_TIMEOUT_S) == len(expected)
        finally:
            for fd in fresh:
                os.close(fd)
        assert got == expected
    finally:
        other.close()
        log.close()


async def test_a_slice_of_a_deleted_segment_raises_short_read(pair: Pair, tmp_path: Path) -> None:
    log = big_log(tmp_path, SegmentFileCache(1))
    try:
        data = log.read(0, 1 * MIB)
        log.truncate_fully_and_start_at(100, now_ms=0)
        log.reap_deleted_segments(0)  # past file.delete.delay.ms: the file is gone
        with pytest.raises(ShortReadError, match="gone before sending"):
            await slice_sender.send_slice(pair.writer, data)
        with pytest.raises(ShortReadError, match="gone before sending"):
            slice_sender.pread_slice(data)
        assert slice_sender.pread_slice(log.read(100, 1 * MIB)) == b""  # empty: no file needed
    finally:
        log.close()
