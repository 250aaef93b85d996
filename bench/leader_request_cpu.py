"""A leader's CPU per acks=all Produce at RF=3, with the follower Fetches it causes, in one process.

An in-process `broker.server.KafkaServer` with the broker's RequestHandler leads one partition
(replicas 1, 2, 3, ISR all three, min.insync.replicas 2) on a log in a temp dir (no fsync, as
the brokers). Three client threads talk to it over loopback with blocking sockets: a producer
sends `--produces` Produce requests (v9, acks=all, one `--value-bytes` record each), one at a
time, each after the answer to the one before (a canary with linger.ms=0 at a rate the leader
keeps up with: every request alone); two followers long-poll Fetch v11 as tidelog's replica
fetcher does (incremental fetch sessions, max.wait 500 ms, min.bytes 1), each from the offset
after what it last received. So every produce runs the whole leader path: frame receive,
decode, append, the waiting followers' fetches woken and answered, their next fetches moving
the high watermark, the produce answered, and the fetches the HW move wakes (the followers
learn it).

The figure is the event loop thread's CPU (thread_time: user and kernel; the clients' threads
are not counted) per produce, and the Fetch requests answered per produce. Run it at two
commits to compare them (PYTHONPATH=<worktree>): `--rounds` alternate nothing by themselves,
so on a shared box run old and new in turns. CPU time on a shared 2-core box moves by a
third between runs of the same code; `--opcodes` counts instead what the loop thread executes
per produce, a figure the box's load does not move: Python bytecodes (sys.settrace with opcode
events) and function calls, Python and C (sys.setprofile). It leaves out what C code does
inside a call (a struct unpack, a dict lookup, a syscall), and it slows the loop ~50x, so
it is a count, not a time. (valgrind's callgrind counts instructions, C included, but serialises
the client threads and the loop: ~60 ms per produce; the slope between two `--produces` counts
is the work per produce, the clients' included.)

The client threads share the loop's GIL: on two cores each hand-off of the GIL moves between
cores, and the loop thread's CPU time then follows the scheduler as much as the code (a change
that cut the loop's instructions by 6 % read 9 % dearer in one series of alternated runs and
cheaper in another). `--cpu N` pins the process, clients and loop, to core N: the hand-offs stay
on one core and the figure follows the work.

    python bench/leader_request_cpu.py [--produces 5000] [--rounds 3] [--value-bytes 100] [--opcodes] [--cpu N]
                                       [--idempotent] [--by-file] [--top N]

`--by-file` and `--top N` (with `--opcodes`) say where those opcodes run: per source file, and
the N functions that run the most (bench/opcode_counter.py, the counter the benches share).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import struct
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Final

from broker.server import KafkaServer
from common.protocol import fetch, produce
from common.protocol.api_keys import ApiKey
from common.protocol.frame import RequestHeader, encode_request_header, strip_response_header
from common.record_batch import iter_batches
from frame_receive import leading_handler
from opcode_counter import Counts  # bench/follower_round_cpu.py imports it from here too

HOST: Final = "127.0.0.1"
LEADER: Final = 1
FOLLOWERS: Final = (2, 3)
TOPIC: Final = "canary"
PRODUCE_VERSION: Final = 9
FETCH_VERSION: Final = 11  # tidelog's replica fetcher's (common.request_versions)
FETCH_MAX_WAIT_MS: Final = 500
PARTITION_MAX_BYTES: Final = 1 << 20
WARMUP_PRODUCES: Final = 200
PRODUCER_ID: Final = 1000  # --idempotent: the leader knows no state for it, so sequence 0 starts it
_SIZE: Final = struct.Struct(">i")


def leader_handler(directory: Path) -> tuple[Any, Any]:
    """(RequestHandler, LogManager) of broker LEADER leading TOPIC-0 with replicas 1-3."""
    handler, _, logs = leading_handler(directory, topic=TOPIC, replicas=(LEADER, *FOLLOWERS),
                                       configs={"min.insync.replicas": "2"})
    return handler, logs


def _frame(api_key: int, version: int, correlation_id: int, body: list) -> bytes:
    data = encode_request_header(RequestHeader(api_key, version, correlation_id, "bench")) + b"".join(body)
    return _SIZE.pack(len(data)) + data


def _receive(sock: socket.socket) -> bytes | None:
    """One response frame's bytes after the correlation id; None at EOF."""
    head = _exactly(sock, 8)
    if head is None:
        return None
    size = _SIZE.unpack_from(head)[0]
    return _exactly(sock, size - 4)


