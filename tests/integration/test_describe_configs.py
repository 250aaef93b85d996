"""DescribeConfigs with a real client: confluent-kafka's AdminClient.describe_configs against
a broker whose config sets min.insync.replicas and unclean.leader.election.enable.

The broker answers its effective defaults with Kafka's sources: STATIC_BROKER_CONFIG for the
keys its config file sets, DEFAULT_CONFIG for the rest, DYNAMIC_TOPIC_CONFIG for a topic's
own configs (it used to answer min.insync.replicas=1 and unclean.leader.election.enable=false
whatever its config said). A BROKER resource lists every key the broker reads (it used to
answer none), read-only, with types and documentation, for confluent-kafka, kafka-python and a
raw DescribeConfigs v3.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.cluster_fixtures import (
    BROKER_ID,
    http,
    running_cluster,
    wait_until,
)
from localcluster.launcher import LocalCluster

confluent_kafka = pytest.importorskip("confluent_kafka")
admin = pytest.importorskip("confluent_kafka.admin")

CLIENT_TIMEOUT_S = 20.0
BROKER_PROPERTIES = {"min.insync.replicas": "2", "unclean.leader.election.enable": "true"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory.mktemp("describe-configs") / "cluster",
                         BROKER_PROPERTIES) as started:
        yield started  # stopped on exit even on failure


def create_topic(cluster: LocalCluster, name: str, configs: dict[str, str]) -> None:
    status, answer = http(f"{cluster.admin_url}/v1/topics", "POST",
                          {"name": name, "partitions": 1, "replication_factor": 1, "configs": configs})
    assert status == 201, answer

    def known() -> bool:
        metadata = confluent_kafka.Producer(
            {"bootstrap.servers": cluster.bootstrap_servers}).list_topics(name, timeout=5)
        topic = metadata.topics.get(name)
        return topic is not None and topic.error is None and topic.partitions[0].leader == BROKER_ID
    wait_until(f"broker {BROKER_ID} serving {name}", known)


def describe(cluster: LocalCluster, topic: str) -> dict[str, object]:
    client = admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    resource = admin.ConfigResource(admin.ResourceType.TOPIC, topic)
    futures = client.describe_configs([resource], request_timeout=CLIENT_TIMEOUT_S)
    return futures[resource].result(timeout=CLIENT_TIMEOUT_S)


def test_topic_without_overrides_reports_the_brokers_static_config(cluster: LocalCluster) -> None:
    create_topic(cluster, "plain", {})
    entries = describe(cluster, "plain")
    Source = admin.ConfigSource
    seen = {name: (entries[name].value, entries[name].source) for name in
            ("min.insync.replicas", "unclean.leader.election.enable", "segment.bytes")}
    # ELR on (a new cluster's default, KIP-966): the controllers wrote their static value (2 here,
    # every node has BROKER_PROPERTIES) as the cluster-level dynamic default, as Kafka 4.1 does.
    assert seen == {
        "min.insync.replicas": ("2", Source.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
        "unclean.leader.election.enable": ("true", Source.STATIC_BROKER_CONFIG.value),
        "segment.bytes": ("1073741824", Source.DEFAULT_CONFIG.value),
    }
    assert not entries["min.insync.replicas"].is_default  # set cluster-wide
    # Synonyms were asked for: the broker key (confluent-kafka keeps one entry per name, so the
    # STATIC then DEFAULT pair shows as its last; the unit tests check the whole list).
    assert set(entries["min.insync.replicas"].synonyms) == {"min.insync.replicas"}
    assert entries["segment.bytes"].is_default

def test_topic_overrides_win_as_dynamic_topic_configs(cluster: LocalCluster) -> None:
    create_topic(cluster, "overridden", {"min.insync.replicas": "1", "retention.ms": "60000"})
    entries = describe(cluster, "overridden")
    Source = admin.ConfigSource
    assert (entries["min.insync.replicas"].value, entries["min.insync.replicas"].source) == \
        ("1", Source.DYNAMIC_TOPIC_CONFIG.value)
    assert (entries["retention.ms"].value, entries["retention.ms"].source) == \
        ("60000", Source.DYNAMIC_TOPIC_CONFIG.value)
    assert (entries["unclean.leader.election.enable"].value,
            entries["unclean.leader.election.enable"].source) == ("true", Source.STATIC_BROKER_CONFIG.value)


def test_broker_resource_lists_every_broker_config(cluster: LocalCluster) -> None:
    """issue 18: a BROKER resource used to answer no entries at all."""
    client = admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    resource = admin.ConfigResource(admin.ResourceType.BROKER, str(BROKER_ID))
    entries = client.describe_configs([resource], request_timeout=CLIENT_TIMEOUT_S)[resource].result(
        timeout=CLIENT_TIMEOUT_S)
    Source = admin.ConfigSource
    assert (entries["min.insync.replicas"].value, entries["min.insync.replicas"].source) == \
        ("2", Source.DYNAMIC_DEFAULT_BROKER_CONFIG.value)  # KIP-966's cluster-level default (above)
    assert entries["advertised.listeners"].value.startswith("PLAINTEXT://127.0.0.4:")
    assert entries["log.segment.bytes"].source == Source.DEFAULT_CONFIG.value and entries["log.segment.bytes"].is_default
    # Kafka's dynamic keys (none set here) are not read-only; the rest are
    assert not entries["min.insync.replicas"].is_read_only and not entries["log.retention.ms"].is_read_only
    assert entries["log.dirs"].is_read_only and entries["num.partitions"].is_read_only
    assert len(entries) > 50


def test_broker_resource_with_kafka_python_types_and_documentation(cluster: LocalCluster) -> None:
    """kafka-python used to fail with KeyError: 'advertised.listeners'; DescribeConfigs v3 carries
    each config's type and, when asked, its documentation."""
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    from common.protocol import describe_configs as dc
    from common.protocol.api_keys import ApiKey
    from common.kafka_client import KafkaClient

    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        described = client.describe_configs([ConfigResource(ConfigResourceType.BROKER, str(BROKER_ID))],
                                            config_filter="all")
    finally:
        client.close()
    assert "advertised.listeners" in str(described)
    host, _, port = (cluster.bootstrap_servers or "").partition(",")[0].rpartition(":")
    with KafkaClient([(host, int(port))]) as raw:
        answer = raw.call(None, ApiKey.DESCRIBE_CONFIGS, 3, dc.request(
            3, (4, str(BROKER_ID), ("num.partitions", "controller.cluster.password")), (4, "99", None),
            include_synonyms=True, include_documentation=True),
            dc.encode_describe_configs_request, dc.decode_describe_configs_response)
    mine, other = answer.results
    [entry] = [c for c in mine.configs if c.name == "num.partitions"]
    assert (entry.config_type, entry.read_only, entry.config_source) == (3, True, 5)  # INT, DEFAULT_CONFIG
    assert entry.documentation and entry.synonyms[0].name == "num.partitions"
    assert other.error_code == 42 and "expected 4" in (other.error_message or "")  # INVALID_REQUEST
