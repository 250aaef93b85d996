"""Batch-read throughput of the tidelog Spark source, beside a plain confluent-kafka consumer,
and batch-write throughput of its sink, at-least-once beside exactly-once.

One run, one cluster (controller 1 + broker 2 on loopback, RF 1), one topic of
`--partitions` partitions holding `--records` records of `--value-bytes` bytes (keys 8
bytes, no headers). Then, on the same records:

- plain consumer: one confluent-kafka consumer assigned to every partition, a
  `consume(num_messages=10000)` loop touching each record's value — the floor of any
  Python reader;
- range reader: the source's own per-task code (`spark.range_reader.read_range`), every
  partition in turn in this process, building the Arrow batches Spark would get — the
  source's cost without Spark;
- Spark -> noop: `spark.read.format("tidelog")...write.format("noop")`, local[2]: the
  source through Spark (Python workers, Arrow transfer), no output cost;
- Spark -> Parquet: the same into Parquet files (snappy) in a temporary directory;
- Spark -> tidelog at-least-once: the first `--write-records` of those records (key,
  value, each to the partition it was read from) written back into a topic of as many
  partitions by the sink (`df.write.format("tidelog")`, spark/writer.py): one idempotent
  producer per task, no transaction;
- Spark -> tidelog exactly-once: the same rows into another topic with `transactional=true`
  (spark/txn_sink.py): each task writes its rows in a transaction it prepares, the driver
  commits them all (EndTxn) once every task succeeded.
  The two alternate `--write-runs` times, each run into topics of its own (the first write
  after the reads is the slowest whichever sink does it: imports in the workers, the JIT);
  the ratio of the best rows/s of each is printed and is in the JSON (`eos_over_alo`, on
  the exactly-once row). Each output is read back with the source (read_committed for the
  exactly-once one) and must hold every row.

The Spark phases run on each master of `--masters`: `local[2]` (one JVM, tasks on two
threads, Python workers forked by it) and `standalone` (spark/standalone.py: a master and two
workers of 1 core each started from the installed pyspark, so each task runs in an executor
JVM of its own, reading through its own Python workers, as on a real cluster; the driver
here). The sinks are measured on the first master only.

Spark's first query (worker start-up, imports) runs before the timed ones on the first
1000 records of each partition and is reported on its own. rows/s = records / wall-clock seconds of the phase.
Each Spark phase also gives the CPU it cost per row, from /proc: the JVM (Spark's own
threads), the Python workers (the source's `read()`), and the broker.

    python bench/spark_ingest.py [--records 2000000] [--write-records 300000] [--write-runs 2]
                                 [--value-bytes 100] [--partitions 4] [--noop-runs 1]
                                 [--masters local[2],standalone] [--conf spark.key=value ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Final

import confluent_kafka

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout: `python bench/...`

from spark.offsets import OffsetRange  # noqa: E402
from spark.options import parse_source_options  # noqa: E402
from spark.range_reader import read_range  # noqa: E402
from spark.standalone import StandaloneCluster, cluster_session, standalone_cluster  # noqa: E402
from localcluster.launcher import LocalCluster, free_ports  # noqa: E402

HOSTS: Final = ("127.0.0.1", "127.0.0.2")
TOPIC: Final = "bench"
WARM_RECORDS: Final = 1000  # per partition: Spark's first query, not counted
# the sinks' phases: label, transactional, the isolation level their output is read back with
SINKS: Final = (("ALO", False, "read_uncommitted"), ("EOS", True, "read_committed"))
READY_S: Final = 60.0
CLIENT_TIMEOUT_S: Final = 600.0  # one phase; a stuck broker fails the run
CONSUME_BATCH: Final = 10_000
MB: Final = 1e6
CLK_TCK: Final = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, list[str]] | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(fields[1]), fields


def cpu_by_kind(broker_pid: int) -> dict[str, float]:
    """CPU seconds so far of this process's descendants, as JVM / Python workers, and of the
    broker. utime+stime of live ones plus cutime+cstime (workers reaped by Spark's daemon)."""
    stats = {pid: st for pid in (int(d) for d in os.listdir("/proc") if d.isdigit())
             if (st := _stat(pid)) is not None}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    totals = {"jvm": 0.0, "python": 0.0, "broker": 0.0}
    todo = list(children.get(os.getpid(), []))
    while todo:  # bounded: each process once (a tree)
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        fields = stats[pid][1]
        seconds = sum(int(f) for f in fields[11:15]) / CLK_TCK
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except FileNotFoundError:
            continue
        if pid == broker_pid:
            totals["broker"] += seconds
        elif b"java" in command.split(b"\0")[0]:
            totals["jvm"] += seconds
        elif b"pyspark" in command:
            totals["python"] += seconds
    return totals


def timed(label: str, records: int, record_bytes: int, action: Callable[[], int],
          cpu: Callable[[], dict[str, float]] | None = None) -> dict[str, Any]:
    before = cpu() if cpu else {}
    started = time.perf_counter()
    count = action()
    seconds = time.perf_counter() - started
    if count != records:
        raise SystemExit(f"{label}: read {count} records, expected {records}")
    row: dict[str, Any] = {"phase": label, "records": count, "seconds": round(seconds, 2),
                           "rows_per_s": round(count / seconds),
                           "mb_per_s": round(count * record_bytes / seconds / MB, 1)}
    shown = ""
    if cpu:
        after = cpu()
        row["cpu_us_per_row"] = {k: round((after[k] - before[k]) / count * 1e6, 2) for k in after}
        shown = "  CPU us/row " + " ".join(f"{k} {v}" for k, v in row["cpu_us_per_row"].items())
    print(f"{label:<22} {count:>10,} records {seconds:8.2f} s {row['rows_per_s']:>12,.0f} rows/s "
          f"{row['mb_per_s']:8.1f} MB/s{shown}", flush=True)
    return row


def create_topic(admin_url: str, partitions: int, name: str = TOPIC) -> None:
    import urllib.request
    body = json.dumps({"name": name, "partitions": partitions, "replication_factor": 1, "configs": {}}).encode()
    request = urllib.request.Request(f"{admin_url}/v1/topics", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 201, answer.read()


def produce(bootstrap: str, records: int, partitions: int, value_bytes: int) -> int:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20,
                                         "batch.size": 1_048_576, "queue.buffering.max.messages": 1_000_000,
                                         "log_level": 3})
    value = b"v" * value_bytes
    failures: list[Any] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(err)
    for i in range(records):
        while True:  # bounded: a full queue drains as the broker acknowledges
            try:
                producer.produce(TOPIC, value, b"%08d" % i, i % partitions, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(CLIENT_TIMEOUT_S) or failures:
        raise SystemExit(f"produce failed: {failures[:3]}")
    return records


def plain_consumer(bootstrap: str, partitions: int, records: int) -> int:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-never-joined",
                                         "enable.auto.commit": False, "log_level": 3})
    consumer.assign([confluent_kafka.TopicPartition(TOPIC, p, 0) for p in range(partitions)])
    count = 0
    size = 0
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    try:
        while count < records and time.monotonic() < deadline:  # bounded by the deadline
            for msg in consumer.consume(CONSUME_BATCH, 1.0):
                if msg.error() is None:
                    size += len(msg.value() or b"")
                    count += 1
    finally:
        consumer.close()
    return count


