"""A consumer's Fetch on one broker, in process: the Python a fetch costs, by part, and the
loop thread's CPU per fetch over loopback beside a sendfile-only server's.

    python bench/fetch_path.py [--mib 256] [--batch-bytes 800000] [--version 16] [--rounds 3]
                               [--isolation 1] [--parts-only] [--opcodes [--by-file] [--top N]]

A log of `--mib` MiB in batches of about `--batch-bytes` (one partition, appended through the
broker's RequestHandler as Produce requests) is read back from offset 0 by Fetch requests
shaped as librdkafka sends them to a bulk consumer: one topic, one partition, 1 MiB
partition_max_bytes, 50 MiB max_bytes, min_bytes 1, no session (id 0, epoch -1),
read_committed (librdkafka's default `--isolation 1`), Fetch v16 (`--version`: librdkafka
since 2.5 sends v16, before it v11).

'parts': each step of the broker's answer run over every fetch of the log in turn, in process
(no socket), thread CPU per fetch: the header parse, the request decode, fetch_now (naming,
session, the partition's read, the answer), the response encode and its framing. 'loop': the
same fetches over loopback from a client thread that reads each answer before asking again,
the event loop thread's CPU (user and kernel: sendfile included) per fetch and per GB; 'floor':
the same exchange with a server thread that reads the request and sendfiles the same slice
lengths with a fixed head (no decode, no log), the floor of serving that client. The loop row
is printed as a multiple of the floor. Issue 35 goal 3's cluster figure is
bench/produce_consume.py's consume rows; this one isolates the broker's Python per fetch.
'--opcodes': instead, the Python bytecodes fetch_now executes per fetch of the log's first
batch (sys.settrace opcode events: a count the box's load does not move; what C code does
inside a call is not in it), then the bytecodes and calls of the whole loop thread per fetch of
one walk of the log over loopback (bench/opcode_counter.py: server, frame receive, asyncio,
handler, encode; the walk's last fetch waits at the log end, once); `--by-file` and `--top N`
say where those run.

On the shared 2-core VM (load 5.6-7.6, three alternated runs each, 335 fetches of 800 KB): at
3180b4f handler.start 80-94 us/fetch (request decode 13-15, fetch_now 37-44, response encode
6.4-7.4), loop 272-320 us/fetch; at ae7d99e handler.start 53-58 (decode 5.5-6.2, fetch_now
33-36, encode 2.4-2.6), loop 247-282. The floor moved 42-113 us/fetch between runs: the
multiple is only as steady as the box.
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
from typing import Any

from frame_receive import HOST, TOPIC, leading_handler, produce_request
from opcode_counter import Counts
from broker.server import KafkaServer, Later
from common.protocol import fetch
from common.protocol.frame import RequestHeader, encode_request_header, frame_response_for, join_chunks, \
    parse_request_header, strip_response_header
from common.protocol.primitives import Chunk
from common.units import MIB

FETCH_PARTITION_BYTES = 1 * MIB  # librdkafka's fetch.max.bytes per partition default (max.partition.fetch.bytes)
FETCH_MAX_BYTES = 50 * MIB  # librdkafka's fetch.max.bytes
_HEAD = struct.Struct(">iq")  # response size, then (in a batch) base offset
_BATCH = struct.Struct(">qi")  # base offset, batch length after these 12 bytes


def fetch_frame(offset: int, version: int, isolation: int, correlation_id: int = 1, max_wait_ms: int = 500) -> bytes:
    from common.protocol.metadata import wire_topic_id
    by_id = version >= 13  # leading_handler's topic id is its name upper-cased
    req = fetch.FetchRequest(-1, max_wait_ms, 1, FETCH_MAX_BYTES, isolation, (fetch.FetchTopic(
        "" if by_id else TOPIC,
        (fetch.FetchPartition(0, offset, FETCH_PARTITION_BYTES, -1, 0 if version >= 9 else -1),),
        wire_topic_id(TOPIC.upper()) if by_id else fetch.ZERO_UUID),))
    body = encode_request_header(RequestHeader(1, version, correlation_id, "rdkafka")) + join_chunks(
        fetch.encode_fetch_request(req, version))
    return struct.pack(">i", len(body)) + body


def next_offset(records: bytes | memoryview, offset: int) -> int:
    """The offset after the last whole batch of `records` (`offset` when there is none)."""
    pos, end = 0, len(records)
    while pos + 61 <= end:  # bounded by the records' length
        base, length = _BATCH.unpack_from(records, pos)
        if pos + 12 + length > end:
            break
        (last_delta,) = struct.unpack_from(">i", records, pos + 23)
        offset = base + last_delta + 1
        pos += 12 + length
    return offset


def filled_handler(directory: Path, mib: int, batch_bytes: int) -> tuple[Any, Any, Any]:
    handler, replicas, logs = leading_handler(directory, topic=TOPIC)
    frame = produce_request(batch_bytes)
    header, body = parse_request_header(memoryview(frame)[4:])
    for _ in range(mib * MIB // batch_bytes):  # bounded by --mib
        answer = handler.start(header, body)
        assert not isinstance(answer, Later)
    return handler, replicas, logs


def parts(handler: Any, version: int, isolation: int) -> tuple[int, dict[str, float]]:
    """Thread CPU seconds of each step over every fetch of the log, and the fetch count."""
    from broker.request_handler import row_for
    offsets = [0]
    frames = []
    while True:  # bounded: each fetch moves past at least one batch, until the log end
        # no wait: at the log end the answer is empty at once. A fetch left waiting would keep a
        # deadline on the handler's timers, armed on this round's loop, which the next round's
        # asyncio.run does not run
        frame = fetch_frame(offsets[-1], version, isolation, max_wait_ms=0)
        header, body = parse_request_header(memoryview(frame)[4:])
        chunks = handler.start(header, body)
        assert not isinstance(chunks, Later)
        data = b"".join(c.read_bytes() for c in chunks if not isinstance(c, bytes))
        nxt = next_offset(data, offsets[-1])
        if nxt == offsets[-1]:
            break
        frames.append(memoryview(frame)[4:])
        offsets.append(nxt)
    times: dict[str, float] = {}
    ctx = handler.context
    from broker.handlers.context import ClientInfo
    from broker.handlers.fetch import fetch_now
    client = ClientInfo.of("rdkafka", HOST)

    def step(name: str, fn: Any, inputs: list[Any]) -> list[Any]:
        t0 = time.thread_time()
        out = [fn(x) for x in inputs]
        times[name] = time.thread_time() - t0
        return out

    headers = step("header parse", parse_request_header, frames)
    row = row_for(headers[0][0])
    requests = step("request decode", lambda hb: row.codec.decode(hb[1], version), headers)
    responses = step("fetch_now", lambda r: fetch_now(ctx, r, version, client), requests)
    bodies = step("response encode", lambda r: row.codec.encode(r, version), responses)
    step("framing", lambda b: frame_response_for(headers[0][0], b), bodies)
    step("handler.start (all above)", lambda hb: handler.start(hb[0], hb[1]), headers)
    return len(frames), times


def loop_round(handler: Any, version: int, isolation: int, counts: Counts | None = None
               ) -> tuple[float, int, int, list[int]]:
    """(loop thread CPU s, fetches, bytes received by the client, records lengths) over loopback;
    `counts` counts the loop thread's bytecodes and calls meanwhile (server, asyncio, handler)."""
    class Counting:
        def __init__(self) -> None:
            self.cpu = 0.0

        def start(self, header: RequestHeader, body: memoryview, client_host: str = "") -> Any:
            return handler.start(header, body, client_host)

        async def handle(self, header: RequestHeader, body: memoryview, client_host: str = "") -> Any:
            return await handler.handle(header, body, client_host)

    result: dict[str, Any] = {}

    async def serve() -> None:
        server = KafkaServer(Counting(), host=HOST, port=0)
        await server.start()
        done = threading.Event()

        def client() -> None:
            try:
                result["fetches"], result["bytes"], result["lengths"] = drive(server.port, version, isolation)
            finally:  # a failed walk ends the round (its error printed by the thread), not a hang
                done.set()

        thread = threading.Thread(target=client, name="fetch-path-client")
        if counts is not None:
            counts.install()  # this coroutine runs on the loop's thread: every callback and task step counts
        cpu0 = time.thread_time()
        thread.start()
        try:
            await asyncio.to_thread(done.wait)
        finally:
            result["cpu"] = time.thread_time() - cpu0
            if counts is not None:
                counts.remove()
        thread.join()
        await server.stop()

    asyncio.run(serve())
    return result["cpu"], result["fetches"], result["bytes"], result["lengths"]


