"""Python work per Produce request by partition count: what each extra partition costs a leader.

The broker's RequestHandler (one broker, RF=1, acks=1, as bench/frame_receive.py --append builds
it) is handed the same Produce (v8, or `--version`) `--requests` times in process, no socket: one batch of
100-byte records per partition, `--partitions` partitions per request (default 1 and 6). It
counts what the calling thread executes per request - Python bytecodes (sys.settrace opcode
events) and calls, Python and C (sys.setprofile) - and the opcodes per extra partition, the
slope between the first and the last partition count. `--replicas 3`: the leader has two ISR
followers that never fetch, so every append finds the HW held by a follower at or below it (what
an acks=all leader sees between its followers' fetches) where at RF=1 each append moves it. What C code does inside a call (the CRC,
a writev) is not in it: a count the box's load does not move, not a time. `--top N` lists the
functions that executed the most opcodes per request at the largest partition count. `--version`
9 and up are the flexible requests librdkafka sends (compact lengths, tagged fields): the same
batches, re-encoded.

    python bench/produce_opcodes.py [--partitions 1,6] [--requests 200] [--frame-bytes 65536]
                                    [--replicas 1] [--version 8] [--top 0]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from common.protocol import produce
from common.protocol.frame import RequestHeader, encode_request_header, join_chunks, parse_request_header
from frame_receive import TOPIC, leading_handler, produce_request
from opcode_counter import Counts

WARMUP_REQUESTS = 20  # first appends create each segment's file and index objects


def request_frame(frame_bytes: int, partitions: int, version: int) -> bytes:
    """frame_receive's Produce v8 (its size prefix left off), re-encoded at `version`."""
    frame = produce_request(frame_bytes, partitions)[4:]
    if version == 8:
        return frame
    header, body = parse_request_header(frame)
    request = produce.decode_produce_request(body, header.request_api_version)
    return encode_request_header(RequestHeader(0, version, 1, "bench")) + \
        join_chunks(produce.encode_produce_request(request, version))


def counts_for(partitions: int, requests: int, frame_bytes: int, replicas: int = 1,
               version: int = 8) -> Counts:
    directory = Path(tempfile.mkdtemp(prefix="tidelog-produce-opcodes-"))
    handler, _, logs = leading_handler(directory, topic=TOPIC, partitions=partitions,
                                       replicas=tuple(range(1, replicas + 1)))
    header, body = parse_request_header(memoryview(request_frame(frame_bytes, partitions, version)))
    try:
        def one() -> None:
            answer = handler.start(header, body, "")
            if answer is None or not isinstance(answer, list):  # acks=1: answered at once
                raise RuntimeError(f"produce was not answered at once: {answer!r}")
        for _ in range(WARMUP_REQUESTS):
            one()
        counts = Counts()
        counts.count(one, requests)
        return counts
    finally:
        logs.shutdown()
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=lambda v: tuple(int(x) for x in v.split(",")), default=(1, 6))
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--frame-bytes", type=int, default=65536, help="about the request's size")
    parser.add_argument("--replicas", type=int, default=1, help="replication factor (followers never fetch)")
    parser.add_argument("--version", type=int, default=8, help="Produce version (9+: flexible)")
    parser.add_argument("--top", type=int, default=0, help="list the N functions with most opcodes")
    args = parser.parse_args()
    print(f"{'partitions':>10} {'opcodes/request':>15} {'calls/request':>13}")
    results = []
    for p in args.partitions:
        counts = counts_for(p, args.requests, args.frame_bytes, args.replicas, args.version)
        results.append((p, counts))
        print(f"{p:>10} {counts.opcodes / args.requests:>15,.0f} {counts.calls / args.requests:>13,.0f}",
              flush=True)
    if len(results) > 1:
        (p0, c0), (p1, c1) = results[0], results[-1]
        span = p1 - p0
        print(f"per extra partition: {(c1.opcodes - c0.opcodes) / args.requests / span:,.0f} "
              f"opcodes, {(c1.calls - c0.calls) / args.requests / span:,.0f} calls")
    if args.top:
        p, counts = results[-1]
        print(f"\nper request at {p} partitions, {counts.report(args.requests, top=args.top)}")


if __name__ == "__main__":
    main()
