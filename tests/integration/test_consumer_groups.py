"""Consumer groups with real clients against a real 3-broker cluster (RF=3 topics).

For confluent-kafka, kafka-python and aiokafka: 3 members of one group split a 6-partition
topic and consume every record exactly once (synchronous commits); then one member leaves
and the other two take its partitions over from the committed offsets, again exactly once.
confluent-kafka also with cooperative-sticky; a static member (group.instance.id) restarts
within its session without a rebalance; kcat -G consumes; bad group requests get Kafka's
errors. Coordinator failover (SIGKILL) is in test_consumer_group_failover.py.
"""

from __future__ import annotations

import re
import shutil
import time
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster_fixtures import wait_until
from tests.integration.group_fixtures import produce, split, start_member, stop_members
from tests.integration.replication_fixtures import create_topic, replicated_cluster, wait_full_isr
from tidelog.launcher import LocalCluster

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
    from tidelog.kafka_client import KafkaClient

    with KafkaClient(parse_bootstrap_servers(bootstrap)) as client:
        return GroupAdmin(client).describe(group)


def test_a_killed_consumer_is_expired_after_its_session_timeout(cluster: LocalCluster) -> None:
    import signal
    import sys
    import time

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


def test_broker_metrics_count_groups_rebalances_and_commits(cluster: LocalCluster) -> None:
    from tests.integration.cluster_fixtures import http

    totals: dict[str, float] = {}
    for broker in cluster.brokers:
        status, body = http(broker.spec.metrics_url)
        assert status == 200
        for line in body.decode().splitlines():
            if line.startswith(("tidelog_broker_group_rebalances_total", "tidelog_broker_offset_commits_total",
                                "tidelog_broker_groups{")):
                name, value = line.rsplit(" ", 1)
                totals[name] = totals.get(name, 0) + float(value)
    assert totals["tidelog_broker_group_rebalances_total"] > 0  # the tests before this one rebalanced
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
    from common.protocol import join_group as jg
    from common.protocol import offset_commit as oc
    from common.protocol.api_keys import ApiKey
    from tidelog.cli_common import parse_bootstrap_servers
    from tidelog.group_admin import GroupAdmin
    from tidelog.kafka_client import KafkaClient

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
                request = jg.JoinGroupRequest(group, 10000, 10000, "", None, "consumer", protocols)
                return client.call(coordinator, ApiKey.JOIN_GROUP, 5, request, jg.encode_join_group_request,
                                   jg.decode_join_group_response).error_code

            def commit(group: str, *parts: tuple[str, int, str]) -> list[int]:
                request = oc.OffsetCommitRequest(group, -1, "", tuple(oc.OffsetCommitRequestTopic(t, (
                    oc.OffsetCommitRequestPartition(p, 5, -1, m),)) for t, p, m in parts))
                for _ in range(50):  # a retriable COORDINATOR_LOAD_IN_PROGRESS is retried, as clients do
                    response = client.call(admin.coordinator(group), ApiKey.OFFSET_COMMIT, 7, request,
                                           oc.encode_offset_commit_request, oc.decode_offset_commit_response)
                    codes = [p.error_code for t in response.topics for p in t.partitions]
                    if E.COORDINATOR_LOAD_IN_PROGRESS not in codes:
                        return codes
                    time.sleep(0.1)
                raise AssertionError(f"{group}: still loading")

            assert join("", (jg.JoinGroupRequestProtocol("range", b""),)) == E.INVALID_GROUP_ID
            assert join("bad-input-group", (jg.JoinGroupRequestProtocol("no-such-assignor", b""),)) == \
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
