"""What replication costs: acks=all throughput at RF=3 against RF=1, and leader failover time.

One cluster as the integration tests run it: controller 1 on 127.0.0.1, brokers 2, 3 and 4
on 127.0.0.2-4, file-backed, no fsync. The client is confluent-kafka (librdkafka).

Throughput. `--records` x `--value-bytes` records with linger.ms=5 and librdkafka's default
batch.size, record i to partition i % `--partitions`, into three phases on the same
topics every round: acks=all into an RF=1 topic, acks=all into an RF=3 topic with
min.insync.replicas=2, and acks=1 into that same RF=3 topic (for context: replication
still runs, but no produce waits for it). The phases are interleaved, in reversed order on
every other round, for `--rounds` rounds, because a small shared VM drifts by more than
the effect measured; the table shows the median round and the best one. The ratio
RF3/RF1 is the median of the per-round ratios (each RF=3 phase beside the RF=1 phase of
its own round). Per phase, each broker's CPU seconds (utime+stime from /proc/<pid>/stat),
tagged with its role in that phase's topic (L leader, F follower, - not a replica; LnFm
with several partitions), and the client's own CPU (this process, librdkafka included):
the busiest process near the phase's wall time is the bottleneck. From each broker's
/metrics: Produce requests answered by the leader and Fetch requests answered by it
(followers fetching; no consumer runs), i.e. records per produce request and per
replication round trip.

Failover. An idempotent acks=all producer writes one record every 2 ms into a fresh RF=3
single-partition topic (min.insync.replicas=2, librdkafka's default retry and metadata
backoffs). The partition's leader is SIGKILLed; the time to the first delivery report of
a record produced after the kill is the recovery time (a record produced after the kill
can only be acknowledged by a new leader, so no report of the old leader's is counted). A
thread polls the controller's admin API meanwhile and splits that time into
  session   kill -> the controller fences the dead broker: broker.session.timeout.ms, less
            the age of the broker's last heartbeat at the kill (up to one heartbeat
            interval), plus up to the controller's expiry check period (half an interval),
  election  fenced -> a new leader in the committed metadata,
  client    new leader -> first ack: brokers learn the metadata, the surviving follower
            re-fetches from the new leader (HW), librdkafka refreshes metadata and retries.
            The brokers take ~0.1 s of it (their logs); the rest is librdkafka, which asks
            for the leader of a partition whose leader is down once a second (debug=metadata
            shows it), so expect 0-1 s here, and a second more when it drops the fenced
            broker's handle just as it moves the partition (it logs "Reverting ... to leader -1").
Then the broker is restarted and the bench waits until it is back in the ISR. `--kills`
times, on a cluster with the session settings `tidelog up` uses (9 s, heartbeat 2 s) and
again on a fresh one with small ones (3 s, heartbeat 200 ms). The same once with SIGSTOP
instead of SIGKILL ("pause"): a paused broker is alive, so it must only be fenced when its
session expires (issue 17) — it is fenced after the session, by design. Its "client" part
is librdkafka waiting out `socket.timeout.ms` (60 s) for the requests it sent into the
silent connection before it asks for metadata again; Kafka's clients do the same.

Latency. An idempotent acks=all producer (the C load generator, bench/loadgen.c) writes
`--rate` records/s with linger.ms=0 for `--seconds` into an RF=1 and an RF=3 topic
(min.insync.replicas=2); produce() -> delivery report percentiles after a warm-up fifth.

    python bench/replication.py [--records 200000] [--rounds 5] [--partitions 1] [--kills 3]
                                [--rate 10000] [--seconds 10] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import confluent_kafka

from common.prometheus import samples
from common.units import SECONDS

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the project's packages are importable
    sys.path.insert(0, str(ROOT))

import c_client  # noqa: E402
from produce_consume import (  # noqa: E402
    HTTP_TIMEOUT_S,
    MIB,
    fmt,
    process_cpu_s,
    self_cpu_s,
    wait_led,
)

from chaos.nemesis import Nemesis  # noqa: E402
from common import waiting
from localcluster.launcher import LocalCluster, free_ports  # noqa: E402

# --- limits, in one place --------------------------------------------------------------------
HOSTS: Final = ("127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4")  # controller 1, brokers 2-4
READY_S: Final = 60 * SECONDS
CLIENT_TIMEOUT_S: Final = 300 * SECONDS  # one produce phase; a stuck broker fails the run
FAILOVER_WAIT_S: Final = 120 * SECONDS  # kill -> first ack; the default session alone is 9 s
ISR_WAIT_S: Final = 120 * SECONDS  # restart -> back in the ISR (registration, catch-up, AlterPartition)
STEADY_ACKS: Final = 200  # acks of the failover writer before each kill: its metadata is fresh
WATCH_POLL_S: Final = 0.02 * SECONDS  # admin API poll while a failover is under way
WATCH_GRACE_S: Final = 10 * SECONDS  # after the first ack, for the watch to finish its last poll
WRITE_INTERVAL_S: Final = 0.002 * SECONDS  # failover writer: one record per poll
STOP_WAIT_S: Final = 60 * SECONDS  # the failover writer's final flush
MIN_INSYNC: Final = "2"
SMALL_SESSION: Final = {"broker.heartbeat.interval.ms": "200", "broker.session.timeout.ms": "3000"}
SESSIONS: Final = (("default 9000/2000 ms", {}), ("small 3000/200 ms", SMALL_SESSION))
METRICS_PREFIX: Final = "tidelog_broker_"
QUIET: Final = logging.getLogger("bench.replication.librdkafka")
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False


# --- the cluster -------------------------------------------------------------------------------


def http_json(url: str, body: Mapping[str, Any] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as answer:
        return json.loads(answer.read())


@dataclass
class Bench:
    """A running cluster and what the bench asks of it."""

    cluster: LocalCluster
    nemesis: Nemesis

    @property
    def bootstrap(self) -> str:
        assert self.cluster.bootstrap_servers is not None
        return self.cluster.bootstrap_servers

    @property
    def broker_ids(self) -> list[int]:
        return [b.spec.node_id for b in self.cluster.brokers]

    def pid(self, broker_id: int) -> int:
        pid = self.cluster.node(broker_id).pid
        assert pid is not None
        return pid

    def create(self, topic: str, partitions: int, replication_factor: int) -> None:
        configs = {"min.insync.replicas": MIN_INSYNC} if replication_factor > 1 else {}
        http_json(f"{self.cluster.admin_url}/v1/topics", {
            "name": topic, "partitions": partitions, "replication_factor": replication_factor,
            "configs": configs})
        wait_led(self.bootstrap, topic, partitions)
        self.wait_full_isr(topic, READY_S)

    def partitions(self, topic: str) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = http_json(f"{self.cluster.admin_url}/v1/topics/{topic}")["partitions"]
        return parts

    def fenced(self, broker_id: int) -> bool:
        return bool(http_json(f"{self.cluster.admin_url}/v1/brokers/{broker_id}")["fenced"])

    def wait_full_isr(self, topic: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:  # bounded by the deadline
            try:
                if all(p["leader"] >= 0 and sorted(p["isr"]) == sorted(p["replicas"])
                       for p in self.partitions(topic)):
                    return
            except OSError:  # the controller is busy: ask again
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{topic}: not every replica back in the ISR after {timeout_s:.0f} s: "
                           f"{self.partitions(topic)}")

    def roles(self, topic: str) -> dict[int, str]:
        """Each broker's role in `topic`: L, F or - with one partition, LnFm with several."""
        parts = self.partitions(topic)
        out = {}
        for b in self.broker_ids:
            led = sum(p["leader"] == b for p in parts)
            followed = sum(b in p["replicas"] and p["leader"] != b for p in parts)
            if len(parts) == 1:
                out[b] = "L" if led else "F" if followed else "-"
            else:
                out[b] = f"L{led}F{followed}"
        return out

    def request_counts(self) -> dict[int, dict[str, float]]:
        """Per broker, requests_total by API from its /metrics (Prometheus text)."""
        counts: dict[int, dict[str, float]] = {}
        for node in self.cluster.brokers:
            with urllib.request.urlopen(node.spec.metrics_url, timeout=HTTP_TIMEOUT_S) as answer:
                text = answer.read().decode()
            prefix = f'{METRICS_PREFIX}requests_total{{api="'
            counts[node.spec.node_id] = {name.removeprefix(prefix).removesuffix('"}'): value
                                         for name, value in samples(text).items() if name.startswith(prefix)}
        return counts


