"""The leader's cost per Produce request on the acks=all RF=3 path, driven by the C producer.

One cluster as bench/replication.py runs it (controller 1, brokers 2-4, file-backed, no fsync);
one RF=3 topic (min.insync.replicas=2) of `--partitions` partitions; bench/loadgen.c produces
`--records` x `--value-bytes` with acks=all and linger.ms=5 (as bench/produce_consume.py's bulk
phases), `--rounds` times. Per round: records/s, MB/s, each broker's CPU (utime+stime from /proc,
its role L/F), the leader's CPU per GB and per Produce request it answered (from its /metrics;
'fet/pr' is the followers' Fetch requests it answered per Produce request),
and the load average beside it, since the box is shared. The leader's Python is what the path
costs: leader append, the followers' fetches that move the high watermark and complete the
waiting Produce requests, the answers.

`--rate R` paces the producer at R records/s with linger.ms=0 instead: small requests (librdkafka
leaves Nagle on, so a few dozen records each at 5,000/s), the per-request cost, and the producer's
p50/p99 from produce() to delivery report.
`--py-spy FILE` records the leader with py-spy (raw, collapsed stacks; only samples holding the
GIL, so Python's own work and not the waits in system calls) over the last round.

    flock /tmp/tasks9/heavy.lock python bench/produce_rf3.py [--records 2000000] [--rounds 3] [--rate 0] [--py-spy leader.txt]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

import c_client
from produce_consume import GB, fmt, process_cpu_s
from replication import Bench, running

PY_SPY_RATE: Final = 200  # samples/s: enough for a few seconds of produce, cheap for the leader
PY_SPY_STOP_S: Final = 30.0  # py-spy writes its file once interrupted
TOPIC: Final = "produce-rf3"


def leader_of(bench: Bench, topic: str) -> int:
    leaders = {p["leader"] for p in bench.partitions(topic)}
    if len(leaders) != 1:
        raise RuntimeError(f"{topic}: partitions led by {sorted(leaders)}; this bench measures one leader")
    return leaders.pop()


def produce_round(bench: Bench, binary: Path, args: argparse.Namespace, label: str,
                  profile: Path | None) -> None:
    leader = leader_of(bench, TOPIC)
    pids = {b: bench.pid(b) for b in bench.broker_ids}
    spy = None
    if profile is not None:
        spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--format", "raw", "--gil",
                                "-r", str(PY_SPY_RATE), "-o", str(profile), "-p", str(pids[leader])],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # attached before the phase starts
    load = os.getloadavg()[0]
    requests0 = bench.request_counts()
    cpu0 = {b: process_cpu_s(pid) for b, pid in pids.items()}
    try:
        result = c_client.produce(binary, bench.bootstrap, TOPIC, records=args.records,
                                  value_bytes=args.value_bytes, partitions=args.partitions, acks="all",
                                  linger_ms=0 if args.rate else 5, rate=args.rate,
                                  warmup=min(args.rate, args.records // 5) if args.rate else 0)
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(PY_SPY_STOP_S)
    cpu = {b: process_cpu_s(pid) - cpu0[b] for b, pid in pids.items()}
    requests1 = bench.request_counts()[leader]
    produces, fetches = (requests1.get(api, 0.0) - requests0[leader].get(api, 0.0) for api in ("PRODUCE", "FETCH"))
    gb = result.payload_bytes / GB
    brokers = " ".join(f"{cpu[b]:6.2f} {'L' if b == leader else 'F'}" for b in bench.broker_ids)
    print(f"{label:<6} {result.records / result.seconds:>10,.0f} {result.payload_bytes / result.seconds / 1e6:>7.1f} "
          f"{brokers} {cpu[leader] / gb:>8.2f} {produces:>8,.0f} {fetches / produces if produces else float('nan'):>7.1f} "
          f"{cpu[leader] / produces * 1e6 if produces else float('nan'):>7,.0f} "
          f"{result.client_cpu_s:>7.2f} {fmt(result.p50_ms, '.2f'):>6} {fmt(result.p99_ms, '.2f'):>6} "
          f"{load:>5.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--rate", type=int, default=0, help="records/s with linger.ms=0 (0: as fast as it goes)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--py-spy", type=Path, default=None, help="record the leader over the last round")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    args = parser.parse_args()
    binary = c_client.required("bench/produce_rf3.py")
    root = Path(tempfile.mkdtemp(prefix="tidelog-bench-rf3-", dir=args.dir))
    try:
        with running(root, {}) as bench:
            bench.create(TOPIC, args.partitions, 3)
            c_client.produce(binary, bench.bootstrap, TOPIC, records=10_000, value_bytes=args.value_bytes,
                             partitions=args.partitions, acks="all", linger_ms=5)  # connections, warm caches
            pace = f"{args.rate:,} records/s, linger.ms=0" if args.rate else "linger.ms=5"
            print(f"{args.records:,} x {args.value_bytes} B, acks=all, RF=3, {args.partitions} partition(s), {pace}; "
                  f"C loadgen on librdkafka {c_client.librdkafka_version(binary).split()[0]}; {os.cpu_count()} CPUs")
            print(f"{'round':<6} {'records/s':>10} {'MB/s':>7} "
                  + " ".join(f"{f'brk{b}':>8}" for b in bench.broker_ids)
                  + f" {'L s/GB':>8} {'produces':>8} {'fet/pr':>7} {'L us/req':>7} {'cli cpu':>7} {'p50 ms':>6} {'p99 ms':>6}"
                  + f" {'load':>5}")
            for r in range(args.rounds):
                produce_round(bench, binary, args, str(r + 1), args.py_spy if r == args.rounds - 1 else None)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
