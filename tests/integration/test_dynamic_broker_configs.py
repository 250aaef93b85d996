"""Dynamic broker configs (issue 18) with real admin clients: confluent-kafka, kafka-python and
aiokafka alter BROKER resources per broker and as the cluster-wide default, and every broker reads
them back (DescribeConfigs v4, flexible, with sources and synonyms); a dynamic log.segment.bytes
and log.retention.ms default changes a live topic without a restart; the values survive a broker
restart; bad input (a static key, an unknown key, a type mismatch) gets Kafka's error naming the
key, applies nothing and leaves the connection usable; the admin API and `tidelog configs` take
the same changes.

1 controller + 2 brokers (tidelog.testing.Cluster); every dynamic config is deleted after each test.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from common.errors import ErrorCode
from common.protocol import messages
from common.protocol import describe_configs as dc
from common.protocol.api_keys import ApiKey
from tests.integration import cluster_fixtures
from tests.integration.cluster_fixtures import http, wait_until
from common.kafka_client import KafkaClient
from tidelog.testing import Cluster

admin = pytest.importorskip("confluent_kafka.admin")

TIMEOUT_S = 20.0
BROKER = 4
DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 2, 3, 4, 5
# the retention task runs every half second so that a dynamic retention shows within seconds
STATIC_PROPERTIES = {"log.retention.check.interval.ms": "500", "log.segment.delete.delay.ms": "0"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(brokers=2, controllers=1, broker_config=STATIC_PROPERTIES,
                 base_dir=tmp_path_factory.mktemp("dynamic-broker-configs"),
                 fast_start=cluster_fixtures.FORK_NODES) as started:
        # These tests start from no dynamic broker config at all. A new cluster finalizes ELR
        # (KIP-966), which keeps a cluster-level min.insync.replicas that cannot be removed while
        # ELR is on: downgrade ELR (safe, as Kafka's), then remove that default.
        status, body = http(started.admin_url + "/v1/features", "POST", {"updates": [{
            "feature": "eligible.leader.replicas.version", "max_version_level": 0,
            "upgrade_type": "safe_downgrade"}]})
        assert status == 200, body
        status, body = http(started.admin_url + "/v1/brokers/configs", "PATCH",
                            {"configs": {"min.insync.replicas": None}})
        assert status == 200, body
        yield started


@pytest.fixture(autouse=True)
def clean(cluster: Cluster) -> Iterator[None]:
    """Delete every dynamic broker config a test set (through the admin API)."""
    yield
    for path in ["/v1/brokers/configs"] + [f"/v1/brokers/{b}/configs" for b in cluster.broker_ids]:
        _, raw = http(cluster.admin_url + path)
        configs = json.loads(raw)["configs"]
        if configs:
            status, body = http(cluster.admin_url + path, "PATCH", {"configs": {k: None for k in configs}})
            assert status == 200, body
    for broker_id in cluster.broker_ids:
        wait_until(f"broker {broker_id} without dynamic configs", lambda b=broker_id: not any(
            e.config_source in (DYNAMIC_BROKER, DYNAMIC_DEFAULT) for e in describe(cluster, b, str(b)).values()),
            TIMEOUT_S)


def bootstrap(cluster: Cluster) -> list[tuple[str, int]]:
    return [(host, int(port)) for host, _, port in (a.rpartition(":") for a in cluster.bootstrap_servers.split(","))]


def describe(cluster: Cluster, broker_id: int, name: str, resource_type: int = BROKER,
             keys: tuple[str, ...] | None = None) -> dict[str, Any]:
    """DescribeConfigs v4 (flexible) of one resource as broker `broker_id` answers it."""
    with KafkaClient(bootstrap(cluster)) as client:
        client.metadata([])
        answer = client.call(broker_id, ApiKey.DESCRIBE_CONFIGS, 4, dc.request(
            4, (resource_type, name, keys), include_synonyms=True),
            dc.encode_describe_configs_request, dc.decode_describe_configs_response)
    [result] = answer.results
    assert result.error_code == 0, result
    return {c.name: c for c in result.configs}


def synonyms(entry: Any) -> list[tuple[str, str | None, int]]:
    return [(s.name, s.value, s.source) for s in entry.synonyms]


def set_broker_configs(name: str, entries: list[tuple[str, str]]) -> Any:
    """kio's IncrementalAlterConfigsRequest v1 SETting `entries` on BROKER `name`."""
    m = messages.request_module(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1)
    return m.IncrementalAlterConfigsRequest(resources=(m.AlterConfigsResource(
        resource_type=BROKER, resource_name=name, configs=tuple(
            m.AlterableConfig(name=k, config_operation=0, value=v) for k, v in entries)),), validate_only=False)


