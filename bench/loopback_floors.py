"""The floors a broker's bulk CPU is judged against: the same bytes moved by the kernel alone, over loopback.

bench/produce_consume.py prints each produce phase's broker CPU per GB beside a receive floor
(the bytes received over loopback and written to a file, 1 MiB at a time) and each consume
phase's as a multiple of a sendfile-only sender's (a file in the page cache sent in 1 MiB
`os.sendfile` slices: the physical floor of serving a consumer on loopback; issue 35's goal
is <= 1.5x). Each figure is one thread's CPU (time.thread_time: utime + stime, ns clock, not
/proc's 10 ms ticks): the receiving, writing or sending thread's, the side a broker plays.

Steadiness. One send of 200 MB is 10-30 ms of CPU, and last session the sender's figure moved
0.033-0.149 s/GB between runs: on loopback the receiver's softirq work (the TCP receive path)
is charged to whichever thread is on the core when it runs, the sender's or the reader's, so an
unpinned pair moved the cost between them. Here the serving thread runs on the broker's core
and its reader on the client's (`cpu_pinning.CorePlan`), as the broker and librdkafka do in
the phases, and the figure is the median of `samples` sends with their spread printed.

    floor = sendfile_sender(directory, total, samples=15, plan=plan)   # a Floor
    floor.cpu_s / (floor.payload_bytes / 1e9)                          # s/GB, the median sample
"""

from __future__ import annotations

import os
import socket
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cpu_pinning import CorePlan, pinned

from common.units import MIB

GB: Final = 1e9
LOOPBACK: Final = "127.0.0.1"
CHUNK: Final = 1 * MIB  # every write, send and Fetch-shaped answer
# the Fetch exchange the sendfile server repeats (librdkafka's, one partition, from strace):
FETCH_REQUEST_BYTES: Final = 98  # a v16 Fetch request, size prefix included
FETCH_HEADER_BYTES: Final = 75  # the response up to its records (size prefix, headers, offsets)
FETCH_TAIL_BYTES: Final = 3  # the tagged fields after the records


@dataclass(frozen=True, slots=True)
class Floor:
    """One floor: the median sample's thread CPU and wall time, and every sample's s/GB."""

    phase: str
    payload_bytes: int  # per sample
    wall_s: float
    cpu_s: float  # the serving (or receiving, writing) thread's
    client_cpu_s: float | None = None  # the whole process, both ends (the socket pump)
    samples_s_per_gb: tuple[float, ...] = ()  # sorted

    def spread(self) -> str:
        """'median (min-max, n samples)' of the samples' s/GB, for the bench's output."""
        if not self.samples_s_per_gb:
            return "-"
        s = self.samples_s_per_gb
        return f"{statistics.median(s):.3f} s/GB ({s[0]:.3f}-{s[-1]:.3f}, {len(s)} samples)"


class LoopbackReader:
    """A loopback TCP server whose one connection a thread (on `cpus`) drains to its end."""

    def __init__(self, cpus: frozenset[int] | None = None) -> None:
        self._server = socket.create_server((LOOPBACK, 0))
        self.address = self._server.getsockname()
        self.received = 0
        self.cpu_s = 0.0  # the reading thread's CPU (user and kernel) from its first byte to the end
        self._cpus = cpus
        self._thread = threading.Thread(target=self._read)
        self._thread.start()

    def _read(self) -> None:
        if self._cpus is not None:  # this thread's own mask, for its life
            os.sched_setaffinity(0, self._cpus)
        conn, _ = self._server.accept()
        buf = bytearray(CHUNK)
        with conn:
            cpu0 = time.thread_time()
            while n := conn.recv_into(buf):  # bounded: ends when the writer closes
                self.received += n
            self.cpu_s = time.thread_time() - cpu0

    def join(self) -> int:
        """The bytes received, once the writer has shut its side down."""
        self._thread.join()
        self._server.close()
        return self.received


def socket_pump(total: int, plan: CorePlan | None) -> Floor:
    """`total` bytes in 1 MiB sendall()s through a loopback TCP connection to a reader thread on
    the broker's core (its CPU: what a broker's receive of the bytes costs at least), the
    writer on the client's; 'client_cpu_s' is the whole process, both ends."""
    reader = LoopbackReader(plan.broker if plan else None)
    chunk = os.urandom(CHUNK)
    with pinned(plan.client if plan else None), socket.create_connection(reader.address) as out:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        left = total
        while left > 0:  # bounded by `total`
            out.sendall(chunk[:min(left, CHUNK)])
            left -= CHUNK
        out.shutdown(socket.SHUT_WR)
        received = reader.join()
        wall, process_cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return Floor("loopback socket pump", received, wall, reader.cpu_s, process_cpu,
                 (reader.cpu_s / (received / GB),))


def file_write(directory: Path, total: int, plan: CorePlan | None) -> Floor:
    """`total` bytes in 1 MiB os.write()s to a fresh file, no fsync (as the brokers), on the
    broker's core: what a broker's append of the bytes costs at least (the copy into the page cache)."""
    chunk = os.urandom(CHUNK)
    path = directory / "raw.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        with pinned(plan.broker if plan else None):
            cpu0, wall0 = time.thread_time(), time.perf_counter()
            left = total
            while left > 0:  # bounded by `total`
                os.write(fd, chunk[:min(left, CHUNK)])
                left -= CHUNK
            cpu, wall = time.thread_time() - cpu0, time.perf_counter() - wall0
    finally:
        os.close(fd)
        path.unlink()
    return Floor("file write", total, wall, cpu, None, (cpu / (total / GB),))


