"""KIP-932 share groups with real confluent-kafka `ShareConsumer`s (librdkafka's share consumer).

One module-scoped cluster (one controller, three brokers). Each test has its own topic (one
partition, three replicas) and group; the failover test, last, kills a broker and restarts it.
The acquisition lock is shortened to 5 s and the delivery count limit is Kafka's smallest (2),
so redelivery and archiving take seconds, not Kafka's 30 s. The module also holds the KIP-848
fixes' tests (admin API, per-group configs): they share its cluster.
Consumers acknowledge explicitly, so a test decides when a record is acknowledged, released or
rejected and which consumer holds what.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chaos.nemesis import Nemesis
from localcluster.launcher import LocalCluster
from common.waiting import wait_until
from tests.integration.cluster_fixtures import http
from tests.integration.replication_clients import wait_unfenced
from tests.integration.replication_fixtures import (
    create_topic,
    partition_state,
    replicated_cluster,
    wait_for_state,
    wait_full_isr,
)

confluent_kafka = pytest.importorskip("confluent_kafka")

LOCK_MS = 5_000  # long enough that a loaded machine acknowledges in time, short enough to wait for
PROPERTIES = {
    "group.share.record.lock.duration.ms": str(LOCK_MS), "group.share.delivery.count.limit": "2",
    "group.share.heartbeat.interval.ms": "500", "share.auto.offset.reset": "earliest",
    "offsets.topic.num.partitions": "3",
}
WAIT_S = 20.0  # a consumer joining, getting its assignment and fetching: about 1 s here
POLL_S = 0.5
ACCEPT, RELEASE, REJECT = (confluent_kafka.AcknowledgeType.ACCEPT, confluent_kafka.AcknowledgeType.RELEASE,
                           confluent_kafka.AcknowledgeType.REJECT)


@pytest.fixture(scope="module")
def cluster_and_nemesis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, Nemesis]]:
    with replicated_cluster(tmp_path_factory.mktemp("share-groups"), PROPERTIES) as started:
        yield started


@pytest.fixture
def cluster(cluster_and_nemesis: tuple[LocalCluster, Nemesis]) -> LocalCluster:
    return cluster_and_nemesis[0]


def bootstrap(cluster: LocalCluster) -> str:
    assert cluster.bootstrap_servers is not None
    return cluster.bootstrap_servers


def produce(cluster: LocalCluster, topic: str, values: list[bytes]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap(cluster), "linger.ms": 0})
    for v in values:
        producer.produce(topic, v)
    assert producer.flush(WAIT_S) == 0


def consumer(cluster: LocalCluster, group: str, topic: str) -> Any:
    c = confluent_kafka.ShareConsumer({"bootstrap.servers": bootstrap(cluster), "group.id": group,
                                       "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    return c


def poll(c: Any, want: int, timeout_s: float = WAIT_S) -> list[Any]:
    """Messages until `want` arrived or `timeout_s` passed (bounded)."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        for m in c.poll(POLL_S):
            assert m.error() is None, m.error()
            got.append(m)
    return got


def values(messages: list[Any]) -> list[bytes]:
    return sorted(m.value() for m in messages)


def ack_all(c: Any, messages: list[Any], kind: Any = ACCEPT) -> None:
    for m in messages:
        c.acknowledge(m, kind)
    c.commit_sync(WAIT_S)


@pytest.fixture
def consumers() -> Iterator[list[Any]]:
    """Every consumer a test makes is closed after it, failure or not."""
    made: list[Any] = []
    yield made
    for c in made:
        try:
            c.close()
        except Exception:  # noqa: BLE001 - closed already by the test
            pass


def test_two_consumers_on_one_partition_get_distinct_records(cluster: LocalCluster, consumers: list[Any]) -> None:
    create_topic(cluster, "share-split", partitions=1)
    first, second = [b"first-%d" % i for i in range(20)], [b"second-%d" % i for i in range(20)]
    produce(cluster, "share-split", first)
    a = consumer(cluster, "split", "share-split")
    consumers.append(a)
    got_a = poll(a, 20)
    assert values(got_a) == sorted(first)
    assert {m.delivery_count() for m in got_a} == {1}
    produce(cluster, "share-split", second)
    b = consumer(cluster, "split", "share-split")
    consumers.append(b)
    got_b = poll(b, 20)  # a still holds the first 20: b gets only the second
    assert values(got_b) == sorted(second)
    ack_all(a, got_a)
    ack_all(b, got_b)
    assert poll(a, 1, 1.0) + poll(b, 1, 1.0) == []  # each record acknowledged once: nothing left