def incremental(cluster: Cluster, name: str, **sets: str) -> None:
    """confluent-kafka's IncrementalAlterConfigs; the cluster default ("") through tidelog's own
    client, as librdkafka refuses an empty BROKER name (Java's kafka-configs.sh sends it)."""
    if name == "":
        request = set_broker_configs("", [(k.replace("_", "."), v) for k, v in sets.items()])
        with KafkaClient(bootstrap(cluster)) as kafka:
            answer = kafka.call(None, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, request, messages.encode_request,
                                messages.response_decoder(ApiKey.INCREMENTAL_ALTER_CONFIGS))
        [response] = answer.responses
        if response.error_code:
            raise RuntimeError(response)
        return
    configs = [admin.ConfigEntry(k.replace("_", "."), v, incremental_operation=admin.AlterConfigOpType.SET)
               for k, v in sets.items()]
    resource = admin.ConfigResource(admin.ResourceType.BROKER, name, incremental_configs=configs)
    client = admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    client.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)[resource].result(timeout=TIMEOUT_S)


def test_per_broker_and_cluster_default_with_confluent_kafka(cluster: Cluster) -> None:
    first, second = cluster.broker_ids
    incremental(cluster, str(first), log_retention_ms="3600000")
    mine = describe(cluster, first, str(first))["log.retention.ms"]
    assert (mine.value, mine.config_source, mine.read_only) == ("3600000", DYNAMIC_BROKER, False)
    assert synonyms(mine) == [("log.retention.ms", "3600000", DYNAMIC_BROKER), ("log.retention.hours", "168", DEFAULT)]
    other = describe(cluster, second, str(second))["log.retention.ms"]
    assert other.config_source == DEFAULT  # a per-broker value is that broker's alone
    assert describe(cluster, first, str(first))["log.dirs"].read_only  # static keys stay read-only

    incremental(cluster, "", log_retention_bytes="123456789")
    for broker_id in cluster.broker_ids:  # the cluster default reaches every broker, from any broker
        wait_until(f"broker {broker_id} applies the default", lambda b=broker_id: describe(
            cluster, b, str(b))["log.retention.bytes"].value == "123456789", TIMEOUT_S)
        entry = describe(cluster, broker_id, str(broker_id))["log.retention.bytes"]
        assert entry.config_source == DYNAMIC_DEFAULT
        assert synonyms(entry) == [("log.retention.bytes", "123456789", DYNAMIC_DEFAULT),
                                   ("log.retention.bytes", "-1", DEFAULT)]
        default = describe(cluster, broker_id, "")
        assert list(default) == ["log.retention.bytes"] and default["log.retention.bytes"].config_source == \
            DYNAMIC_DEFAULT
    # a topic without its own retention.bytes reports the dynamic default as its synonym
    name = cluster.create_topic("dyn-synonyms", partitions=1, replication_factor=2)
    try:
        for broker_id in cluster.broker_ids:
            entry = describe(cluster, broker_id, name, resource_type=2)["retention.bytes"]
            assert (entry.value, entry.config_source) == ("123456789", DYNAMIC_DEFAULT)
            assert synonyms(entry)[0] == ("log.retention.bytes", "123456789", DYNAMIC_DEFAULT)
    finally:
        cluster.delete_topic(name)


