"""The ACL matrix (issue 29) with real processes and real clients, every connection User:ANONYMOUS
(authentication is not built yet): a broker with Kafka's StandardAuthorizer enforces the ACLs of
the metadata log on confluent-kafka and kafka-python.

Two cluster shapes (one combined node each):
- OPEN: allow.everyone.if.no.acl.found=true, so the fixtures' own Metadata calls see the topics
  they create; a test then puts ACLs on its resources, which makes them closed to everyone the
  ACLs do not allow. Every test's ACLs are removed after it (admin API, `POST /v1/acls/delete`).
- SUPER: allow.everyone.if.no.acl.found=false and super.users=User:ANONYMOUS: ACLs that deny
  everything deny nothing to a super user.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.cluster_fixtures import http
from tidelog.testing.cluster import Cluster

confluent_kafka = pytest.importorskip("confluent_kafka")
confluent_admin = pytest.importorskip("confluent_kafka.admin")
kafka = pytest.importorskip("kafka")
kafka_errors = pytest.importorskip("kafka.errors")

AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
OPEN = pytest.mark.tidelog(brokers=1, combined=True,
                           broker_config={**AUTHORIZER, "allow.everyone.if.no.acl.found": "true"})
SUPER = pytest.mark.tidelog(brokers=1, combined=True,
                            broker_config={"authorizer.class.name": "standard", "super.users": "User:ANONYMOUS"})
ANON = "User:ANONYMOUS"
CLIENT_TIMEOUT_S = 20.0
MESSAGES = 3


def add_acls(cluster: Cluster, *acls: dict[str, Any]) -> None:
    status, body = http(f"{cluster.admin_url}/v1/acls", "POST", {"acls": list(acls)})
    assert status == 200, body
    answer = json.loads(body)
    assert [r["error"] for r in answer["results"]] == [None] * len(acls), answer


def acl(resource: str, name: str, operation: str, permission: str = "ALLOW", *, pattern: str = "LITERAL",
        principal: str = ANON) -> dict[str, Any]:
    return {"resource_type": resource, "resource_name": name, "pattern_type": pattern, "principal": principal,
            "host": "*", "operation": operation, "permission_type": permission}


@pytest.fixture
def acls(tidelog_cluster: Cluster, tidelog_topic: Any) -> Iterator[Cluster]:
    """The cluster; every ACL is deleted after the test (before its topics are)."""
    yield tidelog_cluster
    status, body = http(f"{tidelog_cluster.admin_url}/v1/acls/delete", "POST", {"filters": [{}]})
    assert status == 200, body


def confluent_produce(cluster: Cluster, topic: str, **config: Any) -> list[Any]:
    """Each message's delivery error (None: delivered)."""
    errors: list[Any] = []
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                         "message.timeout.ms": int(CLIENT_TIMEOUT_S * 1000), **config})
    for i in range(MESSAGES):
        producer.produce(topic, f"m{i}".encode(), on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    return errors


def kafka_python_produce_error(cluster: Cluster, topic: str) -> BaseException | None:
    producer = kafka.KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, max_block_ms=10_000,
                                   request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000), retries=0)
    try:
        producer.send(topic, b"kp").get(timeout=CLIENT_TIMEOUT_S)
        return None
    except kafka_errors.KafkaError as exc:
        return exc
    finally:
        producer.close(timeout=5)


def confluent_consume(cluster: Cluster, topic: str, group: str, wanted: int) -> tuple[list[bytes], Any]:
    """(values read, the first consumer error) once `wanted` values came or an error did."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    values: list[bytes] = []
    try:
        consumer.subscribe([topic])
        for _ in range(int(CLIENT_TIMEOUT_S / 0.5)):  # bounded: one poll per half second
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                return values, message.error()
            values.append(message.value())
            if len(values) >= wanted:
                consumer.commit(asynchronous=False)
                return values, None
        return values, None
    finally:
        consumer.close()


def write_some(cluster: Cluster, topic: str) -> None:
    assert confluent_produce(cluster, topic) == [None] * MESSAGES


@OPEN
def test_read_but_not_write(acls: Cluster, tidelog_topic: Any) -> None:
    topic = tidelog_topic()
    write_some(acls, topic)  # before any ACL: open to everyone
    add_acls(acls, acl("TOPIC", topic, "READ"))
    errors = confluent_produce(acls, topic)
    assert {e.code() for e in errors} == {confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED}
    assert isinstance(kafka_python_produce_error(acls, topic), kafka_errors.TopicAuthorizationFailedError)
    values, error = confluent_consume(acls, topic, f"{topic}-readers", MESSAGES)
    assert error is None and values == [f"m{i}".encode() for i in range(MESSAGES)]


@OPEN
def test_idempotent_producer_with_topic_acls(acls: Cluster, tidelog_topic: Any) -> None:
    """InitProducerId of an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on
    some topic (KIP-679); then each topic's WRITE decides."""
    writable, readable = tidelog_topic(), tidelog_topic()
    add_acls(acls, acl("TOPIC", writable, "WRITE"), acl("TOPIC", readable, "READ"))
    assert confluent_produce(acls, writable, **{"enable.idempotence": True}) == [None] * MESSAGES
    errors = confluent_produce(acls, readable, **{"enable.idempotence": True})
    assert {e.code() for e in errors} == {confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED}


