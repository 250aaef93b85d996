"""A follower's CPU per fetch round: send the Fetch, receive the answer, append it, in one process.

Issue 35 (goal 2): with brokers never waiting for a core, each follower spent ~0.45 ms of loop
CPU per fetch answer received and appended (the canary at 1,000 records/s). This bench runs
that round alone. Broker ME's real `ReplicaManager` and `ReplicaFetcherManager` follow
`--partitions` partitions of leader LEADER (logs in a temp dir, no fsync); a thread plays the
leader on a loopback socket, answering each Fetch v11 with a prebuilt response: one batch of
one `--value-bytes` record for partition 0 at the follower's log end offset and a high
watermark at that offset (an acks=all canary's round: the follower's next fetch moves the HW),
the other partitions silent (an incremental session names only partitions with news). So a
round is everything the follower's event loop does: build and write the Fetch, receive and
decode the answer, dispatch it, append it, bookkeeping.

Printed: the event loop thread's CPU (thread_time: user and kernel; the leader thread is not
counted) per round, and with `--opcodes` what the loop thread executes per round, a figure the
box's load does not move: Python bytecodes (sys.settrace opcode events) and calls, Python and C
(sys.setprofile), as bench/leader_request_cpu.py counts them for the leader. It leaves out what
C code does inside a call and slows the loop ~50x: a count, not a time.

    python bench/follower_round_cpu.py [--rounds 3] [--fetches 5000] [--partitions 100] [--opcodes]
                                       [--by-file] [--top N]

`--by-file` adds where those opcodes run, per source file (the project's, the standard
library's; `<string>` is generated code: dataclass __init__s, instance builders, named tuples),
so each owner sees their share of a round; `--top N` the N functions that run the most.

Without `--opcodes`, also printed: the event loop's passes per round (its selector's select
calls), each a `_run_once` of asyncio's: a round whose answer wakes a task costs two (the
answer's read sets a future; the task resumes in the next pass, after a select(0)). Not with
`--opcodes`: the counting wrapper's own bytecodes would be counted as the round's.

`--busy-ms X` gives the follower's loop other work: a callback that holds the loop X ms in every
loop pass, as a broker leading and serving other partitions has (it sleeps: spinning would hold
the GIL from the leader thread of this process, whose waits would then be timed). Then the
figure is the fetch turnaround, timed by the leader thread: from an answer sent to the next
Fetch received. A round that waits a loop pass for its task waits that pass's other work too.

Run it at two commits to compare them (PYTHONPATH=<worktree>), old and new in turns. Nothing is
asserted: a measurement, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Final

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the project's packages are importable
    sys.path.insert(0, str(ROOT))

from broker.log.log_manager import LogManager  # noqa: E402
from broker.replica_manager import ReplicaManager  # noqa: E402
from broker.replication.fetcher_manager import ReplicaFetcherManager  # noqa: E402
from broker.replication.fetcher_state import FetcherSettings  # noqa: E402
from common.log_config import LogConfig  # noqa: E402
from common.protocol import fetch  # noqa: E402
from common.protocol.api_keys import ApiKey  # noqa: E402
from common.protocol.frame import join_chunks  # noqa: E402
from common.records import build_batch  # noqa: E402
from metadata.delta import apply  # noqa: E402
from metadata.image import EMPTY_IMAGE, MetadataImage  # noqa: E402
from metadata.local_changes import changes_for_broker  # noqa: E402
from metadata.records import BeginEpoch, BrokerRegistrationChange, Listener, Partition, RegisterBroker, Topic  # noqa: E402

from opcode_counter import Counts  # noqa: E402  (bench/: the benches' shared opcode counter)

HOST: Final = "127.0.0.1"
ME, LEADER, LEADER_EPOCH = 5, 4, 1
TOPIC: Final = "canary"
FETCH_VERSION: Final = 11  # common.request_versions.FETCH_VERSION (non-flexible: header v0)
SESSION_ID: Final = 77
WARMUP_FETCHES: Final = 200
_SIZE: Final = struct.Struct(">i")


def image(port: int, partitions: int) -> MetadataImage:
    return apply(EMPTY_IMAGE, enumerate([
        BeginEpoch(1),
        *(RegisterBroker(b, f"inc-{b}", (Listener("PLAINTEXT", HOST, port),)) for b in (LEADER, ME)),
        *(BrokerRegistrationChange(b, i, fenced=False) for i, b in enumerate((LEADER, ME), start=1)),
        Topic(TOPIC, "T"),
        *(Partition("T", p, (LEADER, ME), (LEADER, ME), leader=LEADER, leader_epoch=LEADER_EPOCH)
          for p in range(partitions)),
    ]))


def answers(count: int, value_bytes: int) -> list[bytes]:
    """Fetch v11 response bodies (after the correlation id): the i-th carries offset i."""
    value = os.urandom(value_bytes)
    out = []
    for i in range(count):
        batch = build_batch([(None, value)], base_offset=i, base_timestamp=1_700_000_000_000 + i,
                            partition_leader_epoch=LEADER_EPOCH)
        response = fetch.FetchResponse(0, (fetch.FetchTopicResponse(TOPIC, (
            fetch.FetchPartitionResponse(0, 0, i, batch, last_stable_offset=i, log_start_offset=0),)),),
            0, SESSION_ID)
        out.append(join_chunks(fetch.encode_fetch_response(response, FETCH_VERSION)))
    return out


def _exactly(sock: socket.socket, n: int) -> bytes | None:
    chunks, left = [], n
    while left:  # bounded by n
        try:
            data = sock.recv(left)
        except ConnectionError:  # the follower aborted its connection (its fetcher stopped)
            return None
        if not data:
            return None
        chunks.append(data)
        left -= len(data)
    return b"".join(chunks)


class Leader(threading.Thread):
    """Answers Fetch k with the k-th prebuilt answer; at `mark` requests calls `on_mark` in the loop."""

    def __init__(self, listener: socket.socket, bodies: list[bytes]) -> None:
        super().__init__(name="leader", daemon=True)
        self.listener, self.bodies = listener, bodies
        self.requests = 0
        self.mark = -1
        self.on_mark: Any = None
        self.timed = range(0)  # the requests whose turnaround is noted (answer before -> them)
        self.turnarounds: list[float] = []

    def run(self) -> None:
        conn, _ = self.listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sent_at = 0.0
        with conn:
            while True:  # until the follower closes, or the answers run out
                head = _exactly(conn, 4)
                frame = None if head is None else _exactly(conn, _SIZE.unpack(head)[0])
                if frame is None:
                    return
                if self.requests in self.timed:
                    self.turnarounds.append(time.perf_counter() - sent_at)
                api_key, _, correlation_id = struct.unpack_from(">hhi", frame)
                if api_key != ApiKey.FETCH:
                    raise RuntimeError(f"the follower sent API {api_key}, not Fetch")
                k, self.requests = self.requests, self.requests + 1
                if k == self.mark:
                    self.on_mark()
                if k >= len(self.bodies):
                    return  # hold the last fetch: the bench has what it needs
                body = self.bodies[k]
                conn.sendall(struct.pack(">ii", 4 + len(body), correlation_id) + body)
                sent_at = time.perf_counter()


class Passes:
    """Counts the event loop's passes: its selector's select calls, one per `_run_once`."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.count = 0
        self.counting = False
        selector = loop._selector  # type: ignore[attr-defined]  # a selector event loop's
        self._select = selector.select
        selector.select = self._counted

    def _counted(self, timeout: float | None = None) -> Any:
        if self.counting:
            self.count += 1
        return self._select(timeout)