def test_a_brokers_sasl_keys_change_as_in_kafka(cluster: Cluster) -> None:
    """librdkafka's 0081-admin sets sasl.kerberos.min.time.before.relogin on one broker with the
    legacy AlterConfigs and expects success: Kafka's per-broker dynamic listener keys (stored and
    described; tidelog serves PLAINTEXT, so nothing uses them)."""
    first = cluster.broker_ids[0]
    client = admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    resource = admin.ConfigResource(admin.ResourceType.BROKER, str(first),
                                    set_config={"sasl.kerberos.min.time.before.relogin": "58000"})
    client.alter_configs([resource], request_timeout=TIMEOUT_S)[resource].result(timeout=TIMEOUT_S)
    wait_until(f"broker {first} describes the new value", lambda: describe(cluster, first, str(first))[
        "sasl.kerberos.min.time.before.relogin"].value == "58000", TIMEOUT_S)
    entry = describe(cluster, first, str(first))["sasl.kerberos.min.time.before.relogin"]
    assert (entry.config_source, entry.read_only) == (DYNAMIC_BROKER, False)
    jaas = describe(cluster, first, str(first))["sasl.jaas.config"]
    assert (jaas.value, jaas.is_sensitive) == (None, True)


def test_validate_only_checks_and_applies_nothing(cluster: Cluster) -> None:
    first = cluster.broker_ids[0]
    client = admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})

    def dry_run(key: str, value: str) -> None:
        resource = admin.ConfigResource(admin.ResourceType.BROKER, str(first), incremental_configs=[
            admin.ConfigEntry(key, value, incremental_operation=admin.AlterConfigOpType.SET)])
        client.incremental_alter_configs([resource], validate_only=True, request_timeout=TIMEOUT_S)[resource].result(
            timeout=TIMEOUT_S)

    dry_run("log.retention.ms", "1000")
    with pytest.raises(Exception, match="log.dirs"):  # still validated: a static key is refused
        dry_run("log.dirs", "/x")
    assert describe(cluster, first, str(first))["log.retention.ms"].config_source == DEFAULT
    assert json.loads(http(cluster.admin_url + f"/v1/brokers/{first}/configs")[1])["configs"] == {}


def test_kafka_python_alters_and_describes_broker_configs(cluster: Cluster) -> None:
    """kafka-python checks a key is dynamic (read_only false) before it alters it, then sends
    IncrementalAlterConfigs v1 (flexible) to the broker named."""
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    first = cluster.broker_ids[0]
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
    try:
        result = client.alter_configs([ConfigResource(ConfigResourceType.BROKER, str(first),
                                                      configs={"log.segment.bytes": "2097152"})])
        assert "OK" in str(result), result
        described = client.describe_configs([ConfigResource(ConfigResourceType.BROKER, str(first))],
                                            config_filter="all")
    finally:
        client.close()
    assert "2097152" in str(described)
    entry = describe(cluster, first, str(first))["log.segment.bytes"]
    assert (entry.value, entry.config_source) == ("2097152", DYNAMIC_BROKER)