def test_released_on_close_and_lock_timeout_after_sigkill_redeliver_with_count_2(
        cluster: LocalCluster, consumers: list[Any], tmp_path: Path) -> None:
    create_topic(cluster, "share-redeliver", partitions=1)
    produce(cluster, "share-redeliver", [b"r-%d" % i for i in range(10)])
    a = consumer(cluster, "redeliver", "share-redeliver")
    got_a = poll(a, 10)
    assert len(got_a) == 10
    ack_all(a, got_a[:3])
    closed = time.monotonic()
    a.close()  # its share session closes: the 7 it did not acknowledge go back at once
    b = consumer(cluster, "redeliver", "share-redeliver")
    consumers.append(b)
    again = poll(b, 7)
    assert values(again) == values(got_a[3:])
    assert time.monotonic() - closed < LOCK_MS / 1000  # released by the close, not by the lock timeout
    assert {m.delivery_count() for m in again} == {2}
    ack_all(b, again)

    # a consumer SIGKILLed while holding records: they come back once its locks run out
    produce(cluster, "share-redeliver", [b"k-%d" % i for i in range(5)])
    killed = _holding_consumer(cluster, "redeliver", "share-redeliver", 5, tmp_path)
    try:
        os.kill(killed.pid, signal.SIGKILL)
        started = time.monotonic()
        back = poll(b, 5, LOCK_MS / 1000 + WAIT_S)
        assert values(back) == [b"k-%d" % i for i in range(5)]
        assert {m.delivery_count() for m in back} == {2}
        assert time.monotonic() - started < LOCK_MS / 1000 + 5  # the lock, not the session timeout
        ack_all(b, back)
    finally:
        killed.kill()
        killed.wait()


