"""The controllers' side of a controlled shutdown, without real brokers: want_shutdown -> should_shut_down.

    python bench/shutdown_controller_side.py [--partitions 10000] [--runs 2]
    PYTHONPATH=<a git archive of an earlier commit> python <that archive>/bench/shutdown_controller_side.py

Issue 35 goal 1 (a broker leading a third of 100,000 partitions shut down in <= 10 s) has a
controller half: moving the leaderships in bounded decisions and waiting for every active
broker to report them replayed. `bench/partition_scale.py --phases shutdown` measures the whole
path with real brokers, whose role changes dominate on a loaded machine and vary from run to
run; this isolates the controllers. A real quorum of 3 controllers and the broker doubles of
`tidelog.testing.fencing_scale` (real broker RPCs; a double reports the committed tip as
replayed, so every active broker "replays" at once); broker 4 leads every one of
`--partitions` partitions (RF=3) and its heartbeats start asking for a controlled shutdown.

Per run (a fresh cluster each): want_shutdown -> the heartbeat reply that says should_shut_down
(every leadership moved and reported replayed), -> in no ISR (the ISR-seat batches after it),
the CPU each controller used over that, its longest stall, the slowest heartbeat of a live
double. Each figure beside the load average (the machine is shared): compare runs at similar
load, and the active controller's CPU rather than wall time. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from bench_common import process_cpu_s
from tidelog.testing.fencing_scale import FencingScale


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def logged_at(line: str) -> float:
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def decisions(text: str) -> str:
    """From the active controller's log: the controlled shutdown's first decision (its "goes from
    UNFENCED to CONTROLLED_SHUTDOWN" line, logged as it is computed) to the commit of its last
    batch (the last commit line before "leads no partition"; a transaction's or a plain one's)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if "Broker 4 goes from UNFENCED to CONTROLLED_SHUTDOWN" in line), None)
    end = next((i for i, line in enumerate(lines) if "Broker 4 leads no partition" in line), None)
    if start is None or end is None:
        return "not logged"
    commits = [line for line in lines[start:end] if "Committed " in line]
    if not commits:
        return "not logged"
    return f"{logged_at(commits[-1]) - logged_at(lines[start]):.2f} in {len(commits)} commit(s)"


def one_run(partitions: int) -> None:
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-shutdown-ctl-") as tmp:
        with FencingScale.start(Path(tmp), partitions=partitions) as scale:
            print(f"  created {partitions} partitions led by broker 4 in {scale.create_s:.1f} s ({load()})", flush=True)
            time.sleep(2.0)  # the create's last replays settle
            active = scale.admin.cluster()["active_controller"]
            log_path = next(n.spec.log_path for n in scale.cluster.controllers if n.spec.node_id == active)
            mark = log_path.stat().st_size
            before = {n.spec.node_id: process_cpu_s(n.pid) for n in scale.cluster.controllers if n.pid}
            started = time.monotonic()
            figures = scale.shut_down(4)
            took = time.monotonic() - started
            cpu = {n.spec.node_id: process_cpu_s(n.pid) - before[n.spec.node_id]
                   for n in scale.cluster.controllers if n.pid and n.spec.node_id in before}
            moves = decisions(log_path.read_bytes()[mark:].decode(errors="replace"))
    print(f"  want_shutdown -> should_shut_down (s): {figures.detect_s:.2f} ({load()})", flush=True)
    print(f"  active controller: CONTROLLED_SHUTDOWN decided -> its last batch committed (s): {moves} "
          f"({load()})", flush=True)
    print(f"  want_shutdown -> in no ISR (s): {figures.fence_s:.2f} ({load()})", flush=True)
    for node_id, seconds in sorted(cpu.items()):
        role = " (active)" if node_id == active else ""
        print(f"  CPU of controller {node_id}{role} over the {took:.1f} s (s): {seconds:.2f}", flush=True)
    print(f"  longest controller stall (ms): {figures.longest_stall_ms or '< 250'}; slowest live heartbeat "
          f"(ms): {figures.live_heartbeat_max_ms:.0f}; live brokers fenced: {len(figures.live_brokers_fenced)}",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    print(f"controlled shutdown of broker 4 leading {args.partitions} partitions, controllers and broker doubles "
          f"({sys.argv[0]}):", flush=True)
    for run in range(1, args.runs + 1):
        print(f"run {run}:", flush=True)
        one_run(args.partitions)


if __name__ == "__main__":
    main()