def range_reader(bootstrap: str, ends: dict[int, int]) -> int:
    options = parse_source_options({"kafka.bootstrap.servers": bootstrap, "subscribe": TOPIC}, streaming=False)
    return sum(batch.num_rows for p, end in ends.items()
               for batch in read_range(OffsetRange(TOPIC, p, 0, end), options))


def source_between(session: Any, bootstrap: str, ends: dict[str, dict[str, int]]) -> Any:
    return session.read.format("tidelog").option("kafka.bootstrap.servers", bootstrap) \
        .option("subscribe", TOPIC).option("endingOffsets", json.dumps(ends)).load()


def first_records(records: int, partitions: int) -> dict[int, int]:
    """Partition -> end offset of the first `records` records `produce` wrote (round robin)."""
    return {p: records // partitions + (1 if p < records % partitions else 0) for p in range(partitions)}


def write_back(session: Any, bootstrap: str, topic: str, ends: dict[int, int], *,
               transactional: bool) -> Callable[[], int]:
    """A phase writing the source's records below `ends` (key, value, each to the partition it
    was read from) into `topic` through the sink; it answers how many it wrote."""
    def write() -> int:
        rows = source_between(session, bootstrap, {TOPIC: {str(p): end for p, end in ends.items()}})
        writer = rows.select("key", "value", "partition").write.format("tidelog").mode("append") \
            .option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
        if transactional:
            writer = writer.option("transactional", "true")
        writer.save()
        return sum(ends.values())
    return write


def read_back(session: Any, bootstrap: str, topic: str, records: int, isolation: str) -> None:
    """The output holds every row once: a reader of `isolation` counts `records` (read_committed
    for the exactly-once sink: only its committed transactions, no commit-log record)."""
    found = session.read.format("tidelog").option("kafka.bootstrap.servers", bootstrap) \
        .option("subscribe", topic).option("kafka.isolation.level", isolation).load().count()
    if found != records:
        raise SystemExit(f"{topic} holds {found} rows under {isolation}, expected {records}")


def write_phases(session: Any, admin_url: str, bootstrap: str, args: argparse.Namespace, record_bytes: int,
                 cpu: Callable[[], dict[str, float]]) -> list[dict[str, Any]]:
    """Each sink writes the first `args.write_records` records `args.write_runs` times,
    alternating, into topics bench-out-<sink>-<run>; each output read back whole."""
    written = min(args.write_records, args.records)
    ends = first_records(written, args.partitions)
    topics = {(label, run): f"bench-out-{label.lower()}-{run}"
              for label, _, _ in SINKS for run in range(args.write_runs)}
    for topic in topics.values():
        create_topic(admin_url, args.partitions, topic)
    time.sleep(1.0)  # the broker applies the new topics' metadata
    rows: list[dict[str, Any]] = []
    best: dict[str, dict[str, Any]] = {}
    for run in range(args.write_runs):
        for label, transactional, isolation in SINKS:
            topic = topics[(label, run)]
            row = timed(f"Spark -> tidelog ({label})", written, record_bytes,
                        write_back(session, bootstrap, topic, ends, transactional=transactional), cpu)
            read_back(session, bootstrap, topic, written, isolation)
            rows.append(row)
            if label not in best or row["rows_per_s"] > best[label]["rows_per_s"]:
                best[label] = row
    ratio = round(best["EOS"]["rows_per_s"] / best["ALO"]["rows_per_s"], 2)
    best["EOS"]["eos_over_alo"] = ratio
    print(f"exactly-once / at-least-once (best of {args.write_runs} each): {ratio:.2f}", flush=True)
    return rows


MASTERS: Final = ("local[2]", "standalone")
STANDALONE_WORKERS: Final = 2  # x 1 core: as many task slots as local[2]


def spark_session(conf: list[str], standalone: StandaloneCluster | None = None) -> Any:
    """local[2] (driver memory 2g), or a driver for the standalone cluster; `conf` on top."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from spark import register
    if standalone is not None:
        session = cluster_session(standalone.master_url, "bench-spark-ingest-standalone")
    else:
        builder = (SparkSession.builder.master("local[2]").appName("bench-spark-ingest")
                   .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                   .config("spark.driver.memory", "2g"))
        session = builder.getOrCreate()
    for setting in conf:
        key, _, value = setting.partition("=")
        session.conf.set(key, value)
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session


def read_phases(session: Any, master: str, bootstrap: str, args: argparse.Namespace, record_bytes: int,
                ends: dict[int, int], work: Path, cpu: Callable[[], dict[str, float]]) -> list[dict[str, Any]]:
    """Spark -> noop (`--noop-runs` times) and Spark -> Parquet on one master, after a warm-up query."""
    def source() -> Any:
        return session.read.format("tidelog").option("kafka.bootstrap.servers", bootstrap) \
            .option("subscribe", TOPIC).load()
    started = time.perf_counter()
    warm_ends = {TOPIC: {str(p): min(WARM_RECORDS, end) for p, end in ends.items()}}
    warm = source_between(session, bootstrap, warm_ends).count()  # starts the Python workers
    print(f"{'Spark first query':<22} {warm:>10,} records {time.perf_counter() - started:8.2f} s "
          f"(worker start-up, not counted; {master})", flush=True)

    def to_noop() -> int:
        source().write.format("noop").mode("overwrite").save()
        return args.records
    rows = [timed("Spark -> noop", args.records, record_bytes, to_noop, cpu) for _ in range(args.noop_runs)]
    out = work / f"parquet-{master.strip('[]').replace('[', '-')}"

    def to_parquet() -> int:
        source().write.mode("overwrite").parquet(str(out))
        return args.records
    rows.append(timed("Spark -> Parquet", args.records, record_bytes, to_parquet, cpu))
    written = session.read.parquet(str(out)).count()
    if written != args.records:
        raise SystemExit(f"Parquet holds {written} rows, expected {args.records}")
    for row in rows:
        row["master"] = master
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--write-records", type=int, default=300_000,
                        help="records each sink writes (the first ones; at most --records)")
    parser.add_argument("--write-runs", type=int, default=2, help="timed runs of each sink, alternating")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--noop-runs", type=int, default=1, help="timed Spark -> noop runs")
    parser.add_argument("--masters", default=",".join(MASTERS),
                        help=f"where the Spark phases run, in order: {' and/or '.join(MASTERS)} (comma-separated)")
    parser.add_argument("--conf", action="append", default=[], help="a Spark SQL setting key=value (repeatable)")
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    args = parser.parse_args()
    masters = [m.strip() for m in args.masters.split(",") if m.strip()]
    if not masters or any(m not in MASTERS for m in masters):
        parser.error(f"--masters takes {', '.join(MASTERS)}, got {args.masters!r}")
    work = args.dir or Path(tempfile.mkdtemp(prefix="bench-spark-"))
    record_bytes = args.value_bytes + 8
    rows: list[dict[str, Any]] = []
    raft_port, admin_port, kafka_port, metrics_port = free_ports(HOSTS, 4)
    with LocalCluster.start(work / "cluster", controllers=1, raft_port=raft_port, admin_port=admin_port, brokers=1,
                            kafka_port=kafka_port, metrics_port=metrics_port, ready_timeout=READY_S) as cluster:
        bootstrap = cluster.bootstrap_servers or ""
        create_topic(cluster.admin_url, args.partitions)
        time.sleep(1.0)  # the broker applies the new topic's metadata
        print(f"tidelog at {bootstrap}: {args.records:,} records x {args.value_bytes} B value + 8 B key, "
              f"{args.partitions} partitions", flush=True)
        rows.append(timed("produce (acks=1)", args.records, record_bytes,
                          lambda: produce(bootstrap, args.records, args.partitions, args.value_bytes)))
        ends = first_records(args.records, args.partitions)
        rows.append(timed("plain consumer", args.records, record_bytes,
                          lambda: plain_consumer(bootstrap, args.partitions, args.records)))
        rows.append(timed("range reader (Arrow)", args.records, record_bytes, lambda: range_reader(bootstrap, ends)))

        broker_pid = cluster.brokers[0].pid
        cpu = lambda: cpu_by_kind(broker_pid or 0)  # noqa: E731  # standalone daemons are our children too
        for index, master in enumerate(masters):
            print(f"-- Spark on {master}", flush=True)
            with ExitStack() as stack:
                standalone = None if master == "local[2]" else stack.enter_context(
                    standalone_cluster(work / "standalone", workers=STANDALONE_WORKERS))
                session = spark_session(args.conf, standalone)
                stack.callback(session.stop)
                rows += read_phases(session, master, bootstrap, args, record_bytes, ends, work, cpu)
                if index == 0 and args.write_records > 0:
                    rows += write_phases(session, cluster.admin_url, bootstrap, args, record_bytes, cpu)
    print(json.dumps(rows))
    if args.dir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
