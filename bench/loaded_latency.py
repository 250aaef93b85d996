"""Latency under load (issue 35, goal 2): a canary producer's tail while other traffic runs, and where it comes from.

One cluster as bench/replication.py runs it (controller 1, brokers 2-4 on loopback). A canary
producer (the C load generator: idempotent unless --idempotence off, acks=all, linger.ms=0) writes `--canary-rate`
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
                                   [--sweep 10,30,60,100] [--fifo-pairs]
                                   [--load-partitions 6] [--load-value-bytes 1000] [--json F]
                                   [--load-cpus 1] [--load-nice 19] [--broker-slice-us 100]

`--sweep 10,30,60,100` runs a loaded window at each load in turn on the one cluster, and the
summary names the first load at which the canary leaves the goal. `--fifo-pairs` follows each
loaded window with a second at the same load in which every broker thread and the canary run
SCHED_FIFO (`sched_policy.realtime`): a woken broker takes a core from the load's clients and
any other work at once, as if the brokers had machines of their own. What tail is left there
is the brokers' own (their loops, collections, fsyncs, the follower fetch schedule, the wire);
the default window's p99 less the SCHED_FIFO window's is the share that was the wait for a
core. The summary prints both beside the goal, with each broker loop's mean wait for a core
per wakeup (schedstat: run delay over times on a core) and each role's CPU. Read a SCHED_FIFO
window with two cautions (measured on the shared 2-core box, 2026-11-30): the real-time threads
also win every core from the load's own clients, which got 3-10 % of a core there instead of
33-70 %, so that window carries little of the asked load (its "load MB/s" counts the load's
whole run, head start and tail included; the "cpu % by role" column shows what the load got);
and a broker can wait for a SCHED_OTHER kernel thread it outranks: before the logs started
their own writeback (broker/log/writeback.py) a broker's append waited in ext4 (wchan
ext4_da_get_block_prep) for the flusher thread's block allocation, up to ~1 s per window; what
remains is kcompactd migrating a page of a broker's heap (wchan migration_entry_wait_on_locked,
951 ms once in 8 windows). So the SCHED_FIFO figure is the brokers' own tail with the load
mostly held off, not beside it.

Where an acks=all produce's wait goes, per broker and window (the leader's counters are the
canary's): `purgatory_wait_ms{purgatory="Produce"}` (append to ISR acknowledgement) and
`follower_fetch_wait_ms` (a change waiting for a follower's next fetch: the follower fetch
schedule's share), as bucket bounds of their p50 and p99. Beside them, the canary leader's loop
CPU per Produce it answered (its Fetch answers included) and the followers' per fetch round
(`leader_cost`): in the alone window the loop cost of one canary produce, which per-request cuts
move; librdkafka batches the canary when the leader falls behind, so read it with the Produce/s.

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
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the project's packages are importable
    sys.path.insert(0, str(ROOT))

import c_client  # noqa: E402
import sched_policy  # noqa: E402
from box_cpu import BoxSampler, print_rows  # noqa: E402
from produce_consume import HTTP_TIMEOUT_S, fmt, process_cpu_s  # noqa: E402
from replication import Bench, running  # noqa: E402

from broker.loop_stalls import PAUSE_BUCKETS_MS  # noqa: E402
from common.protocol.api_keys import ApiKey  # noqa: E402
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
    """One broker main thread's schedstat (ns on a CPU, ns waiting for one, times it got a core)
    and its D-state samples."""

    on_cpu_ns: int = 0
    run_wait_ns: int = 0
    slices: int = 0  # times it was put on a core: the wait per slice is the mean wait per wakeup
    samples: int = 0
    blocked: dict[str, int] = field(default_factory=dict)  # wchan -> samples in state D


def _schedstat(pid: int) -> tuple[int, int, int]:
    on_cpu, run_wait, slices = Path(f"/proc/{pid}/schedstat").read_text().split()
    return int(on_cpu), int(run_wait), int(slices)


class OsSampler:
    """Samples each broker's main thread in /proc, and the page cache's dirty and writeback
    bytes, every `OS_SAMPLE_PERIOD_S` on a thread, between `start` and `stop`."""

    def __init__(self, pids: Mapping[int, int]) -> None:
        self.pids = dict(pids)  # broker id -> pid
        self.start_times: dict[int, tuple[int, int, int]] = {}
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
            on_cpu, run_wait, slices = _schedstat(pid)
            times = self.times[broker]
            times.on_cpu_ns = on_cpu - self.start_times[broker][0]
            times.run_wait_ns = run_wait - self.start_times[broker][1]
            times.slices = slices - self.start_times[broker][2]

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
            "wait_per_slice_ms": t.run_wait_ns / 1e6 / t.slices if t.slices else 0.0,
            "blocked_pct": 100 * sum(t.blocked.values()) / t.samples if t.samples else 0.0,
            "blocked_in": ", ".join(f"{w} {100 * n / t.samples:.1f}%" for w, n in top) or "-",
        })
    return rows


def print_os(rows: list[dict[str, Any]], sampler: OsSampler) -> None:
    print(f"  {'broker':>6} {'loop cpu ms/s':>13} {'waiting for a core ms/s':>23} {'per wakeup ms':>13}"
          f" {'blocked (D) %':>13}  in")
    for r in rows:
        print(f"  {r['broker']:>6} {r['main_cpu_ms_s']:>13.0f} {r['run_wait_ms_s']:>23.0f} {r['wait_per_slice_ms']:>13.2f}"
              f" {r['blocked_pct']:>13.1f}  {r['blocked_in']}")
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


def _produce_canary(binary: Path, bootstrap: str, rate: int, seconds: float, *, fifo: bool,
                    idempotent: bool) -> c_client.LoadResult:
    """The canary producer, run from a thread of its own when `fifo`: that thread's SCHED_FIFO
    policy is inherited by the loadgen process it starts (as `chrt -f 1` would)."""
    total = int(rate * seconds)

    def call() -> c_client.LoadResult:
        return c_client.produce(binary, bootstrap, CANARY_TOPIC, records=total, value_bytes=100, partitions=1,
                                acks="all", linger_ms=0, rate=rate, warmup=total // WARMUP_SHARE,
                                idempotent=idempotent)
    if not fifo:
        return call()
    out: dict[str, c_client.LoadResult | BaseException] = {}

    def in_fifo() -> None:
        try:
            sched_policy.fifo_here()
            out["result"] = call()
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            out["result"] = exc
    thread = threading.Thread(target=in_fifo, name="canary-fifo", daemon=True)
    thread.start()
    thread.join()
    result = out.get("result")
    if isinstance(result, BaseException):
        raise result
    assert result is not None
    return result


def canary(bench: Bench, binary: Path, rate: int, seconds: float, *, fifo: bool = False, idempotent: bool = True
           ) -> tuple[c_client.LoadResult, list[dict[str, Any]], OsSampler, list[dict[str, Any]], BoxSampler,
                      dict[int, dict[str, float]]]:
    requests = bench.request_counts()
    before = snapshot(bench)
    sampler = OsSampler({broker: bench.pid(broker) for broker in before})
    box = BoxSampler(root_pid=os.getpid())
    box.start()
    sampler.start()
    try:
        result = _produce_canary(binary, bench.bootstrap, rate, seconds, fifo=fifo, idempotent=idempotent)
    finally:
        sampler.stop()
        box.stop()
    rates = print_requests(requests, bench.request_counts(), box.seconds)
    return result, source_rows(before, snapshot(bench)), sampler, box.rows(box_labels(bench, box)), box, rates


def leader_cost(rows: list[dict[str, Any]], rates: Mapping[int, Mapping[str, float]], leader: int
                ) -> dict[str, float | None]:
    """The canary leader's event-loop CPU per Produce it answered (ms) and its Fetch answers per
    Produce; each follower's loop CPU per fetch round, taking the leader's Fetch answers as split
    evenly between the others. Alone, every Produce the leader answers is the canary's and every
    Fetch a follower's: the loop cost of one acks=all produce with its follower fetches, the path
    the per-request cuts aim at (bench/leader_request_cpu.py and bench/follower_round_cpu.py
    count it in opcodes; this is the same path in CPU, waits for a core excluded). Beside the
    load, the leader also answers the load's Produce and Fetch on the partitions it leads, and
    the followers fetch those too: there the figures are per request of any client."""
    loop = {r["broker"]: r["main_cpu_ms_s"] for r in rows}
    by_api = rates.get(leader, {})
    produces, fetches = by_api.get(ApiKey.PRODUCE.name, 0.0), by_api.get(ApiKey.FETCH.name, 0.0)
    followers = [b for b in loop if b != leader]
    per_follower = fetches / len(followers) if followers else 0.0
    return {
        "produce_s": produces, "fetch_s": fetches,
        "leader_loop_ms_per_produce": loop[leader] / produces if leader in loop and produces > 0 else None,
        "fetches_per_produce": fetches / produces if produces > 0 else None,
        "follower_loop_ms_per_fetch": (sum(loop[b] for b in followers) / len(followers) / per_follower
                                       if per_follower > 0 else None),
    }


def print_leader_cost(cost: Mapping[str, float | None], leader: int) -> None:
    print(f"  canary leader {leader}: {fmt(cost['produce_s'], ',.0f')} Produce/s answered, loop "
          f"{fmt(cost['leader_loop_ms_per_produce'], '.2f')} ms per Produce with "
          f"{fmt(cost['fetches_per_produce'], '.2f')} Fetch answers each; followers' loop "
          f"{fmt(cost['follower_loop_ms_per_fetch'], '.2f')} ms per fetch round")


class Load:
    """The C producer and the consumer group of the load topic, each on a thread."""

    def __init__(self, bench: Bench, binary: Path, args: argparse.Namespace, load_mb_s: float) -> None:
        self.rate = int(load_mb_s * 1e6 / args.load_value_bytes)
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
                partitions=partitions, acks="all", linger_ms=LOAD_LINGER_MS, rate=self.rate,
                idempotent=args.idempotence == "on"))),
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


def shorten_slices(bench: Bench, slice_us: int) -> None:
    """Every thread of every broker gets a `slice_us` slice (threads it starts later inherit it)."""
    sched_policy.shorten_slices([bench.pid(broker) for broker in bench.broker_ids], slice_us)
    print(f"brokers' threads: EEVDF slice {slice_us} µs (sched_setattr; the kernel's default is shown in "
          f"/proc/PID/sched as se.slice)")


def mb_s(result: c_client.LoadResult | None) -> float | None:
    return None if result is None or result.seconds <= 0 else result.payload_bytes / result.seconds / 1e6


PERCENTILES: Final = ("p50_ms", "p99_ms", "p999_ms", "max_ms")


def idempotence(args: argparse.Namespace) -> str:
    return "idempotent " if args.idempotence == "on" else "not idempotent, "


def loaded_window(bench: Bench, binary: Path, args: argparse.Namespace, load_mb_s: float, leader: int, *,
                  fifo: bool) -> dict[str, Any]:
    """The canary beside the load at `load_mb_s`; with `fifo`, every broker thread and the canary
    run SCHED_FIFO meanwhile (`sched_policy.realtime`): none waits for a core behind the load's
    clients or other work, so the tail left is the brokers' own (and the wire's, the canary's)."""
    load = Load(bench, binary, args, load_mb_s)
    label = f"loaded {load_mb_s:g} MB/s" + (", brokers + canary SCHED_FIFO" if fifo else "")
    print(f"\n{label}: {load.rate:,} records/s x {args.load_value_bytes} B ({idempotence(args)}acks=all, "
          f"linger.ms={LOAD_LINGER_MS}) "
          f"into {LOAD_TOPIC} ({args.load_partitions} partitions RF=3), a consumer group ({LOAD_GROUP}) reading it"
          + (f"; both pinned to CPUs {sorted(load.cpus)}" if load.cpus else "")
          + (f"; both at nice {load.nice}" if load.nice else ""), flush=True)
    policy = sched_policy.realtime([bench.pid(b) for b in bench.broker_ids]) if fifo else nullcontext()
    with policy:
        load.start()
        threading.Event().wait(LOAD_HEAD_START_S)
        result, sources, os_sampler, box_rows, box, rates = canary(bench, binary, args.canary_rate, args.seconds,
                                                                   fifo=fifo, idempotent=args.idempotence == "on")
    print_sources(label, sources)
    print_os(os_rows(os_sampler), os_sampler)
    cost = leader_cost(os_rows(os_sampler), rates, leader)
    print_leader_cost(cost, leader)
    print_rows(label, box_rows, box)
    load.join()
    produced, consumed = load.results.get("produce"), load.results.get("consume")
    return {"label": label, "load_mb_s": load_mb_s, "fifo": fifo,
            "canary": {k: getattr(result, k) for k in PERCENTILES}, "leader_cost": cost,
            "sources": sources, "os": os_rows(os_sampler), "box": box_rows, "load_average": os.getloadavg()[0],
            "max_dirty_bytes": os_sampler.max_dirty, "max_writeback_bytes": os_sampler.max_writeback,
            "load_produce_mb_s": mb_s(produced), "load_consume_mb_s": mb_s(consumed), "load_errors": load.errors}


