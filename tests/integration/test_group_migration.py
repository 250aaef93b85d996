"""KIP-848's online migration with real confluent-kafka consumers, while a producer writes.

One group rolls from one protocol to the other and back without stopping: two members with
`group.protocol=classic`; two with `group.protocol=consumer` join (the classic group is
upgraded to a consumer group, its classic members stay in it); the classic ones leave (a
consumer group of consumer-protocol members); a classic one joins again (a mixed consumer
group); the consumer-protocol ones leave (the group is downgraded to a classic group). At
each step ListGroups reports the type Kafka would, and `tidelog groups describe` the
consumer group's view. Every record written meanwhile is consumed; each member commits after
each poll, so a record is read twice only around a revocation (at-least-once), bounded here;
and no partition is owned by two members at once (each member logs its on_assign/on_revoke
times, one clock for all).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from localcluster.launcher import LocalCluster
from tests.integration.cluster_fixtures import wait_until
from tests.integration.replication_fixtures import create_topic, replicated_cluster, wait_full_isr

confluent_kafka = pytest.importorskip("confluent_kafka")

TOPIC, GROUP = "migrate", "migrate-group"
PARTITIONS = 4
WAIT_S = 30.0
POLL_S = 0.2
PRODUCE_EVERY_S = 0.01
MAX_DUPLICATES = 5 * 100  # at most one poll batch (100) per partition move, 5 steps
PROPERTIES = {
    "group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000",
    "group.consumer.heartbeat.interval.ms": "500", "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.session.timeout.ms": "6000", "group.consumer.min.session.timeout.ms": "6000",
    "offsets.topic.num.partitions": "3",
}
CLASSIC = {"group.protocol": "classic", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
           "max.poll.interval.ms": 20_000}  # the rebalance timeout: a lost rejoin costs 20 s, not 5 min
CONSUMER = {"group.protocol": "consumer"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with replicated_cluster(tmp_path_factory.mktemp("migration"), PROPERTIES) as (started, _):
        yield started


@dataclass
class Member:
    """A confluent-kafka consumer in its own thread: what it reads (partition, offset, value),
    when it held which partition (from its rebalance callbacks), its current assignment."""

    name: str
    stop: threading.Event = field(default_factory=threading.Event)
    reads: list[tuple[int, int, bytes]] = field(default_factory=list)
    owned_since: dict[int, float] = field(default_factory=dict)
    held: list[tuple[int, float, float]] = field(default_factory=list)  # (partition, from, to)
    assignment: frozenset[int] = frozenset()
    error: BaseException | None = None
    thread: threading.Thread | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def assigned(self, partitions: list[Any]) -> None:
        with self.lock:
            for tp in partitions:
                self.owned_since.setdefault(tp.partition, time.monotonic())

    def revoked(self, partitions: list[Any]) -> None:
        with self.lock:
            for tp in partitions:
                since = self.owned_since.pop(tp.partition, None)
                if since is not None:
                    self.held.append((tp.partition, since, time.monotonic()))


def _run(m: Member, bootstrap: str, config: dict[str, Any]) -> None:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "client.id": m.name, **config})
    try:
        c.subscribe([TOPIC], on_assign=lambda _c, ps: m.assigned(ps), on_revoke=lambda _c, ps: m.revoked(ps),
                    on_lost=lambda _c, ps: m.revoked(ps))
        while not m.stop.is_set():  # until the test stops this member
            msgs = c.consume(num_messages=100, timeout=POLL_S)
            good = [msg for msg in msgs if msg.error() is None]
            with m.lock:
                m.reads.extend((msg.partition(), msg.offset(), msg.value()) for msg in good)
            if good:
                try:
                    c.commit(asynchronous=False)
                except confluent_kafka.KafkaException:  # a revocation raced the commit: read again elsewhere
                    pass
            m.assignment = frozenset(tp.partition for tp in c.assignment())
    except BaseException as e:  # the test re-raises it
        m.error = e
    finally:
        c.close()  # leaves the group (LeaveGroup, or a heartbeat with epoch -1); revokes what it held
        m.revoked([confluent_kafka.TopicPartition(TOPIC, p) for p in list(m.owned_since)])


def start(bootstrap: str, name: str, config: dict[str, Any]) -> Member:
    m = Member(name)
    m.thread = threading.Thread(target=_run, args=(m, bootstrap, config), name=name, daemon=True)
    m.thread.start()
    return m


def stop(members: list[Member]) -> None:
    for m in members:
        m.stop.set()
    for m in members:
        assert m.thread is not None
        m.thread.join(WAIT_S)
        assert not m.thread.is_alive(), f"{m.name} did not close"
    for m in members:
        if m.error is not None:
            raise AssertionError(f"{m.name} failed: {m.error!r}") from m.error


def split(live: list[Member]) -> bool:
    for m in live:
        if m.error is not None:
            raise AssertionError(f"{m.name} failed: {m.error!r}") from m.error
    owned = sorted(p for m in live for p in m.assignment)
    return owned == list(range(PARTITIONS)) and all(m.assignment for m in live)


class Writer:
    """A producer writing distinct values until stopped; `written` holds the acknowledged ones."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
        self.written: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="writer", daemon=True)
        self.thread.start()

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.written.append(msg.value())

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():  # until the test stops it
            self.producer.produce(TOPIC, value=f"v-{i}".encode(), key=str(i).encode(), on_delivery=self._delivered)
            self.producer.poll(0)
            i += 1
            time.sleep(PRODUCE_EVERY_S)
        assert self.producer.flush(WAIT_S) == 0

    def close(self) -> list[bytes]:
        self.stop.set()
        self.thread.join(WAIT_S)
        return list(self.written)


