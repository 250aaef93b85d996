"""What durable controller state costs (issue 28): the metadata quorum with fsync on and off.

    python bench/quorum_fsync.py [--writes 100] [--partitions 10000] [--failovers 2] [--json F]
                                   [--keep DIR] [--only on|off]

For each of `controller.quorum.fsync=true` and `=false`, a fresh cluster of 3 real
controllers (`LocalCluster`) and the broker doubles of `tidelog.testing.fencing_scale`
(brokers 4, 5, 6 registered and heartbeating over the real broker RPCs: a topic needs
brokers to place its replicas, and real brokers would spend the run creating 10,000 logs):
1. metadata write latency: `--writes` one-partition topic creations through the admin API,
   one at a time (each is one controller decision committed to the quorum), p50/p99;
2. one topic of `--partitions` partitions RF=3: seconds until the admin API answers (the
   controller answers once the records are committed, as Kafka's CreateTopics does);
3. controller failover, `--failovers` times: SIGKILL of the active controller → the first
   metadata write (a topic creation) a surviving controller accepts; the killed one is
   restarted (same data dir) and waited for before the next round. Issue 28's goal: ≤ 1.5 s.
Nothing is asserted: a measurement. The box is shared; the load average is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from doubled_quorum import WRITE_TIMEOUT_S, admin_urls, doubled_quorum, percentile, wait_for
from localcluster.launcher import LocalCluster
from localcluster.node_process import NodeProcess
from tidelog.admin_client import AdminClient
from tidelog.cli_common import ClusterError

FAILOVER_TRY_S: Final = 0.5  # one write attempt during a failover


def write_latencies(admin: AdminClient, writes: int) -> list[float]:
    out = []
    for i in range(writes):
        started = time.perf_counter()
        admin.create_topic(f"w{i:05d}", partitions=1, replication_factor=3, configs={})
        out.append((time.perf_counter() - started) * 1000)
    return out


def failover(cluster: LocalCluster, round_no: int) -> float:
    """SIGKILL the active controller; seconds until a survivor accepts a write. Restarts it."""
    admin = AdminClient(admin_urls(cluster), timeout=WRITE_TIMEOUT_S)
    active = wait_for("an active controller", lambda: admin.cluster().get("active_controller"))
    node = next(n for n in cluster.controllers if n.spec.node_id == active)
    survivors = AdminClient(admin_urls(cluster, skip=active), timeout=FAILOVER_TRY_S)
    killed_at = time.monotonic()
    node.kill()

    def written() -> bool:
        try:
            survivors.create_topic(f"failover{round_no}", partitions=1, replication_factor=3, configs={})
        except ClusterError as exc:
            # an attempt that timed out on our side may have committed all the same
            if exc.error != "TOPIC_ALREADY_EXISTS":
                raise
        return True

    wait_for("a write after the failover", written)
    seconds = time.monotonic() - killed_at
    cluster.nodes[cluster.nodes.index(node)] = NodeProcess.spawn(node.spec)
    back = AdminClient([f"http://{node.spec.admin_address}"], timeout=FAILOVER_TRY_S)
    wait_for(f"controller {active} back", lambda: back.cluster().get("active_controller") is not None)
    return seconds


def run_mode(root: Path, fsync: bool, writes: int, partitions: int, failovers: int) -> dict[str, Any]:
    with doubled_quorum(root, {"controller.quorum.fsync": "true" if fsync else "false"}) as cluster:
        admin = AdminClient(admin_urls(cluster), timeout=WRITE_TIMEOUT_S)
        latencies = write_latencies(admin, writes)
        started = time.monotonic()
        admin.create_topic("big", partitions=partitions, replication_factor=3, configs={})
        create_s = time.monotonic() - started
        failover_s = [failover(cluster, i) for i in range(failovers)]
    result = {"fsync": fsync, "write_p50_ms": statistics.median(latencies),
              "write_p99_ms": percentile(latencies, 0.99), "create_s": create_s, "partitions": partitions,
              "failover_s": failover_s}
    print(f"fsync={str(fsync).lower()}: write p50 {result['write_p50_ms']:.1f} ms, p99 "
          f"{result['write_p99_ms']:.1f} ms; {partitions}-partition topic {create_s:.2f} s; failover "
          + ", ".join(f"{s:.2f}" for s in failover_s) + " s", flush=True)
    return result


def rows(results: list[dict[str, Any]]) -> list[list[str]]:
    out = []
    for r in results:
        mode = "fsync on" if r["fsync"] else "fsync off"
        out.append([f"metadata write p50 / p99 ms ({mode})", f"{r['write_p50_ms']:.1f} / {r['write_p99_ms']:.1f}", ""])
        out.append([f"{r['partitions']}-partition topic creation s ({mode})", f"{r['create_s']:.2f}", ""])
        if r["failover_s"]:
            out.append([f"controller failover kill -> write s, median of {len(r['failover_s'])} ({mode})",
                        f"{statistics.median(r['failover_s']):.2f} (max {max(r['failover_s']):.2f})", "<= 1.5 s"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--failovers", type=int, default=2)
    parser.add_argument("--json", type=Path, help="write the figures here (bench/all.py reads them)")
    parser.add_argument("--keep", type=Path, help="run in this directory and keep it (the nodes' logs)")
    parser.add_argument("--only", choices=("on", "off"), help="run one mode only")
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    results = []
    modes = [mode for mode in (True, False) if args.only is None or args.only == ("on" if mode else "off")]
    with tempfile.TemporaryDirectory(prefix="bench-quorum-") as scratch:
        root = args.keep or Path(scratch)
        for fsync in modes:
            results.append(run_mode(root / ("on" if fsync else "off"), fsync, args.writes,
                                    args.partitions, args.failovers))
    table = rows(results)
    width = max(len(name) for name, _, _ in table)
    print()
    for name, value, goal in table:
        print(f"{name:<{width}}  {value:>18}  {goal}")
    if args.json:
        args.json.write_text(json.dumps({"results": results, "figures": table}))


if __name__ == "__main__":
    main()