def test_aiokafka_alters_a_broker_with_alter_configs(cluster: Cluster) -> None:
    """aiokafka sends the legacy AlterConfigs (the whole set of the resource) to a broker."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    first = cluster.broker_ids[0]

    async def run() -> object:
        client = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap_servers)
        await client.start()
        try:
            await client.alter_configs([ConfigResource(ConfigResourceType.BROKER, str(first),
                                                       configs={"min.insync.replicas": "2"})])
            return await client.describe_configs([ConfigResource(ConfigResourceType.BROKER, str(first))],
                                                 include_synonyms=True)
        finally:
            await client.close()

    responses = asyncio.run(run())
    assert "min.insync.replicas" in str(responses)
    entry = describe(cluster, first, str(first))["min.insync.replicas"]
    assert (entry.value, entry.config_source) == ("2", DYNAMIC_BROKER)


def segment_files(cluster: Cluster, broker_id: int, topic: str) -> list[Path]:
    return sorted((cluster.node(broker_id).spec.directory / "data" / f"{topic}-0").glob("*.log"))


def test_dynamic_log_defaults_change_a_live_topic(cluster: Cluster) -> None:
    """log.segment.bytes and log.retention.ms as cluster defaults: the running partition rolls at
    the new size and its old segments are deleted, no restart; its replica follows the same."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    name = cluster.create_topic("dyn-live", partitions=1, replication_factor=2)
    try:
        incremental(cluster, "", log_segment_bytes="2048")
        for broker_id in cluster.broker_ids:
            wait_until(f"broker {broker_id} applies log.segment.bytes", lambda b=broker_id: describe(
                cluster, b, name, 2)["segment.bytes"].value == "2048", TIMEOUT_S)
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 0})
        for i in range(40):
            producer.produce(name, value=b"x" * 300, key=str(i).encode())
            producer.flush(TIMEOUT_S)  # one batch each: segments roll by size between them
        for broker_id in cluster.broker_ids:  # leader and follower both roll at 2 KiB
            wait_until(f"segments on broker {broker_id}", lambda b=broker_id: len(segment_files(cluster, b, name)) >= 4,
                       TIMEOUT_S)
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "dyn-live"})
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(name, 0), timeout=TIMEOUT_S)
            assert (low, high) == (0, 40)
            incremental(cluster, "", log_retention_ms="1000")
            wait_until("retention deletes the old segments", lambda: consumer.get_watermark_offsets(
                TopicPartition(name, 0), timeout=TIMEOUT_S)[0] > 0, TIMEOUT_S)
        finally:
            consumer.close()
    finally:
        cluster.delete_topic(name)


def test_dynamic_configs_survive_a_broker_restart(cluster: Cluster) -> None:
    first = cluster.broker_ids[0]
    incremental(cluster, str(first), log_cleaner_min_cleanable_ratio="0.25")
    incremental(cluster, "", compression_type="lz4")
    cluster.kill(first)  # a crash: the values come back from the metadata log, not from memory
    cluster.restart(first)
    wait_until(f"broker {first} back", lambda: describe(cluster, first, str(first)) is not None, TIMEOUT_S)
    entries = describe(cluster, first, str(first))
    assert (entries["log.cleaner.min.cleanable.ratio"].value,
            entries["log.cleaner.min.cleanable.ratio"].config_source) == ("0.25", DYNAMIC_BROKER)
    assert (entries["compression.type"].value, entries["compression.type"].config_source) == ("lz4", DYNAMIC_DEFAULT)


