"""Consumer groups with real clients against a real 3-broker cluster (RF=3 topics).

For confluent-kafka, kafka-python and aiokafka: 3 members of one group split a 6-partition
topic and consume every record exactly once (synchronous commits); then one member leaves
and the other two take its partitions over from the committed offsets, again exactly once.
confluent-kafka also with cooperative-sticky; a static member (group.instance.id) restarts
within its session without a rebalance; kcat -G consumes; bad group requests get Kafka's
errors; a member that heartbeats but never syncs is removed after the rebalance timeout
(KIP-814). Coordinator failover (SIGKILL) is in test_consumer_group_failover.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster_fixtures import wait_until
from tests.integration.group_fixtures import produce, split, start_member, stop_members
from tests.integration.replication_fixtures import (
    create_topic,
    replicated_cluster,
    wait_full_isr,
)
from localcluster.launcher import LocalCluster

confluent_kafka = pytest.importorskip("confluent_kafka")

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
PARTITIONS = 6
RECORDS = 300
CONSUME_S = 60.0
GROUP_PROPERTIES = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000",
                    "offsets.topic.num.partitions": "12"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with replicated_cluster(tmp_path_factory.mktemp("groups"), GROUP_PROPERTIES) as (started, _):
        yield started


def new_topic(cluster: LocalCluster, name: str) -> str:
    create_topic(cluster, name, partitions=PARTITIONS, replication_factor=3)
    wait_full_isr(cluster, name, PARTITIONS)
    return name


def values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


def consumed_values(members: list) -> list[bytes]:
    return [v for m in members for _, _, v in m.seen()]


def assert_exactly_once(members: list, expected: list[bytes]) -> None:
    got = consumed_values(members)
    assert sorted(got) == sorted(expected), (
        f"{len(got)} consumed, {len(set(got))} distinct, {len(expected)} produced; missing "
        f"{sorted(set(expected) - set(got))[:5]}, duplicates {len(got) - len(set(got))}")


def member_owns_its_records(members: list) -> None:
    """Each member received records only from partitions it was assigned (in this phase)."""
    for m in members:
        partitions = {p for p, _, _ in m.seen()}
        assert partitions <= set(m.assignment), (m.client, m.index, partitions, m.assignment)


@pytest.mark.parametrize("client, extra", [
    ("confluent", {}),
    ("confluent", {"partition.assignment.strategy": "cooperative-sticky"}),
    ("kafka-python", {}),
    ("aiokafka", {}),
], ids=["confluent-range", "confluent-cooperative-sticky", "kafka-python", "aiokafka"])
def test_three_members_split_partitions_then_one_leaves(cluster: LocalCluster, client: str, extra: dict) -> None:
    tag = f"{client}-{len(extra)}"
    topic = new_topic(cluster, f"split-{tag}")
    group = f"group-{tag}"
    bootstrap = cluster.bootstrap_servers
    assert bootstrap is not None
    members = [start_member(client, bootstrap, group, topic, i, extra) for i in range(3)]
    try:
        wait_until("3 members split 6 partitions", lambda: split(members, PARTITIONS), CONSUME_S)
        first = values(f"{tag}-a", RECORDS)
        produce(bootstrap, topic, first)
        wait_until("every record consumed", lambda: len(consumed_values(members)) >= RECORDS, CONSUME_S)
        assert_exactly_once(members, first)
        member_owns_its_records(members)
        assert all(m.seen() for m in members), "a member got nothing"

        leaver = members[2]
        stop_members([leaver])
        stayers = members[:2]
        wait_until("2 members take over 6 partitions", lambda: split(stayers, PARTITIONS), CONSUME_S)
        assert all(len(m.assignment) == 3 for m in stayers)
        before = {id(m): len(m.seen()) for m in stayers}
        second = values(f"{tag}-b", RECORDS)
        produce(bootstrap, topic, second)
        wait_until("the rest consumed by the 2 stayers",
                   lambda: len(consumed_values(members)) >= 2 * RECORDS, CONSUME_S)
        assert_exactly_once(members, first + second)
        taken_over = {p for m in stayers for p, _, v in m.seen()[before[id(m)]:]}
        assert leaver.assignment <= taken_over, "the leaver's partitions were not consumed after it left"
    finally:
        stop_members(members)


def test_static_member_restarts_without_a_rebalance(cluster: LocalCluster) -> None:
    topic = new_topic(cluster, "static")
    bootstrap = cluster.bootstrap_servers
    assert bootstrap is not None

    def static(i: int):  # noqa: ANN202
        return start_member("confluent", bootstrap, "static-group", topic, i,
                            {"group.instance.id": f"instance-{i}", "session.timeout.ms": 20000})

    members = [static(i) for i in range(3)]
    try:
        wait_until("3 static members split 6 partitions", lambda: split(members, PARTITIONS), CONSUME_S)
        before = [m.assignment for m in members]
        generation_before = generation(cluster, "static-group")
        stop_members([members[1]])  # a static member's close sends no LeaveGroup (KIP-345)
        members[1] = static(1)
        wait_until("the restarted member has its partitions back",
                   lambda: members[1].assignment == before[1], CONSUME_S)
        assert [m.assignment for m in members] == before
        produce(bootstrap, topic, values("static", 60))
        wait_until("records consumed", lambda: len(consumed_values(members)) >= 60, CONSUME_S)
        assert generation(cluster, "static-group") == generation_before, "the restart caused a rebalance"
    finally:
        stop_members(members)


def generation(cluster: LocalCluster, group: str) -> int:
    """The newest generation of `group` its coordinators logged (one line per transition)."""
    pattern = re.compile(rf"Group {re.escape(group)} \(.*, generation (\d+):")
    found = [int(m.group(1)) for broker in cluster.brokers
             for m in pattern.finditer(broker.spec.log_path.read_text(errors="replace"))]
    assert found, f"no transition of {group} logged"
    return max(found)


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed")
def test_kcat_balanced_consumer(cluster: LocalCluster) -> None:
    topic = new_topic(cluster, "kcat-group")
    bootstrap = cluster.bootstrap_servers
    assert bootstrap is not None and KCAT is not None
    sent = values("kcat", 100)
    produce(bootstrap, topic, sent)
    out = subprocess.run([KCAT, "-b", bootstrap, "-G", "kcat-group", "-X", "auto.offset.reset=earliest",
                          "-c", str(len(sent)), "-f", "%s\n", "-q", topic],
                         capture_output=True, timeout=CONSUME_S, check=True)
    assert sorted(out.stdout.split()) == sorted(sent)


def test_committed_offsets_are_kept(cluster: LocalCluster, tmp_path: Path) -> None:
    """A consumer that restarts in the same group starts after what it committed."""
    from confluent_kafka import Consumer, TopicPartition

    topic = new_topic(cluster, "resume")
    bootstrap = cluster.bootstrap_servers
    assert bootstrap is not None
    produce(bootstrap, topic, values("resume", 60))
    members = [start_member("confluent", bootstrap, "resume-group", topic, 0)]
    try:
        wait_until("all consumed", lambda: len(consumed_values(members)) >= 60, CONSUME_S)
    finally:
        stop_members(members)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "resume-group"})
    try:
        committed = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    finally:
        c.close()
    ends = {p: max(o for q, o, _ in members[0].seen() if q == p) + 1 for p, _, _ in members[0].seen()}
    assert {tp.partition: tp.offset for tp in committed if tp.offset >= 0} == ends
    produce(bootstrap, topic, values("resume-more", 30))
    again = [start_member("confluent", bootstrap, "resume-group", topic, 1)]
    try:
        wait_until("the new records consumed", lambda: len(consumed_values(again)) >= 30, CONSUME_S)
    finally:
        stop_members(again)
    assert sorted(consumed_values(again)) == sorted(values("resume-more", 30))
    # where the commits live: Kafka's compacted, internal __consumer_offsets
    from confluent_kafka.admin import AdminClient, ConfigResource

    resource = ConfigResource(ConfigResource.Type.TOPIC, "__consumer_offsets")
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the answer arrives
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert configs["cleanup.policy"].value == "compact"


KILLED_MEMBER = """
import sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "session.timeout.ms": 3000,
              "heartbeat.interval.ms": 300, "auto.offset.reset": "earliest"})
