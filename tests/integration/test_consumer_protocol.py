"""KIP-848's consumer group protocol with real confluent-kafka consumers (`group.protocol=consumer`).

Three members split a 6-partition topic, one leaves, one joins: every record is consumed, and
none twice (each member commits after each poll, so a partition moving to another member
resumes after what the first one read). A regex subscription picks up a topic created later.
The broker's heartbeat interval is lowered to 500 ms (group.consumer.*) so a rebalance takes
a second or two, not Kafka's default 5 s heartbeats.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from localcluster.launcher import LocalCluster
from tests.integration.cluster_fixtures import wait_until
from tests.integration.group_fixtures import produce
from tests.integration.replication_fixtures import create_topic, replicated_cluster, wait_full_isr

confluent_kafka = pytest.importorskip("confluent_kafka")

PARTITIONS = 6
RECORDS = 300
WAIT_S = 30.0
POLL_S = 0.2
PROPERTIES = {
    "group.consumer.heartbeat.interval.ms": "500", "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.session.timeout.ms": "6000", "group.consumer.min.session.timeout.ms": "6000",
    "offsets.topic.num.partitions": "6",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with replicated_cluster(tmp_path_factory.mktemp("consumer-protocol"), PROPERTIES) as (started, _):
        yield started


@dataclass
class Member:
    """A confluent-kafka consumer with group.protocol=consumer in its own thread: it records
    (topic, partition, value) of what it reads, commits after each non-empty poll, and
    publishes its assignment."""

    name: str
    stop: threading.Event = field(default_factory=threading.Event)
    records: list[tuple[str, int, bytes]] = field(default_factory=list)
    assignment: frozenset[tuple[str, int]] = frozenset()
    error: BaseException | None = None
    thread: threading.Thread | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def seen(self) -> list[tuple[str, int, bytes]]:
        with self.lock:
            return list(self.records)

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"{self.name} failed: {self.error!r}") from self.error


def _run(m: Member, bootstrap: str, group: str, subscription: list[str]) -> None:
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "client.id": m.name,
                  "topic.metadata.refresh.interval.ms": 1000})
    try:
        c.subscribe(subscription)
        while not m.stop.is_set():  # until the test stops this member
            msgs = c.consume(num_messages=100, timeout=POLL_S)
            good = [msg for msg in msgs if msg.error() is None]
            with m.lock:
                m.records.extend((msg.topic(), msg.partition(), msg.value()) for msg in good)
            if good:
                c.commit(asynchronous=False)
            m.assignment = frozenset((tp.topic, tp.partition) for tp in c.assignment())
    except BaseException as e:  # the test re-raises it (check)
        m.error = e
    finally:
        c.close()  # leaves the group: a heartbeat with member epoch -1


def start(bootstrap: str, group: str, subscription: list[str], name: str) -> Member:
    m = Member(name)
    m.thread = threading.Thread(target=_run, args=(m, bootstrap, group, subscription), name=name, daemon=True)
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
        m.check()


def split(members: list[Member], partitions: set[tuple[str, int]]) -> bool:
    """Every partition assigned to exactly one live member, every live member some."""
    live = [m for m in members if not m.stop.is_set()]
    for m in live:
        m.check()
    owned = [tp for m in live for tp in m.assignment]
    return sorted(owned) == sorted(partitions) and all(m.assignment for m in live)


def consumed(members: list[Member]) -> list[bytes]:
    return [v for m in members for _, _, v in m.seen()]


def assert_once(members: list[Member], expected: list[bytes]) -> None:
    got = consumed(members)
    assert sorted(got) == sorted(expected), (
        f"{len(got)} consumed, {len(set(got))} distinct, {len(expected)} produced; missing "
        f"{sorted(set(expected) - set(got))[:5]}, duplicates {len(got) - len(set(got))}")


def values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


def tidelog(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    from tidelog.cli import main

    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def test_three_members_split_then_one_leaves_and_one_joins(cluster: LocalCluster,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    bootstrap = cluster.bootstrap_servers
    assert bootstrap is not None
    topic, group = "kip848-split", "kip848-split-group"
    create_topic(cluster, topic, partitions=PARTITIONS)
    wait_full_isr(cluster, topic, PARTITIONS)
    every = {(topic, p) for p in range(PARTITIONS)}
    members = [start(bootstrap, group, [topic], f"member-{i}") for i in range(3)]
    try:
        wait_until("3 members split 6 partitions", lambda: split(members, every), WAIT_S)
        first = values("a", RECORDS)
        produce(bootstrap, topic, first)
        wait_until("every record consumed", lambda: len(consumed(members)) >= RECORDS, WAIT_S)
        assert_once(members, first)
        assert all(len(m.assignment) == 2 for m in members)
        code, out = tidelog(capsys, "groups", "describe", "--group", group, "--bootstrap-server", bootstrap)
        assert code == 0, out
        assert f"Consumer group '{group}': type consumer, assignor uniform" in out, out
        rows = [line.split() for line in out.splitlines() if line.startswith(group) and "member-" in line]
        # GROUP CONSUMER-ID HOST CLIENT-ID MEMBER-TYPE EPOCH CURRENT TARGET
        members_rows = [r for r in rows if len(r) == 8]
        assert sorted(r[3] for r in members_rows) == ["member-0", "member-1", "member-2"], out
        assert {r[4] for r in members_rows} == {"consumer"}, out
        assert all(r[6].startswith(f"{topic}:") and r[6] == r[7] for r in members_rows), out  # settled: at target

        stop(members[2:])  # one leaves
        stayers = members[:2]
        wait_until("2 members take over 6 partitions", lambda: split(stayers, every), WAIT_S)
        second = values("b", RECORDS)
        produce(bootstrap, topic, second)
        wait_until("the second batch consumed", lambda: len(consumed(members)) >= 2 * RECORDS, WAIT_S)
        assert_once(members, first + second)

        members.append(start(bootstrap, group, [topic], "member-3"))  # one joins
        live = stayers + members[3:]
        wait_until("3 members split 6 partitions again", lambda: split(live, every), WAIT_S)
        third = values("c", RECORDS)
        produce(bootstrap, topic, third)
        wait_until("the third batch consumed", lambda: len(consumed(members)) >= 3 * RECORDS, WAIT_S)
        assert_once(members, first + second + third)
        assert members[3].seen(), "the new member read nothing"
    finally:
        stop([m for m in members if not m.stop.is_set()])


def test_regex_subscription_picks_up_a_new_topic(cluster: LocalCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    assert bootstrap is not None
    create_topic(cluster, "kip848-re-one", partitions=2)
    wait_full_isr(cluster, "kip848-re-one", 2)
    members = [start(bootstrap, "kip848-regex-group", ["^kip848-re-.*"], f"regex-{i}") for i in range(2)]
    try:
        one = {("kip848-re-one", p) for p in range(2)}
        wait_until("the regex's topic split", lambda: split(members, one), WAIT_S)
        create_topic(cluster, "kip848-re-two", partitions=2)
        wait_full_isr(cluster, "kip848-re-two", 2)
        both = one | {("kip848-re-two", p) for p in range(2)}
        wait_until("the new topic assigned too", lambda: split(members, both), WAIT_S)
        records = values("r", 50)
        produce(bootstrap, "kip848-re-two", records)
        wait_until("the new topic's records consumed", lambda: len(consumed(members)) >= len(records), WAIT_S)
        assert_once(members, records)
    finally:
        stop(members)


KILLED_MEMBER = """
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "group.protocol": "consumer",
              "auto.offset.reset": "earliest", "client.id": "doomed"})
