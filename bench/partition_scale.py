"""10,000 partitions RF=3 on 3 brokers: create, idle, controlled shutdown, restart, fencing — one table.

    python bench/partition_scale.py [--partitions 10000] [--topics 100] [--idle-s 30] [--keep DIR] [--json F]
                                    [--fencing-partitions N] [--fencing-only]

A real cluster on loopback (3 controllers, brokers 4..6, Kafka's default heartbeat settings).
Phases, in order, each printed as it ends and all together in one table at the end:

1. create one topic of `--partitions` partitions RF=3 through the admin API; "created" is the
   moment every broker's `partitions_led` gauge adds up to the partition count (every
   partition has a leader that serves it on its broker);
2. on a second, fresh cluster: the same count as `--topics` topics of partitions/topics each,
   created concurrently; the phases below run on that cluster;
3. idle broker CPU over `--idle-s` seconds (utime+stime from /proc, % of one core), RSS;
4. SIGTERM of broker 4 (leader of about a third of the partitions) → process exit;
5. restart of broker 4 → broker 4 back in every ISR (admin API describe of every topic);
6. the longest controller stall of each cluster's run (its controllers' "was stalled for" lines);
7. fencing (issue 36), on a third cluster of controllers only: `--fencing-partitions` (default:
   `--partitions`) partitions RF=3 all led by broker 4, whose heartbeats stop while brokers 5 and 6
   go on; the brokers are the RPC doubles of `tidelog.testing.fencing_scale` (real brokers would
   spend minutes creating the logs). Figures: session expiry → fenced, → out of every ISR, the
   longest "Controller N was stalled for X ms" any controller logged meanwhile (the stall probe
   logs 250 ms and more: "< 250" means none), the slowest heartbeat of a live broker, and
   whether a live broker was fenced. `--fencing-only` runs just this phase.

Nothing is asserted: a measurement, not a test (issue 17's goals: create ≤ 5 s, shutdown
≤ 5 s, restart-to-ISR ≤ 30 s, idle CPU ≤ 5 %).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import signal
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Final

from bench_common import broker_gauge, http, process_cpu_s, rss_mib, wait_until
from localcluster.launcher import LocalCluster, free_ports
from localcluster.node_process import NodeProcess
from tidelog.testing.fencing_scale import STALL, FencingScale

HOSTS: Final = tuple(f"127.0.0.{n}" for n in range(1, 7))
UNDER_TEST: Final = 4
READY_S: Final = 120.0
WAIT_S: Final = 300.0


def led_total(cluster: LocalCluster) -> int:
    return int(sum(broker_gauge(b, "partitions_led") for b in cluster.brokers if b.running()))


def create(cluster: LocalCluster, topics: dict[str, int]) -> float:
    """Create `topics` (name -> partitions, RF=3) concurrently; seconds until all are led."""
    before = led_total(cluster)
    target = before + sum(topics.values())
    started = time.monotonic()
    def post(item: tuple[str, int]) -> None:
        try:
            http(f"{cluster.admin_url}/v1/topics", "POST",
                 {"name": item[0], "partitions": item[1], "replication_factor": 3})
        except urllib.error.HTTPError as exc:
            if exc.code != 504:  # the forwarding controller gave up waiting: the create goes on
                raise
            print(f"  {item[0]}: 504 from the forwarding controller; waiting for the partitions", flush=True)

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(post, topics.items()))
    answered = time.monotonic() - started
    wait_until(f"{target} partitions led", lambda: led_total(cluster) >= target, poll=0.02)
    elapsed = time.monotonic() - started
    print(f"  created {len(topics)} topic(s), {sum(topics.values())} partitions: admin API answered in "
          f"{answered:.2f} s, all led in {elapsed:.2f} s", flush=True)
    return elapsed


def in_every_isr(cluster: LocalCluster, names: list[str], broker: int) -> bool:
    for name in names:
        view = http(f"{cluster.admin_url}/v1/topics/{name}")
        if any(broker in p["replicas"] and broker not in p["isr"] for p in view["partitions"]):
            return False
    return True


def idle_cpu(cluster: LocalCluster, seconds: float) -> dict[int, float]:
    pids = {b.spec.node_id: b.pid for b in cluster.brokers if b.pid is not None}
    before = {n: process_cpu_s(p) for n, p in pids.items()}
    started = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - started
    return {n: 100 * (process_cpu_s(p) - before[n]) / wall for n, p in pids.items()}


def start_cluster(root: Path) -> LocalCluster:
    root.mkdir(parents=True, exist_ok=True)
    raft, admin, kafka, metrics = free_ports(HOSTS, 4)
    cluster = LocalCluster.start(root, controllers=3, raft_port=raft, admin_port=admin, brokers=3,
                                 kafka_port=kafka, metrics_port=metrics, ready_timeout=READY_S)
    try:
        wait_until("3 brokers unfenced", lambda: sum(
            1 for b in http(f"{cluster.admin_url}/v1/brokers") if b["state"] == "UNFENCED") == 3)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def longest_stall(cluster: LocalCluster) -> str:
    """The longest "Controller N was stalled for X ms" in the controllers' logs ("< 250": none)."""
    stalls = [int(m.group(2)) for node in cluster.controllers
              for m in STALL.finditer(node.spec.log_path.read_text(errors="replace"))]
    return f"{max(stalls)}" if stalls else "< 250"