c.subscribe([sys.argv[3]])
while True:
    c.poll(0.2)
"""


def describe(bootstrap: str, group: str):  # noqa: ANN201
    from tidelog.cli_common import parse_bootstrap_servers
    from tidelog.group_admin import GroupAdmin
    from common.kafka_client import KafkaClient

    with KafkaClient(parse_bootstrap_servers(bootstrap)) as client:
        return GroupAdmin(client).describe(group)


def test_a_killed_consumer_is_expired_after_its_session_timeout(cluster: LocalCluster) -> None:
    import signal
    import sys

    topic = new_topic(cluster, "killed")
    bootstrap = cluster.bootstrap_servers
    assert bootstrap is not None
    process = subprocess.Popen([sys.executable, "-c", KILLED_MEMBER, bootstrap, "killed-group", topic])
    try:
        wait_until("the member joined", lambda: describe(bootstrap, "killed-group").state == "Stable", CONSUME_S)
        assert len(describe(bootstrap, "killed-group").members) == 1
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    killed_at = time.monotonic()
    wait_until("the member expired", lambda: describe(bootstrap, "killed-group").state == "Empty", 20.0)
    waited = time.monotonic() - killed_at
    assert 1.5 <= waited <= 10, f"expired after {waited:.1f} s with a 3 s session timeout"



def _subscription(topic: str) -> bytes:
    """A ConsumerProtocolSubscription v0 for one topic, no user data."""
    name = topic.encode()
    return b"\x00\x00" + b"\x00\x00\x00\x01" + len(name).to_bytes(2, "big") + name + b"\xff\xff\xff\xff"


def test_a_member_that_never_syncs_is_removed_and_the_real_consumer_takes_everything(cluster: LocalCluster) -> None:
    """KIP-814: a hand-driven member joins beside a confluent-kafka consumer, heartbeats, but
    never sends SyncGroup; one rebalance timeout after the join phase the coordinator removes
    it, and the real consumer ends up with every partition."""
    from common.errors import ErrorCode
    from tests import group_wire as gw
    from common.protocol.api_keys import ApiKey
    from tidelog.cli_common import parse_bootstrap_servers
    from tidelog.group_admin import GroupAdmin
    from common.kafka_client import KafkaClient

    topic, group = new_topic(cluster, "unsynced"), "unsynced-group"
    bootstrap = cluster.bootstrap_servers
    assert bootstrap is not None
    rebalance_timeout_ms = 7000  # the real consumer's max.poll.interval.ms: the group's rebalance timeout
    real = start_member("confluent", bootstrap, group, topic, 0, {"max.poll.interval.ms": rebalance_timeout_ms})
    removed_after: list[float] = []
    try:
        wait_until("the real consumer owns every partition", lambda: split([real], PARTITIONS), CONSUME_S)
        with KafkaClient(parse_bootstrap_servers(bootstrap), request_timeout=30.0) as client:
            coordinator = GroupAdmin(client).coordinator(group)
            request = gw.join(3, group, 6000, 3000, "", None, "consumer", (("range", _subscription(topic)),))
            joined = client.call(coordinator, ApiKey.JOIN_GROUP, 3, request,
                                 *gw.codec(ApiKey.JOIN_GROUP))  # answered once the real consumer rejoined
            assert joined.error_code == 0 and joined.leader != joined.member_id
            joined_at = time.monotonic()
            wait_until("the real consumer got its half", lambda: len(real.assignment) == PARTITIONS // 2, CONSUME_S)
            while time.monotonic() - joined_at < 30:  # bounded: heartbeats, never a SyncGroup
                code = client.call(coordinator, ApiKey.HEARTBEAT, 3,
                                   gw.heartbeat(3, group, joined.generation_id, joined.member_id),
                                   *gw.codec(ApiKey.HEARTBEAT)).error_code
                if code == ErrorCode.UNKNOWN_MEMBER_ID:
                    removed_after.append(time.monotonic() - joined_at)
                    break
                assert code == ErrorCode.NONE, f"heartbeat answered {ErrorCode(code).name}"
                time.sleep(0.5)
        assert removed_after, "the member that never synced was never removed"
        assert 0.8 * rebalance_timeout_ms / 1000 <= removed_after[0] <= rebalance_timeout_ms / 1000 + 5, removed_after
        wait_until("the real consumer owns every partition again", lambda: split([real], PARTITIONS), CONSUME_S)
        members = describe(bootstrap, group).members
        assert len(members) == 1 and members[0].member_id != joined.member_id
    finally:
        stop_members([real])


def test_a_deleted_topics_offsets_go_with_it(cluster: LocalCluster) -> None:
    """Committed offsets of a deleted topic are removed (Kafka's onPartitionsDeleted): the group's
    consumer of a topic recreated under the same name starts at its reset policy, not at the
    old topic's positions."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    bootstrap = cluster.bootstrap_servers
    assert bootstrap is not None
    topic, group = new_topic(cluster, "recreated"), "recreated-group"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        positions = [TopicPartition(topic, p, 2) for p in range(PARTITIONS)]
        consumer.commit(offsets=positions, asynchronous=False)

        def committed() -> list[int]:
            return [tp.offset for tp in consumer.committed(
                [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)]
        assert committed() == [2] * PARTITIONS
        admin.delete_topics([topic])[topic].result(timeout=30)
        wait_until("the deleted topic's offsets removed", lambda: committed() == [-1001] * PARTITIONS, 30.0)
        wait_until("the topic gone from metadata",
                   lambda: topic not in admin.list_topics(timeout=10).topics, 30.0)
        new_topic(cluster, topic)
        produce(bootstrap, topic, values("again", 5 * PARTITIONS))
        consumer.subscribe([topic])
        seen: list[tuple[int, int]] = []
        deadline = time.monotonic() + CONSUME_S
        while len(seen) < 5 * PARTITIONS and time.monotonic() < deadline:  # bounded by the deadline
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append((message.partition(), message.offset()))
        assert len(seen) == 5 * PARTITIONS and min(o for _, o in seen) == 0, seen
    finally:
        consumer.close()