Run = Callable[[Path, int, CorePlan | None], tuple[float, float, int]]


def sendfile_sender(directory: Path, total: int, *, samples: int, plan: CorePlan | None) -> Floor:
    """`total` bytes of a file in the page cache sent with os.sendfile in 1 MiB slices (a Fetch
    response's shape) through a loopback connection to a reader thread: the physical floor of
    serving a consumer on loopback (issue 35). Its CPU is the sending thread's, on the broker's
    core (the reader on the client's): the median of `samples` sends."""
    return _median_of_runs(directory, "sendfile sender", total, samples, plan, _send_file)


def sendfile_server(directory: Path, total: int, *, samples: int, plan: CorePlan | None) -> Floor:
    """The sendfile sender as a server, to check that the floor is fair to a broker: a client
    thread sends a Fetch-sized request and reads the whole answer before the next, as
    librdkafka does; each answer is a 75-byte header, 1 MiB sent with os.sendfile from a file
    in the page cache, and a 3-byte tail (a Fetch response's shape and syscalls: recv, send,
    sendfile, send), `total` bytes of file in all. What it adds to the sender is what a
    request/response exchange costs before anything is decoded; the rest of a broker's CPU
    per fetch is its own work."""
    return _median_of_runs(directory, "sendfile server", total, samples, plan, _serve_file)


def _median_of_runs(directory: Path, phase: str, total: int, samples: int, plan: CorePlan | None,
                    run: Run) -> Floor:
    chunk = os.urandom(CHUNK)
    path = directory / "sendfile.bin"
    with open(path, "wb") as out:
        for _ in range(0, total, CHUNK):  # bounded by `total`
            out.write(chunk)
    runs: list[tuple[float, float, int]] = []  # (cpu, wall, bytes) of each sample
    try:
        with pinned(plan.broker if plan else None):
            for _ in range(samples):  # bounded by `samples`
                runs.append(run(path, total, plan))
    finally:
        path.unlink()
    runs.sort()
    cpu, wall, sent = runs[len(runs) // 2]
    return Floor(phase, sent, wall, cpu, None, tuple(sorted(c / (b / GB) for c, _, b in runs)))


def _send_file(path: Path, total: int, plan: CorePlan | None) -> tuple[float, float, int]:
    """One send of `path`'s first `total` bytes to a LoopbackReader: (thread CPU s, wall s, bytes received)."""
    reader = LoopbackReader(plan.client if plan else None)
    with open(path, "rb") as source, socket.create_connection(reader.address) as sock:
        cpu0, wall0 = time.thread_time(), time.perf_counter()
        offset = 0
        while offset < total:  # bounded by `total`; a blocking socket sends each slice whole
            offset += os.sendfile(sock.fileno(), source.fileno(), offset, min(CHUNK, total - offset))
        sock.shutdown(socket.SHUT_WR)
        received = reader.join()
        return time.thread_time() - cpu0, time.perf_counter() - wall0, received


def _serve_file(path: Path, total: int, plan: CorePlan | None) -> tuple[float, float, int]:
    """One run of the sendfile server over `path`'s first `total` bytes: (serving thread CPU s,
    wall s, file bytes sent)."""
    server = socket.create_server((LOOPBACK, 0))
    answers = -(-total // CHUNK)
    answer_bytes = [FETCH_HEADER_BYTES + min(CHUNK, total - i * CHUNK) + FETCH_TAIL_BYTES
                    for i in range(answers)]

    def fetch_all() -> None:
        if plan is not None:
            os.sched_setaffinity(0, plan.client)
        buf = bytearray(FETCH_HEADER_BYTES + CHUNK + FETCH_TAIL_BYTES)
        view = memoryview(buf)
        with socket.create_connection(server.getsockname()) as conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as librdkafka's sockets
            for size in answer_bytes:  # bounded: one exchange per answer
                conn.sendall(bytes(FETCH_REQUEST_BYTES))
                got = 0
                while got < size:  # bounded: a closed connection reads 0 and fails below
                    n = conn.recv_into(view[got:size])
                    if not n:
                        raise ConnectionError("sendfile server closed early")
                    got += n

    client = threading.Thread(target=fetch_all)
    client.start()
    header, tail, request = bytes(FETCH_HEADER_BYTES), bytes(FETCH_TAIL_BYTES), bytearray(FETCH_REQUEST_BYTES)
    sent = 0
    with open(path, "rb") as source:
        conn, _ = server.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as asyncio's transports
            cpu0, wall0 = time.thread_time(), time.perf_counter()
            for _ in range(answers):  # bounded: one answer per request
                conn.recv_into(request, FETCH_REQUEST_BYTES, socket.MSG_WAITALL)
                conn.sendall(header)
                length = min(CHUNK, total - sent)
                end = sent + length
                while sent < end:  # a blocking socket: each call sends what it can, at least a byte
                    sent += os.sendfile(conn.fileno(), source.fileno(), sent, end - sent)
                conn.sendall(tail)
            cpu, wall = time.thread_time() - cpu0, time.perf_counter() - wall0
    client.join()
    server.close()
    return cpu, wall, sent
