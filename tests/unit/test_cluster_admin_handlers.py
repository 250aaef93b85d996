"""The broker's DescribeCluster, ElectLeaders and ACL handlers through RequestHandler.handle,
at their flexible versions: a real ReplicaManager and metadata image (test_request_handler's
`node`), and a recording LeaderElections standing in for the controllers' /v1/elections
(the real path is covered by tests/integration/test_admin_clients.py)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from broker.handlers.cluster import ALL_CLUSTER_OPERATIONS_BITS
from broker.leader_elections import ElectionOutcome
from datetime import timedelta

from common.protocol import acls, messages
from common.protocol import metadata as md
from common.protocol.api_keys import ApiKey
from tests.unit.test_request_handler import ADVERTISED, ME, call, node

__all__ = ["node"]


def kio_encode(request, version):
    return [messages.encode(request)]


async def call_kio(handler, api, version, request):
    """A request built from kio's dataclasses, its answer decoded by kio (APIs on generated messages)."""
    return await call(handler, api, version, request, kio_encode,
                      lambda body, v: messages.decode_response(api, v, body))


def describe_cluster(version, include, endpoint_type=None):
    m = messages.request_module(ApiKey.DESCRIBE_CLUSTER, version)
    extra = {} if endpoint_type is None else {"endpoint_type": endpoint_type}
    return m.DescribeClusterRequest(include_cluster_authorized_operations=include, **extra)


def elect_request(version, topics, election_type=None):
    m = messages.request_module(ApiKey.ELECT_LEADERS, version)
    extra = {} if election_type is None else {"election_type": election_type}
    partitions = None if topics is None else tuple(m.TopicPartitions(topic=t, partitions=ps) for t, ps in topics)
    return m.ElectLeadersRequest(topic_partitions=partitions, timeout=timedelta(seconds=5), **extra)


class RecordingElections:
    def __init__(self, outcome: ElectionOutcome) -> None:
        self.outcome = outcome
        self.calls: list[tuple[str, list[tuple[str, int]] | None]] = []

    async def elect(self, election: str, partitions: Sequence[tuple[str, int]] | None) -> ElectionOutcome:
        self.calls.append((election, None if partitions is None else list(partitions)))
        return self.outcome


@pytest.mark.parametrize("version", [0, 1])
async def test_describe_cluster_lists_alive_brokers_and_operations(node, version):
    handler, _, _ = node
    for include, operations in ((False, md.AUTHORIZED_OPERATIONS_OMITTED), (True, ALL_CLUSTER_OPERATIONS_BITS)):
        response = await call_kio(handler, ApiKey.DESCRIBE_CLUSTER, version, describe_cluster(version, include))
        assert (response.error_code, response.cluster_id, response.controller_id) == (0, "test-cluster", ME)
        assert [(b.broker_id, b.host, b.port) for b in response.brokers] == [(1, *ADVERTISED), (2, "127.0.0.2", 9092)]
        assert response.cluster_authorized_operations == operations
    assert ALL_CLUSTER_OPERATIONS_BITS == 0b1_1111_1010_0000  # CREATE, ALTER..IDEMPOTENT_WRITE


async def test_describe_cluster_for_a_controller_endpoint_is_mismatched(node):
    handler, _, _ = node
    response = await call_kio(handler, ApiKey.DESCRIBE_CLUSTER, 1, describe_cluster(1, False, 2))
    assert response.error_code == 114 and response.brokers == ()  # MISMATCHED_ENDPOINT_TYPE
    assert "CONTROLLER" in (response.error_message or "")


@pytest.mark.parametrize("version", [0, 1, 2, 3])
async def test_acls_answer_security_disabled_and_store_nothing(node, version):
    handler, _, _ = node
    any_acl = (1, None, None, None, 1, 1, 3)  # ANY resource, operation and permission; LITERAL
    described = await call(handler, ApiKey.DESCRIBE_ACLS, version, acls.describe_request(version, any_acl),
                           acls.encode_request, acls.response_decoder(ApiKey.DESCRIBE_ACLS))
    assert (described.error_code, described.error_message, described.resources) == (
        54, "No Authorizer is configured on the broker", ())
    binding = (2, "orders", "User:alice", "*", 3, 3, 3)
    created = await call(handler, ApiKey.CREATE_ACLS, version, acls.create_request(version, binding, binding),
                         acls.encode_request, acls.response_decoder(ApiKey.CREATE_ACLS))
    assert [(r.error_code, r.error_message) for r in created.results] == [(54, "No Authorizer is configured.")] * 2
    deleted = await call(handler, ApiKey.DELETE_ACLS, version, acls.delete_request(version, any_acl),
                         acls.encode_request, acls.response_decoder(ApiKey.DELETE_ACLS))
    assert [(r.error_code, r.error_message, r.matching_acls) for r in deleted.filter_results] == [
        (54, "No Authorizer is configured.", ())]