@OPEN
def test_transactional_producer_is_checked_per_transactional_id_and_topic(acls: Cluster, tidelog_topic: Any) -> None:
    """WRITE on its transactional id, then AddPartitionsToTxn per topic as Kafka's KafkaApis: a topic
    it may not WRITE answers TOPIC_AUTHORIZATION_FAILED for its partition (librdkafka: an abortable
    error naming it; the gate used to fail on kio's v3 field names), its writable topic commits; an
    id without WRITE fails InitProducerId."""
    writable, readable = tidelog_topic(), tidelog_topic()
    tid = f"{writable}-txn"
    add_acls(acls, acl("TOPIC", writable, "WRITE"), acl("TOPIC", readable, "READ"),
             acl("TRANSACTIONAL_ID", tid, "WRITE"),
             acl("TRANSACTIONAL_ID", f"{writable}-other", "WRITE", principal="User:someone-else"))  # closed to us
    config = {"bootstrap.servers": acls.bootstrap_servers, "message.timeout.ms": int(CLIENT_TIMEOUT_S * 1000)}
    producer = confluent_kafka.Producer({**config, "transactional.id": tid})
    producer.init_transactions(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(readable, b"refused")
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        producer.commit_transaction(CLIENT_TIMEOUT_S)
    error = refused.value.args[0]
    assert "Topic authorization failed" in error.str() or error.code() == \
        confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED, error
    producer = confluent_kafka.Producer({**config, "transactional.id": tid})  # a new epoch: nothing open
    producer.init_transactions(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(writable, b"committed")
    producer.commit_transaction(CLIENT_TIMEOUT_S)
    stranger = confluent_kafka.Producer({**config, "transactional.id": f"{writable}-other"})
    with pytest.raises(confluent_kafka.KafkaException) as denied:
        stranger.init_transactions(CLIENT_TIMEOUT_S)
    assert denied.value.args[0].code() == confluent_kafka.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


@OPEN
def test_prefixed_acls(acls: Cluster, tidelog_topic: Any) -> None:
    locked, other = tidelog_topic(name="locked-orders"), tidelog_topic(name="open-orders")
    add_acls(acls, acl("TOPIC", "locked-", "WRITE", "DENY", pattern="PREFIXED", principal="User:*"),
             acl("TOPIC", "locked-", "DESCRIBE", pattern="PREFIXED"))
    errors = confluent_produce(acls, locked)
    assert {e.code() for e in errors} == {confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED}
    assert isinstance(kafka_python_produce_error(acls, locked), kafka_errors.TopicAuthorizationFailedError)
    write_some(acls, other)  # no ACL names it


@OPEN
def test_deny_wins_over_allow(acls: Cluster, tidelog_topic: Any) -> None:
    topic = tidelog_topic()
    add_acls(acls, acl("TOPIC", topic, "ALL"), acl("TOPIC", topic, "WRITE", "DENY", principal="User:*"))
    errors = confluent_produce(acls, topic)
    assert {e.code() for e in errors} == {confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED}


@OPEN
def test_group_acl_for_consumers(acls: Cluster, tidelog_topic: Any) -> None:
    topic = tidelog_topic()
    write_some(acls, topic)
    allowed, refused = f"{topic}-allowed", f"{topic}-refused"
    add_acls(acls, acl("TOPIC", topic, "READ"), acl("GROUP", allowed, "READ"),
             acl("GROUP", refused, "READ", principal="User:someone-else"))
    values, error = confluent_consume(acls, topic, allowed, MESSAGES)
    assert error is None and len(values) == MESSAGES
    values, error = confluent_consume(acls, topic, refused, MESSAGES)
    assert values == [] and error is not None
    assert error.code() == confluent_kafka.KafkaError.GROUP_AUTHORIZATION_FAILED


@OPEN
def test_admin_client_create_describe_delete(acls: Cluster, tidelog_topic: Any) -> None:
    admin = confluent_admin.AdminClient({"bootstrap.servers": acls.bootstrap_servers})
    binding = confluent_admin.AclBinding(
        confluent_admin.ResourceType.TOPIC, "round-trip", confluent_admin.ResourcePatternType.PREFIXED,
        "User:alice", "*", confluent_admin.AclOperation.READ, confluent_admin.AclPermissionType.ALLOW)
    for future in admin.create_acls([binding]).values():
        future.result(timeout=CLIENT_TIMEOUT_S)
    everything = confluent_admin.AclBindingFilter(
        confluent_admin.ResourceType.ANY, None, confluent_admin.ResourcePatternType.ANY, None, None,
        confluent_admin.AclOperation.ANY, confluent_admin.AclPermissionType.ANY)
    assert admin.describe_acls(everything).result(timeout=CLIENT_TIMEOUT_S) == [binding]
    status, body = http(f"{acls.admin_url}/v1/acls?resource_type=topic&pattern_type=MATCH&resource_name=round-trip-x")
    assert status == 200 and json.loads(body)["acls"] == [acl("TOPIC", "round-trip", "READ", pattern="PREFIXED",
                                                              principal="User:alice")]
    for query in ("operation=FLY", "operation=UNKNOWN"):
        status, body = http(f"{acls.admin_url}/v1/acls?{query}")
        assert status == 400 and json.loads(body)["field"] == "operation", body
    matching = confluent_admin.AclBindingFilter(
        confluent_admin.ResourceType.TOPIC, "round-trip-topic", confluent_admin.ResourcePatternType.MATCH, None,
        None, confluent_admin.AclOperation.ANY, confluent_admin.AclPermissionType.ANY)
    assert admin.describe_acls(matching).result(timeout=CLIENT_TIMEOUT_S) == [binding]
    [deleted] = admin.delete_acls([everything]).values()
    assert deleted.result(timeout=CLIENT_TIMEOUT_S) == [binding]
    assert admin.describe_acls(everything).result(timeout=CLIENT_TIMEOUT_S) == []
    bad = confluent_admin.AclBinding(
        confluent_admin.ResourceType.BROKER, "not-kafka-cluster", confluent_admin.ResourcePatternType.LITERAL,
        "User:alice", "*", confluent_admin.AclOperation.ALTER, confluent_admin.AclPermissionType.ALLOW)
    with pytest.raises(confluent_kafka.KafkaException) as caught:
        for future in admin.create_acls([bad]).values():
            future.result(timeout=CLIENT_TIMEOUT_S)
    assert caught.value.args[0].code() == confluent_kafka.KafkaError.INVALID_REQUEST


@OPEN
def test_cli_add_list_remove(acls: Cluster, tidelog_topic: Any) -> None:
    topic = tidelog_topic()

    def tidelog(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tidelog", "acls", *args, "--bootstrap-server",
                               acls.bootstrap_servers], capture_output=True, text=True, timeout=60, check=False)

    added = tidelog("add", "--allow-principal", ANON, "--consumer", "--topic", topic, "--group", "cli-group")
    assert added.returncode == 0, added.stderr
    assert f"Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)`: " \
        in added.stdout
    listed = tidelog("list", "--topic", topic)
    assert listed.returncode == 0, listed.stderr
    assert f"\t(principal={ANON}, host=*, operation=READ, permissionType=ALLOW) " in listed.stdout
    assert f"\t(principal={ANON}, host=*, operation=DESCRIBE, permissionType=ALLOW) " in listed.stdout
    assert {e.code() for e in confluent_produce(acls, topic)} == {
        confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED}  # a consumer's ACLs: no WRITE
    removed = tidelog("remove", "--allow-principal", ANON, "--consumer", "--topic", topic, "--group", "cli-group")
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.count("Removed ACL") == 3
    assert tidelog("list").stdout.strip() == ""
    bad = tidelog("add", "--allow-principal", "alice", "--topic", topic)
    assert bad.returncode == 2 and "Type:name" in bad.stderr


@SUPER
def test_super_users_bypass(acls: Cluster, tidelog_topic: Any) -> None:
    topic = tidelog_topic()
    add_acls(acls, acl("TOPIC", "*", "ALL", "DENY", principal="User:*"),
             acl("GROUP", "*", "ALL", "DENY", principal="User:*"))
    write_some(acls, topic)
    values, error = confluent_consume(acls, topic, f"{topic}-group", MESSAGES)
    assert error is None and len(values) == MESSAGES
