"""Topic writes with real clients on 1 controller + 3 brokers (2, 3, 4) whose config sets
num.partitions=2 and default.replication.factor=5 (more than the 3 brokers):

- read-your-writes: 200 CreateTopics-then-Metadata round trips through one broker on one
  connection (tidelog's own wire client, so both requests certainly reach the same broker),
  zero UNKNOWN_TOPIC_OR_PARTITION; DeleteTopics and CreatePartitions likewise; then the same
  through kafka-python's KafkaAdminClient;
- validate_only (kafka-python and confluent-kafka): everything checked, nothing created;
- manual replica assignments in CreateTopics and CreatePartitions, honoured in order, and
  Kafka's refusals for bad ones; the connection stays usable;
- broker defaults: -1 sizes and auto-creation take num.partitions and default.replication.factor
  (capped to the 3 live brokers, with a WARNING in the broker's log); Metadata v4+ with
  allow_auto_topic_creation=false creates nothing.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from common.errors import ErrorCode
from common.protocol import messages
from common.protocol import metadata as md
from common.protocol.api_keys import ApiKey
from tests.integration.cluster_fixtures import http, wait_until
from tests.integration.replication_fixtures import replicated_cluster
from tests.unit.test_topic_admin_codecs import TopicSpec, create_request
from common.kafka_client import KafkaClient
from localcluster.launcher import LocalCluster

kafka_admin = pytest.importorskip("kafka.admin")
kafka_errors = pytest.importorskip("kafka.errors")
confluent_admin = pytest.importorskip("confluent_kafka.admin")

E = ErrorCode
ROUND_TRIPS = 200
CLIENT_TIMEOUT_S = 20.0
PROPERTIES = {"num.partitions": "2", "default.replication.factor": "5"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with replicated_cluster(tmp_path_factory.mktemp("topic-admin") / "cluster", PROPERTIES) as (started, _):
        yield started  # every process stopped on exit, failure or not


def broker_address(cluster: LocalCluster, index: int = 0) -> tuple[str, int]:
    assert cluster.bootstrap_servers is not None
    host, _, port = cluster.bootstrap_servers.split(",")[index].rpartition(":")
    return host, int(port)


def topic_view(cluster: LocalCluster, name: str) -> tuple[int, dict]:
    status, body = http(f"{cluster.admin_url}/v1/topics/{name}")
    return status, json.loads(body)


def create(client: KafkaClient, *topics: TopicSpec, validate_only: bool = False,
           timeout_ms: int = 10_000) -> list[Any]:
    """CreateTopics v4 (kio's messages): topics as (name, partitions, rf[, assignments])."""
    request = create_request(4, *topics, timeout_ms=timeout_ms, validate_only=validate_only)
    response = client.call(None, ApiKey.CREATE_TOPICS, 4, request, messages.encode_request,
                           messages.response_decoder(ApiKey.CREATE_TOPICS))
    return list(response.topics)


def metadata(client: KafkaClient, *names: str, allow_auto: bool = False) -> dict[str, md.MetadataResponseTopic]:
    response = client.call(None, ApiKey.METADATA, 8, md.MetadataRequest(names, allow_auto),
                           md.encode_metadata_request, md.decode_metadata_response)
    return {t.name: t for t in response.topics}


# --- read-your-writes --------------------------------------------------------------------------

def test_create_then_metadata_through_one_broker_always_sees_the_topic(cluster: LocalCluster) -> None:
    unknown, took_ms = [], []
    with KafkaClient([broker_address(cluster, 1)]) as client:
        for i in range(ROUND_TRIPS):
            name = f"ryw-{i}"
            started = time.perf_counter()
            assert [(r.name, r.error_code) for r in create(client, (name, 1, 1))] == [(name, 0)]
            took_ms.append((time.perf_counter() - started) * 1000)
            seen = metadata(client, name)[name]
            if seen.error_code == E.UNKNOWN_TOPIC_OR_PARTITION:
                unknown.append(name)
            else:
                assert seen.error_code == 0 and len(seen.partitions) == 1, seen
    print(f"\n[topic admin measurement] CreateTopics through broker 3, answered once applied there: "
          f"p50 {statistics.median(took_ms):.1f} ms, max {max(took_ms):.1f} ms over {ROUND_TRIPS}")
    assert unknown == [], f"{len(unknown)} of {ROUND_TRIPS} topics unknown right after CreateTopics"


def test_delete_and_create_partitions_are_seen_at_once(cluster: LocalCluster) -> None:
    with KafkaClient([broker_address(cluster, 2)]) as client:
        for i in range(20):
            name = f"grow-{i}"
            assert create(client, (name, 1, 2))[0].error_code == 0
            # CreatePartitions and DeleteTopics are served on kio's generated messages: built and read with them
            m = messages.request_module(ApiKey.CREATE_PARTITIONS, 1)
            grown = client.call(None, ApiKey.CREATE_PARTITIONS, 1, m.CreatePartitionsRequest(
                topics=(m.CreatePartitionsTopic(name=name, count=3, assignments=None),),
                timeout=timedelta(seconds=10), validate_only=False), lambda request, v: [messages.encode(request)],
                lambda body, v: messages.decode_response(ApiKey.CREATE_PARTITIONS, v, body))
            assert grown.results[0].error_code == 0, grown
            assert len(metadata(client, name)[name].partitions) == 3
            deleted = client.call(None, ApiKey.DELETE_TOPICS, 3, messages.request_type(ApiKey.DELETE_TOPICS, 3)(
                topic_names=(name,), timeout=timedelta(seconds=10)), lambda request, v: [messages.encode(request)],
                lambda body, v: messages.decode_response(ApiKey.DELETE_TOPICS, v, body))
            assert deleted.responses[0].error_code == 0
            assert metadata(client, name)[name].error_code == E.UNKNOWN_TOPIC_OR_PARTITION


def test_kafka_python_create_then_describe(cluster: LocalCluster) -> None:
    host, port = broker_address(cluster, 0)
    client = kafka_admin.KafkaAdminClient(bootstrap_servers=f"{host}:{port}", request_timeout_ms=20_000)
    try:
        for i in range(50):
            name = f"kp-ryw-{i}"
            client.create_topics([kafka_admin.NewTopic(name, 2, 1)], timeout_ms=10_000)
            described = client.describe_topics([name])
            assert [(t["name"], t["error_code"], len(t["partitions"])) for t in described] == [(name, 0, 2)], described
            client.create_partitions({name: kafka_admin.NewPartitions(3)}, timeout_ms=10_000)
            assert len(client.describe_topics([name])[0]["partitions"]) == 3
            client.delete_topics([name], timeout_ms=10_000)
            assert client.describe_topics([name])[0]["error_code"] == E.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        client.close()


# --- validate_only and manual assignments --------------------------------------------------------

def test_validate_only_creates_nothing(cluster: LocalCluster) -> None:
    client = kafka_admin.KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=20_000)
    try:
        client.create_topics([kafka_admin.NewTopic("checked", 3, 2, topic_configs={"retention.ms": "60000"})],
                             validate_only=True)
        client.create_topics([kafka_admin.NewTopic("checked-manual", replica_assignments={0: [2, 3], 1: [3, 4]})],
                             validate_only=True)
        with pytest.raises(kafka_errors.InvalidReplicationFactorError):
            client.create_topics([kafka_admin.NewTopic("checked-rf", 1, 4)], validate_only=True)
        with pytest.raises(kafka_errors.InvalidConfigurationError):
            client.create_topics([kafka_admin.NewTopic("checked-cfg", 1, 1, topic_configs={"retention.ms": "x"})],
                                 validate_only=True)
        client.create_topics([kafka_admin.NewTopic("grown-checked", 1, 1)])
        client.create_partitions({"grown-checked": kafka_admin.NewPartitions(4)}, validate_only=True)
        with pytest.raises(kafka_errors.InvalidReplicationAssignmentError):
            client.create_partitions({"grown-checked": kafka_admin.NewPartitions(3, [[2, 3]])}, validate_only=True)
    finally:
        client.close()
    for name in ("checked", "checked-manual", "checked-rf", "checked-cfg"):
        assert topic_view(cluster, name)[0] == 404, name
    assert len(topic_view(cluster, "grown-checked")[1]["partitions"]) == 1


