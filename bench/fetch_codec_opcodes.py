"""The Fetch codec's bytecodes per message, by shape: what each entry the broker and the
follower call executes for one partition of one topic (the usual exchange) and for many.

    python bench/fetch_codec_opcodes.py [--partitions 1,100] [--topics 1,10]

Rows: the broker's request decode (v11, a follower's; v16, a librdkafka consumer's), its answer
encode (v11 records in bytes; v16 a segment slice, as the broker sends them), the follower's
answer decode (v11) and its request encode (`FetchRequests.encode`, v11). Each message names
`--topics` topics of `--partitions` partitions each. The counts are sys.settrace opcode events
(bench/opcode_counter.py): the box's load does not move them, and what C code does inside a
call (a struct pack, a dict lookup) is not in them. Run it at two commits to compare them
(run the worktree's copy of this file: it puts its own tree first on sys.path); in a tree
before `decode_request_in_range` the broker's rows are counted through the checked entries,
their check_version included (~38 opcodes).
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the project's packages are importable
    sys.path.insert(0, str(ROOT))

from bench.opcode_counter import Counts  # noqa: E402
from common.protocol import fetch  # noqa: E402
from common.protocol.fetch_requests import FetchRequests  # noqa: E402
from common.protocol.frame import join_chunks  # noqa: E402

COUNTED = 50  # calls counted per row: every call of a row executes the same bytecodes


@dataclass(frozen=True)
class Slice:
    """A records placeholder, as a segment FileSlice is one."""

    length: int


def _topic_id(t: int) -> uuid.UUID:
    return uuid.UUID(int=0x1234_5678_9ABC_DEF0 + t)


def rows(n_topics: int, n_partitions: int) -> list[tuple[str, Callable[[], Any]]]:
    """(label, the call counted) for messages of `n_topics` x `n_partitions`."""
    P, R = fetch.FetchPartition, fetch.FetchPartitionResponse
    parts = range(n_partitions)
    req11 = fetch.FetchRequest(5, 500, 1, 10 << 20, 0, tuple(fetch.FetchTopic(
        f"canary-{t}", tuple(P(i, 41, 1 << 20, 0, 3) for i in parts)) for t in range(n_topics)), 77, 12, (), "")
    req16 = fetch.FetchRequest(-1, 500, 1, 50 << 20, 1, tuple(fetch.FetchTopic(
        "", tuple(P(i, 1234, 1 << 20, -1, 5, 4) for i in parts), _topic_id(t)) for t in range(n_topics)),
        0, -1, (), "", None, -1)
    ans11 = fetch.FetchResponse(0, tuple(fetch.FetchTopicResponse(
        f"canary-{t}", tuple(R(i, 0, 41, b"\x00" * 100, 41, 0, None, -1) for i in parts)) for t in range(n_topics)),
        0, 77)
    ans16 = fetch.FetchResponse(0, tuple(fetch.FetchTopicResponse(
        "", tuple(R(i, 0, 41, Slice(800_000), 41, 0, (), -1) for i in parts), _topic_id(t)) for t in range(n_topics)),
        0, 0)
    decode = getattr(fetch, "decode_request_in_range", fetch.decode_fetch_request)
    encode = getattr(fetch, "encode_response_in_range", fetch.encode_fetch_response)
    body11 = memoryview(join_chunks(fetch.encode_fetch_request(req11, 11)))
    body16 = memoryview(join_chunks(fetch.encode_fetch_request(req16, 16)))
    answer11 = memoryview(join_chunks(fetch.encode_fetch_response(ans11, 11)))
    requests = FetchRequests(11, replica_id=5, max_wait_ms=500, min_bytes=1, max_bytes=10 << 20)
    to_send = [((t.topic, p.partition), p) for t in req11.topics for p in t.partitions]
    return [
        ("broker: request decode v11", lambda: decode(body11, 11)),
        ("broker: request decode v16", lambda: decode(body16, 16)),
        ("broker: answer encode v11", lambda: encode(ans11, 11)),
        ("broker: answer encode v16", lambda: encode(ans16, 16)),
        ("follower: answer decode v11", lambda: fetch.decode_fetch_response(answer11, 11)),
        ("follower: FetchRequests.encode v11", lambda: requests.encode(77, 12, to_send)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", default="1,100", help="partitions per topic, comma-separated")
    parser.add_argument("--topics", default="1", help="topics per message, comma-separated")
    args = parser.parse_args()
    shapes = [(int(t), int(p)) for t in args.topics.split(",") for p in args.partitions.split(",")]
    print(f"{'row':<38}" + "".join(f"{f'{t}x{p}':>14}" for t, p in shapes) + "   (topics x partitions: opcodes)")
    table = {shape: rows(*shape) for shape in shapes}
    for i, (label, _) in enumerate(table[shapes[0]]):
        cells = []
        for shape in shapes:
            call = table[shape][i][1]
            call()  # caches warmed (topic ids, names) as in a fetcher's later rounds
            counts = Counts()
            counts.count(call, COUNTED)
            cells.append(f"{counts.opcodes / COUNTED:>14,.0f}")
        print(f"{label:<38}" + "".join(cells))


if __name__ == "__main__":
    main()