def _cpu_by_role(box_rows: list[dict[str, Any]]) -> str:
    """Brokers (together), the load producer, its consumer group, the canary and other work: CPU %."""
    def pct(prefix: str) -> float:
        return sum(r["cpu_pct"] for r in box_rows if str(r["process"]).startswith(prefix))
    return (f"brokers {pct('broker'):.0f} / load {pct('load producer'):.0f} / group {pct('load consumer'):.0f}"
            f" / canary {pct('canary'):.0f} / other {pct('other work'):.0f}")


def meets_goal(canary_figures: Mapping[str, float | None]) -> bool:
    p99, p999 = canary_figures.get("p99_ms"), canary_figures.get("p999_ms")
    return p99 is not None and p999 is not None and p99 <= GOAL_P99_MS and p999 <= GOAL_P999_MS


def core_wait_share(default: Mapping[str, float | None], fifo: Mapping[str, float | None], key: str) -> str:
    """How much of the canary's `key` percentile the brokers' and the canary's wait for a core
    explains: the default window's figure less the SCHED_FIFO window's, at the same load."""
    a, b = default.get(key), fifo.get(key)
    if a is None or b is None or a <= 0:
        return "-"
    return f"{a - b:.1f} of {a:.1f} ms ({100 * (a - b) / a:.0f} %)"


