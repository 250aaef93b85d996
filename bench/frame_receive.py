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
`--partitions P` spreads each request's records over P partitions of the topic, one batch
each (a bulk producer's request to a P-partition topic, as bench/produce_consume.py's P=6
phases send): what a request pays per partition beside what it pays per byte.
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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from broker.server import KafkaServer, Later
from common.protocol.frame import RequestHeader, encode_request_header, join_chunks
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


def leading_handler(directory: Path, *, topic: str, partitions: int = 1, replicas: tuple[int, ...] = (1,),
                    configs: Mapping[str, str] | None = None) -> tuple[Any, Any, Any]:
    """(RequestHandler, ReplicaManager, LogManager) of broker replicas[0], leading `partitions`
    partitions of `topic` (replicas and ISR `replicas`, topic `configs`) on logs in `directory`;
    every broker of `replicas` registered and unfenced (bench/leader_request_cpu.py too)."""
    from broker.log.log_manager import LogManager
    from broker.replica_manager import ReplicaManager
    from broker.request_handler import RequestHandler
    from common.log_config import LogConfig
    from metadata.delta import apply
    from metadata.image import EMPTY_IMAGE
    from metadata.local_changes import changes_for_broker
    from metadata.records import (BeginEpoch, BrokerRegistrationChange, Config, ConfigResourceType, Listener,
                                  Partition, RegisterBroker, Topic)

    leader = replicas[0]
    topic_id = topic.upper()
    records = (BeginEpoch(1),
               *(RegisterBroker(b, f"bench-{b}", (Listener("PLAINTEXT", HOST, 9092),)) for b in replicas),
               *(BrokerRegistrationChange(b, b, fenced=False) for b in replicas), Topic(topic, topic_id),
               *(Config(ConfigResourceType.TOPIC, topic, k, v) for k, v in (configs or {}).items()),
               *(Partition(topic_id, p, replicas, replicas, leader=leader) for p in range(partitions)))
    image = apply(EMPTY_IMAGE, enumerate(records, start=EMPTY_IMAGE.offset + 1))  # type: ignore[arg-type]
    logs = LogManager([directory], LogConfig(), now_ms=int(time.time() * 1000))
    manager = ReplicaManager(leader, logs, now_ms=lambda: int(time.time() * 1000))
    manager.apply_changes(changes_for_broker(EMPTY_IMAGE, image, leader), image)
    return RequestHandler(leader, manager, lambda: image, (HOST, 9092), None), manager, logs


class AppendingHandler(CountingHandler):
    """The broker's RequestHandler, leading `partitions` partitions of TOPIC on logs in `directory`."""

    def __init__(self, expected: int, done: asyncio.Future[None], directory: Path, partitions: int = 1) -> None:
        super().__init__(expected, done)
        self.handler, self.replicas, self.logs = leading_handler(directory, topic=TOPIC, partitions=partitions)
        self.partitions = partitions

    def start(self, header: RequestHeader, body: memoryview,
              client_host: str = "") -> list[Chunk] | None | Later[list[Chunk] | None]:
        super().start(header, body, client_host)
        return self.handler.start(header, body, client_host)

    def records_appended(self) -> int:
        """Records in the partitions' logs (a refused append would leave the figure empty)."""
        from common.topic_partition import TopicPartition

        total = 0
        for p in range(self.partitions):  # bounded by --partitions
            partition = self.replicas.get_partition(TopicPartition(TOPIC, p))
            assert partition is not None
            total += partition.log.log_end_offset
        return total


BROKER = 1
TOPIC = "bench"
RECORD_BYTES = 100


def produce_request_records(frame_bytes: int, partitions: int = 1) -> int:
    """The records of one `produce_request`."""
    return _produce_request(frame_bytes, partitions)[1]


def produce_request(frame_bytes: int, partitions: int = 1) -> bytes:
    return _produce_request(frame_bytes, partitions)[0]


@functools.cache
def _produce_request(frame_bytes: int, partitions: int = 1) -> tuple[bytes, int]:
    """One framed Produce v8 (acks=1) whose batches of RECORD_BYTES-byte records, one per
    partition, about fill `frame_bytes` (built once: every round sends the same bytes)."""
    from common.protocol import produce
    from common.records import build_batch

    # Each batch within its share of the frame: at RECORD_BYTES + 8 per record a 1 MiB batch
    # was 1,069,554 bytes, over max.message.bytes (1,048,588), and every append was refused.
    share = frame_bytes // partitions
    count = max(1, share // (RECORD_BYTES + 8))
    value = os.urandom(RECORD_BYTES)
    while True:  # bounded: the count shrinks by the overshoot each pass
        batch = build_batch([(None, value)] * count, base_timestamp=int(time.time() * 1000))
        if len(batch) <= share or count == 1:
            break
        count = max(1, count * share // len(batch) - 1)
    request = produce.ProduceRequest(None, 1, 30_000, (produce.TopicProduceData(TOPIC, tuple(
        produce.PartitionProduceData(p, batch) for p in range(partitions))),))
    body = encode_request_header(RequestHeader(0, 8, 1, "bench")) + join_chunks(produce.encode_produce_request(request, 8))
    return struct.pack(">i", len(body)) + body, count * partitions


async def one_round(frames: int, frame_bytes: int, append: bool = False, partitions: int = 1) -> tuple[float, int]:
    """The loop thread's CPU seconds to receive `frames` requests of about `frame_bytes`
    (`append`: Produce requests, appended), and the bytes sent."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    directory = Path(tempfile.mkdtemp(prefix="tidelog-frame-receive-")) if append else None
    handler = CountingHandler(frames, done) if directory is None else AppendingHandler(frames, done, directory,
                                                                                          partitions)
    server = KafkaServer(handler, host=HOST, port=0, max_request_bytes=frame_bytes + MIB)
    await server.start()
    if append:
        request = produce_request(frame_bytes, partitions)
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
        cpu = time.thread_time() - cpu0
        if isinstance(handler, AppendingHandler):  # every request appended, none refused
            await asyncio.to_thread(sender.join)  # its answers all read: the last append is done
            expected = frames * produce_request_records(frame_bytes, partitions)
            if handler.records_appended() != expected:
                raise RuntimeError(f"{handler.records_appended()} records appended, not {expected}")
        return cpu, frames * len(request)
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
    parser.add_argument("--partitions", type=int, default=1, help="with --append: partitions per request")
    args = parser.parse_args()
    print(f"{args.frames:,} {'Produce requests' if args.append else 'frames'} x {args.frame_bytes:,} B per round; "
          f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}")
    if args.append:
        produce_request(args.frame_bytes, args.partitions)  # built before the first round, outside its figure
    for i in range(args.rounds):  # bounded by --rounds
        cpu, sent = asyncio.run(one_round(args.frames, args.frame_bytes, args.append, args.partitions))
        gb = sent / 1e9
        print(f"round {i + 1}: loop thread CPU {cpu:.3f} s for {gb:.2f} GB: {cpu / gb:.3f} s/GB "
              f"(load average {os.getloadavg()[0]:.2f})", flush=True)


if __name__ == "__main__":
    main()
