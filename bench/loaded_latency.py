"""Latency under load (issue 35, goal 2): a canary producer's tail while other traffic runs, and where it comes from.

One cluster as bench/replication.py runs it (controller 1, brokers 2-4 on loopback). A canary
producer (the C load generator: idempotent, acks=all, linger.ms=0) writes `--canary-rate`
records/s into a one-partition RF=3 topic (min.insync.replicas=2), twice for `--seconds`:

1. alone: the baseline, in the same run;
2. loaded: while a second C producer writes `--load-mb-s` MB/s (acks=all, linger.ms=5,
   `--load-value-bytes` values) into a `--load-partitions`-partition RF=3 topic on the same
   brokers, and a consumer group (a C consumer, subscribed) reads it.

Each canary record's latency is produce() -> delivery report; the first fifth is left out as
warm-up. Goal: loaded p99 <= 10 ms and p99.9 <= 25 ms.

Where the tail comes from: around each canary run the bench reads every broker's /metrics and
prints what changed: event-loop stalls (`tidelog_broker_event_loop_stall_ms`, how late a 10 ms
probe timer fired: a request arriving meanwhile waits as long), collections by generation
(`tidelog_broker_gc_pause_ms`), and each broker's CPU use. A canary p99.9 of X ms with stalls
of X ms or more in the same window points at what held the loop; with none it points at the
wire, the follower fetch schedule or the client. A stall is also a process that waited for a
core: with the brokers near 100 % of a core (or the machine's load above its cores) the probe
cannot tell the two apart, and the CPU column says which it is likely to be.

    python bench/loaded_latency.py [--seconds 20] [--canary-rate 1000] [--load-mb-s 100]
                                   [--load-partitions 6] [--load-value-bytes 1000] [--json F]
                                   [--load-cpus 1] [--load-nice 19] [--broker-slice-us 100]

Where an acks=all produce's wait goes, per broker and window (the leader's counters are the
canary's): `purgatory_wait_ms{purgatory="Produce"}` (append to ISR acknowledgement) and
`follower_fetch_wait_ms` (a change waiting for a follower's next fetch: the follower fetch
schedule's share), as bucket bounds of their p50 and p99.

Waiting for a core or inside a system call: the bench samples each broker's main thread in
/proc during each window: its run-queue wait (schedstat: ready to run, no core free) per second
beside its CPU per second, and the share of samples it spent in uninterruptible sleep (state D,
a blocking system call: fsync, writeback throttling) with the kernel function it waited in
(wchan); and the machine's dirty and writeback page-cache bytes (/proc/vmstat). `--load-cpus 1`
pins the load generator and its consumer to those CPUs (sched_setaffinity, as taskset);
`--load-nice 19` runs them at that niceness, so that a broker woken by a request wins the core
from them: the tail that remains is then the brokers' own (an experiment: on a real cluster
the clients are on other machines). `--broker-slice-us 100` asks the kernel's EEVDF scheduler
(Linux >= 6.12) for a 100 µs slice for every broker thread (sched_setattr): its CPU share is
unchanged, but a broker woken by a request has an earlier virtual deadline and preempts sooner.

Where both cores went (bench/box_cpu.py): per window, one line per process of the box -- the
controller, each broker (its main thread and other threads apart), the load producer, the
consumer group, the canary, the bench itself -- with its CPU (utime + stime from /proc) and its
run-queue wait (schedstat), its busiest threads by name (librdkafka's rdk:broker<N> threads are
its connections), one line for everything outside the bench (other work on a shared machine),
and one for what no process accounts for (the kernel's softirq work for loopback traffic,
processes too short-lived to be seen). Beside it, each broker's requests per second by API.

Nothing is asserted: a measurement. On a shared 2-core machine the load generator, its
consumer, three brokers and a controller share the cores; the achieved load is printed.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import struct
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the project's packages are importable
    sys.path.insert(0, str(ROOT))

import c_client  # noqa: E402
from box_cpu import BoxSampler, print_rows  # noqa: E402
from produce_consume import HTTP_TIMEOUT_S, fmt, process_cpu_s  # noqa: E402
from replication import Bench, running  # noqa: E402

from broker.loop_stalls import PAUSE_BUCKETS_MS  # noqa: E402
from common.prometheus import samples  # noqa: E402
from common.units import SECONDS  # noqa: E402

CANARY_TOPIC: Final = "canary"
LOAD_TOPIC: Final = "load"
LOAD_GROUP: Final = "bench-loaded-latency"
LOAD_LINGER_MS: Final = 5
WARMUP_SHARE: Final = 5  # the first 1/5 of the canary's records are left out
LOAD_HEAD_START_S: Final = 2 * SECONDS  # the load runs this long before the canary starts
LOAD_JOIN_S: Final = 600 * SECONDS  # the load's producer and consumer finish within this after the canary
GOAL_P99_MS: Final = 10.0
GOAL_P999_MS: Final = 25.0
STALL_REPORT_MS: Final = (10, 25, 100)  # stalls at least this long are counted in the report
PREFIX: Final = "tidelog_broker_"
OS_SAMPLE_PERIOD_S: Final = 0.02  # /proc samples of each broker's main thread: 50 a second
TOP_WCHANS: Final = 2  # blocking kernel functions named per broker
TOP_APIS: Final = 4  # APIs named per broker in the requests/s line
PAGE_BYTES: Final = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Sources:
    """One broker's tail-source counters at one moment (from its /metrics)."""

    stall_buckets: dict[float, float] = field(default_factory=dict)  # le -> cumulative count
    gc_count: dict[str, float] = field(default_factory=dict)  # generation -> collections
    gc_sum_ms: dict[str, float] = field(default_factory=dict)
    gc_buckets: dict[tuple[str, float], float] = field(default_factory=dict)
    produce_wait: dict[float, float] = field(default_factory=dict)  # le -> cumulative count (Produce purgatory)
    follower_fetch_wait: dict[float, float] = field(default_factory=dict)
    cpu_s: float = 0.0  # the broker process's utime + stime
    at_s: float = 0.0  # when it was read (monotonic)