def print_summary(alone: Mapping[str, Any], windows: list[dict[str, Any]]) -> None:
    print(f"\n{'window':<44} {'p50 ms':>8} {'p99 ms':>8} {'p99.9 ms':>9} {'max ms':>8} {'load MB/s':>11} "
          f"{'brokers wait/wakeup ms':>22} {'leader ms/Produce':>17} {'load avg':>8}  cpu % by role")
    for w in (alone, *windows):
        c = w["canary"]
        achieved = (f"{fmt(w['load_produce_mb_s'], '.0f')}/{fmt(w['load_consume_mb_s'], '.0f')}"
                    if "load_mb_s" in w else "-")
        waits = "/".join(f"{r['wait_per_slice_ms']:.1f}" for r in w["os"])
        print(f"{w['label']:<44} {fmt(c['p50_ms'], '.2f'):>8} {fmt(c['p99_ms'], '.2f'):>8} {fmt(c['p999_ms'], '.2f'):>9}"
              f" {fmt(c['max_ms'], '.2f'):>8} {achieved:>11} {waits:>22}"
              f" {fmt(w['leader_cost']['leader_loop_ms_per_produce'], '.2f'):>17}"
              f" {w['load_average']:>8.2f}  {_cpu_by_role(w['box'])}")
    print(f"goal: loaded p99 <= {GOAL_P99_MS:g} ms, p99.9 <= {GOAL_P999_MS:g} ms (load MB/s: produced/consumed; "
          "wait/wakeup: each broker's loop, schedstat run delay per time on a core; leader ms/Produce: the "
          "canary leader's loop CPU per Produce it answered, its Fetch answers included)")
    default = [w for w in windows if not w["fifo"]]
    missed = next((w for w in default if not meets_goal(w["canary"])), None)
    met = [w["load_mb_s"] for w in default if meets_goal(w["canary"])]
    print("the tail leaves the goal at " + (f"{missed['load_mb_s']:g} MB/s asked" if missed else "no load measured")
          + (f" (met at {', '.join(f'{m:g}' for m in met)} MB/s)" if met else ""))
    for w in default:
        pair = next((f for f in windows if f["fifo"] and f["load_mb_s"] == w["load_mb_s"]), None)
        if pair is not None:
            print(f"  at {w['load_mb_s']:g} MB/s default less SCHED_FIFO (the wait for a core; the FIFO window "
                  "holds the load mostly off, see --help) is p99 "
                  f"{core_wait_share(w['canary'], pair['canary'], 'p99_ms')}, p99.9 "
                  f"{core_wait_share(w['canary'], pair['canary'], 'p999_ms')}; the brokers' own (SCHED_FIFO) "
                  f"p99 {fmt(pair['canary']['p99_ms'], '.1f')} / p99.9 {fmt(pair['canary']['p999_ms'], '.1f')} ms")


