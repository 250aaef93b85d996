"""Transactions (issue 27), side by side: tidelog and the Tansu broker, with confluent-kafka (librdkafka).

- produce: one producer writes --value-bytes records round-robin to 3 partitions as fast as
  librdkafka takes them (linger.ms=5, batch.size=1 MiB, acks=all, idempotent), plainly with a
  flush every --commit-ms, and transactionally with a commit every --commit-ms (100 ms)
  instead; the two take turns (3 turns each, --seconds in all). The transactional rate as a
  fraction of the plain one (goal >= 0.8), and commit_transaction()'s latency under that load
  (the call to its return: the flush of the last batches, then EndTxn);
- small commits: --commits transactions of one record on each of the 3 partitions, back to
  back; commit_transaction() latency p50/p99 with (almost) nothing to flush (its flush,
  AddPartitionsToTxn and EndTxn), then from its return until the markers are visible: a
  read_committed ListOffsets (the LSO) past the transaction on all 3 partitions;
- consume-transform-produce: --ctp-records records from a 3-partition topic, each turned into
  one output record, committing every --commit-ms either exactly-once (a read_committed
  consumer, send_offsets_to_transaction + commit_transaction) or at-least-once (flush, then a
  synchronous consumer commit): records/s from the first record read to the last commit.

The C load generator (bench/loadgen.c) has no transactions, so the client is confluent-kafka in
this process for every phase, plain and transactional alike (the same client on both sides of
each ratio; on a 2-core machine the Python produce() loop is part of what is measured, shown as
client CPU). tidelog runs as 1 controller + 1 broker (RF=1); Tansu with memory storage, skipped
when absent, and reported as unsupported when its transactional producer cannot initialise.

    python bench/transactional_produce.py [--seconds 10] [--commits 200] [--ctp-records 200000] [--skip-tansu] [--skip-tidelog]
                                 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import confluent_kafka
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from produce_consume import Peer, measured, optional_tansu_peer, tidelog_peer

from common.units import MIB

PARTITIONS: Final = 3
CLIENT_TIMEOUT_S: Final = 120.0  # one blocking client call; a stuck broker fails the run
INIT_TIMEOUT_S: Final = 30.0  # init_transactions: a peer without transactions fails it within this
GOAL_FRACTION: Final = 0.8
POLL_EVERY: Final = 10_000  # produce() calls between delivery-report polls
ROUNDS: Final = 3  # plain and transactional produce alternate, each --seconds / ROUNDS a turn
WARMUP_S: Final = 2.0  # an unmeasured plain produce first: the first phase must not carry start-up costs


@dataclass
class Result:
    peer: str
    phase: str
    records: int
    wall_s: float
    broker_cpu_s: float
    client_cpu_s: float
    commits: int = 0
    commit_ms: list[float] = field(default_factory=list)

    @property
    def records_per_s(self) -> float:
        return self.records / self.wall_s if self.wall_s else 0.0

    def quantile_ms(self, q: float) -> float | None:
        if len(self.commit_ms) < 2:
            return self.commit_ms[0] if self.commit_ms else None
        return statistics.quantiles(self.commit_ms, n=100, method="inclusive")[round(q * 100) - 1]


def merged(results: list[Result]) -> Result:
    """One phase's rounds as one result: totals, and every commit's latency."""
    first = results[0]
    return Result(first.peer, first.phase, sum(r.records for r in results), sum(r.wall_s for r in results),
                  sum(r.broker_cpu_s for r in results), sum(r.client_cpu_s for r in results),
                  sum(r.commits for r in results), [ms for r in results for ms in r.commit_ms])


def producer(peer: Peer, transactional_id: str | None) -> Producer:
    config: dict[str, Any] = {
        "bootstrap.servers": peer.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
        "batch.size": MIB, "message.max.bytes": MIB + 1024,
        "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2 * MIB}  # KiB: 2 GiB
    if transactional_id is not None:
        config["transactional.id"] = transactional_id
    p = Producer(config)
    if transactional_id is not None:
        p.init_transactions(INIT_TIMEOUT_S)
    return p


def produce_for(peer: Peer, topic: str, *, seconds: float, value: bytes, commit_s: float,
                transactional: bool) -> Result:
    """Records as fast as librdkafka takes them for `seconds`, in transactions committed every
    commit_s, or plainly with a flush() every commit_s instead (the commit's wait is part of the
    phase: it is what transactions cost). The plain producer flushes at the same cadence because
    without it librdkafka's queue grows to millions of records and the client slows down (found
    on Tansu: an unflushed plain producer ran at 0.5-0.7x the transactional one); so the ratio
    shows what the transaction protocol adds, not a difference in queue depth."""
    p = producer(peer, f"bench-produce-{topic}" if transactional else None)
    p.list_topics(topic, timeout=10)  # connected before the clock starts
    sent, commit_ms = 0, []
    with measured(peer.pid) as m:
        start = time.perf_counter()
        end, next_commit = start + seconds, start + commit_s
        if transactional:
            p.begin_transaction()
        now = start
        while now < end:  # bounded by the phase's length
            for _ in range(POLL_EVERY):
                try:
                    p.produce(topic, value, partition=sent % PARTITIONS)
                except BufferError:  # the local queue is full: serve it, then go on
                    p.poll(0.01)
                    continue
                sent += 1
            p.poll(0)
            now = time.perf_counter()
            if now >= next_commit:
                if transactional:
                    p.commit_transaction(CLIENT_TIMEOUT_S)
                elif p.flush(CLIENT_TIMEOUT_S):
                    raise RuntimeError(f"{peer.name}: records left unsent after {CLIENT_TIMEOUT_S} s")
                after = time.perf_counter()
                commit_ms.append((after - now) * 1000)
                if transactional:
                    p.begin_transaction()
                now, next_commit = after, after + commit_s
        if transactional:
            p.commit_transaction(CLIENT_TIMEOUT_S)
        elif p.flush(CLIENT_TIMEOUT_S):
            raise RuntimeError(f"{peer.name}: records left unsent after {CLIENT_TIMEOUT_S} s")
    every = f"/{commit_s * 1000:g} ms)"
    phase = f"produce txn (commit{every}" if transactional else f"produce plain (flush{every}"
    return Result(peer.name, phase, sent, m["wall_s"], m["broker_cpu_s"], m["client_cpu_s"], len(commit_ms), commit_ms)


def small_commits(peer: Peer, topic: str, commits: int) -> list[Result]:
    """One-record-per-partition transactions back to back: commit_transaction() latency, and how
    long after it returns the markers are visible, i.e. until a read_committed ListOffsets
    (the last stable offset) is past the transaction's record on all 3 partitions. librdkafka's
    commit returns on EndTxn's answer, which Kafka's coordinator sends once PrepareCommit is
    logged, before its markers are written: this second figure is EndTxn -> markers written,
    seen from outside (plus one ListOffsets round trip, polled back to back)."""
    p = producer(peer, f"bench-small-{topic}")
    watcher = Consumer({"bootstrap.servers": peer.bootstrap, "group.id": f"bench-lso-{topic}",
                        "isolation.level": "read_committed"})
    offsets: dict[int, int] = {}

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            offsets[msg.partition()] = msg.offset()

    commit_ms, visible_ms = [], []
    try:
        with measured(peer.pid) as m:
            for _ in range(commits):  # bounded: --commits
                p.begin_transaction()
                for partition in range(PARTITIONS):
                    p.produce(topic, b"x", partition=partition, on_delivery=delivered)
                start = time.perf_counter()
                p.commit_transaction(CLIENT_TIMEOUT_S)
                returned = time.perf_counter()
                commit_ms.append((returned - start) * 1000)
                pending = set(range(PARTITIONS))
                while pending:  # bounded: a marker that never comes fails the run at the deadline
                    for partition in sorted(pending):
                        _, lso = watcher.get_watermark_offsets(TopicPartition(topic, partition), CLIENT_TIMEOUT_S,
                                                               cached=False)
                        if lso > offsets[partition]:
                            pending.discard(partition)
                    if time.perf_counter() - returned > CLIENT_TIMEOUT_S:
                        raise RuntimeError(f"{peer.name}: markers not visible {CLIENT_TIMEOUT_S} s after commit")
                visible_ms.append((time.perf_counter() - returned) * 1000)
    finally:
        watcher.close()
    phase = "small txn (1 record x 3 partitions)"
    return [Result(peer.name, phase, commits * PARTITIONS, m["wall_s"], m["broker_cpu_s"], m["client_cpu_s"],
                   commits, commit_ms),
            Result(peer.name, "small txn: return -> markers visible (LSO)", commits * PARTITIONS, m["wall_s"],
                   m["broker_cpu_s"], m["client_cpu_s"], commits, visible_ms)]


def fill(peer: Peer, topic: str, records: int, value: bytes) -> None:
    p = producer(peer, None)
    for i in range(records):
        try:
            p.produce(topic, value, key=str(i).encode(), partition=i % PARTITIONS)
        except BufferError:
            p.poll(0.05)
            p.produce(topic, value, key=str(i).encode(), partition=i % PARTITIONS)
    if p.flush(CLIENT_TIMEOUT_S):
        raise RuntimeError(f"{peer.name}: could not fill {topic}")


def transform(peer: Peer, source: str, sink: str, records: int, *, exactly_once: bool, commit_s: float) -> Result:
    """Read every record of `source`, write one per record to `sink`, committing every commit_s."""
    group = f"bench-ctp-{sink}"
    consumer = Consumer({"bootstrap.servers": peer.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False,
                         "isolation.level": "read_committed" if exactly_once else "read_uncommitted"})
    p = producer(peer, f"bench-ctp-{sink}" if exactly_once else None)
    consumer.subscribe([source])
    done, commits, commit_ms = 0, 0, []
    try:
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        first = consumer.poll(CLIENT_TIMEOUT_S)  # the group join is not part of the loop's rate
        while first is None or first.error() is not None:  # bounded by the deadline
            if time.monotonic() > deadline:
                raise RuntimeError(f"{peer.name}: nothing to transform in {source}")
            first = consumer.poll(1.0)
        batch = [first]
        with measured(peer.pid) as m:
            if exactly_once:
                p.begin_transaction()
            next_commit = time.perf_counter() + commit_s
            while True:  # bounded: ends at `records`, or the deadline
                for msg in batch:
                    if msg.error() is None:
                        p.produce(sink, msg.value()[::-1], key=msg.key(), partition=msg.partition())
                        done += 1
                p.poll(0)
                now = time.perf_counter()
                if now >= next_commit or done >= records:
                    start = time.perf_counter()
                    if exactly_once:
                        p.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                      consumer.consumer_group_metadata(), CLIENT_TIMEOUT_S)
                        p.commit_transaction(CLIENT_TIMEOUT_S)
                    else:
                        if p.flush(CLIENT_TIMEOUT_S):
                            raise RuntimeError(f"{peer.name}: output left unsent")
                        # explicit positions: a commit with nothing consumed since the last is _NO_OFFSET
                        consumer.commit(offsets=consumer.position(consumer.assignment()), asynchronous=False)
                    commit_ms.append((time.perf_counter() - start) * 1000)
                    commits += 1
                    if done >= records:
                        break
                    if exactly_once:
                        p.begin_transaction()
                    next_commit = time.perf_counter() + commit_s
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{peer.name}: transformed {done}/{records} before the deadline")
                batch = consumer.consume(10_000, 0.05)
    finally:
        consumer.close()
    mode = "exactly-once" if exactly_once else "at-least-once"
    return Result(peer.name, f"consume-transform-produce {mode}", done, m["wall_s"], m["broker_cpu_s"],
                  m["client_cpu_s"], commits, commit_ms)


def supports_transactions(peer: Peer) -> str | None:
    """None when a transactional producer initialises and commits; else why not."""
    try:
        p = producer(peer, "bench-probe")
        p.begin_transaction()
        p.commit_transaction(INIT_TIMEOUT_S)
    except KafkaException as e:
        return str(e.args[0]) if e.args else repr(e)
    return None


def run_peer(peer: Peer, args: argparse.Namespace, show: Callable[[Result], None]) -> None:
    value = b"v" * args.value_bytes
    for topic in ("plain", "txn", "small", "ctp-in", "ctp-eos", "ctp-alo"):
        peer.create(topic, PARTITIONS)
    why = supports_transactions(peer)
    if why is not None:
        print(f"{peer.name}: transactions unsupported ({why}); its transactional phases are skipped", flush=True)
        show(produce_for(peer, "plain", seconds=args.seconds, value=value, commit_s=args.commit_ms / 1000,
                         transactional=False))
        return
    commit_s = args.commit_ms / 1000
    # unmeasured first: connections, producer ids and caches are no phase's cost
    produce_for(peer, "plain", seconds=WARMUP_S, value=value, commit_s=commit_s, transactional=False)
    # plain and transactional take turns (a shared machine's load drifts; both see the same drift)
    turns: dict[bool, list[Result]] = {False: [], True: []}
    for _ in range(ROUNDS):
        for transactional in (False, True):
            turns[transactional].append(produce_for(peer, "txn" if transactional else "plain",
                                                    seconds=args.seconds / ROUNDS, value=value, commit_s=commit_s,
                                                    transactional=transactional))
    for transactional in (False, True):
        show(merged(turns[transactional]))
    for result in small_commits(peer, "small", args.commits):
        show(result)
    fill(peer, "ctp-in", args.ctp_records, value)
    show(transform(peer, "ctp-in", "ctp-alo", args.ctp_records, exactly_once=False, commit_s=commit_s))
    show(transform(peer, "ctp-in", "ctp-eos", args.ctp_records, exactly_once=True, commit_s=commit_s))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def line(r: Result) -> str:
    return (f"{r.peer:<8} {r.phase:<44} {r.records_per_s:>11,.0f} {r.broker_cpu_s:>9.2f} {r.client_cpu_s:>9.2f} "
            f"{r.commits:>7} {_ms(r.quantile_ms(0.5)):>8} {_ms(r.quantile_ms(0.99)):>8}")


HEADER: Final = (f"{'peer':<8} {'phase':<44} {'records/s':>11} {'brk cpu s':>9} {'cli cpu s':>9} "
                 f"{'commits':>7} {'p50 ms':>8} {'p99 ms':>8}")


def fractions(rows: list[Result]) -> dict[str, dict[str, float]]:
    """Per peer: transactional / plain produce, exactly-once / at-least-once transform."""
    out: dict[str, dict[str, float]] = {}
    for peer in dict.fromkeys(r.peer for r in rows):
        rate = {r.phase.split(" (")[0]: r.records_per_s for r in rows if r.peer == peer}
        got = {}
        if rate.get("produce plain") and "produce txn" in rate:
            got["txn_over_plain"] = rate["produce txn"] / rate["produce plain"]
        eos = rate.get("consume-transform-produce exactly-once")
        alo = rate.get("consume-transform-produce at-least-once")
        if eos and alo:
            got["eos_over_alo"] = eos / alo
        out[peer] = got
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each produce phase")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--commit-ms", type=float, default=100.0, help="commit interval of the loops")
    parser.add_argument("--commits", type=int, default=200, help="small transactions for the latency phase")
    parser.add_argument("--ctp-records", type=int, default=200_000)
    parser.add_argument("--skip-tansu", action="store_true")
    parser.add_argument("--skip-tidelog", action="store_true")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here (bench/all.py)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tidelog-bench-txn-"))
    rows: list[Result] = []

    def show(r: Result) -> None:
        rows.append(r)
        print(line(r), flush=True)

    print(f"{PARTITIONS} partitions, {args.value_bytes} B records, commit every {args.commit_ms:g} ms; "
          f"confluent-kafka {confluent_kafka.version()[0]} / librdkafka {confluent_kafka.libversion()[0]}; "
          f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}\n")
    print(HEADER)
    try:
        if not args.skip_tidelog:
            with tidelog_peer(root / "tidelog") as peer:
                run_peer(peer, args, show)
        with optional_tansu_peer(root, skip=args.skip_tansu) as tansu:
            if tansu is not None:
                run_peer(tansu, args, show)
        ratios = fractions(rows)
        for peer, got in ratios.items():
            parts = [f"transactional / plain produce {got['txn_over_plain']:.2f} (goal >= {GOAL_FRACTION})"
                     if "txn_over_plain" in got else "", f"exactly-once / at-least-once transform "
                     f"{got['eos_over_alo']:.2f}" if "eos_over_alo" in got else ""]
            print(f"{peer}: " + "; ".join(p for p in parts if p))
        if args.json is not None:
            args.json.write_text(json.dumps({"rows": [{**asdict(r), "records_per_s": r.records_per_s,
                                                       "p50_ms": r.quantile_ms(0.5), "p99_ms": r.quantile_ms(0.99)}
                                                      for r in rows], "fractions": ratios}, indent=1))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