@pytest.mark.parametrize(("name", "key", "value", "error"), [
    ("", "log.dirs", "/elsewhere", "INVALID_REQUEST"),  # Kafka: not dynamically updatable
    ("self", "num.partitions", "3", "INVALID_REQUEST"),
    ("self", "ssl.keystore.location", "/k", "INVALID_REQUEST"),  # Kafka: only with a listener prefix
    ("", "log.retention.ms", "soon", "INVALID_CONFIG"),  # type mismatch
    ("self", "log.cleanup.policy", "sometimes", "INVALID_CONFIG"),
    ("", "sasl.kerberos.min.time.before.relogin", "58000", "INVALID_REQUEST"),  # per-broker only
])
def test_bad_input_names_the_key_applies_nothing_and_the_connection_stays(
        cluster: Cluster, name: str, key: str, value: str, error: str) -> None:
    first = cluster.broker_ids[0]
    entries = [(key, value), ("log.retention.bytes", "999")]
    if name == "":  # librdkafka refuses an empty BROKER name: tidelog's own client, one connection throughout
        with KafkaClient(bootstrap(cluster)) as kafka:
            kafka.metadata([])
            [response] = kafka.call(first, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, set_broker_configs("", entries),
                                    messages.encode_request,
                                    messages.response_decoder(ApiKey.INCREMENTAL_ALTER_CONFIGS)).responses
            code, message = response.error_code, response.error_message or ""
            described = kafka.call(first, ApiKey.DESCRIBE_CONFIGS, 4, dc.request(
                4, (BROKER, str(first), ("log.retention.bytes",))),
                dc.encode_describe_configs_request, dc.decode_describe_configs_response)
        assert (ErrorCode(code).name, key in message) == (error, True), message
        assert described.results[0].configs[0].value == "-1"
    else:
        client = admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        resource = admin.ConfigResource(admin.ResourceType.BROKER, str(first), incremental_configs=[
            admin.ConfigEntry(k, v, incremental_operation=admin.AlterConfigOpType.SET) for k, v in entries])
        with pytest.raises(Exception) as caught:
            client.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)[resource].result(timeout=TIMEOUT_S)
        kafka_error = caught.value.args[0]
        assert kafka_error.name() == error and key in kafka_error.str(), kafka_error
        # nothing applied, not even the good key next to the bad one; the same client still works
        answer = client.describe_configs([admin.ConfigResource(admin.ResourceType.BROKER, str(first))],
                                         request_timeout=TIMEOUT_S)
        [configs] = [future.result(timeout=TIMEOUT_S) for future in answer.values()]
        assert configs["log.retention.bytes"].value == "-1"
    for path in ("/v1/brokers/configs", f"/v1/brokers/{first}/configs"):
        assert json.loads(http(cluster.admin_url + path)[1])["configs"] == {}


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")  # AlterConfigs is the API under test
def test_a_key_no_broker_knows_is_stored_described_and_logged_once(cluster: Cluster) -> None:
    """Kafka's DynamicBrokerConfig stores `cleanup.policy` (a topic key) on a BROKER resource:
    AlterConfigs and IncrementalAlterConfigs succeed, DescribeConfigs lists it as Kafka does (type
    unknown, so sensitive: value hidden; read-only), nothing applies it (log.cleanup.policy stays),
    and the controller logs once that no broker reads it."""
    first = cluster.broker_ids[0]
    client = admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    resource = admin.ConfigResource(admin.ResourceType.BROKER, str(first), incremental_configs=[
        admin.ConfigEntry("cleanup.policy", "compact", incremental_operation=admin.AlterConfigOpType.SET)])
    client.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)[resource].result(timeout=TIMEOUT_S)
    legacy = admin.ConfigResource(admin.ResourceType.BROKER, str(first), set_config={
        "cleanup.policy": "compact", "my.plugin.setting": "x"})
    client.alter_configs([legacy], request_timeout=TIMEOUT_S)[legacy].result(timeout=TIMEOUT_S)
    [future] = client.describe_configs([admin.ConfigResource(admin.ResourceType.BROKER, str(first))],
                                       request_timeout=TIMEOUT_S).values()
    configs = future.result(timeout=TIMEOUT_S)
    for key in ("cleanup.policy", "my.plugin.setting"):
        entry = configs[key]
        assert (entry.value, entry.source, entry.is_sensitive, entry.is_read_only) == \
            (None, admin.ConfigSource.DYNAMIC_BROKER_CONFIG.value, True, True), entry
    assert configs["log.cleanup.policy"].value == "delete"  # nothing reads the unknown key
    stored = json.loads(http(cluster.admin_url + f"/v1/brokers/{first}/configs")[1])["configs"]
    assert stored == {"cleanup.policy": "compact", "my.plugin.setting": "x"}
    logs = "".join(cluster.node(c).spec.log_path.read_text(errors="replace") for c in cluster.controller_ids)
    assert logs.count(f"Dynamic broker config cleanup.policy of broker {first} stored") == 1, logs[-3000:]
    assert "no broker reads it: not a broker config (did you mean 'log.cleanup.policy'?)" in logs