@contextmanager
def running(root: Path, extra: Mapping[str, str]) -> Iterator[Bench]:
    """1 controller + 3 brokers; every process stopped on exit, failure or Ctrl-C alike."""
    raft, admin, kafka, metrics = free_ports(HOSTS, 4)
    with LocalCluster.start(root, controllers=1, brokers=3, raft_port=raft, admin_port=admin,
                            kafka_port=kafka, metrics_port=metrics, ready_timeout=READY_S,
                            extra_properties=dict(extra)) as cluster, Nemesis(cluster) as nemesis:
        yield Bench(cluster, nemesis)


# --- throughput --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Phase:
    name: str
    topic: str
    acks: str


@dataclass
class Sample:
    phase: Phase
    records: int
    payload_bytes: int
    wall_s: float
    client_cpu_s: float
    broker_cpu_s: dict[int, float]
    roles: dict[int, str]
    requests: dict[int, dict[str, float]]  # broker -> API -> requests answered in the phase

    @property
    def records_per_s(self) -> float:
        return self.records / self.wall_s

    @property
    def mb_per_s(self) -> float:
        return self.payload_bytes / self.wall_s / 1e6

    def led_requests(self, api: str) -> float:
        """Requests of `api` answered by the brokers leading partitions of the topic."""
        return sum(apis.get(api, 0.0) for b, apis in self.requests.items() if leads(self.roles[b]))