class Busy:
    """Other work in every loop pass: a callback holding the loop `seconds`, then scheduled again."""

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        self.loop, self.seconds, self.on = loop, seconds, False

    def start(self) -> None:
        self.on = True
        self.loop.call_soon(self._spin)

    def _spin(self) -> None:
        if not self.on:
            return
        time.sleep(self.seconds)
        self.loop.call_soon(self._spin)


async def one_round(directory: Path, fetches: int, partitions: int, value_bytes: int,
                    opcodes: bool, counter: Counts, busy_s: float = 0.0
                    ) -> tuple[float, float, float, float, list[float]]:
    """(loop CPU s per fetch, opcodes per fetch, calls per fetch, loop passes per fetch, fetch
    turnarounds s) over `fetches` rounds, counted in `counter` with `opcodes`; with `busy_s`, that
    much other work in each loop pass meanwhile."""
    listener = socket.create_server((HOST, 0))
    leader = Leader(listener, answers(WARMUP_FETCHES + fetches + 1, value_bytes))
    leader.timed = range(WARMUP_FETCHES + 1, WARMUP_FETCHES + fetches + 1)
    loop = asyncio.get_running_loop()
    started, ended = loop.create_future(), loop.create_future()
    passes = Passes(loop) if not opcodes else None
    busy = Busy(loop, busy_s)

    def at_start() -> None:
        if opcodes:
            counter.install()
        if passes is not None:
            passes.counting = True
        if busy_s:
            busy.start()
        started.set_result(time.thread_time())

    def at_end() -> None:
        cpu = time.thread_time()
        counter.remove()
        busy.on = False
        if passes is not None:
            passes.counting = False
        ended.set_result(cpu)

    def mark(k: int, action: Any) -> None:
        leader.mark = k
        leader.on_mark = lambda: loop.call_soon_threadsafe(action)

    def at_warm() -> None:
        at_start()
        mark(WARMUP_FETCHES + fetches, at_end)

    mark(WARMUP_FETCHES, at_warm)
    leader.start()
    metadata = image(listener.getsockname()[1], partitions)
    log_manager = LogManager([directory], LogConfig(), now_ms=int(time.time() * 1000))
    replicas = ReplicaManager(ME, log_manager, now_ms=lambda: int(time.time() * 1000))
    manager = ReplicaFetcherManager(replicas, FetcherSettings(ME), image=lambda: metadata)
    replicas.fetchers = manager
    try:
        replicas.apply_changes(changes_for_broker(EMPTY_IMAGE, metadata, ME), metadata)
        async with asyncio.timeout(600):
            before = await started
            after = await ended
        counts = (counter.opcodes / fetches, counter.calls / fetches,
                  0.0 if passes is None else passes.count / fetches)
    finally:
        counter.remove()
        await manager.shutdown()
        log_manager.shutdown()
        listener.close()
    return (after - before) / fetches, *counts, leader.turnarounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fetches", type=int, default=5000)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--opcodes", action="store_true", help="count bytecodes and calls (~50x slower)")
    parser.add_argument("--by-file", action="store_true", help="with --opcodes: opcodes per round by source file")
    parser.add_argument("--top", type=int, default=0, help="with --opcodes: the N functions that run the most")
    parser.add_argument("--busy-ms", type=float, default=0.0,
                        help="other work in every loop pass (ms the loop is held); prints the fetch turnaround")
    args = parser.parse_args()
    fetches = min(args.fetches, 500) if args.opcodes else args.fetches
    cpus = []
    for r in range(args.rounds):
        directory = Path(tempfile.mkdtemp(prefix="follower-round-"))
        counter = Counts()
        try:
            cpu, ops, calls, passes, turnarounds = asyncio.run(one_round(
                directory, fetches, args.partitions, args.value_bytes, args.opcodes, counter, args.busy_ms / 1000))
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        cpus.append(cpu)
        extra = (f", {ops:.0f} opcodes and {calls:.0f} calls per round" if args.opcodes
                 else f", {passes:.2f} loop passes per round")
        if args.busy_ms:
            turnarounds.sort()
            extra += (f"; fetch turnaround median {statistics.median(turnarounds) * 1e3:.2f} ms, "
                      f"p99 {turnarounds[int(len(turnarounds) * 0.99)] * 1e3:.2f} ms "
                      f"(with {args.busy_ms:g} ms of other work per loop pass)")
        print(f"round {r + 1}: {fetches} fetches, loop CPU {cpu * 1e6:.0f} us per fetch{extra}; "
              f"load average {os.getloadavg()[0]:.1f}", flush=True)
        if args.opcodes and (args.by_file or args.top):
            print(counter.report(fetches, by_file=args.by_file, top=args.top), flush=True)
    if not args.opcodes:
        print(f"median loop CPU per fetch {statistics.median(cpus) * 1e6:.0f} us over {args.rounds} rounds",
              flush=True)


if __name__ == "__main__":
    main()
