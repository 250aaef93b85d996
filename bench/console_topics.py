"""The web console's topic list at 10,000 partitions (issue 32): p50/p99 of its API, goal <= 300 ms.

    python bench/console_topics.py [--topics 100] [--partitions 100] [--requests 200] [--cold 30] [--json F]

A fresh cluster of 3 real controllers (`LocalCluster`) and the broker doubles of
`tidelog.testing.fencing_scale` (brokers 4, 5, 6 registered and heartbeating over the real broker
RPCs: the topic list reads only the controller's image, and real brokers would spend the run
creating 10,000 logs). `--topics` topics of `--partitions` partitions each, RF 3, then, against a
follower controller (the usual case: the console is opened on any of them):
1. warm: GET /console/api/topics (page 1 of 50 topics, the cluster's counts up front), the same
   image each time, `--requests` times;
2. search: GET /console/api/topics?q=0042 (the matching topics), `--requests` times;
3. cold: each request after a metadata change (a topic config altered: a new image), so the rows
   of every topic and the counts of all 10,000 partitions are computed again, `--cold` times;
4. overview: GET /console/api/overview (brokers, partitions led, the history strip), `--requests`.
Timed end to end by an HTTP client in this process (urllib, one connection per request, as a
browser's fetch without keep-alive would be at worst). Nothing is asserted: a measurement. The box
is shared; the load average is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from doubled_quorum import WRITE_TIMEOUT_S, admin_urls, doubled_quorum, percentile, wait_for  # noqa: E402
from tidelog.admin_client import AdminClient  # noqa: E402

REQUEST_TIMEOUT_S: Final = 30.0
GOAL_MS: Final = 300.0


def timed_get(url: str) -> tuple[float, Any]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=REQUEST_TIMEOUT_S) as answer:
        body = json.loads(answer.read())
    return (time.perf_counter() - started) * 1000, body


def series(url: str, count: int, before: Callable[[int], None] | None = None) -> list[float]:
    out = []
    for i in range(count):
        if before is not None:
            before(i)
        ms, _ = timed_get(url)
        out.append(ms)
    return out


def run(root: Path, topics: int, partitions: int, requests: int, cold: int) -> dict[str, Any]:
    with doubled_quorum(root) as cluster:
        urls = admin_urls(cluster)
        admin = AdminClient(urls, timeout=WRITE_TIMEOUT_S)
        started = time.monotonic()
        for t in range(topics):
            admin.create_topic(f"topic-{t:04d}", partitions=partitions, replication_factor=3, configs={})
        print(f"{topics} topics x {partitions} partitions created in {time.monotonic() - started:.1f} s", flush=True)
        active = admin.cluster()["active_controller"]
        follower = next(u for n, u in zip(cluster.controllers, urls) if n.spec.node_id != active)
        # the follower has applied every creation once its list counts them all
        wait_for("the follower's image", lambda: timed_get(f"{follower}/console/api/topics")[1]["totals"][
            "partitions"] == topics * partitions)
        _, page = timed_get(f"{follower}/console/api/topics")

        def change(i: int) -> None:
            admin.alter_configs("topic-0000", {"retention.ms": str(3_600_000 + i)})
            offset = admin.cluster()["metadata_offset"]
            wait_for("the change applied", lambda: AdminClient([follower]).cluster()["metadata_offset"] >= offset)

        result = {
            "topics": topics, "partitions": topics * partitions, "served_by": "follower",
            "warm_ms": series(f"{follower}/console/api/topics", requests),
            "search_ms": series(f"{follower}/console/api/topics?q=0042", requests),
            "cold_ms": series(f"{follower}/console/api/topics", cold, change),
            "overview_ms": series(f"{follower}/console/api/overview", requests),
            "totals": page["totals"],
        }
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=100, help="per topic")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--cold", type=int, default=30)
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--keep", type=Path, default=None, help="run the cluster in this directory and keep it")
    args = parser.parse_args()
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores", flush=True)
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        result = run(args.keep, args.topics, args.partitions, args.requests, args.cold)
    else:
        with tempfile.TemporaryDirectory(prefix="tidelog-bench-console-") as tmp:
            result = run(Path(tmp), args.topics, args.partitions, args.requests, args.cold)
    print(f"\n{result['partitions']:,} partitions in {result['topics']} topics, served by a follower controller")
    print(f"{'request':48} {'p50 ms':>8} {'p99 ms':>8}  goal")
    for key, what in (("warm_ms", "GET /console/api/topics (same image)"),
                      ("search_ms", "GET /console/api/topics?q=0042"),
                      ("cold_ms", "GET /console/api/topics after a metadata change"),
                      ("overview_ms", "GET /console/api/overview")):
        values = result[key]
        goal = f"<= {GOAL_MS:.0f} ms" if key != "overview_ms" else ""
        print(f"{what:48} {percentile(values, 0.5):8.1f} {percentile(values, 0.99):8.1f}  {goal}")
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