def _le(text: str) -> float:
    return float("inf") if text == "+Inf" else float(text)


def read_sources(metrics_url: str) -> Sources:
    with urllib.request.urlopen(metrics_url, timeout=HTTP_TIMEOUT_S) as answer:
        found = samples(answer.read().decode())
    out = Sources()
    for key, value in found.items():
        name, _, labels = key.partition("{")
        fields = dict(part.split("=", 1) for part in labels.rstrip("}").split(",") if "=" in part)
        fields = {k: v.strip('"') for k, v in fields.items()}
        if name == f"{PREFIX}event_loop_stall_ms_bucket":
            out.stall_buckets[_le(fields["le"])] = value
        elif name == f"{PREFIX}gc_pause_ms_count":
            out.gc_count[fields["generation"]] = value
        elif name == f"{PREFIX}gc_pause_ms_sum":
            out.gc_sum_ms[fields["generation"]] = value
        elif name == f"{PREFIX}gc_pause_ms_bucket":
            out.gc_buckets[(fields["generation"], _le(fields["le"]))] = value
        elif name == f"{PREFIX}purgatory_wait_ms_bucket" and fields.get("purgatory") == "Produce":
            out.produce_wait[_le(fields["le"])] = value
        elif name == f"{PREFIX}follower_fetch_wait_ms_bucket":
            out.follower_fetch_wait[_le(fields["le"])] = value
    return out


def snapshot(bench: Bench) -> dict[int, Sources]:
    out = {}
    for node in bench.cluster.brokers:
        sources = read_sources(node.spec.metrics_url)
        sources.cpu_s, sources.at_s = process_cpu_s(bench.pid(node.spec.node_id)), time.monotonic()
        out[node.spec.node_id] = sources
    return out


def stalls_at_least(before: Sources, after: Sources, ms: float) -> float:
    """Stalls of at least `ms` (by bucket: those above the largest bound below `ms`) between two reads."""
    floor = max((b for b in PAUSE_BUCKETS_MS if b < ms), default=0)
    total = after.stall_buckets.get(float("inf"), 0.0) - before.stall_buckets.get(float("inf"), 0.0)
    below = after.stall_buckets.get(float(floor), 0.0) - before.stall_buckets.get(float(floor), 0.0)
    return total - below if floor else total


