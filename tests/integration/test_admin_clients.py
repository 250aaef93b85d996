"""The flexible admin APIs with the real clients' own admin APIs (issue 18): DescribeCluster,
ElectLeaders (preferred and unclean, decided by the controllers as `POST /v1/elections`)
and the ACL APIs answered as a Kafka broker without an authorizer does (SECURITY_DISABLED),
with confluent-kafka, kafka-python and aiokafka, against one 1-controller + 3-broker cluster.

kafka-python infers the broker's version from the advertised ranges; it used to infer 2.4
and refuse DescribeAcls and ElectLeaders with IncompatibleBrokerVersion.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.integration.replication_fixtures import (
    BROKERS,
    create_topic,
    partition_state,
    replicated_cluster,
    wait_for_state,
    wait_full_isr,
)
from localcluster.launcher import LocalCluster

confluent_kafka = pytest.importorskip("confluent_kafka")
admin = pytest.importorskip("confluent_kafka.admin")
kafka = pytest.importorskip("kafka")
kafka_errors = pytest.importorskip("kafka.errors")
kafka_acl = pytest.importorskip("kafka.admin")
aiokafka_admin = pytest.importorskip("aiokafka.admin")

CLIENT_TIMEOUT_S = 20.0
TOPIC = "elections"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, object]]:
    # No automatic rebalance: the preferred election below is the client's doing.
    with replicated_cluster(tmp_path_factory.mktemp("admin-clients") / "cluster",
                            {"auto.leader.rebalance.enable": "false"}) as started:
        create_topic(started[0], TOPIC, partitions=1, replication_factor=3)
        wait_full_isr(started[0], TOPIC, 1)
        yield started


def confluent_admin(cluster: LocalCluster) -> admin.AdminClient:
    return admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})


@pytest.fixture()
def kafka_python(cluster: tuple[LocalCluster, object]) -> Iterator[kafka.KafkaAdminClient]:
    client = kafka.KafkaAdminClient(bootstrap_servers=cluster[0].bootstrap_servers,
                                    request_timeout_ms=int(CLIENT_TIMEOUT_S * 1000))
    try:
        yield client
    finally:
        client.close()


def cluster_id(cluster: LocalCluster) -> str:
    metadata = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers}).list_topics(timeout=5)
    return str(metadata.cluster_id)


# ---- DescribeCluster ---------------------------------------------------------------------

def test_confluent_describe_cluster(cluster: tuple[LocalCluster, object]) -> None:
    c, _ = cluster
    client = confluent_admin(c)  # kept: the future fails once its client is collected
    described = client.describe_cluster(include_authorized_operations=True,
                                        request_timeout=CLIENT_TIMEOUT_S).result(CLIENT_TIMEOUT_S)
    assert described.cluster_id == cluster_id(c)
    assert sorted(n.id for n in described.nodes) == list(BROKERS)
    assert described.controller is not None and described.controller.id in BROKERS
    assert set(described.authorized_operations) == {
        admin.AclOperation.CREATE, admin.AclOperation.ALTER, admin.AclOperation.DESCRIBE,
        admin.AclOperation.CLUSTER_ACTION, admin.AclOperation.DESCRIBE_CONFIGS,
        admin.AclOperation.ALTER_CONFIGS, admin.AclOperation.IDEMPOTENT_WRITE}


def test_kafka_python_describe_cluster_and_inferred_version(cluster: tuple[LocalCluster, object],
                                                            kafka_python: kafka.KafkaAdminClient) -> None:
    c, _ = cluster
    described = kafka_python.describe_cluster()
    assert described["cluster_id"] == cluster_id(c)
    assert sorted(b["broker_id"] for b in described["brokers"]) == list(BROKERS)
    assert described["controller_id"] in BROKERS
    assert kafka_python.get_broker_version_data(BROKERS[0]).broker_version >= (3, 3)  # was (2, 4)


def test_aiokafka_describe_cluster(cluster: tuple[LocalCluster, object]) -> None:
    c, _ = cluster

    async def describe() -> dict[str, object]:
        client = aiokafka_admin.AIOKafkaAdminClient(bootstrap_servers=c.bootstrap_servers)
        await client.start()
        try:
            return await client.describe_cluster()
        finally:
            await client.close()

    described = asyncio.run(asyncio.wait_for(describe(), CLIENT_TIMEOUT_S))
    assert described["cluster_id"] == cluster_id(c)
    assert sorted(b["node_id"] for b in described["brokers"]) == list(BROKERS)  # type: ignore[attr-defined]


# ---- ACLs without an authorizer ------------------------------------------------------------

def test_confluent_acls_are_security_disabled(cluster: tuple[LocalCluster, object]) -> None:
    client = confluent_admin(cluster[0])
    any_filter = admin.AclBindingFilter(admin.ResourceType.ANY, None, admin.ResourcePatternType.ANY,
                                        None, None, admin.AclOperation.ANY, admin.AclPermissionType.ANY)
    binding = admin.AclBinding(admin.ResourceType.TOPIC, TOPIC, admin.ResourcePatternType.LITERAL,
                               "User:alice", "*", admin.AclOperation.READ, admin.AclPermissionType.ALLOW)
    futures = [client.describe_acls(any_filter, request_timeout=CLIENT_TIMEOUT_S),
               *client.create_acls([binding], request_timeout=CLIENT_TIMEOUT_S).values(),
               *client.delete_acls([any_filter], request_timeout=CLIENT_TIMEOUT_S).values()]
    outcomes: list[object] = []
    for future in futures:
        try:
            outcomes.append(("answered", future.result(CLIENT_TIMEOUT_S)))
        except confluent_kafka.KafkaException as e:
            outcomes.append(e.args[0].code())
    # librdkafka hands DescribeAcls' top-level error to no one (the future answers the empty
    # list it was sent); CreateAcls and DeleteAcls carry it per binding and filter.
    assert outcomes[1:] == [confluent_kafka.KafkaError.SECURITY_DISABLED] * 2
    assert outcomes[0] in (confluent_kafka.KafkaError.SECURITY_DISABLED, ("answered", []))


def test_kafka_python_acls_are_security_disabled(kafka_python: kafka.KafkaAdminClient) -> None:
    any_filter = kafka_acl.ACLFilter(principal=None, host="*", operation=kafka_acl.ACLOperation.ANY,
                                     permission_type=kafka_acl.ACLPermissionType.ANY,
                                     resource_pattern=kafka_acl.ResourcePatternFilter(
                                         kafka_acl.ResourceType.TOPIC, TOPIC, kafka_acl.ACLResourcePatternType.LITERAL))
    with pytest.raises(kafka_errors.SecurityDisabledError):
        kafka_python.describe_acls(any_filter)
    binding = kafka_acl.ACL(principal="User:alice", host="*", operation=kafka_acl.ACLOperation.READ,
                            permission_type=kafka_acl.ACLPermissionType.ALLOW,
                            resource_pattern=kafka_acl.ResourcePattern(kafka_acl.ResourceType.TOPIC, TOPIC))
    created = kafka_python.create_acls([binding])
    assert created == {"succeeded": [], "failed": [kafka_errors.SecurityDisabledError]}


# ---- ElectLeaders --------------------------------------------------------------------------

def test_elections_not_needed_while_the_preferred_replica_leads(cluster: tuple[LocalCluster, object],
                                                                kafka_python: kafka.KafkaAdminClient) -> None:
    c, _ = cluster
    state = partition_state(c, TOPIC, 0)
    assert state["leader"] == state["replicas"][0]
    for election_type in (0, 1):  # preferred, unclean: both find nothing to do
        response = kafka_python.elect_leaders(election_type, {TOPIC: [0]})
        codes = [(r.topic, p.partition_id, p.error_code) for r in response.replica_election_results
                 for p in r.partition_result]
        assert codes == [(TOPIC, 0, 84)]  # ELECTION_NOT_NEEDED
    client = confluent_admin(c)
    results = client.elect_leaders(confluent_kafka.ElectionType.PREFERRED, [  # (its kwargs crash in 2.16)
        confluent_kafka.TopicPartition(TOPIC, 0)]).result(CLIENT_TIMEOUT_S)
    [(tp, error)] = results.items()
    assert (tp.topic, tp.partition) == (TOPIC, 0) and error is not None
    assert error.code() == confluent_kafka.KafkaError.ELECTION_NOT_NEEDED
    with pytest.raises(kafka_errors.UnknownTopicOrPartitionError):
        kafka_python.elect_leaders(0, {"no-such-topic": [0]})


def test_confluent_preferred_election_moves_leadership_back(cluster: tuple[LocalCluster, object]) -> None:
    c, nemesis = cluster
    preferred = partition_state(c, TOPIC, 0)["replicas"][0]
    nemesis.kill(preferred)  # type: ignore[attr-defined]
    wait_for_state(c, TOPIC, 0, "a follower leads", lambda s: s["leader"] not in (preferred, -1))
    nemesis.restart(preferred)  # type: ignore[attr-defined]
    wait_full_isr(c, TOPIC, 1)
    assert partition_state(c, TOPIC, 0)["leader"] != preferred
    client = confluent_admin(c)
    results = client.elect_leaders(confluent_kafka.ElectionType.PREFERRED, [  # (its kwargs crash in 2.16)
        confluent_kafka.TopicPartition(TOPIC, 0)]).result(CLIENT_TIMEOUT_S)
    assert [e for e in results.values()] == [None]
    wait_for_state(c, TOPIC, 0, f"broker {preferred} leads again", lambda s: s["leader"] == preferred, 5.0)
