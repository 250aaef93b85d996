"""The broker listener's CPU to receive large requests: bytes from the socket to whole frames.

An in-process `broker.server.KafkaServer` whose handler answers nothing (as acks=0) takes
`--frames` requests of `--frame-bytes` each from a client thread over loopback; the figure is
the event loop thread's CPU (thread_time: user and kernel, the recv copies included) per GB.
No log, no handler work: what is left is framing, the cost a bulk Produce pays before its
append. Run it at two commits to compare them (issue 35: StreamReader's copies vs reading in
place, broker/frame_receiver.py):

    python bench/frame_receive.py [--frames 2000] [--frame-bytes 1048576] [--rounds 3] [--append]

On the shared 2-core VM (load 11-20, noisy): at 4cbb382 (StreamReader) 1.05-2.16 s/GB, at
b8f1d82 (read in place) 0.30-0.33 s/GB.

`--append`: the requests are real Produce requests (v8, acks=1, one batch of 100-byte records
filling the frame, to one partition) answered by the broker's RequestHandler, appending to a
PartitionLog in a temp dir (no fsync, as the brokers): the whole produce path of one broker
(receive, decode, CRC, append, answer) without a client library, a figure to compare commits
with while the box cannot spare a cluster run. The client thread reads the answers.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import shutil
import socket
import struct
import tempfile
import threading
import time
from pathlib import Path

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


class AppendingHandler(CountingHandler):
    """The broker's RequestHandler, leading one partition of TOPIC on a log in `directory`."""

    def __init__(self, expected: int, done: asyncio.Future[None], directory: Path) -> None:
        super().__init__(expected, done)
        from broker.log.log_manager import LogManager
        from broker.replica_manager import ReplicaManager
        from broker.request_handler import RequestHandler
        from common.log_config import LogConfig
        from metadata.delta import apply
        from metadata.image import EMPTY_IMAGE
        from metadata.local_changes import changes_for_broker
        from metadata.records import BeginEpoch, BrokerRegistrationChange, Listener, Partition, RegisterBroker, Topic

        records = (BeginEpoch(1), RegisterBroker(BROKER, "bench", (Listener("PLAINTEXT", HOST, 9092),)),
                   BrokerRegistrationChange(BROKER, BROKER, fenced=False), Topic(TOPIC, "BENCH"),
                   Partition("BENCH", 0, (BROKER,), (BROKER,), leader=BROKER))
        image = apply(EMPTY_IMAGE, enumerate(records, start=EMPTY_IMAGE.offset + 1))
        now = int(time.time() * 1000)
        self.logs = LogManager([directory], LogConfig(), now_ms=now)
        replicas = ReplicaManager(BROKER, self.logs, now_ms=lambda: int(time.time() * 1000))
        replicas.apply_changes(changes_for_broker(EMPTY_IMAGE, image, BROKER), image)
        self.handler = RequestHandler(BROKER, replicas, lambda: image, (HOST, 9092), None)

    def start(self, header: RequestHeader, body: memoryview,
              client_host: str = "") -> list[Chunk] | None | Later[list[Chunk] | None]:
        super().start(header, body, client_host)
        return self.handler.start(header, body, client_host)  # type: ignore[no-any-return]


BROKER = 1
TOPIC = "bench"
RECORD_BYTES = 100


@functools.cache
def produce_request(frame_bytes: int) -> bytes:
    """One framed Produce v8 (acks=1) whose one batch of RECORD_BYTES-byte records about fills
    `frame_bytes` (built once: every round sends the same bytes)."""
    from common.protocol import produce
    from common.records import build_batch

    count = max(1, frame_bytes // (RECORD_BYTES + 8))
    batch = build_batch([(None, os.urandom(RECORD_BYTES)) for _ in range(count)], base_timestamp=int(time.time() * 1000))
    request = produce.ProduceRequest(None, 1, 30_000, (produce.TopicProduceData(TOPIC, (
        produce.PartitionProduceData(0, batch),)),))
    body = encode_request_header(RequestHeader(0, 8, 1, "bench")) + b"".join(produce.encode_produce_request(request, 8))
    return struct.pack(">i", len(body)) + body


async def one_round(frames: int, frame_bytes: int, append: bool = False) -> tuple[float, int]:
    """The loop thread's CPU seconds to receive `frames` requests of about `frame_bytes`
    (`append`: Produce requests, appended), and the bytes sent."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    directory = Path(tempfile.mkdtemp(prefix="tidelog-frame-receive-")) if append else None
    handler = CountingHandler(frames, done) if directory is None else AppendingHandler(frames, done, directory)
    server = KafkaServer(handler, host=HOST, port=0, max_request_bytes=frame_bytes + MIB)
    await server.start()
    if append:
        request = produce_request(frame_bytes)
    else:
        head = encode_request_header(RequestHeader(0, 9, 1, "bench"))
        request = struct.pack(">i", len(head) + frame_bytes) + head + bytes(frame_bytes)

    def drain(sock: socket.socket) -> None:
        while sock.recv(65536):  # bounded: ends when the server closes
            pass

    def send() -> None:
        with socket.create_connection((HOST, server.port)) as sock:
            reader = threading.Thread(target=drain, args=(sock,), name="frame-receive-answers")
            reader.start()
            for _ in range(frames):  # bounded by --frames
                sock.sendall(request)
            sock.shutdown(socket.SHUT_WR)
            reader.join()

    cpu0 = time.thread_time()
    sender = threading.Thread(target=send, name="frame-receive-client")
    sender.start()
    try:
        await done
        return time.thread_time() - cpu0, frames * len(request)
    finally:
        await asyncio.to_thread(sender.join)
        await server.stop()
        if isinstance(handler, AppendingHandler):
            handler.logs.shutdown()
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=2000)
    parser.add_argument("--frame-bytes", type=int, default=MIB)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--append", action="store_true",
                        help="Produce requests (acks=1) handled and appended to a log, not dropped")
    args = parser.parse_args()
    print(f"{args.frames:,} {'Produce requests' if args.append else 'frames'} x {args.frame_bytes:,} B per round; "
          f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}")
    if args.append:
        produce_request(args.frame_bytes)  # built before the first round, outside its figure
    for i in range(args.rounds):  # bounded by --rounds
        cpu, sent = asyncio.run(one_round(args.frames, args.frame_bytes, args.append))
        gb = sent / 1e9
        print(f"round {i + 1}: loop thread CPU {cpu:.3f} s for {gb:.2f} GB: {cpu / gb:.3f} s/GB "
              f"(load average {os.getloadavg()[0]:.2f})", flush=True)


if __name__ == "__main__":
    main()