c.subscribe([sys.argv[3]])
while True:
    c.poll(0.2)
"""


def test_a_killed_member_is_fenced_after_the_session_timeout(cluster: LocalCluster) -> None:
    """SIGKILL: no leave heartbeat. The coordinator's session timer (group.consumer.session.timeout.ms,
    6 s here) fences the member and the survivor gets every partition."""
    import signal
    import subprocess
    import sys
    import time

    bootstrap = cluster.bootstrap_servers
    assert bootstrap is not None
    topic, group = "kip848-killed", "kip848-killed-group"
    create_topic(cluster, topic, partitions=4)
    wait_full_isr(cluster, topic, 4)
    every = {(topic, p) for p in range(4)}
    survivor = start(bootstrap, group, [topic], "survivor")
    process = subprocess.Popen([sys.executable, "-c", KILLED_MEMBER, bootstrap, group, topic])
    try:
        wait_until("the two members split the topic", lambda: len(survivor.assignment) == 2, WAIT_S)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    killed_at = time.monotonic()
    try:
        wait_until("the survivor owns every partition", lambda: split([survivor], every), WAIT_S)
        waited = time.monotonic() - killed_at
        assert 4.0 <= waited <= 15.0, f"fenced after {waited:.1f} s with a 6 s session timeout"
    finally:
        stop([survivor])


def _first_error(bootstrap: str, group: str, subscription: list[str], **extra: str) -> Any:
    """The first error a consumer-protocol consumer reports (error_cb or a consume error), or None."""
    import time

    from confluent_kafka import Consumer, KafkaError

    errors: list[Any] = []

    def on_error(e: Any) -> None:  # a broker's error (fatal here), not a transient connection one
        if e.fatal() or e.code() > 0 or e.code() == KafkaError._FATAL:
            errors.append(e)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                  "error_cb": on_error, **extra})
    try:
        c.subscribe(subscription)
        deadline = time.monotonic() + 10.0
        while not errors and time.monotonic() < deadline:  # bounded: 10 s
            msg = c.poll(0.2)
            if msg is not None and msg.error() is not None:
                on_error(msg.error())
    finally:
        c.close()
    return errors[0] if errors else None


def test_an_unknown_assignor_gets_unsupported_assignor(cluster: LocalCluster) -> None:
    """group.remote.assignor names an assignor group.consumer.assignors lacks: librdkafka gets
    UNSUPPORTED_ASSIGNOR and stops (a fatal error). An invalid regex cannot be sent this way:
    librdkafka compiles the pattern itself first (the unit tests send it)."""
    from confluent_kafka import KafkaError

    bootstrap = cluster.bootstrap_servers
    assert bootstrap is not None
    create_topic(cluster, "kip848-bad", partitions=1)
    wait_full_isr(cluster, "kip848-bad", 1)
    subscription, extra, expected = ["kip848-bad"], {"group.remote.assignor": "sticky"}, "UNSUPPORTED_ASSIGNOR"

    error = _first_error(bootstrap, f"kip848-bad-{expected.lower()}", subscription, **extra)
    # librdkafka raises it as a fatal consumer error quoting the broker's error by its description
    description = KafkaError(getattr(KafkaError, expected)).str()
    assert error is not None and (error.name() == expected or description in error.str()), error


@pytest.fixture
def killable(tmp_path: Any) -> Iterator[tuple[LocalCluster, Any]]:
    with replicated_cluster(tmp_path, PROPERTIES) as started:
        yield started


def test_sigkill_of_the_coordinator_loses_nothing(killable: tuple[LocalCluster, Any]) -> None:
    """The coordinator of a consumer-protocol group is SIGKILLed while two members consume: the new
    leader of its __consumer_offsets partition loads the group (members, epochs, assignments,
    offsets) and the members carry on with it; every record is consumed, duplicates at most the
    uncommitted tail."""
    from groups.partitioner import GROUP_METADATA_TOPIC_NAME, coordinator_partition
    from tests.integration.replication_fixtures import partition_state, wait_for_state

    running, nemesis = killable
    bootstrap = running.bootstrap_servers
    assert bootstrap is not None
    topic, group = "kip848-failover", "kip848-failover-group"
    create_topic(running, topic, partitions=PARTITIONS)
    wait_full_isr(running, topic, PARTITIONS)
    every = {(topic, p) for p in range(PARTITIONS)}
    members = [start(bootstrap, group, [topic], f"failover-{i}") for i in range(2)]
    try:
        wait_until("2 members split 6 partitions", lambda: split(members, every), WAIT_S)
        first = values("before", RECORDS)
        produce(bootstrap, topic, first)
        wait_until("the first batch consumed", lambda: set(first) <= set(consumed(members)), WAIT_S)
        offsets_partition = coordinator_partition(group, int(PROPERTIES["offsets.topic.num.partitions"]))
        coordinator = partition_state(running, GROUP_METADATA_TOPIC_NAME, offsets_partition)["leader"]
        nemesis.kill(coordinator)
        wait_for_state(running, GROUP_METADATA_TOPIC_NAME, offsets_partition, "a new coordinator",
                       lambda s: s["leader"] not in (-1, coordinator))
        second = values("after", RECORDS)
        produce(bootstrap, topic, second)
        wait_until("the second batch consumed", lambda: set(second) <= set(consumed(members)), 60.0)
        wait_until("still split", lambda: split(members, every), WAIT_S)
    finally:
        stop([m for m in members if not m.stop.is_set()])
    got = consumed(members)
    assert len(got) - len(set(got)) <= RECORDS, "more duplicates than one uncommitted batch"
    leader = partition_state(running, GROUP_METADATA_TOPIC_NAME, offsets_partition)["leader"]
    log = next(b for b in running.brokers if b.spec.node_id == leader).spec.log_path.read_text(errors="replace")
    assert re.search(rf"Loaded [1-9]\d* group\(s\) .* from {GROUP_METADATA_TOPIC_NAME}-{offsets_partition} "
                     rf"\(leader epoch [1-9]\d*\), 1 of them consumer-protocol", log), "the group was not loaded"