def longest_bucket(before: Mapping[float, float], after: Mapping[float, float]) -> str:
    """The upper bound of the highest bucket that gained a count ("> 1000" for +Inf), or "-"."""
    bounds = sorted(after)
    previous = 0.0
    longest = "-"
    for bound in bounds:
        gained = (after[bound] - before.get(bound, 0.0)) - previous
        previous = after[bound] - before.get(bound, 0.0)
        if gained > 0:
            longest = f"> {PAUSE_BUCKETS_MS[-1]:g}" if bound == float("inf") else f"<= {bound:g}"
    return longest


def bucket_quantile(before: Mapping[float, float], after: Mapping[float, float], q: float) -> str:
    """The upper bound of the bucket holding quantile `q` of what was observed between two
    reads of a cumulative histogram ("-" when nothing was)."""
    gained = {le: after[le] - before.get(le, 0.0) for le in sorted(after)}
    total = gained.get(float("inf"), 0.0)
    if total <= 0:
        return "-"
    for le, count in gained.items():
        if count >= q * total:
            return f"> {PAUSE_BUCKETS_MS[-1]:g}" if le == float("inf") else f"<= {le:g}"
    return "-"


@dataclass
class ThreadTimes:
    """One broker main thread's schedstat (ns on a CPU, ns waiting for one) and its D-state samples."""

    on_cpu_ns: int = 0
    run_wait_ns: int = 0
    samples: int = 0
    blocked: dict[str, int] = field(default_factory=dict)  # wchan -> samples in state D


def _schedstat(pid: int) -> tuple[int, int]:
    on_cpu, run_wait, _ = Path(f"/proc/{pid}/schedstat").read_text().split()
    return int(on_cpu), int(run_wait)


class OsSampler:
    """Samples each broker's main thread in /proc, and the page cache's dirty and writeback
    bytes, every `OS_SAMPLE_PERIOD_S` on a thread, between `start` and `stop`."""

    def __init__(self, pids: Mapping[int, int]) -> None:
        self.pids = dict(pids)  # broker id -> pid
        self.start_times: dict[int, tuple[int, int]] = {}
        self.times = {broker: ThreadTimes() for broker in self.pids}
        self.max_dirty = self.max_writeback = 0
        self.seconds = 0.0  # how long it sampled
        self._started = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="os-sampler", daemon=True)

    def start(self) -> None:
        self.start_times = {broker: _schedstat(pid) for broker, pid in self.pids.items()}
        self._started = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.seconds = time.monotonic() - self._started
        for broker, pid in self.pids.items():
            on_cpu, run_wait = _schedstat(pid)
            times = self.times[broker]
            times.on_cpu_ns = on_cpu - self.start_times[broker][0]
            times.run_wait_ns = run_wait - self.start_times[broker][1]

    def _run(self) -> None:
        while not self._stop.wait(OS_SAMPLE_PERIOD_S):  # until stopped at the window's end
            vmstat = dict(line.split() for line in Path("/proc/vmstat").read_text().splitlines())
            self.max_dirty = max(self.max_dirty, int(vmstat.get("nr_dirty", 0)) * PAGE_BYTES)
            self.max_writeback = max(self.max_writeback, int(vmstat.get("nr_writeback", 0)) * PAGE_BYTES)
            for broker, pid in self.pids.items():
                try:
                    state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
                    wchan = Path(f"/proc/{pid}/wchan").read_text() if state == "D" else ""
                except OSError:  # the broker stopped: the window is over for it
                    continue
                times = self.times[broker]
                times.samples += 1
                if state == "D":  # wchan reads "0" when the task woke between the two reads
                    where = wchan if wchan not in ("", "0") else "?"
                    times.blocked[where] = times.blocked.get(where, 0) + 1