def test_a_refused_alter_is_logged_once_with_the_client_id(cluster: Cluster) -> None:
    """broker.refusal_log: the broker that refused says why, once per client and reason."""
    first = cluster.broker_ids[0]
    client = admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers, "client.id": "ops-tool-7"})
    resource = admin.ConfigResource(admin.ResourceType.BROKER, str(first), incremental_configs=[
        admin.ConfigEntry("log.retention.ms", "soon", incremental_operation=admin.AlterConfigOpType.SET)])
    for _ in range(2):
        with pytest.raises(Exception, match="INVALID_CONFIG"):
            client.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)[resource].result(
                timeout=TIMEOUT_S)
    line = f"Refused IncrementalAlterConfigs from client 'ops-tool-7' at /127.0.0.1: INVALID_CONFIG: BROKER '{first}': "
    log_path = cluster.node(first).spec.log_path
    wait_until("the refusal in the broker log", lambda: line in log_path.read_text(errors="replace"), TIMEOUT_S)
    found = [text for text in log_path.read_text(errors="replace").splitlines() if line in text]
    assert len(found) == 1 and "log.retention.ms" in found[0] and " INFO " in found[0], found


def test_admin_api_and_cli(cluster: Cluster, tmp_path: Path) -> None:
    first = cluster.broker_ids[0]
    status, body = http(cluster.admin_url + f"/v1/brokers/{first}/configs", "PATCH",
                        {"ops": [{"name": "log.retention.ms", "op": "SET", "value": "7200000"}]})
    assert status == 200 and json.loads(body)["configs"] == {"log.retention.ms": "7200000"}, body
    status, body = http(cluster.admin_url + "/v1/brokers/configs", "PATCH",
                        {"configs": {"log.dirs": "/x"}})
    answer = json.loads(body)
    assert (status, answer["error"], answer["field"]) == (400, "INVALID_REQUEST", "log.dirs"), body
    status, body = http(cluster.admin_url + "/v1/brokers/configs", "PATCH",
                        {"configs": {"log.retention.bytes": "1"}, "validate_only": True})
    assert status == 200 and json.loads(http(cluster.admin_url + "/v1/brokers/configs")[1])["configs"] == {}
    status, body = http(cluster.admin_url + "/v1/brokers/x/configs")
    assert status == 400 and json.loads(body)["field"] == "id"

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parents[2]),
                                                                     os.environ.get("PYTHONPATH")]))}

    def tidelog(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tidelog", "configs", *args, "--bootstrap-server",
                               cluster.bootstrap_servers], capture_output=True, text=True, env=env,
                              timeout=TIMEOUT_S, check=False)

    done = tidelog("alter", "--entity-type", "brokers", "--entity-default", "--add-config", "log.retention.bytes=5000000")
    assert done.returncode == 0 and "Completed updating default config for brokers in the cluster." in done.stdout, done
    shown = tidelog("describe", "--entity-type", "brokers", "--entity-default")
    assert shown.stdout.splitlines() == [
        "Default configs for brokers in the cluster are:",
        ("  log.retention.bytes=5000000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:"
         "log.retention.bytes=5000000, DEFAULT_CONFIG:log.retention.bytes=-1}")], shown
    shown = tidelog("describe", "--entity-type", "brokers", "--entity-name", str(first))
    assert f"Dynamic configs for broker {first} are:" in shown.stdout and "log.retention.ms=7200000" in shown.stdout
    refused = tidelog("alter", "--entity-type", "brokers", "--entity-name", str(first), "--add-config", "listeners=x")
    assert refused.returncode == 1 and "INVALID_REQUEST" in refused.stderr and "listeners" in refused.stderr