def _exactly(sock: socket.socket, n: int) -> bytes | None:
    chunks, left = [], n
    while left:  # bounded by n
        data = sock.recv(left)
        if not data:
            return None
        chunks.append(data)
        left -= len(data)
    return b"".join(chunks)


class Producer:
    """One acks=all Produce at a time; `produced` counts the answers. `idempotent`: as the
    canary (bench/loaded_latency.py's C producer), each batch carries a producer id, epoch and
    the next sequence, so the leader runs its idempotence checks; each request is built in this
    (client) thread."""

    def __init__(self, port: int, value_bytes: int, idempotent: bool = False) -> None:
        self.sock = socket.create_connection((HOST, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.value = os.urandom(value_bytes)
        self.idempotent = idempotent
        self.body = self._body(0)
        self.produced = 0

    def _body(self, sequence: int) -> list:
        from common.records import build_batch

        ids = {"producer_id": PRODUCER_ID, "producer_epoch": 0, "base_sequence": sequence} if self.idempotent else {}
        batch = build_batch([(None, self.value)], base_timestamp=int(time.time() * 1000), **ids)
        request = produce.ProduceRequest(None, -1, 30_000, (produce.TopicProduceData(TOPIC, (
            produce.PartitionProduceData(0, batch),)),))
        return produce.encode_produce_request(request, PRODUCE_VERSION)

    def run(self, count: int) -> None:
        for i in range(count):  # bounded by count
            body = self._body(self.produced) if self.idempotent else self.body
            self.sock.sendall(_frame(ApiKey.PRODUCE, PRODUCE_VERSION, i, body))
            answer = _receive(self.sock)
            assert answer is not None
            response = produce.decode_produce_response(
                strip_response_header(ApiKey.PRODUCE, PRODUCE_VERSION, memoryview(answer)), PRODUCE_VERSION)
            code = response.responses[0].partitions[0].error_code
            if code:
                raise RuntimeError(f"produce answered error {code}")
            self.produced += 1


class Follower(threading.Thread):
    """A replica fetcher's long-poll loop over one incremental fetch session, until stopped."""

    def __init__(self, replica_id: int, port: int) -> None:
        super().__init__(name=f"follower-{replica_id}", daemon=True)
        self.replica_id = replica_id
        self.sock = socket.create_connection((HOST, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.offset = 0
        self.stopping = False
        self.fetches = 0

    def run(self) -> None:
        session_id, epoch, sent_offset = 0, 0, -1
        while not self.stopping:  # until stop()
            topics: tuple[fetch.FetchTopic, ...] = ()
            if self.offset != sent_offset:  # an incremental session lists only what changed
                topics = (fetch.FetchTopic(TOPIC, (fetch.FetchPartition(0, self.offset, PARTITION_MAX_BYTES, 0, 0),)),)
                sent_offset = self.offset
            request = fetch.FetchRequest(self.replica_id, FETCH_MAX_WAIT_MS, 1, 10 << 20, fetch.READ_UNCOMMITTED,
                                         topics, session_id, epoch)
            try:
                self.sock.sendall(_frame(ApiKey.FETCH, FETCH_VERSION, self.fetches,
                                         fetch.encode_fetch_request(request, FETCH_VERSION)))
                body = _receive(self.sock)
            except OSError:
                return
            if body is None:
                return
            self.fetches += 1
            response = fetch.decode_fetch_response(memoryview(body), FETCH_VERSION)
            if response.error_code:
                raise RuntimeError(f"fetch answered error {response.error_code}")
            session_id, epoch = response.session_id, epoch + 1
            for topic in response.responses:
                for p in topic.partitions:
                    if p.error_code:
                        raise RuntimeError(f"fetch of partition answered error {p.error_code}")
                    records = p.records if isinstance(p.records, (bytes, memoryview)) else b""
                    batches = list(iter_batches(memoryview(records), allow_partial_tail=True))
                    if batches:
                        self.offset = batches[-1][1].last_offset + 1

    def stop(self) -> None:
        self.stopping = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


async def one_round(produces: int, value_bytes: int, counts: Counts | None = None,
                    idempotent: bool = False) -> tuple[float, int]:
    """(loop thread CPU seconds, Fetch requests answered) over `produces` acks=all produces;
    `counts` counts the loop thread's bytecodes and calls meanwhile."""
    directory = Path(tempfile.mkdtemp(prefix="tidelog-leader-request-cpu-"))
    handler, logs = leader_handler(directory)
    server = KafkaServer(handler, host=HOST, port=0)
    await server.start()
    followers = [Follower(r, server.port) for r in FOLLOWERS]
    producer = Producer(server.port, value_bytes, idempotent)
    try:
        for f in followers:
            f.start()
        await asyncio.to_thread(producer.run, WARMUP_PRODUCES)
        fetches0 = sum(f.fetches for f in followers)
        if counts is not None:
            counts.install()  # this coroutine runs on the loop's thread: every task's steps count
        cpu0 = time.thread_time()
        try:
            await asyncio.to_thread(producer.run, produces)
        finally:
            cpu = time.thread_time() - cpu0
            if counts is not None:
                counts.remove()
        return cpu, sum(f.fetches for f in followers) - fetches0
    finally:
        for f in followers:
            f.stop()
        producer.sock.close()
        await server.stop()
        for f in followers:
            await asyncio.to_thread(f.join)
        logs.shutdown()
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--produces", type=int, default=5000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--opcodes", action="store_true", help="count bytecodes and calls (not times)")
    parser.add_argument("--cpu", type=int, default=None, help="pin the process (clients and loop) to this core")
    parser.add_argument("--idempotent", action="store_true", help="the producer is idempotent, as the canary")
    parser.add_argument("--by-file", action="store_true", help="with --opcodes: opcodes per produce by source file")
    parser.add_argument("--top", type=int, default=0, help="with --opcodes: the N functions with most opcodes")
    args = parser.parse_args()
    if args.cpu is not None:  # before any thread starts: every thread inherits it
        os.sched_setaffinity(0, {args.cpu})
    pinned = "" if args.cpu is None else f", pinned to core {args.cpu}"
    idempotent = ", idempotent" if args.idempotent else ""
    print(f"{args.produces:,} acks=all produces of 1 x {args.value_bytes} B{idempotent}, RF=3 "
          f"(2 followers long-polling){pinned}")
    if args.opcodes:
        print(f"{'round':<6} {'opcodes/produce':>15} {'calls/produce':>13} {'fetch/pr':>8}")
    else:
        print(f"{'round':<6} {'loop cpu s':>10} {'us/produce':>10} {'fetch/pr':>8} {'load':>5}")
    for r in range(args.rounds):
        load = os.getloadavg()[0]
        counts = Counts() if args.opcodes else None
        cpu, fetches = asyncio.run(one_round(args.produces, args.value_bytes, counts, args.idempotent))
        if counts is not None:
            print(f"{r + 1:<6} {counts.opcodes / args.produces:>15,.0f} {counts.calls / args.produces:>13,.0f} "
                  f"{fetches / args.produces:>8.2f}", flush=True)
            if args.by_file or args.top:
                print(counts.report(args.produces, by_file=args.by_file, top=args.top), flush=True)
        else:
            print(f"{r + 1:<6} {cpu:>10.2f} {cpu / args.produces * 1e6:>10.0f} {fetches / args.produces:>8.2f} "
                  f"{load:>5.2f}", flush=True)


if __name__ == "__main__":
    main()
