"""Serving file slices to a loopback socket: `loop.sendfile` against `os.pread` + transport write.

The design brief measured 1.8 GB/s for `loop.sendfile` and 3.4 GB/s for `os.pread` +
`transport.write` at 1 MiB slices; this measures it again here, beside what the broker does
(`broker.slice_sender`: sendfile straight to the socket, loop.sendfile for the rest). A file of `--mib` MiB (in the
page cache: it is read once first) is sent in `--slice-kib` slices over one loopback TCP
connection to a reader in another process (so the reader never competes for our GIL); the
reader answers with the byte count once the sender closes, and the clock stops there. Each
figure is the best of `--rounds`; the sender's CPU seconds per GB is shown beside it.

    python bench/sendfile_vs_pread.py [--mib 1024] [--slice-kib 1024] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import BinaryIO, Final

from broker.slice_sender import send_file_slice
from common.units import KIB, MIB

GB: Final = 1e9
LOOPBACK: Final = "127.0.0.1"
READ_BUFFER: Final = 4 * MIB
COUNT: Final = struct.Struct(">Q")

Sender = Callable[[asyncio.StreamWriter, BinaryIO, int, int], Awaitable[None]]


def reader(port_out: int) -> None:
    """Child: accept connections one after another, drain each, answer the byte count."""
    server = socket.create_server((LOOPBACK, 0))
    os.write(port_out, b"%d\n" % server.getsockname()[1])
    buf = bytearray(READ_BUFFER)
    while True:  # until the parent closes our stdin and kills us
        conn, _ = server.accept()
        with conn:
            total = 0
            while n := conn.recv_into(buf):  # bounded: ends when the sender shuts down writing
                total += n
            conn.sendall(COUNT.pack(total))


async def send_pread(writer: asyncio.StreamWriter, file: BinaryIO, size: int, slice_bytes: int) -> None:
    fd = file.fileno()
    for offset in range(0, size, slice_bytes):
        writer.write(os.pread(fd, slice_bytes, offset))
        await writer.drain()


async def send_sendfile(writer: asyncio.StreamWriter, file: BinaryIO, size: int, slice_bytes: int) -> None:
    loop = asyncio.get_running_loop()
    for offset in range(0, size, slice_bytes):
        await loop.sendfile(writer.transport, file, offset, min(slice_bytes, size - offset))


async def send_sendfile_once(writer: asyncio.StreamWriter, file: BinaryIO, size: int, _slice: int) -> None:
    await asyncio.get_running_loop().sendfile(writer.transport, file, 0, size)


async def send_broker(writer: asyncio.StreamWriter, file: BinaryIO, size: int, slice_bytes: int) -> None:
    """What the broker does per Fetch response (broker.slice_sender): sendfile straight to the
    socket while the transport holds nothing, loop.sendfile for what did not fit."""
    fd = file.fileno()
    for offset in range(0, size, slice_bytes):
        await send_file_slice(writer, fd, offset, min(slice_bytes, size - offset))


async def one_round(port: int, send: Sender, file: BinaryIO, size: int, slice_bytes: int) -> tuple[float, float]:
    """(wall seconds, sender CPU seconds) to move the file to the reader."""
    reader_stream, writer = await asyncio.open_connection(LOOPBACK, port)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await send(writer, file, size, slice_bytes)
    writer.write_eof()
    (received,) = COUNT.unpack(await reader_stream.readexactly(COUNT.size))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    writer.close()
    await writer.wait_closed()
    if received != size:
        raise RuntimeError(f"the reader got {received} bytes of {size}")
    return wall, cpu


async def run(port: int, path: Path, size: int, slice_bytes: int, rounds: int) -> None:
    loop_name = type(asyncio.get_running_loop()).__module__
    cases: list[tuple[str, Sender]] = [
        ("os.pread + transport.write", send_pread),
        ("loop.sendfile per slice", send_sendfile),
        ("loop.sendfile whole file", send_sendfile_once),
        ("broker send_file_slice", send_broker),
    ]
    print(f"{loop_name}: {size / MIB:.0f} MiB file, {slice_bytes / KIB:.0f} KiB slices, best of {rounds}")
    print(f"{'method':<28} {'GB/s':>7} {'sender cpu s/GB':>16}")
    with open(path, "rb") as file:
        for name, send in cases:
            best: tuple[float, float] | None = None
            try:
                for _ in range(rounds):
                    wall, cpu = await one_round(port, send, file, size, slice_bytes)
                    if best is None or wall < best[0]:
                        best = (wall, cpu)
            except NotImplementedError as e:  # uvloop has no loop.sendfile
                print(f"{name:<28} {'n/a':>7}  ({type(e).__name__}: {e})")
                continue
            assert best is not None
            print(f"{name:<28} {size / best[0] / GB:>7.2f} {best[1] / (size / GB):>16.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=1024, help="file size in MiB")
    parser.add_argument("--slice-kib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--reader", type=int, default=None, help=argparse.SUPPRESS)  # child mode: port fd
    args = parser.parse_args()
    if args.reader is not None:
        reader(args.reader)
        return

    size, slice_bytes = args.mib * MIB, args.slice_kib * KIB
    read_end, write_end = os.pipe()
    child = subprocess.Popen([sys.executable, __file__, "--reader", str(write_end)], pass_fds=(write_end,),
                             stdin=subprocess.DEVNULL)
    os.close(write_end)
    try:
        with os.fdopen(read_end) as pipe:
            port = int(pipe.readline())
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            path = Path(tmp) / "segment.log"
            block = os.urandom(MIB)
            with open(path, "wb") as out:
                for _ in range(args.mib):
                    out.write(block)
            with open(path, "rb") as warm:  # into the page cache: we measure the socket path, not the disk
                while warm.read(8 * MIB):
                    pass
            asyncio.run(run(port, path, size, slice_bytes, args.rounds))
            try:
                import uvloop  # type: ignore[import-not-found]
            except ImportError:
                print("uvloop: not installed, skipped")
            else:
                print()
                uvloop.run(run(port, path, size, slice_bytes, args.rounds))
    finally:
        child.kill()
        child.wait()


if __name__ == "__main__":
    main()