def group_type(bootstrap: str) -> tuple[str, str]:
    """(type, state) of the group as ListGroups v5 reports them."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the answer: a collected client cancels it
    listed = admin.list_consumer_groups().result(WAIT_S)
    found = [g for g in listed.valid if g.group_id == GROUP]
    assert found, f"ListGroups lists no {GROUP}: {listed.valid} {listed.errors}"
    return found[0].type.name.lower(), found[0].state.name.lower()


def described(capsys: pytest.CaptureFixture[str], bootstrap: str) -> str:
    from tidelog.cli import main

    code = main(["groups", "describe", "--group", GROUP, "--bootstrap-server", bootstrap])
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    return out.out


def member_types(out: str) -> dict[str, str]:
    """CLIENT-ID -> MEMBER-TYPE from the members table of `tidelog groups describe`."""
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if "MEMBER-TYPE" in line)
    names = lines[header].split()
    rows = [dict(zip(names, line.split())) for line in lines[header + 1:] if line.strip()]
    return {row["CLIENT-ID"]: row["MEMBER-TYPE"] for row in rows}


def test_a_group_rolls_from_classic_to_consumer_and_back_while_a_producer_writes(
        cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
    bootstrap = cluster.bootstrap_servers
    assert bootstrap is not None
    create_topic(cluster, TOPIC, partitions=PARTITIONS)
    wait_full_isr(cluster, TOPIC, PARTITIONS)
    writer = Writer(bootstrap)
    members: list[Member] = []
    try:
        a, b = start(bootstrap, "classic-a", CLASSIC), start(bootstrap, "classic-b", CLASSIC)
        members += [a, b]
        wait_until("two classic members split the topic", lambda: split([a, b]), WAIT_S)
        assert group_type(bootstrap) == ("classic", "stable")
        assert "type consumer" not in described(capsys, bootstrap)

        c, d = start(bootstrap, "consumer-c", CONSUMER), start(bootstrap, "consumer-d", CONSUMER)
        members += [c, d]
        wait_until("the upgraded group splits the topic four ways", lambda: split([a, b, c, d]), WAIT_S)
        assert group_type(bootstrap)[0] == "consumer"
        out = described(capsys, bootstrap)
        assert f"Consumer group '{GROUP}': type consumer" in out and "classic-a" in out, out

        stop([a, b])  # the classic members leave: a consumer group of consumer-protocol members
        wait_until("the consumer-protocol members take over", lambda: split([c, d]), WAIT_S)
        assert group_type(bootstrap)[0] == "consumer"

        e = start(bootstrap, "classic-e", CLASSIC)  # a classic member joins the consumer group
        members.append(e)
        wait_until("a classic member gets its share", lambda: split([c, d, e]), WAIT_S)
        assert group_type(bootstrap)[0] == "consumer"
        types = member_types(described(capsys, bootstrap))  # ConsumerGroupDescribe v1's MemberType
        assert types == {"consumer-c": "consumer", "consumer-d": "consumer", "classic-e": "classic"}, types

        stop([c, d])  # the last consumer-protocol members leave: downgraded to a classic group
        wait_until("the classic member takes everything", lambda: split([e]), WAIT_S)
        assert group_type(bootstrap) == ("classic", "stable")
        assert "type consumer" not in described(capsys, bootstrap)

        written = writer.close()
        assert len(written) > 100, "the producer barely wrote"
        wait_until("every record consumed", lambda: {v for m in members for _, _, v in m.reads} >= set(written),
                   WAIT_S)
    finally:
        writer.close()
        stop([m for m in members if not m.stop.is_set()])
    reads = [v for m in members for _, _, v in m.reads]
    duplicates = len(reads) - len(set(reads))
    assert duplicates <= MAX_DUPLICATES, f"{duplicates} records read twice"
    for p in range(PARTITIONS):  # no partition held by two members at once
        spans = sorted((since, until, m.name) for m in members for q, since, until in m.held if q == p)
        for (s1, u1, n1), (s2, _, n2) in zip(spans, spans[1:]):
            assert s2 >= u1 or n1 == n2, f"partition {p}: {n2} got it at {s2:.3f} before {n1} let it go at {u1:.3f}"