def fencing(root: Path, partitions: int) -> list[tuple[str, str]]:
    """Phase 7: a broker leading every one of `partitions` partitions stops heartbeating."""
    print(f"fencing a broker that leads {partitions} partitions (controllers and broker doubles):", flush=True)
    with FencingScale.start(root, partitions=partitions) as scale:
        print(f"  created in {scale.create_s:.1f} s", flush=True)
        figures = scale.fence(4)
    rows = [
        (f"fence broker leading {partitions}: silent -> fenced (s)", f"{figures.detect_s:.1f}"),
        (f"fence broker leading {partitions}: silent -> in no ISR (s)", f"{figures.fence_s:.1f}"),
        (f"fence broker leading {partitions}: longest controller stall (ms)",
         f"{figures.longest_stall_ms}" if figures.longest_stall_ms else "< 250"),
        (f"fence broker leading {partitions}: slowest live heartbeat (ms)", f"{figures.live_heartbeat_max_ms:.0f}"),
        (f"fence broker leading {partitions}: live brokers fenced", f"{len(figures.live_brokers_fenced)}"),
    ]
    for name, value in rows:
        print(f"  {name}: {value}", flush=True)
    for line in figures.stalls + figures.slow_decisions:
        print(f"  controller log: {line}", flush=True)
    return rows


def run(partitions: int, topics: int, idle_s: float, keep: Path | None,
        fencing_partitions: int | None = None, fencing_only: bool = False) -> list[tuple[str, str]]:
    """Each shape on a fresh cluster: no phase pays for what the one before left behind."""
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-scale-", dir=keep and str(keep)) as tmp:
        if fencing_only:
            return fencing(Path(tmp) / "fencing", fencing_partitions or partitions)
        with start_cluster(Path(tmp) / "one-topic") as cluster:
            print(f"one topic of {partitions} partitions RF=3:", flush=True)
            rows.append((f"create 1 x {partitions} RF=3 (s)", f"{create(cluster, {'big': partitions}):.2f}"))
            rows.append(("one topic: longest controller stall over the run (ms)", longest_stall(cluster)))
        per = partitions // topics
        names = [f"t{i:04d}" for i in range(topics)]
        with start_cluster(Path(tmp) / "many-topics") as cluster:
            print(f"{topics} topics of {per} partitions RF=3:", flush=True)
            rows.append((f"create {topics} x {per} RF=3 (s)", f"{create(cluster, dict.fromkeys(names, per)):.2f}"))
            led = broker_gauge(cluster.node(UNDER_TEST), "partitions_led")
            rows.append((f"broker {UNDER_TEST} leads", f"{led:.0f}"))
            for node_id, share in sorted(idle_cpu(cluster, idle_s).items()):
                rows.append((f"idle CPU broker {node_id} over {idle_s:.0f} s (% core)", f"{share:.1f}"))
            for b in cluster.brokers:
                assert b.pid is not None
                rows.append((f"RSS broker {b.spec.node_id} (MiB)", f"{rss_mib(b.pid):.0f}"))
            node = cluster.node(UNDER_TEST)
            started = time.monotonic()
            node.send(signal.SIGTERM)
            wait_until(f"broker {UNDER_TEST} to exit", lambda: not node.running(), poll=0.005)
            rows.append((f"controlled shutdown broker {UNDER_TEST}: SIGTERM -> exit (s)",
                         f"{time.monotonic() - started:.2f}"))
            print(f"  {rows[-1][0]}: {rows[-1][1]}", flush=True)
            out = sum(1 for name in names for p in http(f"{cluster.admin_url}/v1/topics/{name}")["partitions"]
                      if UNDER_TEST in p["replicas"] and UNDER_TEST not in p["isr"])
            rows.append((f"partitions with broker {UNDER_TEST} out of the ISR at exit", f"{out}"))
            new = NodeProcess.spawn(node.spec)
            cluster.nodes[cluster.nodes.index(node)] = new
            cluster.write_cluster_file()
            started = time.monotonic()
            wait_until(f"broker {UNDER_TEST} in every ISR", lambda: in_every_isr(cluster, names, UNDER_TEST),
                       poll=0.5)
            rows.append((f"restart broker {UNDER_TEST} -> in every ISR (s)", f"{time.monotonic() - started:.2f}"))
            print(f"  {rows[-1][0]}: {rows[-1][1]}", flush=True)
            assert new.pid is not None
            rows.append((f"RSS broker {UNDER_TEST} after restart (MiB)", f"{rss_mib(new.pid):.0f}"))
            rows.append((f"{topics} topics: longest controller stall over the run (ms)", longest_stall(cluster)))
        rows.extend(fencing(Path(tmp) / "fencing", fencing_partitions or partitions))
    return rows


GOALS: Final = (("create 1 x", "<= 5 s"), ("idle CPU", "<= 5 %"), ("controlled shutdown", "<= 5 s"),
                 ("-> in every ISR", "<= 30 s"), ("longest controller stall", "< 1000 ms"),
                 ("live brokers fenced", "0"))


def goal_of(name: str) -> str:
    """Issue 17's goal for a figure, where it sets one."""
    return next((goal for key, goal in GOALS if key in name), "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--topics", type=int, default=100, help="the second shape: this many topics")
    parser.add_argument("--idle-s", type=float, default=30.0)
    parser.add_argument("--keep", type=Path, help="a directory for the cluster's temp dir (logs survive a crash)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here (bench/all.py)")
    parser.add_argument("--fencing-partitions", type=int, default=None,
                        help="partitions the fenced broker leads in the fencing phase (default: --partitions)")
    parser.add_argument("--fencing-only", action="store_true", help="run only the fencing phase")
    args = parser.parse_args()
    rows = run(args.partitions, args.topics, args.idle_s, args.keep, args.fencing_partitions, args.fencing_only)
    if args.json is not None:
        args.json.write_text(json.dumps({"figures": [[name, value, goal_of(name)] for name, value in rows]}))
    width = max(len(name) for name, _ in rows)
    print(f"\n{'measure'.ljust(width)}  value")
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")


if __name__ == "__main__":
    main()