def os_rows(sampler: OsSampler) -> list[dict[str, Any]]:
    rows, seconds = [], max(sampler.seconds, 1e-9)
    for broker, t in sorted(sampler.times.items()):
        top = sorted(t.blocked.items(), key=lambda kv: -kv[1])[:TOP_WCHANS]
        rows.append({
            "broker": broker, "main_cpu_ms_s": t.on_cpu_ns / 1e6 / seconds, "run_wait_ms_s": t.run_wait_ns / 1e6 / seconds,
            "blocked_pct": 100 * sum(t.blocked.values()) / t.samples if t.samples else 0.0,
            "blocked_in": ", ".join(f"{w} {100 * n / t.samples:.1f}%" for w, n in top) or "-",
        })
    return rows


def print_os(rows: list[dict[str, Any]], sampler: OsSampler) -> None:
    print(f"  {'broker':>6} {'loop cpu ms/s':>13} {'waiting for a core ms/s':>23} {'blocked (D) %':>13}  in")
    for r in rows:
        print(f"  {r['broker']:>6} {r['main_cpu_ms_s']:>13.0f} {r['run_wait_ms_s']:>23.0f} {r['blocked_pct']:>13.1f}"
              f"  {r['blocked_in']}")
    print(f"  page cache: at most {sampler.max_dirty / 1e6:,.0f} MB dirty, {sampler.max_writeback / 1e6:,.0f} MB "
          f"under writeback; load average {os.getloadavg()[0]:.2f}")


def source_rows(before: dict[int, Sources], after: dict[int, Sources]) -> list[dict[str, Any]]:
    rows = []
    for broker, a in sorted(after.items()):
        b = before[broker]
        gen2 = {le: v for (g, le), v in a.gc_buckets.items() if g == "2"}
        gen2_before = {le: v for (g, le), v in b.gc_buckets.items() if g == "2"}
        rows.append({
            "broker": broker,
            **{f"stalls_ge_{ms}ms": stalls_at_least(b, a, ms) for ms in STALL_REPORT_MS},
            "longest_stall": longest_bucket(b.stall_buckets, a.stall_buckets),
            **{f"gc{g}": a.gc_count.get(g, 0.0) - b.gc_count.get(g, 0.0) for g in ("0", "1", "2")},
            "gc_ms": sum(a.gc_sum_ms.values()) - sum(b.gc_sum_ms.values()),
            "longest_gc2": longest_bucket(gen2_before, gen2),
            "cpu_pct": 100 * (a.cpu_s - b.cpu_s) / (a.at_s - b.at_s) if a.at_s > b.at_s else None,
            **{f"produce_wait_p{q}": bucket_quantile(b.produce_wait, a.produce_wait, q / 100) for q in (50, 99)},
            **{f"follower_wait_p{q}": bucket_quantile(b.follower_fetch_wait, a.follower_fetch_wait, q / 100)
               for q in (50, 99)},
        })
    return rows


def print_sources(label: str, rows: list[dict[str, Any]]) -> None:
    print(f"  {label}: per broker, what held its event loop meanwhile")
    print(f"  {'broker':>6} " + " ".join(f"{'stalls>=' + str(ms):>11}" for ms in STALL_REPORT_MS)
          + f" {'longest':>9} {'gc0':>6} {'gc1':>5} {'gc2':>5} {'gc ms':>7} {'gc2 long':>9} {'cpu %':>6}")
    for r in rows:
        print(f"  {r['broker']:>6} " + " ".join(f"{r[f'stalls_ge_{ms}ms']:>11.0f}" for ms in STALL_REPORT_MS)
              + f" {r['longest_stall']:>9} {r['gc0']:>6.0f} {r['gc1']:>5.0f} {r['gc2']:>5.0f} {r['gc_ms']:>7.1f}"
              f" {r['longest_gc2']:>9} {fmt(r['cpu_pct'], '.0f'):>6}")
    print(f"  {'broker':>6} {'acks=all wait p50':>18} {'p99':>9} {'change->follower fetch p50':>27} {'p99':>9}"
          "   (ms, bucket bounds; the canary's leader shows its wait)")
    for r in rows:
        print(f"  {r['broker']:>6} {r['produce_wait_p50']:>18} {r['produce_wait_p99']:>9} {r['follower_wait_p50']:>27}"
              f" {r['follower_wait_p99']:>9}")