def recv_exact(sock: socket.socket, buf: bytearray, n: int) -> memoryview:
    view = memoryview(buf)[:n]
    got = 0
    while got < n:  # bounded: each pass receives something or raises
        k = sock.recv_into(view[got:], n - got)
        if not k:
            raise ConnectionError("closed mid-answer")
        got += k
    return view


def drive(port: int, version: int, isolation: int) -> tuple[int, int, list[int]]:
    """Fetch the log from offset 0 to its end, one request at a time; the fetch count, the
    bytes received, and each answer's records length."""
    offset, fetches, received, lengths = 0, 0, 0, []
    buf = bytearray(4 * MIB)
    with socket.create_connection((HOST, port)) as sock:
        while True:  # bounded: each answer moves the offset or ends the walk
            sock.sendall(fetch_frame(offset, version, isolation, fetches + 1))
            (size,) = struct.unpack(">i", recv_exact(sock, buf, 4))
            body = recv_exact(sock, buf, size)
            fetches += 1
            received += 4 + size
            resp = fetch.decode_fetch_response(strip_response_header(1, version, body[4:]), version)
            records = resp.responses[0].partitions[0].records
            assert records is None or isinstance(records, bytes | memoryview)  # decoded: a view of `body`
            records = records or b""
            lengths.append(len(records))
            nxt = next_offset(records, offset)
            if nxt == offset:
                return fetches, received, lengths
            offset = nxt


