"""How a Fetch answer's few bytes around its records slice are sent, and what the sender pays.

    python bench/answer_send.py [--answers 3000] [--bytes 800000] [--rounds 5] [--modes plain,more,notail,cork]

A sender process pinned to CPU 0 answers a client pinned to CPU 1 over loopback as the broker
answers a consumer's Fetch from the reader's turn: for each 4-byte request, a head (size prefix
and ~60 bytes of response before the records), the records slice by os.sendfile from a file in
the page cache, and the 3 bytes after it (the tagged fields of the partition, the topic and the
response), each answer read whole by the client before it asks again. The figure is the
sending process's CPU (user and kernel, its own thread_time: loopback's receive path runs in
the sender's softirq too) per answer, each mode once per round, modes alternated, the median
over the rounds printed. Modes:

- plain: send(head), sendfile, send(tail): a segment of its own for the head (which wakes the
  client for a few dozen bytes) and one for the tail;
- more: send(head, MSG_MORE): the head waits and leaves in the slice's first segment
  (broker/server.py `_sendfile_in_turn` since this bench);
- notail: plain without the tail (a lower bound: what the tail's own segment costs);
- cork: TCP_CORK around the three (two setsockopt calls more).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import tempfile
import time

HOST = "127.0.0.1"
HEAD_BYTES = 64  # size prefix + correlation id + a v16 answer's bytes up to the records
TAIL = b"\x00\x00\x00"
_SIZE = struct.Struct(">i")
MODES = ("plain", "more", "notail", "cork")


def serve(conn: socket.socket, fd: int, mode: str, answers: int, length: int) -> float:
    """Answer `answers` requests; the sender's CPU seconds."""
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as asyncio's transports
    tail = b"" if mode == "notail" else TAIL
    head = _SIZE.pack(HEAD_BYTES - 4 + length + len(tail)) + bytes(HEAD_BYTES - 4)
    buf = bytearray(4)
    t0 = time.thread_time()
    for _ in range(answers):  # bounded by --answers
        conn.recv_into(buf, 4)
        if mode == "cork":
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        conn.send(head, socket.MSG_MORE if mode == "more" else 0)
        sent = 0
        while sent < length:  # bounded: sendfile moves on or raises
            sent += os.sendfile(conn.fileno(), fd, sent, length - sent)
        if tail:
            conn.send(tail)
        if mode == "cork":
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
    return time.thread_time() - t0


def one(path: str, mode: str, answers: int, length: int) -> float:
    """The sender's CPU microseconds per answer in one run of `mode`."""
    listener = socket.create_server((HOST, 0))
    port = listener.getsockname()[1]
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the sender
        try:
            os.sched_setaffinity(0, {0})
            conn, _ = listener.accept()
            fd = os.open(path, os.O_RDONLY)
            cpu = serve(conn, fd, mode, answers, length)
            os.write(write_end, struct.pack(">d", cpu))
        finally:
            os._exit(0)
    listener.close()
    os.sched_setaffinity(0, {1})
    buf = bytearray(HEAD_BYTES + length + len(TAIL))
    view = memoryview(buf)
    with socket.create_connection((HOST, port)) as sock:
        for _ in range(answers):  # bounded by --answers
            sock.sendall(b"ask!")
            got, need = 0, 4
            while got < need:  # bounded: each recv moves on, or the sender is gone
                n = sock.recv_into(view[got:])
                if not n:
                    raise ConnectionError("sender closed")
                got += n
                if need == 4 and got >= 4:
                    need = 4 + _SIZE.unpack_from(buf)[0]
    os.waitpid(pid, 0)
    (cpu,) = struct.unpack(">d", os.read(read_end, 8))
    os.close(read_end)
    os.close(write_end)
    return cpu / answers * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--answers", type=int, default=3000)
    parser.add_argument("--bytes", type=int, default=800_000, help="records bytes per answer")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--modes", type=lambda v: tuple(v.split(",")), default=MODES)
    args = parser.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("needs two CPUs (sender on 0, client on 1)")
    with tempfile.NamedTemporaryFile(prefix="answer-send-", dir="/tmp") as f:
        f.write(os.urandom(args.bytes))
        f.flush()
        runs: dict[str, list[float]] = {m: [] for m in args.modes}
        for r in range(args.rounds):  # bounded by --rounds
            for mode in args.modes:
                runs[mode].append(one(f.name, mode, args.answers, args.bytes))
            print(f"round {r + 1}: " + ", ".join(f"{m} {runs[m][-1]:.0f}" for m in args.modes)
                  + f" us/answer (load {os.getloadavg()[0]:.2f})", flush=True)
    print(f"median over {args.rounds} rounds, sender CPU us per {args.bytes:,} B answer: "
          + ", ".join(f"{m} {statistics.median(v):.0f} [{min(v):.0f}-{max(v):.0f}]" for m, v in runs.items()))


if __name__ == "__main__":
    main()