async def elect(handler, request, version=2):
    return await call_kio(handler, ApiKey.ELECT_LEADERS, version, request)


async def test_elect_leaders_goes_to_the_controllers_and_answers_per_partition(node):
    handler, _, _ = node
    fake = RecordingElections(ElectionOutcome(0, None, {("orders", 0): 0, ("orders", 1): 84, ("nope", 0): 3}))
    handler.context.elections = fake
    request = elect_request(2, [("orders", (0, 1, 0)), ("nope", (0,))], election_type=1)  # unclean
    response = await elect(handler, request)
    assert fake.calls == [("unclean", [("orders", 0), ("orders", 1), ("nope", 0)])]
    assert response.error_code == 0
    assert {(t.topic, p.partition_id): (p.error_code, p.error_message) for t in response.replica_election_results
            for p in t.partition_result} == {
        ("orders", 0): (0, None), ("orders", 1): (84, "Leader election not needed for topic partition."),
        ("nope", 0): (3, "This server does not host this topic-partition.")}
    await elect(handler, elect_request(0, None), version=0)  # v0: preferred, every partition
    assert fake.calls[-1] == ("preferred", None)


async def test_elect_leaders_failures_are_answered_at_both_levels(node):
    handler, _, _ = node
    fake = RecordingElections(ElectionOutcome(42, "too many partitions", {}))
    handler.context.elections = fake
    request = elect_request(2, [("orders", (0,))], election_type=0)
    response = await elect(handler, request)
    assert response.error_code == 42
    (result,) = response.replica_election_results[0].partition_result
    assert (result.partition_id, result.error_code, result.error_message) == (0, 42, "too many partitions")
    unknown_type = await elect(handler, elect_request(2, [("orders", (0,))], election_type=7))
    assert unknown_type.error_code == 42 and len(fake.calls) == 1  # INVALID_REQUEST, never sent on
    empty = await elect(handler, elect_request(2, [], election_type=0))
    assert (empty.error_code, empty.replica_election_results) == (0, ()) and len(fake.calls) == 1


async def test_metadata_v8_answers_authorized_operations_when_asked(node):
    handler, _, _ = node
    for asked, cluster_ops, topic_ops in (
            (False, md.AUTHORIZED_OPERATIONS_OMITTED, md.AUTHORIZED_OPERATIONS_OMITTED),
            (True, ALL_CLUSTER_OPERATIONS_BITS, 0b1101_1111_1000)):  # READ..ALTER, DESCRIBE(_CONFIGS), ALTER_CONFIGS
        request = md.MetadataRequest(("orders",), False, asked, asked)
        response = await call(handler, ApiKey.METADATA, 8, request, md.encode_metadata_request,
                              md.decode_metadata_response)
        assert response.cluster_authorized_operations == cluster_ops
        assert response.topics[0].topic_authorized_operations == topic_ops


async def metadata(handler, request, version):
    return await call(handler, ApiKey.METADATA, version, request, md.encode_metadata_request,
                      md.decode_metadata_response)


async def test_metadata_v10_plus_carries_topic_ids_and_v12_looks_them_up(node):
    handler, admin_api, _ = node
    assert md.wire_topic_id("AAECAwQFBgcICQoLDA0ODw").bytes == bytes(range(16))  # Kafka's Uuid.toString
    orders_id = md.wire_topic_id("ORDERS")  # a hand-written id: a stable stand-in
    assert orders_id == md.wire_topic_id("ORDERS") != md.wire_topic_id("DARK")
    for version in (10, 11, 12):
        by_name = await metadata(handler, md.MetadataRequest(("orders", "nope"), False), version)
        assert [(t.name, t.error_code, t.topic_id) for t in by_name.topics] == [
            ("orders", 0, orders_id), ("nope", 3, md.ZERO_UUID)]
    missing = md.wire_topic_id("AAECAwQFBgcICQoLDA0ODw")
    by_id = await metadata(handler, md.MetadataRequest((), True, topic_ids=(orders_id, missing), null_names=2), 12)
    assert [(t.name, t.error_code, t.topic_id) for t in by_id.topics] == [
        ("orders", 0, orders_id), (None, 100, missing)]  # UNKNOWN_TOPIC_ID, with a null name
    assert admin_api.calls == []  # nothing auto-created by id
    # v10/v11 refuse ids, as Kafka: INVALID_REQUEST on every topic named
    refused = await metadata(handler, md.MetadataRequest(("orders",), True, topic_ids=(orders_id,)), 11)
    assert [(t.name, t.error_code) for t in refused.topics] == [("orders", 42)]
    assert (await metadata(handler, md.MetadataRequest(None), 12)).cluster_authorized_operations == \
        md.AUTHORIZED_OPERATIONS_OMITTED  # v11+ has no such field
