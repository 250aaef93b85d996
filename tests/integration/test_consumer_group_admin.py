"""Operating consumer groups against a real 3-broker cluster: `tidelog groups` (lag, reset to
earliest, delete), the admin API's /v1/groups (lag = high watermark - committed offset, resets
only for an empty group, delete), broker metrics, and bad group requests over a real
connection (Kafka's error codes, nothing stored, the connection fine)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from common.prometheus import samples
from tests.integration.cluster_fixtures import wait_until
from tests.integration.group_fixtures import produce, split, start_member, stop_members
from tests.integration.replication_fixtures import replicated_cluster
from tests.integration.test_consumer_groups import (
    CONSUME_S,
    GROUP_PROPERTIES,
    PARTITIONS,
    consumed_values,
    describe,
    new_topic,
    values,
)
from localcluster.launcher import LocalCluster

confluent_kafka = pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with replicated_cluster(tmp_path_factory.mktemp("group-admin"), GROUP_PROPERTIES) as (started, _):
        yield started


def tidelog(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    from tidelog.cli import main

    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def test_groups_cli_lag_and_reset_to_earliest(cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
    topic = new_topic(cluster, "cli-groups")
    bootstrap = cluster.bootstrap_servers
    assert bootstrap is not None
    produce(bootstrap, topic, values("cli", 90))
    members = [start_member("kafka-python", bootstrap, "cli-group", topic, 0)]
    try:
        wait_until("consumed", lambda: len(consumed_values(members)) >= 90, CONSUME_S)
        code, out = tidelog(capsys, "groups", "describe", "--group", "cli-group", "--bootstrap-server", bootstrap)
        assert code == 0, out
        assert "kafka-python-0" in out  # the owner of each partition: its client id
    finally:
        stop_members(members)
    wait_until("the member left", lambda: describe(bootstrap, "cli-group").state == "Empty", CONSUME_S)
    produce(bootstrap, topic, values("cli-lag", 30))  # 30 records of lag in all
    code, out = tidelog(capsys, "groups", "list", "--bootstrap-server", bootstrap)
    assert code == 0 and "cli-group" in out.split()
    code, out = tidelog(capsys, "groups", "describe", "--group", "cli-group", "--bootstrap-server", bootstrap)
    assert code == 0 and "has no active members" in out, out
    rows = [line.split() for line in out.splitlines() if line.startswith("cli-group ")]
    assert len(rows) == PARTITIONS
    for _, _, _, current, end, lag, *_ in rows:
        assert int(lag) == int(end) - int(current)
    assert sum(int(r[5]) for r in rows) == 30

    code, out = tidelog(capsys, "groups", "reset-offsets", "--group", "cli-group", "--topic", topic,
                        "--to-earliest", "--bootstrap-server", bootstrap)
    assert code == 0 and "NEW-OFFSET" in out  # a dry run: nothing changed
    code, out = tidelog(capsys, "groups", "describe", "--group", "cli-group", "--bootstrap-server", bootstrap)
    assert sum(int(line.split()[5]) for line in out.splitlines() if line.startswith("cli-group ")) == 30
    code, out = tidelog(capsys, "groups", "reset-offsets", "--group", "cli-group", "--topic", topic,
                        "--to-earliest", "--execute", "--bootstrap-server", bootstrap)
    assert code == 0, out
    again = [start_member("confluent", bootstrap, "cli-group", topic, 1)]
    try:
        wait_until("everything consumed again", lambda: len(consumed_values(again)) >= 120, CONSUME_S)
    finally:
        stop_members(again)
    assert sorted(consumed_values(again)) == sorted(values("cli", 90) + values("cli-lag", 30))
    code, out = tidelog(capsys, "groups", "delete", "--group", "cli-group", "--bootstrap-server", bootstrap)
    assert code == 0 and "successful" in out, out
    code, out = tidelog(capsys, "groups", "describe", "--group", "cli-group", "--bootstrap-server", bootstrap)
    assert code == 1 and "GROUP_ID_NOT_FOUND" in out


def test_broker_metrics_count_groups_rebalances_and_commits(cluster: LocalCluster) -> None:
    from tests.integration.cluster_fixtures import http

    topic = new_topic(cluster, "metrics")
    bootstrap = cluster.bootstrap_servers
    assert bootstrap is not None
    produce(bootstrap, topic, values("metrics", 12))
    members = [start_member("confluent", bootstrap, "metrics-group", topic, 0)]
    try:
        wait_until("consumed", lambda: len(consumed_values(members)) >= 12, CONSUME_S)
    finally:
        stop_members(members)

    totals: dict[str, float] = {}
    for broker in cluster.brokers:
        status, body = http(broker.spec.metrics_url)
        assert status == 200
        for name, value in samples(body.decode()).items():
            if name.startswith(("tidelog_broker_group_rebalances_total", "tidelog_broker_offset_commits_total",
                                "tidelog_broker_groups{")):
                totals[name] = totals.get(name, 0) + value
    assert totals["tidelog_broker_group_rebalances_total"] > 0
    assert totals["tidelog_broker_offset_commits_total"] > 0
    assert 'tidelog_broker_groups{state="Empty"}' in totals


def test_admin_api_groups_lag_reset_and_delete(cluster: LocalCluster) -> None:
    import json

    from tests.integration.cluster_fixtures import http

    topic = new_topic(cluster, "api-groups")
    bootstrap = cluster.bootstrap_servers
    assert bootstrap is not None
    produce(bootstrap, topic, values("api", 60))
    members = [start_member("confluent", bootstrap, "api-group", topic, 0)]
    try:
        wait_until("consumed", lambda: len(consumed_values(members)) >= 60, CONSUME_S)
        status, body = http(f"{cluster.admin_url}/v1/groups/api-group")
        assert status == 200, body
        live = json.loads(body)
        assert live["state"] == "Stable" and live["protocol_type"] == "consumer" and live["protocol"] == "range"
        (member,) = live["members"]
        assert member["client_id"] == "confluent-0" and len(member["assignment"]) == PARTITIONS
        status, body = http(f"{cluster.admin_url}/v1/groups/api-group/offsets", "POST",
                            {"topic": topic, "to": "earliest"})
        assert status == 409 and json.loads(body)["error"] == "NON_EMPTY_GROUP"
    finally:
        stop_members(members)
    wait_until("the member left", lambda: describe(bootstrap, "api-group").state == "Empty", CONSUME_S)
    produce(bootstrap, topic, values("api-lag", 20))
    status, body = http(f"{cluster.admin_url}/v1/groups")
    assert status == 200 and "api-group" in {g["group_id"] for g in json.loads(body)}
    described = json.loads(http(f"{cluster.admin_url}/v1/groups/api-group")[1])
    assert described["state"] == "Empty" and described["members"] == []
    offsets = described["offsets"]
    assert len(offsets) == PARTITIONS
    assert all(o["lag"] == o["log_end_offset"] - o["committed_offset"] for o in offsets)
    assert sum(o["lag"] for o in offsets) == 20
    assert sum(o["log_end_offset"] for o in offsets) == 80  # the high watermarks

    status, body = http(f"{cluster.admin_url}/v1/groups/api-group/offsets", "POST",
                        {"topic": topic, "to": "shift", "value": -1, "partitions": [0]})
    plan = json.loads(body)
    assert status == 200 and plan["dry_run"] and [o["partition"] for o in plan["offsets"]] == [0]
    status, body = http(f"{cluster.admin_url}/v1/groups/api-group/offsets", "POST",
                        {"topic": topic, "to": "earliest", "execute": True})
    assert status == 200 and not json.loads(body)["dry_run"]
    described = json.loads(http(f"{cluster.admin_url}/v1/groups/api-group")[1])
    assert sum(o["lag"] for o in described["offsets"]) == 80
    status, body = http(f"{cluster.admin_url}/v1/groups/api-group/offsets", "POST", {"topic": topic, "to": "nope"})
    assert status == 400 and json.loads(body)["field"] == "to"
    status, body = http(f"{cluster.admin_url}/v1/groups/api-group", "DELETE")
    assert status == 200 and json.loads(body)["deleted"]
    status, body = http(f"{cluster.admin_url}/v1/groups/api-group")
    assert status == 404 and json.loads(body)["error"] == "GROUP_ID_NOT_FOUND"
    status, body = http(f"{cluster.admin_url}/v1/groups/never-there", "DELETE")
    assert status == 404


def test_bad_group_requests_get_kafkas_errors_and_store_nothing(cluster: LocalCluster) -> None:
    """Over one real connection to the coordinator: each bad request gets its error code,
    nothing is stored, and the connection keeps working."""
    from common.errors import ErrorCode as E
    from tests import group_wire as gw
    from common.protocol.api_keys import ApiKey
    from tidelog.cli_common import parse_bootstrap_servers
    from tidelog.group_admin import GroupAdmin
    from common.kafka_client import KafkaClient

    topic = new_topic(cluster, "bad-input")
    bootstrap = cluster.bootstrap_servers
    assert bootstrap is not None
    members = [start_member("confluent", bootstrap, "bad-input-group", topic, 0)]
    try:
        wait_until("a live group", lambda: split(members, PARTITIONS), CONSUME_S)
        with KafkaClient(parse_bootstrap_servers(bootstrap)) as client:
            admin = GroupAdmin(client)
            coordinator = admin.coordinator("bad-input-group")

            def join(group: str, protocols: tuple) -> int:
                request = gw.join(5, group, 10000, 10000, "", None, "consumer", protocols)
                return client.call(coordinator, ApiKey.JOIN_GROUP, 5, request, *gw.codec(ApiKey.JOIN_GROUP)).error_code

            def commit(group: str, *parts: tuple[str, int, str]) -> list[int]:
                request = gw.commit(7, group, -1, "", [(t, p, 5, -1, m) for t, p, m in parts])
                for _ in range(50):  # a retriable COORDINATOR_LOAD_IN_PROGRESS is retried, as clients do
                    response = client.call(admin.coordinator(group), ApiKey.OFFSET_COMMIT, 7, request,
                                           *gw.codec(ApiKey.OFFSET_COMMIT))
                    codes = [p.error_code for t in response.topics for p in t.partitions]
                    if E.COORDINATOR_LOAD_IN_PROGRESS not in codes:
                        return codes
                    time.sleep(0.1)
                raise AssertionError(f"{group}: still loading")

            assert join("", (("range", b""),)) == E.INVALID_GROUP_ID
            assert join("bad-input-group", (("no-such-assignor", b""),)) == \
                E.INCONSISTENT_GROUP_PROTOCOL
            assert join("bad-input-group", ()) == E.INCONSISTENT_GROUP_PROTOCOL
            assert commit("bad-input-group", (topic, 0, "")) == [E.UNKNOWN_MEMBER_ID]  # a live group
            standalone = "bad-input-standalone"
            assert commit(standalone, ("no-such-topic", 0, ""), (topic, 0, "x" * 5000)) == [
                E.UNKNOWN_TOPIC_OR_PARTITION, E.OFFSET_METADATA_TOO_LARGE]
            assert admin.committed(standalone) == {}
            assert topic in client.metadata([topic]).topics  # the same connections still work
    finally:
        stop_members(members)
    assert len(members[0].seen()) == 0 and members[0].commit_failures == 0


def test_client_admin_apis_on_groups(cluster: LocalCluster) -> None:
    """confluent-kafka's, kafka-python's and aiokafka's admin clients: list, describe, offsets, alter,
    delete (kafka-python's delete_group_offsets is OffsetDelete)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient

    topic = new_topic(cluster, "client-admin")
    bootstrap = cluster.bootstrap_servers
    assert bootstrap is not None
    produce(bootstrap, topic, values("client-admin", 30))
    members = [start_member("confluent", bootstrap, "client-admin-group", topic, 0)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    python_admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","))
    try:
        wait_until("consumed", lambda: len(consumed_values(members)) >= 30, CONSUME_S)
        listed = admin.list_consumer_groups().result(timeout=20)
        assert "client-admin-group" in {g.group_id for g in listed.valid}
        described = admin.describe_consumer_groups(["client-admin-group"])["client-admin-group"].result(timeout=20)
        assert described.state.name == "STABLE" and len(described.members) == 1
        assert {tp.partition for tp in described.members[0].assignment.topic_partitions} == set(range(PARTITIONS))
        assert "client-admin-group" in {g["group_id"] for g in python_admin.list_groups()}
        py_described = python_admin.describe_groups(["client-admin-group"])["client-admin-group"]
        assert py_described["error"] is None and py_described["group_state"] == "Stable"
        assert len(py_described["members"]) == 1
    finally:
        stop_members(members)
    wait_until("the member left", lambda: describe(bootstrap, "client-admin-group").state == "Empty", CONSUME_S)
    request = ConsumerGroupTopicPartitions("client-admin-group", [TopicPartition(topic, p) for p in range(PARTITIONS)])
    offsets = admin.list_consumer_group_offsets([request])["client-admin-group"].result(timeout=20)
    assert sum(tp.offset for tp in offsets.topic_partitions) == 30
    assert sum(o.offset for o in asyncio.run(aiokafka_offsets(bootstrap, "client-admin-group")).values()) == 30
    py_offsets = python_admin.list_group_offsets({"client-admin-group": None})["client-admin-group"]
    assert sum(o.offset for o in py_offsets.values()) == 30
    from kafka import TopicPartition as PyTopicPartition
    python_admin.delete_group_offsets("client-admin-group", [PyTopicPartition(topic, 0)])  # OffsetDelete
    remaining = python_admin.list_group_offsets({"client-admin-group": None})["client-admin-group"]
    assert {tp.partition for tp, o in remaining.items() if o.offset >= 0} == set(range(1, PARTITIONS))
    altered = ConsumerGroupTopicPartitions("client-admin-group", [TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    admin.alter_consumer_group_offsets([altered])["client-admin-group"].result(timeout=20)
    offsets = admin.list_consumer_group_offsets([request])["client-admin-group"].result(timeout=20)
    assert [tp.offset for tp in offsets.topic_partitions] == [0] * PARTITIONS
    admin.delete_consumer_groups(["client-admin-group"])["client-admin-group"].result(timeout=20)
    assert "client-admin-group" not in {g.group_id for g in admin.list_consumer_groups().result(timeout=20).valid}
    python_admin.close()


async def aiokafka_offsets(bootstrap: str, group: str) -> dict:
    """aiokafka's admin client: the group is listed and described, and its committed offsets."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        assert group in {g[0] for g in await admin.list_consumer_groups()}
        (described,) = (await admin.describe_consumer_groups([group]))[0].groups
        error_code, group_id, state = described[:3]  # aiokafka answers the protocol's tuples
        assert (error_code, group_id, state) == (0, group, "Empty")
        return await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