def test_confluent_validate_only_and_manual_assignments(cluster: LocalCluster) -> None:
    client = confluent_admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    futures = client.create_topics([confluent_admin.NewTopic("cf-manual", 3, replica_assignment=[[4, 2], [2, 3], [3, 4]])],
                                   validate_only=True, request_timeout=CLIENT_TIMEOUT_S)
    assert futures["cf-manual"].result(timeout=CLIENT_TIMEOUT_S) is None
    assert topic_view(cluster, "cf-manual")[0] == 404
    futures = client.create_topics([confluent_admin.NewTopic("cf-manual", 3, replica_assignment=[[4, 2], [2, 3], [3, 4]])],
                                   request_timeout=CLIENT_TIMEOUT_S)
    futures["cf-manual"].result(timeout=CLIENT_TIMEOUT_S)
    partitions = topic_view(cluster, "cf-manual")[1]["partitions"]
    assert [(p["replicas"], p["leader"]) for p in partitions] == [([4, 2], 4), ([2, 3], 2), ([3, 4], 3)]
    futures = client.create_partitions([confluent_admin.NewPartitions("cf-manual", 4, replica_assignment=[[3, 2]])],
                                       request_timeout=CLIENT_TIMEOUT_S)
    futures["cf-manual"].result(timeout=CLIENT_TIMEOUT_S)
    assert topic_view(cluster, "cf-manual")[1]["partitions"][3]["replicas"] == [3, 2]
    bad = client.create_topics([confluent_admin.NewTopic("cf-bad", 1, replica_assignment=[[2, 2]])],
                               request_timeout=CLIENT_TIMEOUT_S)
    with pytest.raises(Exception) as info:
        bad["cf-bad"].result(timeout=CLIENT_TIMEOUT_S)
    assert info.value.args[0].code() == confluent_kafka_error("INVALID_REPLICA_ASSIGNMENT")
    assert topic_view(cluster, "cf-bad")[0] == 404


