"""The group APIs at Kafka 3.9's versions with real clients against a real 3-broker cluster
(issue 18): each client's consumer joins, consumes every record, commits and reads its
commits back, then leaves, at the newest versions both sides know; the versions each client
negotiated are asserted where the client exposes them (kafka-python's own version table,
librdkafka's protocol debug log). ListGroups v5's type filter through both admin clients.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.cluster_fixtures import wait_until
from tests.integration.group_fixtures import produce
from tests.integration.replication_fixtures import (
    create_topic,
    replicated_cluster,
    wait_full_isr,
)
from localcluster.launcher import LocalCluster

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")

PARTITIONS = 3
RECORDS = 60
CONSUME_S = 60.0
GROUP_PROPERTIES = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000",
                    "offsets.topic.num.partitions": "6"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with replicated_cluster(tmp_path_factory.mktemp("groupver"), GROUP_PROPERTIES) as (started, _):
        yield started


def bootstrap_of(cluster: LocalCluster) -> str:
    bootstrap = cluster.bootstrap_servers
    assert bootstrap is not None
    return bootstrap


def loaded_topic(cluster: LocalCluster, name: str) -> str:
    create_topic(cluster, name, partitions=PARTITIONS, replication_factor=3)
    wait_full_isr(cluster, name, PARTITIONS)
    produce(bootstrap_of(cluster), name, [f"{name}-{i}".encode() for i in range(RECORDS)])
    return name


def test_kafka_python_group_at_kafka_39_versions(cluster: LocalCluster) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
    from kafka.protocol.consumer.group import (
        HeartbeatRequest,
        JoinGroupRequest,
        LeaveGroupRequest,
        OffsetCommitRequest,
        OffsetFetchRequest,
        SyncGroupRequest,
    )

    topic = loaded_topic(cluster, "kp-versions")
    group = "kp-versions-group"
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap_of(cluster).split(","), group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=6000, heartbeat_interval_ms=500, client_id="kp-versions")
    try:
        seen: list[bytes] = []
        deadline = time.monotonic() + CONSUME_S
        while len(seen) < RECORDS and time.monotonic() < deadline:  # bounded by CONSUME_S
            for msgs in consumer.poll(timeout_ms=200).values():
                seen += [m.value for m in msgs]
        assert sorted(seen) == sorted(f"{topic}-{i}".encode() for i in range(RECORDS))
        consumer.commit()  # OffsetCommit at kafka-python's maximum (v8)
        versions = consumer._manager.broker_version_data
        # The newest each side knows: kafka-python caps JoinGroup at 7 and the offset APIs at 8
        # (its own max_version arguments); SyncGroup v5 checks the protocol type and name.
        negotiated = {name: versions.api_version(request, max_version=cap) for name, request, cap in (
            ("JoinGroup", JoinGroupRequest, 7), ("SyncGroup", SyncGroupRequest, 5), ("Heartbeat", HeartbeatRequest, 4),
            ("LeaveGroup", LeaveGroupRequest, 5), ("OffsetCommit", OffsetCommitRequest, 8),
            ("OffsetFetch", OffsetFetchRequest, 8))}
        assert negotiated == {"JoinGroup": 7, "SyncGroup": 5, "Heartbeat": 4, "LeaveGroup": 5,
                              "OffsetCommit": 8, "OffsetFetch": 8}
        committed = {p: consumer.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)}  # OffsetFetch v8
        assert sum(committed.values()) == RECORDS, committed
        logging.getLogger(__name__).info("kafka-python infers broker version %s", versions.broker_version)
    finally:
        consumer.close()  # LeaveGroup v5
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_of(cluster).split(","), client_id="kp-versions-admin")
    try:
        listed = wait_until("the group is listed Empty", lambda: [
            g for g in admin.list_groups(types_filter=["classic"]) if g["group_id"] == group
            and g["group_state"] == "Empty"], timeout_s=15)
        assert listed[0]["group_type"] == "classic" and listed[0]["protocol_type"] == "consumer"
        assert [g for g in admin.list_groups(types_filter=["consumer"]) if g["group_id"] == group] == []
        # OffsetFetch v8: several groups in one request (per coordinator), each answered apart
        offsets = admin.list_group_offsets([group, "kp-versions-never-committed"])
        assert sum(o.offset for o in offsets[group].values()) == RECORDS
        assert offsets["kp-versions-never-committed"] == {}
    finally:
        admin.close()


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_confluent_group_versions_and_list_by_type(cluster: LocalCluster) -> None:
    from confluent_kafka import ConsumerGroupType, TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = loaded_topic(cluster, "ck-versions")
    group = "ck-versions-group"
    sent = _Lines()
    logger = logging.getLogger("ck-versions")
    logger.addHandler(sent)
    logger.setLevel(logging.DEBUG)
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap_of(cluster), "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
        "debug": "protocol", "logger": logger})
    try:
        consumer.subscribe([topic])
        seen: list[bytes] = []
        deadline = time.monotonic() + CONSUME_S
        while len(seen) < RECORDS and time.monotonic() < deadline:  # bounded by CONSUME_S
            seen += [m.value() for m in consumer.consume(100, 0.2) if m.error() is None]
        assert sorted(seen) == sorted(f"{topic}-{i}".encode() for i in range(RECORDS))
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        assert sum(tp.offset for tp in committed) == RECORDS
    finally:
        consumer.close()
    used: dict[str, set[int]] = {}
    for line in sent.lines:
        for api, version in re.findall(r"Sent (\w+)Request \(v(\d+)", line):
            used.setdefault(api, set()).add(int(version))
    logging.getLogger(__name__).info("librdkafka %s sent: %s", confluent_kafka.libversion()[0], used)
    # librdkafka's own maxima, each answered by tidelog (no version refused, none downgraded)
    for api in ("JoinGroup", "SyncGroup", "Heartbeat", "OffsetCommit", "OffsetFetch", "LeaveGroup"):
        assert api in used, (api, used)
    assert max(used["OffsetCommit"]) == 9 and max(used["OffsetFetch"]) == 9, used  # librdkafka 2.16: both v9

    admin = AdminClient({"bootstrap.servers": bootstrap_of(cluster)})
    classic = admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC}, request_timeout=10).result()
    assert [(g.group_id, g.type) for g in classic.valid if g.group_id == group] == [(group, ConsumerGroupType.CLASSIC)]
    new_protocol = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}, request_timeout=10).result()
    assert [g for g in new_protocol.valid if g.group_id == group] == []


def test_static_leader_rejoin_skips_assignment_at_join_group_v9(cluster: LocalCluster) -> None:
    """KIP-814 over the wire (no client sends JoinGroup v9 yet): a static leader rejoining its
    Stable group with an unknown member id learns at v9 that it leads, with the members, and
    to skip the assignment; at v8 it is told the previous leader id. SyncGroup v5 refuses a
    protocol name other than the group's."""
    from common.errors import ErrorCode
    from tests import group_wire as gw
    from common.protocol.api_keys import ApiKey
    from tidelog.cli_common import parse_bootstrap_servers
    from tidelog.group_admin import GroupAdmin
    from common.kafka_client import KafkaClient

    group, instance = "kip814-group", "leader-instance"
    protocols = (("range", b"subscription"),)
    with KafkaClient(parse_bootstrap_servers(bootstrap_of(cluster)), request_timeout=30.0) as client:
        coordinator = GroupAdmin(client).coordinator(group)

        def join(version: int) -> Any:
            request = gw.join(version, group, 6000, 10000, "", instance, "consumer", protocols, "restarted")
            return client.call(coordinator, ApiKey.JOIN_GROUP, version, request, *gw.codec(ApiKey.JOIN_GROUP))

        def sync(member_id: str, generation: int, name: str) -> Any:
            request = gw.sync(5, group, generation, member_id, instance, ((member_id, b"assignment"),),
                              "consumer", name)
            return client.call(coordinator, ApiKey.SYNC_GROUP, 5, request, *gw.codec(ApiKey.SYNC_GROUP))

        def joined() -> Any | None:  # None while the coordinator still loads
            answer = join(9)
            return answer if answer.error_code == 0 else None

        first = wait_until("the coordinator answers", joined)
        assert (first.leader, first.skip_assignment, first.protocol_type) == (first.member_id, False, "consumer")
        assert sync(first.member_id, first.generation_id, "roundrobin").error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        synced = sync(first.member_id, first.generation_id, "range")
        assert (synced.error_code, synced.assignment, synced.protocol_name) == (0, b"assignment", "range")

        again = join(9)  # the static leader restarts: same generation, no rebalance
        assert (again.error_code, again.generation_id, again.leader, again.skip_assignment) == (
            0, first.generation_id, again.member_id, True)
        assert [m.group_instance_id for m in again.members] == [instance] and again.member_id != first.member_id
        older = join(8)  # before v9: the previous leader id, so the client does not assign
        assert (older.error_code, older.leader, older.members) == (0, again.member_id, ())
        assert older.member_id not in (first.member_id, again.member_id)

        left = client.call(coordinator, ApiKey.LEAVE_GROUP, 5, gw.leave(5, group, ("", instance, "test over")),
                           *gw.codec(ApiKey.LEAVE_GROUP))
        assert (left.error_code, [m.error_code for m in left.members]) == (0, [0])