def leads(role: str) -> bool:
    return role == "L" or (role.startswith("L") and not role.startswith("L0"))


def produce_phase(bench: Bench, phase: Phase, partitions: int, records: int, value: bytes) -> Sample:
    """Like produce_consume.produce_all, with librdkafka's default batch.size and every broker's CPU."""
    client = confluent_kafka.Producer({
        "bootstrap.servers": bench.bootstrap, "acks": phase.acks, "linger.ms": 5,
        "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2 * MIB})  # KiB: 2 GiB
    errors: list[Any] = []
    delivered = 0

    def report(err: Any, _msg: Any) -> None:
        nonlocal delivered
        if err is not None:
            errors.append(err)
        else:
            delivered += 1
    client.list_topics(phase.topic, timeout=10)  # connect before the clock starts
    roles = bench.roles(phase.topic)
    requests0 = bench.request_counts()
    pids = {b: bench.pid(b) for b in bench.broker_ids}
    cpu0 = {b: process_cpu_s(pid) for b, pid in pids.items()}
    client0, wall0 = self_cpu_s(), time.perf_counter()
    produce = client.produce
    for i in range(records):
        try:
            produce(phase.topic, value, partition=i % partitions, on_delivery=report)
        except BufferError:  # the local queue is full: serve delivery reports, then retry once
            client.poll(0.05)
            produce(phase.topic, value, partition=i % partitions, on_delivery=report)
        if i % 10_000 == 0:
            client.poll(0)
    left = client.flush(CLIENT_TIMEOUT_S)
    wall_s, client_cpu_s = time.perf_counter() - wall0, self_cpu_s() - client0
    cpu = {b: process_cpu_s(pid) - cpu0[b] for b, pid in pids.items()}
    requests1 = bench.request_counts()
    if left or errors or delivered != records:
        raise RuntimeError(f"{phase.name}: {delivered}/{records} delivered, {left} left, errors {errors[:3]}")
    requests = {b: {api: n - requests0[b].get(api, 0.0) for api, n in apis.items()}
                for b, apis in requests1.items()}
    return Sample(phase, records, records * len(value), wall_s, client_cpu_s, cpu, roles, requests)


def throughput(bench: Bench, args: argparse.Namespace) -> list[Sample]:
    p = args.partitions
    bench.create("rf1", p, 1)
    bench.create("rf3", p, 3)
    phases = [Phase("RF=1 acks=all", "rf1", "all"), Phase("RF=3 acks=all", "rf3", "all"),
              Phase("RF=3 acks=1", "rf3", "1")]
    value = os.urandom(args.value_bytes)
    samples: list[Sample] = []
    print(throughput_header(bench.broker_ids))
    for r in range(args.rounds):
        # reversed every other round: neither RF=1 nor RF=3 always runs on a warmer cache
        for phase in phases if r % 2 == 0 else phases[::-1]:
            sample = produce_phase(bench, phase, p, args.records, value)
            samples.append(sample)
            print(throughput_line(f"{r + 1}", sample, bench.broker_ids), flush=True)
    return samples


def throughput_header(brokers: Sequence[int]) -> str:
    return (f"{'round':<6} {'phase':<14} {'records/s':>10} {'MB/s':>6} {'cli cpu':>7} "
            + " ".join(f"{f'brk{b} cpu':>10}" for b in brokers)
            + f" {'brk sum':>7} {'rec/produce':>11} {'rec/repl fetch':>14}")


def throughput_line(label: str, s: Sample, brokers: Sequence[int]) -> str:
    produces = s.led_requests("PRODUCE")
    # each follower fetch that brings records advances one follower; with RF=3 two followers
    # each fetch all records once, so records per replication round trip is records / (fetches / 2)
    fetches = s.led_requests("FETCH")
    per_fetch = s.records / (fetches / 2) if "F" in "".join(s.roles.values()) and fetches else None
    per_produce = s.records / produces if produces else None
    return (f"{label:<6} {s.phase.name:<14} {s.records_per_s:>10,.0f} {s.mb_per_s:>6.1f} {s.client_cpu_s:>7.2f} "
            + " ".join(f"{s.broker_cpu_s[b]:>7.2f} {s.roles[b]:<2}" for b in brokers)
            + f" {sum(s.broker_cpu_s.values()):>7.2f} {fmt(per_produce, ',.0f'):>11} {fmt(per_fetch, ',.0f'):>14}")


def summarize_throughput(samples: list[Sample], brokers: Sequence[int]) -> None:
    by_phase: dict[str, list[Sample]] = {}
    for s in samples:
        by_phase.setdefault(s.phase.name, []).append(s)
    print(f"\n{'':<6} {'phase':<14} {'records/s':>10} {'MB/s':>6} (median round; best in brackets)")
    for name, rows in by_phase.items():
        median = sorted(rows, key=lambda s: s.records_per_s)[(len(rows) - 1) // 2]
        best = max(rows, key=lambda s: s.records_per_s)
        print(throughput_line("median", median, brokers) + f"   [best {best.records_per_s:,.0f}/s]")
    rf1, rf3, rf3_acks1 = (by_phase[n] for n in ("RF=1 acks=all", "RF=3 acks=all", "RF=3 acks=1"))
    paired = [b.records_per_s / a.records_per_s for a, b in zip(rf1, rf3)]
    best_ratio = max(s.records_per_s for s in rf3) / max(s.records_per_s for s in rf1)
    print(f"\nRF3/RF1 acks=all throughput: {statistics.median(paired):.2f} (median of rounds "
          f"{', '.join(f'{x:.2f}' for x in paired)}; best/best {best_ratio:.2f})")
    acks1 = [b.records_per_s / a.records_per_s for a, b in zip(rf1, rf3_acks1)]
    print(f"RF3 acks=1 / RF1 acks=all: {statistics.median(acks1):.2f}")


# --- failover ----------------------------------------------------------------------------------


def wait_until(what: str, condition: Callable[[], Any], timeout_s: float, poll_s: float = 0.01) -> Any:
    """`common.waiting.wait_until`, polling often: failover times are measured with it."""
    return waiting.wait_until(what, condition, timeout_s, poll_s=poll_s)


class AckClock:
    """An idempotent acks=all producer on a thread, one record per poll, each record
    remembering when it was produced, so 'the first record produced after t and acked' is exact."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self._producer = confluent_kafka.Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
            "message.timeout.ms": int(FAILOVER_WAIT_S * 1000),  # retries and backoffs: librdkafka's
            # "Connect ... failed: Connection refused" to stderr after each kill would break the table
            "logger": QUIET})
        self.acks: list[tuple[float, float]] = []  # (produced at, acknowledged at), time.monotonic()
        self.errors: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"ack-clock-{topic}", daemon=True)

    def __enter__(self) -> AckClock:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        self.stop(purge=kind is not None)  # failing or Ctrl-C: do not wait out a dead leader

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():  # until stop(); one record per pass
            produced = time.monotonic()

            def report(err: Any, _msg: Any, produced: float = produced) -> None:
                now = time.monotonic()
                if err is None:
                    self.acks.append((produced, now))
                else:
                    self.errors.append((now, err.name()))
            try:
                self._producer.produce(self.topic, b"%d" % n, partition=0, on_delivery=report)
                n += 1
            except BufferError:
                pass  # the local queue is full while the cluster recovers
            self._producer.poll(WRITE_INTERVAL_S)

    def first_ack_after(self, since: float, timeout_s: float) -> float:
        """When the first record produced after `since` was acknowledged (bounded wait)."""
        def first() -> float | None:
            return min((acked for produced, acked in list(self.acks) if produced > since), default=None)
        try:
            acked: float = wait_until(f"{self.topic}: a record produced after the kill acknowledged", first, timeout_s)
        except RuntimeError as e:
            raise RuntimeError(f"{e}; last delivery errors {self.errors[-3:]}") from None
        return acked

    def acked_since(self, since: float) -> int:
        return sum(1 for produced, _ in list(self.acks) if produced > since)

    def stop(self, *, purge: bool = False) -> int:
        """Stop writing; wait (bounded) for outstanding deliveries, or drop them; records left."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(STOP_WAIT_S)
        if purge:
            self._producer.purge()
        return self._producer.flush(STOP_WAIT_S)


@dataclass
class Failover:
    killed: int
    new_leader: int = -1
    fenced_at: float | None = None
    elected_at: float | None = None
    acked_at: float | None = None
    killed_at: float = 0.0

    def after_kill(self, at: float | None) -> float | None:
        return None if at is None else at - self.killed_at

    @property
    def total_s(self) -> float:
        assert self.acked_at is not None
        return self.acked_at - self.killed_at

    @property
    def parts(self) -> tuple[float | None, float | None, float | None]:
        """(session, election, client) in seconds; None where the watch missed a step."""
        session = self.after_kill(self.fenced_at)
        election = None if self.elected_at is None or self.fenced_at is None else self.elected_at - self.fenced_at
        client = None if self.elected_at is None or self.acked_at is None else self.acked_at - self.elected_at
        return session, election, client


def watch(bench: Bench, topic: str, failover: Failover, done: threading.Event) -> None:
    """Poll the controller until it has fenced the killed broker and elected a new leader."""
    deadline = time.monotonic() + FAILOVER_WAIT_S
    while not done.is_set() and time.monotonic() < deadline:  # bounded by the deadline
        try:
            if failover.fenced_at is None and bench.fenced(failover.killed):
                failover.fenced_at = time.monotonic()
            if failover.elected_at is None:
                leader = bench.partitions(topic)[0]["leader"]
                if leader >= 0 and leader != failover.killed:
                    failover.elected_at, failover.new_leader = time.monotonic(), leader
        except OSError:  # a slow answer (the controller is busy fencing): poll again
            pass
        if failover.fenced_at is not None and failover.elected_at is not None:
            return
        time.sleep(WATCH_POLL_S)


def failovers(bench: Bench, topic: str, kills: int, fault: str = "kill") -> list[Failover]:
    """`kills` times: SIGKILL (or SIGSTOP, fault="pause") the leader, time to the first ack, bring it back."""
    bench.create(topic, 1, 3)
    results = []
    with AckClock(bench.bootstrap, topic) as writer:
        steady_since = time.monotonic()
        for k in range(kills):
            wait_until(f"{STEADY_ACKS} acks before kill {k + 1}",
                       lambda: writer.acked_since(steady_since) >= STEADY_ACKS, FAILOVER_WAIT_S)
            leader = bench.partitions(topic)[0]["leader"]
            failover = Failover(leader)
            done = threading.Event()
            watcher = threading.Thread(target=watch, args=(bench, topic, failover, done), daemon=True)
            failover.killed_at = time.monotonic()  # SIGKILL follows at once (Nemesis.kill's own time
            if fault == "pause":                   # comes after a 0.1 s poll for the exit)
                bench.nemesis.pause(leader)
            else:
                bench.nemesis.kill(leader)
            watcher.start()
            try:
                failover.acked_at = writer.first_ack_after(failover.killed_at, FAILOVER_WAIT_S)
                watcher.join(WATCH_GRACE_S)  # it sees the new leader within a poll or two of the ack
            finally:
                done.set()
                watcher.join(FAILOVER_WAIT_S)
            results.append(failover)
            print(failover_line(k + 1, failover), flush=True)
            if fault == "pause":
                bench.nemesis.resume(leader)
            else:
                bench.nemesis.restart(leader)
            bench.wait_full_isr(topic, ISR_WAIT_S)
            steady_since = time.monotonic()
    if writer.errors:
        print(f"  ({len(writer.errors)} failed deliveries, first {writer.errors[:3]})")
    return results


FAILOVER_HEADER: Final = (f"{'fault':<6} {'leader':>6} {'->new':>5} {'session s':>9} {'election s':>10} "
                          f"{'client s':>8} {'kill->ack s':>11}")


def failover_line(label: int | str, f: Failover) -> str:
    session, election, client = f.parts
    return (f"{label!s:<6} {f.killed:>6} {f.new_leader:>5} {fmt(session, '.3f'):>9} {fmt(election, '.3f'):>10} "
            f"{fmt(client, '.3f'):>8} {f.total_s:>11.3f}")


def summarize_failover(name: str, results: list[Failover], fault: str = "SIGKILL") -> dict[str, float | None]:
    def median(values: list[float | None]) -> float | None:
        present = [v for v in values if v is not None]
        return statistics.median(present) if present else None
    session, election, client = (median([f.parts[i] for f in results]) for i in range(3))
    total = statistics.median(f.total_s for f in results)
    print(f"{'median':<6} {'':>6} {'':>5} {fmt(session, '.3f'):>9} {fmt(election, '.3f'):>10} "
          f"{fmt(client, '.3f'):>8} {total:>11.3f}")
    parts = {"session expiry": session, "election": election, "client/replication after election": client}
    dominant = max(parts, key=lambda k: parts[k] or 0.0)
    print(f"  {name}: {fault} -> first acks=all write {', '.join(f'{f.total_s:.2f}' for f in results)} s, "
          f"median {total:.2f} s; dominated by {dominant} ({(parts[dominant] or 0.0) / total:.0%})")
    return {"total_s": total, "session_s": session}


# --- latency -------------------------------------------------------------------------------------


def latencies(bench: Bench, binary: Path, rate: int, seconds: float, value_bytes: int) -> dict[str, Any]:
    """acks=all linger 0 at `rate` records/s into RF=1 and RF=3 topics: percentiles per RF."""
    print(f"\nlatency: idempotent acks=all, linger.ms=0, {rate} records/s for {seconds:g} s (C load generator)")
    print(f"{'RF':<4} {'p50 ms':>8} {'p99 ms':>8} {'p99.9 ms':>9} {'max ms':>8} {'brk cpu s':>10}")
    out: dict[str, Any] = {}
    total = int(rate * seconds)
    for rf in (1, 3):
        topic = f"latency-rf{rf}"
        bench.create(topic, 1, rf)
        cpu0 = {b: process_cpu_s(bench.pid(b)) for b in bench.broker_ids}
        result = c_client.produce(binary, bench.bootstrap, topic, records=total, value_bytes=value_bytes,
                                  partitions=1, acks="all", linger_ms=0, rate=rate, warmup=total // 5)
        cpu = sum(process_cpu_s(bench.pid(b)) - cpu0[b] for b in bench.broker_ids)
        print(f"{rf:<4} {fmt(result.p50_ms, '.2f'):>8} {fmt(result.p99_ms, '.2f'):>8} "
              f"{fmt(result.p999_ms, '.2f'):>9} {fmt(result.max_ms, '.2f'):>8} {cpu:>10.2f}", flush=True)
        out[f"rf{rf}"] = {"p50_ms": result.p50_ms, "p99_ms": result.p99_ms, "p999_ms": result.p999_ms,
                          "max_ms": result.max_ms, "brokers_cpu_s": cpu}
    return out


# --- main ----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000, help="records per throughput phase")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=1, help="partitions of the throughput topics")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the three phases")
    parser.add_argument("--kills", type=int, default=3, help="leader SIGKILLs per session setting")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-failover", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--pauses", type=int, default=1, help="leader SIGSTOPs on the default-session cluster")
    parser.add_argument("--rate", type=int, default=10_000, help="records/s of the latency phase")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the latency phase")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here (bench/all.py)")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="tidelog-bench-replication-", dir=args.dir))
    binary = None if args.skip_latency else c_client.build()
    results: dict[str, Any] = {"load_average": os.getloadavg()[0]}
    print(f"{args.records:,} x {args.value_bytes} B records per phase, {args.partitions} partition(s), "
          f"{args.rounds} rounds; {args.kills} leader kills per session setting; confluent-kafka "
          f"{confluent_kafka.version()[0]} / librdkafka {confluent_kafka.libversion()[0]}; {os.cpu_count()} CPUs")
    try:
        for i, (name, extra) in enumerate(SESSIONS):
            if args.skip_failover and i > 0:
                break
            with running(root / f"cluster-{i}", extra) as bench:
                print(f"\n== cluster: broker session {name}; brokers "
                      + ", ".join(f"{b} pid {bench.pid(b)}" for b in bench.broker_ids))
                if i == 0 and not args.skip_throughput:
                    samples = throughput(bench, args)
                    summarize_throughput(samples, bench.broker_ids)
                if i == 0 and binary is not None:
                    results["latency"] = latencies(bench, binary, args.rate, args.seconds, args.value_bytes)
                if not args.skip_failover:
                    print(f"\nleader SIGKILL -> first acks=all write (RF=3, min.insync.replicas={MIN_INSYNC}), "
                          f"session {name}")
                    print(FAILOVER_HEADER)
                    results[f"kill {name}"] = summarize_failover(name, failovers(bench, f"failover-{i}", args.kills))
                if i == 0 and not args.skip_failover and args.pauses:
                    print(f"\nleader SIGSTOP -> first acks=all write (a paused broker is fenced only when its "
                          f"session expires), session {name}")
                    print(FAILOVER_HEADER)
                    results[f"pause {name}"] = summarize_failover(
                        name, failovers(bench, f"pause-{i}", args.pauses, fault="pause"), "SIGSTOP")
        if args.json is not None:
            args.json.write_text(json.dumps(results, indent=1))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