def confluent_kafka_error(name: str) -> int:
    from confluent_kafka import KafkaError
    return int(getattr(KafkaError, name))


BAD_ASSIGNMENTS = [  # (assignments, num_partitions, replication_factor, error)
    pytest.param(((0, (2, 2)),), -1, -1, E.INVALID_REPLICA_ASSIGNMENT, id="duplicate-broker"),
    pytest.param(((0, (2, 9)),), -1, -1, E.INVALID_REPLICA_ASSIGNMENT, id="unknown-broker"),
    pytest.param(((0, (2, 3)), (2, (3, 4))), -1, -1, E.INVALID_REPLICA_ASSIGNMENT, id="non-contiguous"),
    pytest.param(((0, (2, 3)), (1, (4,))), -1, -1, E.INVALID_REPLICA_ASSIGNMENT, id="differing-rf"),
    pytest.param(((0, (2, 3)),), 1, -1, E.INVALID_REQUEST, id="with-num-partitions"),
    pytest.param(((0, (2, 3)),), -1, 2, E.INVALID_REQUEST, id="with-replication-factor"),
]


@pytest.mark.parametrize(("assignments", "partitions", "rf", "error"), BAD_ASSIGNMENTS)
def test_bad_assignments_are_refused_and_nothing_is_created(cluster: LocalCluster, assignments, partitions, rf,
                                                            error) -> None:
    with KafkaClient([broker_address(cluster)]) as client:
        topic = ("refused", partitions, rf, tuple(assignments))
        for validate_only in (True, False):
            result = create(client, topic, validate_only=validate_only)[0]
            assert result.error_code == error, result
        assert metadata(client, "refused")["refused"].error_code == E.UNKNOWN_TOPIC_OR_PARTITION  # same connection
    assert topic_view(cluster, "refused")[0] == 404


# --- broker defaults and auto-creation ------------------------------------------------------------

def test_unset_sizes_and_auto_creation_take_the_broker_defaults(cluster: LocalCluster) -> None:
    with KafkaClient([broker_address(cluster)]) as client:
        assert create(client, ("defaulted", -1, -1))[0].error_code == 0
        assert metadata(client, "not-auto")["not-auto"].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
        first = metadata(client, "auto-made", allow_auto=True)["auto-made"]
        assert first.error_code in (0, E.LEADER_NOT_AVAILABLE)
        wait_until("auto-made created", lambda: metadata(client, "auto-made")["auto-made"].error_code == 0)
    client = kafka_admin.KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=20_000)
    try:
        client.create_topics([kafka_admin.NewTopic("kp-defaulted")])  # num_partitions=-1, replication_factor=-1
    finally:
        client.close()
    for name in ("defaulted", "auto-made", "kp-defaulted"):
        partitions = topic_view(cluster, name)[1]["partitions"]
        assert [len(p["replicas"]) for p in partitions] == [3, 3], name  # num.partitions=2; rf 5 capped to 3
    assert topic_view(cluster, "not-auto")[0] == 404
    log = cluster.node(2).spec.log_path.read_text(errors="replace")
    assert "default.replication.factor=5 but only 3 broker(s) are alive" in log


