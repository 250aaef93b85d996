"""The Spark source and sink over SASL_SSL (issue 29): real Spark local[2] against a one-node
cluster secured as `tidelog up --security SASL_SSL` secures it (tidelog.testing.Cluster).

One small batch written with the options a job for Spark's own Kafka source would give
(kafka.sasl.jaas.config, a PEM truststore), read back with librdkafka's names (the settings the
launcher printed); what was written is read back, offsets and all, through the secured listener
only. Both go through confluent-kafka: the raw Fetch reader is used on PLAINTEXT only. The
exactly-once sink, whose commit log and EndTxn go through tidelog's own client, writes each row
once over the same listener, and a wrong password fails its write with the authentication error.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark.fetch_client import supports
from tests.integration import cluster_fixtures
from tests.spark.spark_fixtures import spark_session
from tidelog.testing import Cluster

pytest.importorskip("pyspark")

TOPIC = "secured"
RECORDS = 20
READ_BACK_S = 30.0
WRONG_PASSWORD_WITHIN_S = 20.0  # the driver checks the login before any task (whose producer would wait 60 s)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(1, combined=True, security="SASL_SSL", base_dir=tmp_path_factory.mktemp("spark-sasl-ssl"),
                 fast_start=cluster_fixtures.FORK_NODES) as cluster:
        yield cluster  # every node stopped and the data dir removed on exit, even on failure


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    with spark_session("tidelog-spark-sasl-ssl") as session:
        yield session


def java_style(config: dict[str, str]) -> dict[str, str]:
    """The launcher's client settings as a job for Spark's Kafka source names them."""
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            f'username="{config["sasl.username"]}" password="{config["sasl.password"]}";')
    return {"kafka.bootstrap.servers": config["bootstrap.servers"], "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "PLAIN", "kafka.sasl.jaas.config": jaas,
            "kafka.ssl.truststore.location": config["ssl.ca.location"], "kafka.ssl.truststore.type": "PEM"}


def test_write_and_read_over_sasl_ssl(secured: Cluster, spark: Any) -> None:
    config = secured.client_config()
    assert config["security.protocol"] == "SASL_SSL" and config["bootstrap.servers"] != secured.bootstrap_servers
    assert not supports(config)  # so the source reads through confluent-kafka, over TLS
    secured.create_topic(TOPIC, partitions=2, replication_factor=1)
    rows = [(f"k{i}", f"v{i}") for i in range(RECORDS)]
    spark.createDataFrame(rows, "key string, value string").write.format("tidelog") \
        .options(**java_style(config)).option("topic", TOPIC).mode("append").save()

    df = spark.read.format("tidelog").options(**{f"kafka.{k}": v for k, v in config.items()}) \
        .option("subscribe", TOPIC).load()
    got = df.selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "partition", "offset") \
        .collect()
    assert sorted((r["key"], r["value"]) for r in got) == sorted(rows)
    for partition in (0, 1):  # each partition's offsets from 0 with no gap: every record once
        offsets = sorted(r["offset"] for r in got if r["partition"] == partition)
        assert offsets == list(range(len(offsets)))


def test_a_jks_truststore_fails_the_load_naming_the_option(secured: Cluster, spark: Any, tmp_path: Path) -> None:
    options = {**java_style(secured.client_config()), "kafka.ssl.truststore.type": "JKS"}
    with pytest.raises(Exception, match="kafka.ssl.truststore.location"):
        spark.read.format("tidelog").options(**options).option("subscribe", TOPIC).load().collect()


@pytest.mark.long  # a transactional Spark job: ~40 s on the loaded 2-core box, over the default suite's budget
def test_exactly_once_batch_write_over_sasl_ssl(secured: Cluster, spark: Any) -> None:
    """transactional=true: the tasks' producers, the commit log's reads and the driver's EndTxn all
    go through the SASL_SSL listener (the last two through tidelog's own client); a read_committed
    consumer sees every row exactly once."""
    import confluent_kafka

    config = secured.client_config()
    topic = "secured-eos"
    secured.create_topic(topic, partitions=2, replication_factor=1)
    rows = [(f"k{i}", f"eos{i}") for i in range(RECORDS)]
    spark.createDataFrame(rows, "key string, value string").write.format("tidelog") \
        .options(**java_style(config)).option("topic", topic).option("transactional", "true") \
        .mode("append").save()
    consumer = confluent_kafka.Consumer({**config, "group.id": "eos-check", "auto.offset.reset": "earliest",
                                         "isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        consumer.subscribe([topic])
        got: list[tuple[str, str]] = []
        ended: set[int] = set()
        deadline = time.monotonic() + READ_BACK_S
        while len(ended) < 2 and time.monotonic() < deadline:  # bounded by the deadline
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    ended.add(message.partition())
                continue
            got.append((message.key().decode(), message.value().decode()))
    finally:
        consumer.close()
    assert sorted(got) == sorted(rows)  # every row, none twice, all committed by the driver's EndTxn


def test_exactly_once_write_with_a_wrong_password_fails_clearly(secured: Cluster, spark: Any) -> None:
    config = {**secured.client_config(), "sasl.password": "wrong"}
    df = spark.createDataFrame([("k", "v")], "key string, value string")
    started = time.monotonic()
    with pytest.raises(Exception, match=r"cannot log in with the kafka\.sasl\.\* options: SASL authentication "
                                        r"as .* failed: Authentication failed"):
        df.write.format("tidelog").options(**java_style(config)).option("topic", TOPIC) \
            .option("transactional", "true").mode("append").save()
    assert time.monotonic() - started < WRONG_PASSWORD_WITHIN_S