def floor_round(lengths: list[int], head_bytes: int) -> float:
    """The sending thread's CPU to answer the same fetches with a fixed head and sendfile of
    the same lengths from a file in the page cache (read from the start: the same bytes)."""
    with tempfile.NamedTemporaryFile(prefix="consume-fetchpath-floor-", dir="/tmp") as f:
        f.write(os.urandom(max(lengths)))
        f.flush()
        listener = socket.create_server((HOST, 0))
        port = listener.getsockname()[1]
        cpu: list[float] = []

        def serve() -> None:
            conn, _ = listener.accept()
            with conn:
                buf = bytearray(64 * 1024)
                head = bytes(head_bytes)
                t0 = time.thread_time()
                for n in lengths:  # bounded by the fetches to answer
                    (size,) = struct.unpack(">i", recv_exact(conn, buf, 4))
                    recv_exact(conn, buf, size)
                    conn.sendall(struct.pack(">i", head_bytes - 4 + n) + head[4:])
                    sent = 0
                    while sent < n:  # bounded: sendfile moves on or raises
                        sent += os.sendfile(conn.fileno(), f.fileno(), sent, n - sent)
                cpu.append(time.thread_time() - t0)

        thread = threading.Thread(target=serve)
        thread.start()
        with socket.create_connection((HOST, port)) as sock:
            buf = bytearray(4 * MIB)
            request = fetch_frame(0, 11, 1)
            for _ in lengths:  # bounded
                sock.sendall(request)
                (size,) = struct.unpack(">i", recv_exact(sock, buf, 4))
                recv_exact(sock, buf, size)
        thread.join()
        listener.close()
        return cpu[0]


def fetch_now_opcodes(handler: Any, version: int, isolation: int, fetches: int = 200) -> float:
    """Bytecodes fetch_now executes per fetch, `fetches` times the same first fetch of the log."""
    import sys
    from types import FrameType

    from broker.handlers.context import ClientInfo
    from broker.handlers.fetch import fetch_now
    from broker.request_handler import row_for
    header, body = parse_request_header(memoryview(fetch_frame(0, version, isolation))[4:])
    request = row_for(header).codec.decode(body, version)
    client = ClientInfo.of("rdkafka", HOST)
    count = 0

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "call":
            frame.f_trace_opcodes = True
        elif event == "opcode":
            count += 1
        return trace

    fetch_now(handler.context, request, version, client)  # warm: the first read opens the segment
    sys.settrace(trace)
    try:
        for _ in range(fetches):  # bounded by fetches
            fetch_now(handler.context, request, version, client)
    finally:
        sys.settrace(None)
    return count / fetches


async def _in_loop(fn: Any, *args: Any) -> Any:
    return fn(*args)  # fetch_now reads the running loop's clock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--batch-bytes", type=int, default=800_000)
    parser.add_argument("--version", type=int, default=16)
    parser.add_argument("--isolation", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--parts-only", action="store_true")
    parser.add_argument("--opcodes", action="store_true", help="count bytecodes per fetch (not times)")
    parser.add_argument("--by-file", action="store_true", help="with --opcodes: the loop's opcodes per fetch by file")
    parser.add_argument("--top", type=int, default=0, help="with --opcodes: the N functions with most opcodes")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="consume-fetchpath-", dir="/tmp"))
    try:
        handler, _replicas, logs = filled_handler(directory, args.mib, args.batch_bytes)
        print(f"{args.mib} MiB in ~{args.batch_bytes:,} B batches; Fetch v{args.version} isolation "
              f"{args.isolation}; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}")
        if args.opcodes:
            count = asyncio.run(_in_loop(fetch_now_opcodes, handler, args.version, args.isolation))
            print(f"fetch_now: {count:,.0f} opcodes per fetch")
            counts = Counts()
            _cpu, fetches, _received, _lengths = loop_round(handler, args.version, args.isolation, counts)
            print(f"loop thread over loopback: {counts.opcodes / fetches:,.0f} opcodes, "
                  f"{counts.calls / fetches:,.0f} calls per fetch ({fetches} fetches)")
            if args.by_file or args.top:
                print(counts.report(fetches, by_file=args.by_file, top=args.top))
            logs.shutdown()
            return
        for i in range(args.rounds):  # bounded by --rounds
            n, times = asyncio.run(_in_loop(parts, handler, args.version, args.isolation))
            print(f"round {i + 1} parts, us per fetch over {n} fetches: " + ", ".join(
                f"{name} {t / n * 1e6:.1f}" for name, t in times.items())
                + f" (load {os.getloadavg()[0]:.2f})", flush=True)
            if args.parts_only:
                continue
            cpu, fetches, received, lengths = loop_round(handler, args.version, args.isolation)
            head = (received - sum(lengths)) // fetches
            floor = floor_round(lengths, head)
            gb = sum(lengths) / 1e9
            print(f"round {i + 1} loop: {cpu / fetches * 1e6:.0f} us/fetch, {cpu / gb:.3f} s/GB; floor "
                  f"{floor / fetches * 1e6:.0f} us/fetch, {floor / gb:.3f} s/GB; x{cpu / floor:.2f} "
                  f"({fetches} fetches, {gb:.3f} GB; load {os.getloadavg()[0]:.2f})", flush=True)
        logs.shutdown()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