# --- the admin HTTP API's equivalents ------------------------------------------------------------

def post(cluster: LocalCluster, path: str, body: dict) -> tuple[int, dict]:
    status, raw = http(f"{cluster.admin_url}{path}", "POST", body)
    return status, json.loads(raw)


def test_admin_api_validate_only_and_assignments(cluster: LocalCluster) -> None:
    status, answer = post(cluster, "/v1/topics", {"name": "api-v", "partitions": 3, "replication_factor": 2,
                                                  "configs": {"retention.ms": "60000"}, "validate_only": True})
    assert status == 200, answer
    assert (answer["validate_only"], answer["partitions"], answer["replication_factor"], answer["configs"]) == \
        (True, 3, 2, {"retention.ms": "60000"})
    assert [len(a["replicas"]) for a in answer["assignments"]] == [2, 2, 2]
    assert topic_view(cluster, "api-v")[0] == 404

    status, answer = post(cluster, "/v1/topics", {"name": "api-m", "assignments": [
        {"partition": 0, "replicas": [3, 4]}]})
    assert status == 201, answer
    assert [(p["replicas"], p["leader"]) for p in answer["partitions"]] == [([3, 4], 3)]
    assert type(answer["metadata_offset"]) is int

    refusals = [  # (body, status, error, field)
        ({"name": "api-bad", "assignments": [{"partition": 0, "replicas": [3, 3]}]}, 400,
         "INVALID_REPLICA_ASSIGNMENT", "assignments"),
        ({"name": "api-bad", "assignments": [{"partition": 0, "replicas": [3, 4]}], "partitions": 1}, 400,
         "INVALID_REQUEST", "partitions"),
        ({"name": "api-bad", "assignments": [{"partition": 1, "replicas": [3]}], "validate_only": True}, 400,
         "INVALID_REPLICA_ASSIGNMENT", "assignments"),
        ({"name": "api-bad", "validate_only": "yes"}, 400, "INVALID_REQUEST", "validate_only"),
        ({"name": "api-bad", "partitions": 1, "replication_factor": 4, "validate_only": True}, 400,
         "INVALID_REPLICATION_FACTOR", "replication_factor"),
    ]
    for body, want_status, error, field in refusals:
        status, answer = post(cluster, "/v1/topics", body)
        assert (status, answer["error"], answer["field"]) == (want_status, error, field), (body, answer)
    assert topic_view(cluster, "api-bad")[0] == 404

    status, answer = post(cluster, "/v1/topics/api-m/partitions", {"count": 2, "assignments": [[4, 2]],
                                                                   "validate_only": True})
    assert (status, answer) == (200, {"name": "api-m", "validate_only": True, "count": 2,
                                      "assignments": [{"partition": 1, "replicas": [4, 2]}]})
    assert len(topic_view(cluster, "api-m")[1]["partitions"]) == 1
    status, answer = post(cluster, "/v1/topics/api-m/partitions", {"count": 2, "assignments": [[9, 2]]})
    assert (status, answer["error"], answer["field"]) == (400, "INVALID_REPLICA_ASSIGNMENT", "assignments")
    status, answer = post(cluster, "/v1/topics/api-m/partitions", {"count": 2, "assignments": [[4, 2]]})
    assert status == 200 and [p["replicas"] for p in answer["partitions"]] == [[3, 4], [4, 2]]


def test_cli_replica_assignment(cluster: LocalCluster) -> None:
    def tidelog(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tidelog", "topics", "create", *args,
                               "--data-dir", str(cluster.root)], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parents[2], timeout=CLIENT_TIMEOUT_S)

    done = tidelog("--topic", "cli-pinned", "--replica-assignment", "4:2,2:3")
    assert done.returncode == 0 and "Created topic cli-pinned." in done.stdout, done
    assert [p["replicas"] for p in topic_view(cluster, "cli-pinned")[1]["partitions"]] == [[4, 2], [2, 3]]
    done = tidelog("--topic", "cli-bad", "--replica-assignment", "4:9")
    assert done.returncode == 1 and "INVALID_REPLICA_ASSIGNMENT" in done.stderr, done
    done = tidelog("--topic", "cli-bad", "--replica-assignment", "4", "--partitions", "1")
    assert done.returncode != 0 and "--replica-assignment cannot be used with --partitions" in done.stderr, done
    assert topic_view(cluster, "cli-bad")[0] == 404
