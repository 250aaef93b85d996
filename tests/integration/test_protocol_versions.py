"""Kafka 3.9's versions of Produce (v11), InitProducerId (v5), CreateTopics (v7), DeleteTopics (v6)
and CreatePartitions (v3) with real clients, on 1 controller + 3 brokers (2, 3, 4):

- ApiVersions advertises Kafka 3.9's ranges for them; kafka-python infers a modern broker from
  them and negotiates the newest versions; librdkafka's protocol debug log shows the versions it
  sends; aiokafka works against the same ranges;
- each client creates a topic (kafka-python reads its topic id from CreateTopics v7 and checks
  it against Metadata), grows it, produces idempotently with acks=all and reads every record
  back, then deletes it (kafka-python by topic id, DeleteTopics v6), and an unknown id answers
  UNKNOWN_TOPIC_ID with the connection still usable;
- KIP-951 over the raw protocol: a Produce v11 to a broker that does not lead the partition
  answers NOT_LEADER_OR_FOLLOWER naming the leader, its epoch and its endpoint; after the
  leader is paused and leadership moves, the answer names the new leader and epoch; v9 carries
  none of it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from common.errors import ErrorCode
from common.protocol import api_versions, messages, produce
from common.protocol.leader_discovery import LeaderIdAndEpoch, NodeEndpoint
from common.protocol.api_keys import ApiKey
from common.protocol.metadata import wire_topic_id
from tests.integration.cluster_fixtures import http, wait_until
from tests.integration.replication_fixtures import (
    replicated_cluster,
    wait_for_state,
    wait_full_isr,
)
from tests.log_helpers import batch
from common.kafka_client import KafkaClient
from localcluster.launcher import LocalCluster

kafka = pytest.importorskip("kafka")
kafka_admin = pytest.importorskip("kafka.admin")
kafka_errors = pytest.importorskip("kafka.errors")
confluent_kafka = pytest.importorskip("confluent_kafka")
confluent_admin = pytest.importorskip("confluent_kafka.admin")
aiokafka = pytest.importorskip("aiokafka")
aiokafka_admin = pytest.importorskip("aiokafka.admin")

E = ErrorCode
CLIENT_TIMEOUT_S = 30.0
RECORDS = 200
# Kafka 3.9's ranges, and Produce v12 from Kafka 4.0: the version a transactions v2 client
# (KIP-890 part 2) sends, the same bytes as v11 (the old versions stay served, as 3.9 does).
KAFKA_39 = {ApiKey.PRODUCE: (0, 12), ApiKey.INIT_PRODUCER_ID: (0, 5), ApiKey.CREATE_TOPICS: (2, 7),
            ApiKey.DELETE_TOPICS: (1, 6), ApiKey.CREATE_PARTITIONS: (0, 3)}


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, Any]]:
    with replicated_cluster(tmp_path_factory.mktemp("protover") / "cluster") as (cluster, nemesis):
        yield cluster, nemesis  # every process stopped and resumed on exit, failure or not


@pytest.fixture(scope="module")
def cluster(started: tuple[LocalCluster, Any]) -> LocalCluster:
    return started[0]


def addresses(cluster: LocalCluster) -> list[tuple[str, int]]:
    assert cluster.bootstrap_servers is not None
    return [(host, int(port)) for host, _, port in (s.rpartition(":") for s in cluster.bootstrap_servers.split(","))]


def broker_address(cluster: LocalCluster, broker_id: int) -> tuple[str, int]:
    return next(a for a in addresses(cluster) if a[0] == f"127.0.0.{broker_id}")


def topic_id_of(cluster: LocalCluster, name: str) -> uuid.UUID:
    status, body = http(f"{cluster.admin_url}/v1/topics/{name}")
    assert status == 200, body
    return wire_topic_id(json.loads(body)["topic_id"])


# --- ApiVersions -------------------------------------------------------------------------------

def test_api_versions_advertise_kafka_39_ranges(cluster: LocalCluster) -> None:
    with KafkaClient(addresses(cluster)[:1]) as client:
        response = client.call(None, ApiKey.API_VERSIONS, 3, api_versions.request(3, "tidelog-test", "1.0"),
                               messages.encode_request, messages.response_decoder(ApiKey.API_VERSIONS))
    advertised = {a.api_key: (a.min_version, a.max_version) for a in response.api_keys}
    assert {key: advertised[key] for key in KAFKA_39} == KAFKA_39


# --- kafka-python ------------------------------------------------------------------------------

def test_kafka_python_at_the_newest_versions(cluster: LocalCluster) -> None:
    from kafka.protocol.admin import (
        CreatePartitionsRequest,
        CreateTopicsRequest,
        DeleteTopicsRequest,
    )
    from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest
    admin = kafka_admin.KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=20_000)
    try:
        versions = admin._manager.broker_version_data
        assert versions.broker_version >= (3, 8)  # inferred from Produce v11+ (Kafka 3.8+)
        assert [versions.api_version(r) for r in (ProduceRequest, InitProducerIdRequest, CreateTopicsRequest,
                                                   DeleteTopicsRequest, CreatePartitionsRequest)] == [12, 5, 7, 6, 3]
        created = admin.create_topics({"kp-versions": {"num_partitions": 2, "replication_factor": 3,
                                                       "configs": {"retention.ms": "3600000"}}})
        topic = created["topics"][0]
        assert (topic["error_code"], topic["num_partitions"], topic["replication_factor"]) == (0, 2, 3)
        assert topic["configs"]["retention.ms"]["value"] == "3600000"
        topic_id = uuid.UUID(str(topic["topic_id"]))
        assert topic_id == topic_id_of(cluster, "kp-versions") != uuid.UUID(int=0)
        assert [r.error_code for r in admin.create_partitions({"kp-versions": 3}).results] == [0]
        wait_full_isr(cluster, "kp-versions", 3)

        producer = kafka.KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all",
                                       enable_idempotence=True, request_timeout_ms=20_000)
        try:
            futures = [producer.send("kp-versions", f"v{i}".encode(), partition=i % 3) for i in range(RECORDS)]
            producer.flush(CLIENT_TIMEOUT_S)
            assert all(f.get(CLIENT_TIMEOUT_S).offset >= 0 for f in futures)
        finally:
            producer.close(CLIENT_TIMEOUT_S)
        assert sorted(read_back(cluster, "kp-versions", 3)) == sorted(f"v{i}".encode() for i in range(RECORDS))

        unknown = uuid.uuid4()
        refused = admin.delete_topics([unknown], raise_errors=False)["topics"]
        assert [(uuid.UUID(str(r["topic_id"])), r["error_code"]) for r in refused] == [(unknown, E.UNKNOWN_TOPIC_ID)]
        deleted = admin.delete_topics([topic_id])["topics"]  # by id: DeleteTopics v6
        assert [(r["name"], r["error_code"]) for r in deleted] == [("kp-versions", 0)]
        assert http(f"{cluster.admin_url}/v1/topics/kp-versions")[0] == 404
    finally:
        admin.close()


def read_back(cluster: LocalCluster, topic: str, partitions: int) -> list[bytes]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"read-{topic}",
                                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
        values: list[bytes] = []

        def drained() -> bool:
            for message in consumer.consume(500, timeout=0.5):
                assert message.error() is None, message.error()
                values.append(message.value())
            return len(values) >= RECORDS

        wait_until(f"{RECORDS} records read back from {topic}", drained, CLIENT_TIMEOUT_S)
        return values
    finally:
        consumer.close()


# --- confluent-kafka (librdkafka) --------------------------------------------------------------

class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def librdkafka_logger(name: str) -> tuple[logging.Logger, Lines]:
    logger, lines = logging.getLogger(f"protover.{name}"), Lines()
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return logger, lines


def sent_versions(lines: Lines, request: str) -> set[int]:
    """The versions librdkafka's protocol debug log says it sent ("Sent ProduceRequest (v11, ...")."""
    return {int(v) for line in lines.lines for v in re.findall(rf"Sent {request}Request \(v(\d+),", line)}


