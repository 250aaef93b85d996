"""The Spark source and sink over SASL_SSL (issue 29): real Spark local[2] against a one-node
cluster secured as `tidelog up --security SASL_SSL` secures it (tidelog.testing.Cluster).

One small batch written with the options a job for Spark's own Kafka source would give
(kafka.sasl.jaas.config, a PEM truststore), read back with librdkafka's names (the settings the
launcher printed); what was written is read back, offsets and all, through the secured listener
only. Both go through confluent-kafka: the raw Fetch path speaks PLAINTEXT only.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark.fetch_client import supports
from tests.spark.spark_fixtures import spark_session
from tidelog.testing import Cluster

pytest.importorskip("pyspark")

TOPIC = "secured"
RECORDS = 20


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(1, combined=True, security="SASL_SSL", base_dir=tmp_path_factory.mktemp("spark-sasl-ssl")) as cluster:
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