def test_metadata_and_list_offsets_v0_over_the_wire(cluster: LocalCluster) -> None:
    """The oldest versions Kafka 3.9 still answers, on a real broker: Metadata v0 (an empty
    topic list is every topic) and ListOffsets v0 (old-style offset lists)."""
    from common.protocol import list_offsets as lo
    from common.protocol import metadata as md
    from common.protocol.api_keys import ApiKey
    from tidelog.cli_common import parse_bootstrap_servers
    from common.kafka_client import KafkaClient

    topic = loaded_topic(cluster, "v0-offsets")
    with KafkaClient(parse_bootstrap_servers(bootstrap_of(cluster)), request_timeout=30.0) as client:
        every = client.call(None, ApiKey.METADATA, 0, md.MetadataRequest(None), md.encode_metadata_request,
                            md.decode_metadata_response)
        assert topic in {t.name for t in every.topics} and len(every.brokers) == 3
        leaders = {p.partition_index: p.leader_id for t in every.topics if t.name == topic for p in t.partitions}
        client.metadata([topic])  # the broker addresses, for calls by id
        total = 0
        for partition, leader in sorted(leaders.items()):
            request = lo.V0Request(-1, (lo.V0Topic(topic, (
                lo.V0Partition(partition, lo.LATEST_TIMESTAMP, 10),
                lo.V0Partition(partition, lo.EARLIEST_TIMESTAMP, 10))),))
            answer = client.call(leader, ApiKey.LIST_OFFSETS, 0, request, lo.encode_request, lo.decode_response)
            latest, earliest = answer.topics[0].partitions
            assert latest.error_code == 0 and earliest.old_style_offsets == (0,)
            assert latest.old_style_offsets[-1] == 0 and latest.old_style_offsets == tuple(
                sorted(latest.old_style_offsets, reverse=True))
            total += latest.old_style_offsets[0]
        assert total == RECORDS  # the high watermarks of every partition
