"""Config changes over the Kafka protocol with real admin clients (issue 18): IncrementalAlterConfigs
through confluent-kafka (SET, APPEND, SUBTRACT, DELETE, validate_only) and kafka-python, the
legacy AlterConfigs replacing the whole set, and refusals that name the key and change nothing.
Every change is read back with DescribeConfigs from every broker.

1 controller + 2 brokers (tidelog.testing.Cluster).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from common.protocol import messages
from common.protocol import describe_configs as dc
from common.protocol.api_keys import ApiKey
from tests.integration import cluster_fixtures
from tests.integration.cluster_fixtures import wait_until
from common.kafka_client import KafkaClient
from tidelog.testing import Cluster

admin = pytest.importorskip("confluent_kafka.admin")

TIMEOUT_S = 20.0
TOPIC_RESOURCE = 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(brokers=2, controllers=1, base_dir=tmp_path_factory.mktemp("alter-configs"),
                 fast_start=cluster_fixtures.FORK_NODES) as started:
        yield started


@pytest.fixture
def topic(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    name = cluster.create_topic(request.node.name[:40].replace("[", "-").replace("]", ""), partitions=1,
                                replication_factor=2)
    yield name
    cluster.delete_topic(name)


def bootstrap(cluster: Cluster) -> list[tuple[str, int]]:
    return [(host, int(port)) for host, _, port in (a.rpartition(":") for a in cluster.bootstrap_servers.split(","))]


def described(cluster: Cluster, broker_id: int, topic: str) -> dict[str, tuple[str | None, int]]:
    """name -> (value, source) as broker `broker_id` answers DescribeConfigs for the topic."""
    with KafkaClient(bootstrap(cluster)) as client:
        client.metadata([topic])
        answer = client.call(broker_id, ApiKey.DESCRIBE_CONFIGS, 1, dc.request(1, (TOPIC_RESOURCE, topic, None)),
            dc.encode_describe_configs_request, dc.decode_describe_configs_response)
    [result] = answer.results
    assert result.error_code == 0, result
    return {c.name: (c.value, c.config_source) for c in result.configs}


def everywhere(cluster: Cluster, topic: str, expected: dict[str, str]) -> None:
    """Every broker describes the topic with `expected` (a broker applies the change a moment later)."""
    for broker_id in cluster.broker_ids:
        wait_until(f"broker {broker_id} describes {expected}", lambda b=broker_id: all(
            described(cluster, b, topic)[k][0] == v for k, v in expected.items()), TIMEOUT_S)


def incremental(cluster: Cluster, topic: str, *entries: tuple[str, str | None, Any],
                validate_only: bool = False) -> None:
    client = admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    configs = [admin.ConfigEntry(name, value, incremental_operation=op) for name, value, op in entries]
    resource = admin.ConfigResource(admin.ResourceType.TOPIC, topic, incremental_configs=configs)
    futures = client.incremental_alter_configs([resource], validate_only=validate_only,
                                               request_timeout=TIMEOUT_S)
    futures[resource].result(timeout=TIMEOUT_S)


def test_incremental_alter_configs_with_confluent_kafka(cluster: Cluster, topic: str) -> None:
    op = admin.AlterConfigOpType
    incremental(cluster, topic, ("retention.ms", "123456", op.SET), ("cleanup.policy", "compact", op.APPEND))
    everywhere(cluster, topic, {"retention.ms": "123456", "cleanup.policy": "delete,compact"})
    assert described(cluster, cluster.broker_ids[0], topic)["retention.ms"][1] == 1  # DYNAMIC_TOPIC_CONFIG
    incremental(cluster, topic, ("retention.ms", None, op.DELETE), ("cleanup.policy", "delete", op.SUBTRACT))
    everywhere(cluster, topic, {"retention.ms": "604800000", "cleanup.policy": "compact"})
    assert described(cluster, cluster.broker_ids[0], topic)["retention.ms"][1] != 1
    # Subtracting the last policy leaves an empty list: valid in Kafka (each element is checked),
    # and the log keeps every record (neither deleted by retention nor compacted).
    incremental(cluster, topic, ("cleanup.policy", "compact", op.SUBTRACT))
    everywhere(cluster, topic, {"cleanup.policy": ""})


def test_validate_only_changes_nothing(cluster: Cluster, topic: str) -> None:
    incremental(cluster, topic, ("retention.ms", "5000", admin.AlterConfigOpType.SET), validate_only=True)
    with pytest.raises(Exception, match="retention.ms"):  # still validated: a bad value is refused
        incremental(cluster, topic, ("retention.ms", "soon", admin.AlterConfigOpType.SET), validate_only=True)
    for broker_id in cluster.broker_ids:
        assert described(cluster, broker_id, topic)["retention.ms"] == ("604800000", 5)  # DEFAULT_CONFIG


@pytest.mark.parametrize(("entry", "error", "named"), [
    (("retentoin.ms", "5", "SET"), "INVALID_CONFIG", "retentoin.ms"),
    (("retention.ms", "five", "SET"), "INVALID_CONFIG", "retention.ms"),
    (("retention.ms", "5", "APPEND"), "INVALID_CONFIG", "retention.ms"),
    (("cleanup.policy", "sometimes", "SET"), "INVALID_CONFIG", "cleanup.policy"),
])
def test_bad_changes_name_the_key_and_change_nothing(cluster: Cluster, topic: str,
                                                     entry: tuple[str, str, str], error: str, named: str) -> None:
    name, value, op = entry
    with pytest.raises(Exception) as caught:
        incremental(cluster, topic, (name, value, admin.AlterConfigOpType[op]))
    kafka_error = caught.value.args[0]
    assert kafka_error.name() == error and named in kafka_error.str(), kafka_error
    assert described(cluster, cluster.broker_ids[0], topic)["retention.ms"] == ("604800000", 5)


def test_legacy_alter_configs_replaces_the_whole_set(cluster: Cluster, topic: str) -> None:
    """AlterConfigs (key 33) sent as-is: a key set before and not named again goes back to its default."""
    def alter(configs: dict[str, str]) -> Any:
        m = messages.request_module(ApiKey.ALTER_CONFIGS, 1)
        request = m.AlterConfigsRequest(resources=(m.AlterConfigsResource(
            resource_type=TOPIC_RESOURCE, resource_name=topic, configs=tuple(
                m.AlterableConfig(name=k, value=v) for k, v in configs.items())),), validate_only=False)
        with KafkaClient(bootstrap(cluster)) as client:
            answer = client.call(None, ApiKey.ALTER_CONFIGS, 1, request, messages.encode_request,
                                 messages.response_decoder(ApiKey.ALTER_CONFIGS))
        [response] = answer.responses
        return response

    assert alter({"retention.ms": "1000", "segment.ms": "60000"}).error_code == 0
    everywhere(cluster, topic, {"retention.ms": "1000", "segment.ms": "60000"})
    assert alter({"segment.ms": "70000"}).error_code == 0
    everywhere(cluster, topic, {"retention.ms": "604800000", "segment.ms": "70000"})
    refused = alter({"segment.ms": "-5"})
    assert (refused.error_code, "segment.ms" in (refused.error_message or "")) == (40, True)  # INVALID_CONFIG


def test_kafka_python_alter_configs(cluster: Cluster, topic: str) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers, request_timeout_ms=int(TIMEOUT_S * 1000))
    try:
        client.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "777000"})])
        everywhere(cluster, topic, {"retention.ms": "777000"})
    finally:
        client.close()


def test_static_broker_configs_say_so(cluster: Cluster) -> None:
    """Only Kafka's dynamic broker keys change at run time (tests/integration/test_dynamic_broker_configs.py)."""
    client = admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    resource = admin.ConfigResource(admin.ResourceType.BROKER, str(cluster.broker_ids[0]), incremental_configs=[
        admin.ConfigEntry("log.retention.check.interval.ms", "1000", incremental_operation=admin.AlterConfigOpType.SET)])
    with pytest.raises(Exception) as caught:
        client.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)[resource].result(timeout=TIMEOUT_S)
    kafka_error = caught.value.args[0]
    assert kafka_error.name() == "INVALID_REQUEST" and "log.retention.check.interval.ms" in kafka_error.str()
    assert "Cannot update these configs dynamically" in kafka_error.str()