def box_labels(bench: Bench, box: BoxSampler) -> dict[int, str]:
    """The processes of this bench by role: nodes by id, each loadgen by what it ran."""
    labels = {os.getpid(): "bench (canary driver, /metrics, /proc)"}
    for node in bench.cluster.controllers:
        if node.pid is not None:
            labels[node.pid] = f"controller {node.spec.node_id}"
    for node in bench.cluster.brokers:
        if node.pid is not None:
            labels[node.pid] = f"broker {node.spec.node_id}"
    for pid, cmdline in box.cmdlines.items():
        args = cmdline.split()
        if len(args) >= 4 and args[0].endswith("loadgen"):  # loadgen MODE BOOTSTRAP TOPIC ...
            role = {("produce", CANARY_TOPIC): "canary producer (C)", ("produce", LOAD_TOPIC): "load producer (C)",
                    ("consume", LOAD_TOPIC): "load consumer group (C)"}.get((args[1], args[3]))
            if role is not None:
                labels[pid] = role
    return labels


def print_requests(before: Mapping[int, Mapping[str, float]], after: Mapping[int, Mapping[str, float]],
                   seconds: float) -> dict[int, dict[str, float]]:
    """Requests answered per second by API, per broker, over the window (the busiest APIs):
    follower fetch rounds that come back empty at once would show as Fetch far above Produce."""
    rates = {b: {api: (n - before[b].get(api, 0.0)) / max(seconds, 1e-9) for api, n in counts.items()}
             for b, counts in after.items()}
    for b, by_api in sorted(rates.items()):
        busiest = sorted(((r, api) for api, r in by_api.items() if r > 0), reverse=True)[:TOP_APIS]
        print(f"  broker {b} requests/s: " + ", ".join(f"{api} {r:,.0f}" for r, api in busiest))
    return rates


