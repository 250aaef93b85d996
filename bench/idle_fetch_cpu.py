"""Idle broker CPU with many partitions: what the follower fetch rounds cost when nothing moves.

    python bench/idle_fetch_cpu.py [--partitions 10000] [--topics 10] [--seconds 30]

A real cluster on loopback (3 controllers + 3 brokers, `localcluster.launcher`), `--partitions`
RF=3 partitions created through the admin API in `--topics` topics; once every partition
has its leader and full ISR the cluster is left idle, and each broker's CPU is read from
/proc/<pid>/stat over `--seconds`. Issue 17's goal: ≤ 5 % of a core per broker at 10,000
partitions. Nothing is asserted: a measurement, not a test.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Final

from bench_common import broker_gauge, http, process_cpu_s, rss_mib
from common import waiting
from localcluster.launcher import LocalCluster, free_ports
from localcluster.node_process import NodeProcess

HOSTS: Final = tuple(f"127.0.0.{n}" for n in range(1, 7))
BROKERS: Final = (4, 5, 6)
READY_S: Final = 120.0
CREATE_WAIT_S: Final = 900.0
SETTLE_S: Final = 30.0


def fully_replicated(admin_url: str, topics: list[str]) -> bool:
    for topic in topics:
        view = http(f"{admin_url}/v1/topics/{topic}")
        if any(p["leader"] < 0 or len(p["isr"]) != 3 for p in view["partitions"]):
            return False
    return True


def hosted(node: NodeProcess) -> float:
    """The broker's partitions_hosted gauge (it has opened their logs); 0 before it has one."""
    try:
        return broker_gauge(node, "partitions_hosted")
    except KeyError:
        return 0.0


def run(partitions: int, topics: int, seconds: float, windows: int, keep: Path | None) -> None:
    with tempfile.TemporaryDirectory(prefix="idle-fetch-", dir="/tmp/fetchsess") as tmp:
        raft, admin, kafka, metrics = free_ports(HOSTS, 4)
        with LocalCluster.start(keep or Path(tmp), controllers=3, raft_port=raft, admin_port=admin, brokers=3,
                                kafka_port=kafka, metrics_port=metrics, ready_timeout=READY_S) as cluster:
            names = [f"idle-{i}" for i in range(topics)]
            started = time.monotonic()
            per_topic = partitions // topics
            for name in names:
                http(f"{cluster.admin_url}/v1/topics", "POST",
                     {"name": name, "partitions": per_topic, "replication_factor": 3})
            waiting.wait_until("every partition led with a full ISR",
                               lambda: fully_replicated(cluster.admin_url, names), CREATE_WAIT_S, poll_s=2.0,
                               not_yet=(*waiting.NOT_YET_ERRORS, ValueError, KeyError))
            print(f"{per_topic * topics} partitions RF=3 created and fully replicated in "
                  f"{time.monotonic() - started:.1f} s (controller view)", flush=True)
            waiting.wait_until("every broker hosting every partition",
                               lambda: all(hosted(b) >= per_topic * topics for b in cluster.brokers),
                               CREATE_WAIT_S, poll_s=1.0, not_yet=(*waiting.NOT_YET_ERRORS, ValueError))
            print(f"every broker hosts them after {time.monotonic() - started:.1f} s", flush=True)
            time.sleep(SETTLE_S)  # let the creation's catch-up rounds settle
            pids = {node.spec.node_id: node.pid for node in cluster.brokers if node.pid is not None}
            for window in range(1, windows + 1):
                before = {b: process_cpu_s(pid) for b, pid in pids.items()}
                t0 = time.monotonic()
                time.sleep(seconds)
                elapsed = time.monotonic() - t0
                for broker, pid in sorted(pids.items()):
                    used = process_cpu_s(pid) - before[broker]
                    print(f"window {window}: broker {broker}: {100 * used / elapsed:.1f} % of a core idle over "
                          f"{elapsed:.0f} s, RSS {rss_mib(pid):.0f} MiB", flush=True)
            print(f"load average: {os.getloadavg()}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--windows", type=int, default=1, help="consecutive measurement windows")
    parser.add_argument("--keep", type=Path, help="an empty directory for the cluster, kept afterwards (logs)")
    args = parser.parse_args()
    run(args.partitions, args.topics, args.seconds, args.windows, args.keep)


if __name__ == "__main__":
    main()