def run(bench: Bench, binary: Path, args: argparse.Namespace) -> dict[str, Any]:
    bench.create(CANARY_TOPIC, 1, 3)
    bench.create(LOAD_TOPIC, args.load_partitions, 3)
    leader = bench.partitions(CANARY_TOPIC)[0]["leader"]
    print(f"canary leader: broker {leader} (its acks=all wait is the canary's); load leaders by broker: "
          + ", ".join(f"{b} {role}" for b, role in sorted(bench.roles(LOAD_TOPIC).items())))
    print("broker pids (for py-spy): " + ", ".join(f"{b} pid {bench.pid(b)}" for b in bench.broker_ids), flush=True)
    print(f"\ncanary: {idempotence(args)}acks=all, linger.ms=0, {args.canary_rate} records/s x 100 B for {args.seconds:g} s "
          f"into {CANARY_TOPIC} (RF=3, min.insync.replicas=2), C load generator")
    result, sources, os_sampler, box_rows, box, rates = canary(bench, binary, args.canary_rate, args.seconds,
                                                               idempotent=args.idempotence == "on")
    print_sources("alone", sources)
    print_os(os_rows(os_sampler), os_sampler)
    cost = leader_cost(os_rows(os_sampler), rates, leader)
    print_leader_cost(cost, leader)
    print_rows("alone", box_rows, box)
    alone = {"label": "alone", "canary": {k: getattr(result, k) for k in PERCENTILES}, "leader_cost": cost,
             "sources": sources,
             "os": os_rows(os_sampler), "box": box_rows, "load_average": os.getloadavg()[0]}
    windows = []
    for load_mb_s in args.sweep or [args.load_mb_s]:
        windows.append(loaded_window(bench, binary, args, load_mb_s, leader, fifo=False))
        if args.fifo_pairs:
            windows.append(loaded_window(bench, binary, args, load_mb_s, leader, fifo=True))
    print_summary(alone, windows)
    last = [w for w in windows if not w["fifo"]][-1]
    return {
        "load_average": os.getloadavg()[0], "canary_leader": leader,
        "canary_alone": alone["canary"], "canary_loaded": last["canary"],
        "sources_alone": sources, "sources_loaded": last["sources"],
        "os_alone": alone["os"], "os_loaded": last["os"], "box_alone": box_rows, "box_loaded": last["box"],
        "max_dirty_bytes": last["max_dirty_bytes"], "max_writeback_bytes": last["max_writeback_bytes"],
        "load_produce_mb_s": last["load_produce_mb_s"], "load_consume_mb_s": last["load_consume_mb_s"],
        "load_errors": last["load_errors"], "windows": windows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each canary run")
    parser.add_argument("--canary-rate", type=int, default=1000, help="canary records/s")
    parser.add_argument("--load-mb-s", type=float, default=100.0, help="the load producer's rate, MB/s")
    parser.add_argument("--sweep", type=lambda text: [float(v) for v in text.split(",")], default=None,
                        help="a loaded window at each of these MB/s in turn on the one cluster (e.g. 10,30,60,100; "
                             "instead of --load-mb-s): the load at which the tail leaves the goal")
    parser.add_argument("--fifo-pairs", action="store_true",
                        help="after each loaded window a second one at the same load with every broker thread and "
                             "the canary at SCHED_FIFO (root): the brokers' own tail; the difference is their wait "
                             "for a core")
    parser.add_argument("--idempotence", choices=("on", "off"), default="on",
                        help="the canary and the load producer idempotent (on: Kafka's clients' default) or not "
                             "(librdkafka's own default). librdkafka's idempotent producer holds a partition's next "
                             "request while 5 or more of its records wait for an answer, and polls without sleeping "
                             "meanwhile once that request is due: beside slow acks=all answers each producer then "
                             "takes most of a core")
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
