"""The broker listener's CPU to receive large requests: bytes from the socket to whole frames.

An in-process `broker.server.KafkaServer` whose handler answers nothing (as acks=0) takes
`--frames` requests of `--frame-bytes` each from a client thread over loopback; the figure is
the event loop thread's CPU (thread_time: user and kernel, the recv copies included) per GB.
No log, no handler work: what is left is framing, the cost a bulk Produce pays before its
append. Run it at two commits to compare them (issue 35: StreamReader's copies vs reading in
place, broker/frame_receiver.py):

    python bench/frame_receive.py [--frames 2000] [--frame-bytes 1048576] [--rounds 3]

On the shared 2-core VM (load 11-20, noisy): at 4cbb382 (StreamReader) 1.05-2.16 s/GB, at
b8f1d82 (read in place) 0.30-0.33 s/GB.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import struct
import threading
import time

from broker.server import KafkaServer, Later
from common.protocol.frame import RequestHeader, encode_request_header
from common.protocol.primitives import Chunk
from common.units import MIB

HOST = "127.0.0.1"


class CountingHandler:
    """Answers nothing; resolves `done` at the `expected`-th request."""

    def __init__(self, expected: int, done: asyncio.Future[None]) -> None:
        self.expected, self.done, self.seen = expected, done, 0

    def start(self, header: RequestHeader, body: memoryview,
              client_host: str = "") -> list[Chunk] | None | Later[list[Chunk] | None]:
        self.seen += 1
        if self.seen == self.expected and not self.done.done():
            self.done.set_result(None)
        return None

    async def handle(self, header: RequestHeader, body: memoryview, client_host: str = "") -> list[Chunk] | None:
        self.start(header, body, client_host)
        return None


async def one_round(frames: int, frame_bytes: int) -> float:
    """The loop thread's CPU seconds to receive `frames` requests of `frame_bytes`."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    server = KafkaServer(CountingHandler(frames, done), host=HOST, port=0,
                         max_request_bytes=frame_bytes + MIB)
    await server.start()
    head = encode_request_header(RequestHeader(0, 9, 1, "bench"))
    request = struct.pack(">i", len(head) + frame_bytes) + head + bytes(frame_bytes)

    def send() -> None:
        with socket.create_connection((HOST, server.port)) as sock:
            for _ in range(frames):  # bounded by --frames
                sock.sendall(request)
            sock.shutdown(socket.SHUT_WR)

    cpu0 = time.thread_time()
    sender = threading.Thread(target=send, name="frame-receive-client")
    sender.start()
    try:
        await done
        return time.thread_time() - cpu0
    finally:
        await asyncio.to_thread(sender.join)
        await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=2000)
    parser.add_argument("--frame-bytes", type=int, default=MIB)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    gb = args.frames * args.frame_bytes / 1e9
    print(f"{args.frames:,} frames x {args.frame_bytes:,} B per round; {os.cpu_count()} CPUs; "
          f"load average {os.getloadavg()[0]:.2f}")
    for i in range(args.rounds):  # bounded by --rounds
        cpu = asyncio.run(one_round(args.frames, args.frame_bytes))
        print(f"round {i + 1}: loop thread CPU {cpu:.3f} s for {gb:.2f} GB: {cpu / gb:.3f} s/GB "
              f"(load average {os.getloadavg()[0]:.2f})", flush=True)


if __name__ == "__main__":
    main()