def _holding_consumer(cluster: LocalCluster, group: str, topic: str, want: int, tmp_path: Path) -> Any:
    """A share consumer in its own process that polls `want` records, says so and holds them."""
    script = tmp_path / "hold.py"
    script.write_text(
        "import sys, time, confluent_kafka\n"
        "c = confluent_kafka.ShareConsumer({'bootstrap.servers': sys.argv[1], 'group.id': sys.argv[2],\n"
        "                                   'share.acknowledgement.mode': 'explicit'})\n"
        "c.subscribe([sys.argv[3]])\n"
        "got, deadline = 0, time.monotonic() + 20\n"
        "while got < int(sys.argv[4]) and time.monotonic() < deadline:\n"
        "    got += len(c.poll(0.5))\n"
        "print(got, flush=True)\n"
        "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, str(script), bootstrap(cluster), group, topic, str(want)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == str(want)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


def test_reject_and_releases_past_the_delivery_limit_archive(cluster: LocalCluster, consumers: list[Any]) -> None:
    create_topic(cluster, "share-archive", partitions=1)
    produce(cluster, "share-archive", [b"rejected", b"released", b"kept"])
    a = consumer(cluster, "archive", "share-archive")
    consumers.append(a)
    got = {m.value(): m for m in poll(a, 3)}
    a.acknowledge(got[b"rejected"], REJECT)
    a.acknowledge(got[b"released"], RELEASE)
    a.acknowledge(got[b"kept"], RELEASE)
    a.commit_sync(WAIT_S)
    second = {m.value(): m for m in poll(a, 2)}  # the rejected one never comes back
    assert sorted(second) == [b"kept", b"released"]
    assert {m.delivery_count() for m in second.values()} == {2}
    a.acknowledge(second[b"released"], RELEASE)  # its second delivery: the limit, so archived
    a.acknowledge(second[b"kept"], ACCEPT)
    a.commit_sync(WAIT_S)
    assert poll(a, 1, LOCK_MS / 1000 + 1.0) == []


def test_admin_api_and_cli_describe_share_and_consumer_protocol_groups(
        cluster: LocalCluster, consumers: list[Any], capsys: pytest.CaptureFixture[str]) -> None:
    """GET /v1/groups/{id} shows a KIP-848 group's real state, epochs and members (it showed Dead,
    from DescribeGroups) and a share group's; ListGroups and `tidelog groups` know share groups."""
    create_topic(cluster, "share-admin", partitions=2)
    produce(cluster, "share-admin", [b"x"])
    share = consumer(cluster, "admin-share", "share-admin")
    consumers.append(share)
    [record] = poll(share, 1)
    ack_all(share, [record])
    modern = confluent_kafka.Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": "admin-848",
                                       "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    try:
        modern.subscribe(["share-admin"])
        deadline = time.monotonic() + WAIT_S
        while not modern.assignment() and time.monotonic() < deadline:
            modern.poll(POLL_S)
        assert len(modern.assignment()) == 2

        status, body = http(f"{cluster.admin_url}/v1/groups/admin-848")
        assert status == 200, body
        described = json.loads(body)
        assert (described["type"], described["state"], described["assignor"]) == ("consumer", "Stable", "uniform")
        [member] = described["members"]
        assert member["member_epoch"] == described["group_epoch"] >= 1
        assert sorted(p["partition"] for p in member["assignment"]) == [0, 1]

        status, body = http(f"{cluster.admin_url}/v1/groups/admin-share")
        assert status == 200, body
        described = json.loads(body)
        assert (described["type"], described["state"], described["assignor"]) == ("share", "Stable", "simple")
        assert [sorted(p["partition"] for p in m["assignment"]) for m in described["members"]] == [[0, 1]]

        code, out = tidelog(capsys, "groups", "list", "--bootstrap-server", bootstrap(cluster))
        assert code == 0 and {"admin-share", "admin-848"} <= set(out.split()), out
        code, out = tidelog(capsys, "groups", "describe", "--group", "admin-share", "--bootstrap-server",
                            bootstrap(cluster))
        assert code == 0 and "Share group 'admin-share': type share, assignor simple, state Stable" in out, out
        assert "share-admin:0,1" in out, out
        # DescribeShareGroupOffsets: the acknowledged record's partition starts past it, nothing left
        rows = {int(line.split()[2]): line.split()[3:] for line in out.splitlines()
                if line.startswith("admin-share ") and line.split()[1] == "share-admin"}
        assert rows[record.partition()] == ["1", "1", "0"], out
    finally:
        modern.close()


def tidelog(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    from tidelog.cli import main

    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def test_per_group_configs_set_a_consumer_groups_heartbeat_interval(cluster: LocalCluster) -> None:
    """KIP-848's per-group configs: IncrementalAlterConfigs on a GROUP resource (confluent-kafka's
    AdminClient) is stored, described, and a member joining the group is told its interval."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap(cluster)})
    entry = ConfigEntry("consumer.heartbeat.interval.ms", "7000", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.GROUP, "cfg-848", incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(WAIT_S)
    described = next(iter(admin.describe_configs([ConfigResource(ResourceType.GROUP, "cfg-848")]).values()))
    assert described.result(WAIT_S)["consumer.heartbeat.interval.ms"].value == "7000"
    bad = ConfigResource(ResourceType.GROUP, "cfg-848", incremental_configs=[
        ConfigEntry("consumer.heartbeat.interval.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(confluent_kafka.KafkaException, match="INVALID_CONFIG|Invalid value"):
        next(iter(admin.incremental_alter_configs([bad]).values())).result(WAIT_S)
    assert _joined_heartbeat_interval(cluster, "cfg-848") == 7000
    assert _joined_heartbeat_interval(cluster, "cfg-other") == 5000  # another group: the broker's default


def test_a_share_groups_own_auto_offset_reset(cluster: LocalCluster, consumers: list[Any]) -> None:
    """share.auto.offset.reset per group (IncrementalAlterConfigs on GROUP, Kafka 4's group config):
    the brokers' default here is earliest; a group set to latest starts past what was there."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap(cluster)})
    entry = ConfigEntry("share.auto.offset.reset", "latest", incremental_operation=AlterConfigOpType.SET)
    for future in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, "cfg-latest",
                                                                  incremental_configs=[entry])]).values():
        future.result(WAIT_S)

    def described() -> dict[str, Any]:
        return dict(next(iter(admin.describe_configs([ConfigResource(ResourceType.GROUP, "cfg-latest")]).values()))
                    .result(WAIT_S))
    configs = described()
    assert configs["share.auto.offset.reset"].value == "latest"
    assert configs["share.record.lock.duration.ms"].value == str(LOCK_MS)  # the broker's, as its default
    bad = ConfigResource(ResourceType.GROUP, "cfg-latest", incremental_configs=[
        ConfigEntry("share.record.lock.duration.ms", "999", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(confluent_kafka.KafkaException, match="INVALID_CONFIG|at least 1000"):
        next(iter(admin.incremental_alter_configs([bad]).values())).result(WAIT_S)
    create_topic(cluster, "share-latest", partitions=1)
    produce(cluster, "share-latest", [b"old-%d" % i for i in range(5)])
    a = consumer(cluster, "cfg-latest", "share-latest")
    consumers.append(a)
    assert poll(a, 1, 3.0) == []  # joined and started at the log end: the old records are not its
    produce(cluster, "share-latest", [b"new-%d" % i for i in range(3)])
    got = poll(a, 3)
    ack_all(a, got)
    assert values(got) == [b"new-%d" % i for i in range(3)]


def _joined_heartbeat_interval(cluster: LocalCluster, group: str) -> int:
    """The heartbeat interval a ConsumerGroupHeartbeat v1 join is answered (the member then leaves)."""
    import uuid
    from datetime import timedelta

    from common.kafka_client import KafkaClient
    from common.protocol import messages
    from common.protocol.api_keys import ApiKey
    from tidelog.cli_common import parse_bootstrap_servers
    from tidelog.group_admin import GroupAdmin

    api, member = ApiKey.CONSUMER_GROUP_HEARTBEAT, str(uuid.uuid4())
    m = messages.request_module(api, 1)
    with KafkaClient(parse_bootstrap_servers(bootstrap(cluster)), client_id="share-groups-test") as client:
        admin = GroupAdmin(client)

        def beat(epoch: int) -> Any:
            request = messages.build(m.ConsumerGroupHeartbeatRequest, group_id=group, member_id=member,
                                     member_epoch=epoch, instance_id=None, rack_id=None,
                                     rebalance_timeout=timedelta(seconds=30), subscribed_topic_names=("share-split",),
                                     subscribed_topic_regex=None, server_assignor=None, topic_partitions=())
            return admin._at_coordinator(group, api, 1, request, messages.encode_request,
                                         messages.response_decoder(api), lambda r: r.error_code)

        joined = beat(0)
        beat(-1)
    assert joined.error_code == 0, joined
    return messages.milliseconds(joined.heartbeat_interval)


def test_reset_offsets_of_an_empty_share_group(cluster: LocalCluster, consumers: list[Any],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """`tidelog groups reset-offsets` moves a share group's start offset (AlterShareGroupOffsets):
    refused while a member is active; once done, the next member gets the records again."""
    create_topic(cluster, "share-reset", partitions=1)
    produce(cluster, "share-reset", [b"z-%d" % i for i in range(5)])
    a = consumer(cluster, "reset", "share-reset")
    ack_all(a, poll(a, 5))
    a.close()
    argv = ("groups", "reset-offsets", "--group", "reset", "--topic", "share-reset", "--to-offset", "2",
            "--execute", "--bootstrap-server", bootstrap(cluster))
    assert _share_lags(cluster, "reset", "share-reset") == {0: (5, 0)}  # all 5 acknowledged
    code, out = tidelog(capsys, *argv)
    assert code == 0 and "NEW-START-OFFSET" in out, out
    # DescribeShareGroupOffsets v1's lag: 2-4 again; bounded wait, as a coordinator that follows the
    # partition computes it from its own high watermark, which may trail the leader's a moment
    wait_until("a lag of 3 after the reset", lambda: _share_lags(cluster, "reset", "share-reset") == {0: (2, 3)},
               WAIT_S)
    b = consumer(cluster, "reset", "share-reset")
    consumers.append(b)
    again = poll(b, 3)
    assert values(again) == [b"z-2", b"z-3", b"z-4"] and {m.delivery_count() for m in again} == {1}
    code, out = tidelog(capsys, *argv)
    assert code == 1 and "NON_EMPTY_GROUP" in out, out
    ack_all(b, again)
    b.close()
    # DeleteShareGroupOffsets: the group's state of the topic goes; it starts again from
    # share.auto.offset.reset (earliest here)
    assert _delete_share_offsets(cluster, "reset", "share-reset") == (0, 0)
    c = consumer(cluster, "reset", "share-reset")
    consumers.append(c)
    assert values(poll(c, 5)) == [b"z-%d" % i for i in range(5)]


def test_share_groups_command_lists_describes_and_resets(cluster: LocalCluster, consumers: list[Any],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """`tidelog share-groups` (kafka-share-groups.sh): list names the share group and not a
    classic one; describe shows the members with their epochs and assignment, and each
    partition's start offset and lag (DescribeShareGroupOffsets v1); reset-offsets is refused
    while a member is active (dry run too), then a dry run changes nothing and --execute does."""
    create_topic(cluster, "share-cli", partitions=1)
    produce(cluster, "share-cli", [b"c-%d" % i for i in range(4)])
    a = consumer(cluster, "cli-share", "share-cli")
    consumers.append(a)
    ack_all(a, poll(a, 4))
    classic = confluent_kafka.Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": "cli-classic"})
    try:
        classic.commit(offsets=[confluent_kafka.TopicPartition("share-cli", 0, 1)], asynchronous=False)
    finally:
        classic.close()
    server = ("--bootstrap-server", bootstrap(cluster))
    code, out = tidelog(capsys, "share-groups", "list", *server)
    assert code == 0 and "cli-share" in out.split() and "cli-classic" not in out.split(), out

    def described() -> str:
        code, out = tidelog(capsys, "share-groups", "describe", "--group", "cli-share", *server)
        assert code == 0, out
        return out

    out = described()
    assert "Share group 'cli-share': state Stable" in out, out
    member = [line.split() for line in out.splitlines() if line.startswith("cli-share ") and "share-cli:0" in line]
    assert len(member) == 1 and int(member[0][-3]) >= 1, out  # its epoch, 1 partition
    assert ["cli-share", "share-cli", "0", "4", "0"] in [line.split() for line in out.splitlines()], out
    reset = ("share-groups", "reset-offsets", "--group", "cli-share", "--topic", "share-cli", "--to-earliest", *server)
    code, out = tidelog(capsys, *reset)
    assert code == 1 and "NON_EMPTY_GROUP" in out, out
    a.close()
    wait_until("the share group empty", lambda: "has no active members" in described(), WAIT_S)
    code, out = tidelog(capsys, *reset)
    assert code == 0 and ["cli-share", "share-cli", "0", "0"] in [line.split() for line in out.splitlines()], out
    assert ["cli-share", "share-cli", "0", "4", "0"] in [line.split() for line in described().splitlines()]
    code, out = tidelog(capsys, *reset, "--execute")
    assert code == 0, out
    wait_until("start offset 0 with a lag of 4", lambda: ["cli-share", "share-cli", "0", "0", "4"] in [
        line.split() for line in described().splitlines()], WAIT_S)


def test_an_acknowledgement_whose_state_write_fails_is_not_lost(cluster: LocalCluster, consumers: list[Any]) -> None:
    """issue 31's share-coordinator-kill bug, by a request fault: the group coordinator drops the
    WriteShareGroupState of an ACCEPT (the leader's persister answers the member
    COORDINATOR_NOT_AVAILABLE, which librdkafka's commit_sync reports). The leader rolls the
    acknowledgement back, so once the member closes the records are delivered again, with
    delivery count 2. Before the fix the leader kept them accepted in memory only, and nobody got
    them again."""
    from chaos.nemeses.requests import RequestFaultNemesis

    create_topic(cluster, "share-rollback", partitions=1)
    produce(cluster, "share-rollback", [b"r-0", b"r-1"])
    a = consumer(cluster, "rollback", "share-rollback")
    consumers.append(a)
    got = poll(a, 2)
    assert len(got) == 2
    faults = RequestFaultNemesis(cluster)
    placed = faults.install({"kind": "drop_before", "api": "WriteShareGroupState", "times": 1},
                            [n.spec.node_id for n in cluster.brokers])
    try:
        for m in got:
            a.acknowledge(m, ACCEPT)
        answers = a.commit_sync(WAIT_S)
        assert sum(faults.fired(placed).values()) == 1
    finally:
        faults.remove(placed)
    refused = [e.args[0].code() for e in answers.values()]
    assert refused == [confluent_kafka.KafkaError.COORDINATOR_NOT_AVAILABLE], answers
    a.close()
    b = consumer(cluster, "rollback", "share-rollback")
    consumers.append(b)
    again = poll(b, 2)
    assert values(again) == [b"r-0", b"r-1"] and {m.delivery_count() for m in again} == {2}
    ack_all(b, again)
    assert poll(b, 1, 2.0) == []


def _share_lags(cluster: LocalCluster, group: str, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (start offset, lag) from DescribeShareGroupOffsets v1 (KIP-1226's lag)."""
    from common.kafka_client import KafkaClient
    from common.protocol import messages
    from common.protocol.api_keys import ApiKey
    from tidelog.cli_common import parse_bootstrap_servers
    from tidelog.group_admin import GroupAdmin

    api = ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS
    m = messages.request_module(api, 1)
    request = m.DescribeShareGroupOffsetsRequest(groups=(m.DescribeShareGroupOffsetsRequestGroup(
        group_id=group, topics=(m.DescribeShareGroupOffsetsRequestTopic(topic_name=topic, partitions=(0,)),)),))
    with KafkaClient(parse_bootstrap_servers(bootstrap(cluster)), client_id="share-groups-test") as client:
        response = GroupAdmin(client)._at_coordinator(group, api, 1, request, messages.encode_request,
                                                      messages.response_decoder(api),
                                                      lambda r: r.groups[0].error_code)
    [topic_answer] = response.groups[0].topics
    return {p.partition_index: (p.start_offset, p.lag) for p in topic_answer.partitions}


def _delete_share_offsets(cluster: LocalCluster, group: str, topic: str) -> tuple[int, int]:
    """(top-level error, the topic's error) of DeleteShareGroupOffsets v0."""
    from common.kafka_client import KafkaClient
    from common.protocol import messages
    from common.protocol.api_keys import ApiKey
    from tidelog.cli_common import parse_bootstrap_servers
    from tidelog.group_admin import GroupAdmin

    api = ApiKey.DELETE_SHARE_GROUP_OFFSETS
    m = messages.request_module(api, 0)
    request = m.DeleteShareGroupOffsetsRequest(group_id=group, topics=(
        m.DeleteShareGroupOffsetsRequestTopic(topic_name=topic),))
    with KafkaClient(parse_bootstrap_servers(bootstrap(cluster)), client_id="share-groups-test") as client:
        response = GroupAdmin(client)._at_coordinator(group, api, 0, request, messages.encode_request,
                                                      messages.response_decoder(api), lambda r: r.error_code)
    return int(response.error_code), int(response.responses[0].error_code)


def test_four_consumers_share_two_partitions_every_record_acknowledged_once(
        cluster: LocalCluster, consumers: list[Any]) -> None:
    """Issue 31's shape: 4 ShareConsumers of one group on a 2-partition topic; every record is
    delivered and acknowledged exactly once, and more than one consumer does the work."""
    create_topic(cluster, "share-four", partitions=2)
    four = [consumer(cluster, "four", "share-four") for _ in range(4)]
    consumers.extend(four)

    def all_assigned() -> bool:  # each member holds one of the 2 partitions (the simple assignor)
        for c in four:
            assert not list(c.poll(POLL_S / 4))  # nothing produced yet: a poll only heartbeats
        described = _described_or_none(cluster, "four")  # None until the first member joined
        return described is not None and len(described[1]) == 4 and set(described[1].values()) == {described[0]}
    wait_until("4 members at the group epoch", all_assigned, WAIT_S)
    sent = [b"four-%d" % i for i in range(200)]
    produce(cluster, "share-four", sent)
    got: dict[int, list[bytes]] = {i: [] for i in range(4)}
    deadline = time.monotonic() + 2 * WAIT_S
    while sum(map(len, got.values())) < len(sent) and time.monotonic() < deadline:
        for i, c in enumerate(four):
            batch = [m for m in c.poll(POLL_S / 4) if m.error() is None]
            if batch:
                ack_all(c, batch)
                got[i].extend(m.value() for m in batch)
    everything = sorted(v for vs in got.values() for v in vs)
    assert everything == sorted(sent), f"{len(everything)} delivered, {len(set(everything))} distinct"
    assert sum(1 for vs in got.values() if vs) >= 2, {i: len(vs) for i, vs in got.items()}  # both partitions
    assert all(poll(c, 1, POLL_S) == [] for c in four)  # nothing comes back: each was acknowledged


def _described_share_group(cluster: LocalCluster, group: str) -> tuple[int, dict[str, int]]:
    """(group epoch, member id -> member epoch) from ShareGroupDescribe at its coordinator
    (GET /v1/groups/{id})."""
    status, body = http(f"{cluster.admin_url}/v1/groups/{group}")
    assert status == 200, body
    described = json.loads(body)
    assert described["type"] == "share", described
    return described["group_epoch"], {m["member_id"]: m["member_epoch"] for m in described["members"]}


def test_share_group_membership_survives_a_coordinator_failover(cluster_and_nemesis: tuple[LocalCluster, Nemesis],
                                                                consumers: list[Any]) -> None:
    """The membership is Kafka's ShareGroup* records of __consumer_offsets: after a SIGKILL of the
    group's coordinator, the new one describes the same group epoch and members, and the
    consumers carry on with it without rejoining (a rejoin would bump the group epoch)."""
    from groups.partitioner import GROUP_METADATA_TOPIC_NAME, coordinator_partition

    cluster, nemesis = cluster_and_nemesis
    create_topic(cluster, "share-coord", partitions=2)
    wait_full_isr(cluster, "share-coord", 2)
    produce(cluster, "share-coord", [b"before-%d" % i for i in range(10)])
    pair = [consumer(cluster, "coord", "share-coord") for _ in range(2)]
    consumers.extend(pair)
    seen: set[bytes] = set()

    def consume_until(want: set[bytes]) -> None:
        deadline = time.monotonic() + 2 * WAIT_S
        while not want <= seen and time.monotonic() < deadline:
            for c in pair:
                batch = [m for m in c.poll(POLL_S / 2) if m.error() is None]
                if batch:
                    ack_all(c, batch)
                    seen.update(m.value() for m in batch)
        assert want <= seen, sorted(want - seen)

    consume_until({b"before-%d" % i for i in range(10)})

    def settled() -> tuple[int, dict[str, int]] | None:
        epoch, members = _described_share_group(cluster, "coord")
        return (epoch, members) if len(members) == 2 and set(members.values()) == {epoch} else None

    epoch, members = wait_until("both members at the group epoch", settled, WAIT_S)
    offsets = partition_state(cluster, GROUP_METADATA_TOPIC_NAME, coordinator_partition("coord", 3))
    coordinator = offsets["leader"]
    nemesis.kill(coordinator)
    try:
        wait_for_state(cluster, GROUP_METADATA_TOPIC_NAME, offsets["partition"], "a new coordinator",
                       lambda s: s["leader"] not in (coordinator, -1))
        assert wait_until("the new coordinator describing the group", lambda: _described_or_none(cluster, "coord"),
                          WAIT_S) == (epoch, members)
        produce(cluster, "share-coord", [b"after-%d" % i for i in range(10)])
        consume_until({b"after-%d" % i for i in range(10)})
        assert _described_share_group(cluster, "coord") == (epoch, members)  # nobody rejoined
    finally:
        nemesis.restart(coordinator)
        wait_unfenced(cluster, coordinator)  # the module's later tests make topics of 3 replicas


def _described_or_none(cluster: LocalCluster, group: str) -> tuple[int, dict[str, int]] | None:
    status, body = http(f"{cluster.admin_url}/v1/groups/{group}")
    return _described_share_group(cluster, group) if status == 200 and json.loads(body)["type"] == "share" else None


def test_acknowledgements_survive_a_leader_failover(cluster_and_nemesis: tuple[LocalCluster, Nemesis],
                                                   consumers: list[Any]) -> None:
    """The share partition's state is durable at the group's coordinator: once the leader that
    acknowledged 4 records is SIGKILLed, the new leader delivers only the 6 others (held by a
    consumer when the leader died), with their delivery count 2."""
    cluster, nemesis = cluster_and_nemesis
    create_topic(cluster, "share-failover", partitions=1)
    wait_full_isr(cluster, "share-failover", 1)
    produce(cluster, "share-failover", [b"f-%d" % i for i in range(10)])
    a = consumer(cluster, "failover", "share-failover")
    consumers.append(a)
    got = sorted(poll(a, 10), key=lambda m: m.offset())
    assert len(got) == 10
    ack_all(a, got[:4])  # answered once durable
    leader = partition_state(cluster, "share-failover", 0)["leader"]
    nemesis.kill(leader)
    try:
        wait_for_state(cluster, "share-failover", 0, "a new leader", lambda s: s["leader"] not in (leader, -1))
        b = consumer(cluster, "failover", "share-failover")
        consumers.append(b)
        again = poll(b, 6)
        assert values(again) == values(got[4:])
        assert {m.delivery_count() for m in again} == {2}
        ack_all(b, again)
        assert poll(b, 1, 1.0) == []
    finally:
        nemesis.restart(leader)
