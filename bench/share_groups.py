"""Share groups (KIP-932) and the consumer group protocol (KIP-848) beside the classic one, with
confluent-kafka (librdkafka) on one tidelog process pair (1 controller + 1 broker).

- share throughput (issue 31's shapes): --records records of 100 B in a 2-partition topic, read
  by 1, 4 and 8 `ShareConsumer`s of a fresh share group (implicit acknowledgement: each poll
  accepts the previous one's records, the last batch on close); records/s from the first
  subscribe until every record arrived and the consumers closed (so every record was
  acknowledged), and how many arrived twice (a lock that ran out);
- rebalance: 10 members share a 22-partition topic; an 11th joins, then one leaves; time from
  the 11th's subscribe() (or the leaver's close()) until the members hold disjoint, non-empty
  assignments covering every partition. Classic: eager "range" with heartbeat.interval.ms=100
  (members learn of a rebalance from a heartbeat answer); consumer protocol: the broker's
  group.consumer.heartbeat.interval.ms=100, the same cadence.

    python bench/share_groups.py [--records 20000] [--repeats 2] [--share-only]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Final

import confluent_kafka
from confluent_kafka import Consumer, Producer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from consumer_groups import Member, wait  # noqa: E402
from produce_consume import tidelog_peer  # noqa: E402

TIMEOUT_S: Final = 60.0  # one measurement's bound
MEMBERS: Final = 10
PARTITIONS: Final = 22
SHARE_PARTITIONS: Final = 2  # the shape: many consumers on few partitions
SHARE_CONSUMERS: Final = (1, 4, 8)
HEARTBEAT_MS: Final = 100
PROPERTIES: Final = {
    "share.auto.offset.reset": "earliest", "group.initial.rebalance.delay.ms": "0",
    "group.consumer.heartbeat.interval.ms": str(HEARTBEAT_MS),
    "group.consumer.min.heartbeat.interval.ms": str(HEARTBEAT_MS),
    "offsets.topic.num.partitions": "1", "offsets.topic.replication.factor": "1",
}


def fill(bootstrap: str, topic: str, records: int, partitions: int = 1) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(records):
        while True:  # bounded: the queue drains as the broker answers
            try:
                p.produce(topic, value=b"%099d" % i, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(TIMEOUT_S) == 0


# ---- share groups ---------------------------------------------------------------------------


def share_throughput(bootstrap: str, topic: str, group: str, consumers: int, records: int) -> tuple[float, int]:
    """(records/s, records delivered twice) of `consumers` share consumers reading `records`."""
    seen: Counter[bytes] = Counter()
    lock, stop = threading.Lock(), threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        c = confluent_kafka.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
        try:
            c.subscribe([topic])
            while not stop.is_set():  # until every record arrived (or the bound passed)
                batch = [m.value() for m in c.poll(0.1) if m.error() is None]
                with lock:
                    seen.update(batch)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
        finally:
            c.close()

    threads = [threading.Thread(target=run, daemon=True) for _ in range(consumers)]
    start = time.monotonic()
    for t in threads:
        t.start()
    try:
        wait(f"{consumers} share consumers read {records} records", lambda: len(seen) >= records or bool(errors))
    finally:
        stop.set()
        for t in threads:
            t.join(TIMEOUT_S)
    elapsed = time.monotonic() - start  # the closes acknowledged the last batches
    if errors:
        raise errors[0]
    return records / elapsed, sum(n - 1 for n in seen.values() if n > 1)


# ---- rebalances -------------------------------------------------------------------------------


def member(bootstrap: str, group: str, topic: str, protocol: str) -> Member:
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    if protocol == "consumer":
        config["group.protocol"] = "consumer"  # the heartbeat interval is the broker's
    else:
        config.update({"heartbeat.interval.ms": HEARTBEAT_MS, "session.timeout.ms": 10_000})
    return Member(Consumer(config), topic)


def split_among(members: list[Member]) -> bool:
    owned = [p for m in members for p in m.assignment]
    return sorted(owned) == list(range(PARTITIONS)) and all(m.assignment for m in members)


def rebalances(bootstrap: str, topic: str, group: str, protocol: str) -> tuple[float, float]:
    """(seconds to settle when an 11th member joins, when one then leaves)."""
    members = [member(bootstrap, group, topic, protocol) for _ in range(MEMBERS)]
    try:
        for m in members:
            m.start()
        wait(f"{MEMBERS} {protocol} members stable", lambda: split_among(members))
        time.sleep(1.0)  # let the group settle
        newcomer = member(bootstrap, group, topic, protocol)
        members.append(newcomer)
        newcomer.start()
        wait(f"{MEMBERS + 1} members share the partitions", lambda: split_among(members))
        joined = time.monotonic() - newcomer.started_at
        time.sleep(1.0)
        leaver = members.pop(0)
        left_at = time.monotonic()
        leaver.stop.set()
        leaver.join(TIMEOUT_S)
        wait(f"{MEMBERS} members share the partitions again", lambda: split_among(members))
        return joined, time.monotonic() - left_at
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.join(TIMEOUT_S)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--share-only", action="store_true", help="skip the rebalance measurements")
    args = parser.parse_args()
    print(f"confluent-kafka {confluent_kafka.version()}, librdkafka {confluent_kafka.libversion()}")
    with tempfile.TemporaryDirectory(prefix="bench-share-groups-") as tmp, \
            tidelog_peer(Path(tmp), extra_properties=PROPERTIES) as peer:
        bootstrap, create = peer.bootstrap, peer.create
        create("jobs", SHARE_PARTITIONS)
        fill(bootstrap, "jobs", args.records, SHARE_PARTITIONS)
        create("warm-up", 1)  # the first group lookup creates __consumer_offsets: not measured
        fill(bootstrap, "warm-up", 10)
        share_throughput(bootstrap, "warm-up", "warm-up", 1, 10)
        for consumers in SHARE_CONSUMERS:
            rates, twice = [], 0
            for r in range(args.repeats):
                rate, dup = share_throughput(bootstrap, "jobs", f"share-{consumers}-{r}", consumers, args.records)
                rates.append(rate)
                twice += dup
            print(f"share group, {consumers} consumer(s), {SHARE_PARTITIONS} partitions: "
                  f"{statistics.median(rates):,.0f} records/s acknowledged "
                  f"(runs: {', '.join(f'{x:,.0f}' for x in rates)}; delivered twice: {twice})")
        if args.share_only:
            return
        create("wide", PARTITIONS)
        for r in range(args.repeats):
            for protocol in ("classic", "consumer"):
                joined, left = rebalances(bootstrap, "wide", f"rebalance-{protocol}-{r}", protocol)
                print(f"rebalance, {protocol:8} protocol, {MEMBERS} members: 11th joins {joined:.2f} s, "
                      f"one leaves {left:.2f} s")


if __name__ == "__main__":
    main()