def canary(bench: Bench, binary: Path, rate: int, seconds: float
           ) -> tuple[c_client.LoadResult, list[dict[str, Any]], OsSampler, list[dict[str, Any]], BoxSampler]:
    total = int(rate * seconds)
    requests = bench.request_counts()
    before = snapshot(bench)
    sampler = OsSampler({broker: bench.pid(broker) for broker in before})
    box = BoxSampler(root_pid=os.getpid())
    box.start()
    sampler.start()
    try:
        result = c_client.produce(binary, bench.bootstrap, CANARY_TOPIC, records=total, value_bytes=100,
                                  partitions=1, acks="all", linger_ms=0, rate=rate, warmup=total // WARMUP_SHARE)
    finally:
        sampler.stop()
        box.stop()
    print_requests(requests, bench.request_counts(), box.seconds)
    return result, source_rows(before, snapshot(bench)), sampler, box.rows(box_labels(bench, box)), box


class Load:
    """The C producer and the consumer group of the load topic, each on a thread."""

    def __init__(self, bench: Bench, binary: Path, args: argparse.Namespace) -> None:
        self.rate = int(args.load_mb_s * 1e6 / args.load_value_bytes)
        # it outlasts the canary: the head start, the canary, and a fifth more
        self.records = int(self.rate * (args.seconds * 1.2 + LOAD_HEAD_START_S))
        self.results: dict[str, c_client.LoadResult] = {}
        self.errors: dict[str, str] = {}
        self.cpus: set[int] = set(args.load_cpus or ())
        self.nice: int = args.load_nice
        partitions = args.load_partitions
        self.threads = [
            threading.Thread(target=self._run, name="load-produce", daemon=True, args=("produce", lambda: c_client.produce(
                binary, bench.bootstrap, LOAD_TOPIC, records=self.records, value_bytes=args.load_value_bytes,
                partitions=partitions, acks="all", linger_ms=LOAD_LINGER_MS, rate=self.rate))),
            threading.Thread(target=self._run, name="load-consume", daemon=True, args=("consume", lambda: c_client.consume(
                binary, bench.bootstrap, LOAD_TOPIC, records=self.records, partitions=partitions, group=LOAD_GROUP))),
        ]

    def _run(self, what: str, call: Any) -> None:
        if self.cpus:  # this thread's mask, which the loadgen it starts inherits (taskset's effect)
            os.sched_setaffinity(0, self.cpus)
        if self.nice:  # this thread's niceness (Linux: per thread), which the loadgen inherits (nice's effect)
            os.setpriority(os.PRIO_PROCESS, 0, self.nice)
        try:
            self.results[what] = call()
        except (c_client.LoadError, OSError) as exc:
            self.errors[what] = str(exc)[:300]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def join(self) -> None:
        for thread in self.threads:
            thread.join(timeout=LOAD_JOIN_S)


SYS_SCHED_SETATTR: Final = 314  # x86_64
SCHED_ATTR = struct.Struct("=IIQiIQQQII")  # struct sched_attr, SCHED_ATTR_SIZE_VER1 (56 bytes)
SCHED_OTHER: Final = 0


def set_slice(tid: int, slice_ns: int) -> None:
    """Ask the kernel's EEVDF scheduler (Linux >= 6.12) for a shorter time slice for thread `tid`:
    sched_setattr with SCHED_OTHER and sched_runtime = the slice (0.1-100 ms). Its CPU share (its
    weight, nice 0) is unchanged; a woken task with a shorter slice has an earlier virtual
    deadline and may preempt the running one, so it waits less for a core after each wakeup."""
    attr = ctypes.create_string_buffer(SCHED_ATTR.pack(SCHED_ATTR.size, SCHED_OTHER, 0, 0, 0, slice_ns, 0, 0, 0, 0),
                                       SCHED_ATTR.size)
    if ctypes.CDLL(None, use_errno=True).syscall(SYS_SCHED_SETATTR, tid, attr, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"sched_setattr of thread {tid}: {os.strerror(errno)}")


def shorten_slices(bench: Bench, slice_us: int) -> None:
    """Every thread of every broker gets a `slice_us` slice (threads it starts later inherit it)."""
    for broker in bench.broker_ids:
        pid = bench.pid(broker)
        for tid in os.listdir(f"/proc/{pid}/task"):
            set_slice(int(tid), slice_us * 1000)
    print(f"brokers' threads: EEVDF slice {slice_us} µs (sched_setattr; the kernel's default is shown in "
          f"/proc/PID/sched as se.slice)")


def mb_s(result: c_client.LoadResult | None) -> float | None:
    return None if result is None or result.seconds <= 0 else result.payload_bytes / result.seconds / 1e6


def run(bench: Bench, binary: Path, args: argparse.Namespace) -> dict[str, Any]:
    bench.create(CANARY_TOPIC, 1, 3)
    bench.create(LOAD_TOPIC, args.load_partitions, 3)
    leader = bench.partitions(CANARY_TOPIC)[0]["leader"]
    print(f"canary leader: broker {leader} (its acks=all wait is the canary's); load leaders by broker: "
          + ", ".join(f"{b} {role}" for b, role in sorted(bench.roles(LOAD_TOPIC).items())))
    print("broker pids (for py-spy): " + ", ".join(f"{b} pid {bench.pid(b)}" for b in bench.broker_ids), flush=True)
    print(f"\ncanary: idempotent acks=all, linger.ms=0, {args.canary_rate} records/s x 100 B for {args.seconds:g} s "
          f"into {CANARY_TOPIC} (RF=3, min.insync.replicas=2), C load generator")
    alone, alone_sources, alone_os, alone_box, alone_sampler = canary(bench, binary, args.canary_rate, args.seconds)
    print_sources("alone", alone_sources)
    print_os(os_rows(alone_os), alone_os)
    print_rows("alone", alone_box, alone_sampler)
    load = Load(bench, binary, args)
    print(f"\nload: {args.load_mb_s:g} MB/s asked ({load.rate:,} records/s x {args.load_value_bytes} B, acks=all, "
          f"linger.ms={LOAD_LINGER_MS}) into {LOAD_TOPIC} ({args.load_partitions} partitions RF=3), "
          f"a consumer group ({LOAD_GROUP}) reading it"
          + (f"; both pinned to CPUs {sorted(load.cpus)}" if load.cpus else "")
          + (f"; both at nice {load.nice}" if load.nice else ""))
    load.start()
    threading.Event().wait(LOAD_HEAD_START_S)
    loaded, loaded_sources, loaded_os, loaded_box, loaded_sampler = canary(bench, binary, args.canary_rate,
                                                                           args.seconds)
    print_sources("loaded", loaded_sources)
    print_os(os_rows(loaded_os), loaded_os)
    print_rows("loaded", loaded_box, loaded_sampler)
    load.join()
    produced, consumed = load.results.get("produce"), load.results.get("consume")
    print(f"\n{'canary':<8} {'p50 ms':>8} {'p99 ms':>8} {'p99.9 ms':>9} {'max ms':>8}   goal p99 <= {GOAL_P99_MS:g}, "
          f"p99.9 <= {GOAL_P999_MS:g} (loaded)")
    for label, r in (("alone", alone), ("loaded", loaded)):
        print(f"{label:<8} {fmt(r.p50_ms, '.2f'):>8} {fmt(r.p99_ms, '.2f'):>8} {fmt(r.p999_ms, '.2f'):>9} "
              f"{fmt(r.max_ms, '.2f'):>8}")
    print(f"load achieved: produce {fmt(mb_s(produced), '.1f')} MB/s, consume {fmt(mb_s(consumed), '.1f')} MB/s"
          + (f"; errors: {load.errors}" if load.errors else ""))
    return {
        "load_average": os.getloadavg()[0], "canary_leader": leader,
        "canary_alone": {k: getattr(alone, k) for k in ("p50_ms", "p99_ms", "p999_ms", "max_ms")},
        "canary_loaded": {k: getattr(loaded, k) for k in ("p50_ms", "p99_ms", "p999_ms", "max_ms")},
        "sources_alone": alone_sources, "sources_loaded": loaded_sources,
        "os_alone": os_rows(alone_os), "os_loaded": os_rows(loaded_os),
        "box_alone": alone_box, "box_loaded": loaded_box,
        "max_dirty_bytes": loaded_os.max_dirty, "max_writeback_bytes": loaded_os.max_writeback,
        "load_produce_mb_s": mb_s(produced), "load_consume_mb_s": mb_s(consumed), "load_errors": load.errors,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each canary run")
    parser.add_argument("--canary-rate", type=int, default=1000, help="canary records/s")
    parser.add_argument("--load-mb-s", type=float, default=100.0, help="the load producer's rate, MB/s")
    parser.add_argument("--load-partitions", type=int, default=6)
    parser.add_argument("--load-value-bytes", type=int, default=1000)
    parser.add_argument("--load-cpus", type=lambda text: [int(c) for c in text.split(",")], default=None,
                        help="pin the load generator and its consumer to these CPUs (e.g. 1 or 0,1)")
    parser.add_argument("--load-nice", type=int, default=0,
                        help="run the load generator and its consumer at this niceness (e.g. 19: the brokers "
                             "win every contest for a core with them; an experiment, not Kafka's deployment)")
    parser.add_argument("--broker-slice-us", type=int, default=0,
                        help="give every broker thread this EEVDF time slice (sched_setattr; Linux >= 6.12, e.g. "
                             "100): a woken broker preempts sooner; its CPU share is unchanged")
    parser.add_argument("--broker-config", type=lambda text: tuple(text.split("=", 1)), action="append", default=[],
                        metavar="KEY=VALUE", help="a server.properties setting for every node (e.g. log.segment.bytes=67108864)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here (bench/all.py)")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    args = parser.parse_args()
    binary = c_client.required("bench/loaded_latency.py")
    print(f"load average {os.getloadavg()[0]:.2f}; {os.cpu_count()} CPUs; librdkafka {c_client.librdkafka_version(binary)}")
    root = Path(tempfile.mkdtemp(prefix="tidelog-bench-loaded-latency-", dir=args.dir))
    try:
        with running(root / "cluster", dict(args.broker_config)) as bench:
            if args.broker_slice_us:
                shorten_slices(bench, args.broker_slice_us)
            results = run(bench, binary, args)
        if args.json is not None:
            args.json.write_text(json.dumps(results, indent=1))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