def test_confluent_kafka_at_the_newest_versions(cluster: LocalCluster) -> None:
    logger, lines = librdkafka_logger("admin")
    admin = confluent_admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers, "debug": "protocol",
                                         "logger": logger})
    topic = "ck-versions"
    admin.create_topics([confluent_admin.NewTopic(topic, 2, 3)])[topic].result(CLIENT_TIMEOUT_S)
    admin.create_partitions([confluent_kafka.admin.NewPartitions(topic, 3)])[topic].result(CLIENT_TIMEOUT_S)
    wait_full_isr(cluster, topic, 3)

    plog, plines = librdkafka_logger("producer")
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True,
                                         "acks": "all", "debug": "protocol", "logger": plog})
    failed: list[Any] = []
    for i in range(RECORDS):
        producer.produce(topic, f"v{i}".encode(), partition=i % 3,
                         on_delivery=lambda err, msg: failed.append(err) if err else None)
        producer.poll(0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0 and failed == []
    assert sorted(read_back(cluster, topic, 3)) == sorted(f"v{i}".encode() for i in range(RECORDS))
    admin.delete_topics([topic])[topic].result(CLIENT_TIMEOUT_S)
    wait_until(f"{topic} deleted", lambda: http(f"{cluster.admin_url}/v1/topics/{topic}")[0] == 404, 10)
    admin.poll(0)
    # librdkafka sends the newest version both sides know: librdkafka 2.16 goes up to Produce v10
    # (flexible, KIP-951), InitProducerId v4, CreateTopics v4, DeleteTopics v4, CreatePartitions v2
    assert min(sent_versions(plines, "Produce")) >= 10
    assert min(sent_versions(plines, "InitProducerId")) >= 4
    assert min(sent_versions(lines, "CreateTopics")) >= 4
    assert min(sent_versions(lines, "DeleteTopics")) >= 4  # flexible
    assert min(sent_versions(lines, "CreatePartitions")) >= 2  # flexible


# --- aiokafka ----------------------------------------------------------------------------------

def test_aiokafka_produces_and_administers(cluster: LocalCluster) -> None:
    async def run() -> None:
        admin = aiokafka_admin.AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        await admin.start()
        try:
            await admin.create_topics([aiokafka_admin.NewTopic("aio-versions", 2, 3)])
            await admin.create_partitions({"aio-versions": aiokafka_admin.NewPartitions(3)})
            await asyncio.to_thread(wait_full_isr, cluster, "aio-versions", 3)
            producer = aiokafka.AIOKafkaProducer(bootstrap_servers=cluster.bootstrap_servers, acks="all",
                                                 enable_idempotence=True)
            await producer.start()
            try:
                for i in range(RECORDS):
                    await producer.send("aio-versions", f"v{i}".encode(), partition=i % 3)
                await producer.flush()
            finally:
                await producer.stop()
            got = await asyncio.to_thread(read_back, cluster, "aio-versions", 3)
            assert sorted(got) == sorted(f"v{i}".encode() for i in range(RECORDS))
            await admin.delete_topics(["aio-versions"])
        finally:
            await admin.close()

    asyncio.run(asyncio.wait_for(run(), 120))
    wait_until("aio-versions deleted", lambda: http(f"{cluster.admin_url}/v1/topics/aio-versions")[0] == 404, 10)


# --- KIP-951 over the raw protocol -------------------------------------------------------------

def produce_to(client: KafkaClient, broker_id: int, topic: str, version: int) -> produce.ProduceResponse:
    request = produce.ProduceRequest(None, 1, 10_000, (produce.TopicProduceData(topic, (
        produce.PartitionProduceData(0, batch(1)),)),))
    response: produce.ProduceResponse = client.call(broker_id, ApiKey.PRODUCE, version, request,
                                                    produce.encode_produce_request,
                                                    produce.decode_produce_response)
    return response


def test_not_leader_names_the_current_leader_across_a_leader_change(started: tuple[LocalCluster, Any]) -> None:
    cluster, nemesis = started
    status, body = http(cluster.admin_url + "/v1/topics", "POST", {
        "name": "moving", "assignments": [{"partition": 0, "replicas": [3, 2]}]})
    assert status == 201, body
    wait_full_isr(cluster, "moving", 1)
    first = wait_for_state(cluster, "moving", 0, "broker 3 leads", lambda s: s["leader"] == 3)
    with KafkaClient(addresses(cluster)) as client:
        client.metadata(["moving"])  # learn every broker's address
        response = produce_to(client, 4, "moving", 11)  # broker 4 holds no replica
        part = response.responses[0].partitions[0]
        assert (part.error_code, part.current_leader) == (E.NOT_LEADER_OR_FOLLOWER,
                                                          LeaderIdAndEpoch(3, first["leader_epoch"]))
        assert response.node_endpoints == (NodeEndpoint(3, *broker_address(cluster, 3), None),)
        follower = produce_to(client, 2, "moving", 11)  # broker 2 follows
        assert follower.responses[0].partitions[0].current_leader == part.current_leader
        old = produce_to(client, 4, "moving", 9)  # before KIP-951: no leader, no endpoints
        assert old.responses[0].partitions[0].current_leader == produce.UNKNOWN_LEADER and old.node_endpoints == ()

        nemesis.pause(3)  # fenced after the session timeout; broker 2 takes over
        try:
            moved = wait_for_state(cluster, "moving", 0, "broker 2 leads", lambda s: s["leader"] == 2, 30)
            assert moved["leader_epoch"] > first["leader_epoch"]

            def names_broker_2() -> produce.ProduceResponse | None:
                answer = produce_to(client, 4, "moving", 11)
                leader = answer.responses[0].partitions[0].current_leader
                return answer if leader == LeaderIdAndEpoch(2, moved["leader_epoch"]) else None

            after = wait_until("broker 4 names broker 2 as the leader", names_broker_2, 15)
            assert after.node_endpoints == (NodeEndpoint(2, *broker_address(cluster, 2), None),)
            assert produce_to(client, 2, "moving", 11).responses[0].partitions[0].error_code == 0
        finally:
            nemesis.resume(3)

        def old_leader_redirects() -> produce.ProduceResponse | None:  # once broker 3 applied the change
            answer = produce_to(client, 3, "moving", 11)
            part = answer.responses[0].partitions[0]
            return answer if part.error_code == E.NOT_LEADER_OR_FOLLOWER else None

        redirect = wait_until("broker 3 answers NOT_LEADER_OR_FOLLOWER", old_leader_redirects, 30)
        leader = redirect.responses[0].partitions[0].current_leader
        assert leader.leader_id == 2 and leader.leader_epoch >= moved["leader_epoch"]
        assert redirect.node_endpoints[0].node_id == 2
