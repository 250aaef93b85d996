"""A streaming query's progress, seen from Kafka and governed by admission control: real
Spark local[2] against the suite's real cluster (conftest.py), one SparkSession for the module.

- commitOffsetsToGroup: after an available-now ingest, `tidelog groups describe` shows the
  group at the last completed batch's end offsets, and its lag is the topic's end offsets
  minus those; a restart resumes from the checkpoint even when the group was moved.
- minOffsetsPerTrigger / maxOffsetsPerTrigger / maxTriggerDelay: every batch holds at most
  the maximum, a short backlog waits for the minimum or the delay, whichever comes first.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from spark.ingest_job import IngestConfig, IngestTrigger, start_ingest
from tests.integration.cluster_fixtures import wait_until
from tests.spark.spark_fixtures import SPARK_TIMEOUT_S, create_topic, make_records, produce, spark_session
from tidelog import cli
from localcluster.launcher import LocalCluster

pytest.importorskip("pyspark")

PARTITIONS = 3
MAX_ROWS = 300
MIN_ROWS = 200
DELAY_S = 10  # long enough that a loaded machine still produces inside it; the test waits it out once


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    with spark_session("tidelog-spark-progress") as session:
        yield session


def run_available_now(spark: Any, config: IngestConfig) -> Any:
    query = start_ingest(spark, config)
    try:
        assert query.awaitTermination(SPARK_TIMEOUT_S), "available-now did not finish"
        assert query.exception() is None, query.exception()
    finally:
        query.stop()
    return query


def describe(cluster: LocalCluster, group: str, capsys: pytest.CaptureFixture[str]) -> dict[int, tuple[int, int, int]]:
    """partition -> (CURRENT-OFFSET, LOG-END-OFFSET, LAG), from `tidelog groups describe`."""
    capsys.readouterr()
    assert cli.main(["groups", "describe", "--group", group, "--data-dir", str(cluster.root)]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith(group + " ")]
    return {int(r[2]): (int(r[3]), int(r[4]), int(r[5])) for r in rows}


def last_end(query: Any, topic: str) -> dict[int, int]:
    end = json.loads(query.lastProgress.json)["sources"][0]["endOffset"]
    return {int(p): o for p, o in (json.loads(end) if isinstance(end, str) else end)[topic].items()}


def test_group_shows_the_lag_behind_the_last_completed_batch(spark: Any, cluster: LocalCluster, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    topic, group = "progress-to-group", "lake-ingest"
    create_topic(cluster, topic, PARTITIONS, 1)
    bootstrap = cluster.bootstrap_servers or ""
    produce(bootstrap, topic, make_records(600, PARTITIONS))
    config = IngestConfig(topic=topic, output=str(tmp_path / "data"), checkpoint=str(tmp_path / "checkpoint"),
                          bootstrap_servers=bootstrap, max_offsets_per_trigger=250, commit_offsets_to_group=group)
    query = run_available_now(spark, config)
    assert [json.loads(p.json)["numInputRows"] for p in query.recentProgress] == [250, 250, 100]
    done = last_end(query, topic)
    assert describe(cluster, group, capsys) == {p: (done[p], done[p], 0) for p in range(PARTITIONS)}

    produce(bootstrap, topic, make_records(90, PARTITIONS, prefix="late-"))  # 30 more per partition
    assert describe(cluster, group, capsys) == {p: (done[p], done[p] + 30, 30) for p in range(PARTITIONS)}

    # someone moves the group back to 0: the restart still resumes from its checkpoint
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    request = ConsumerGroupTopicPartitions(group, [confluent_kafka.TopicPartition(topic, p, 0)
                                                   for p in range(PARTITIONS)])
    admin.alter_consumer_group_offsets([request])[group].result(timeout=30)
    query = run_available_now(spark, config)
    assert sum(json.loads(p.json)["numInputRows"] for p in query.recentProgress) == 90
    assert describe(cluster, group, capsys) == {p: (done[p] + 30, done[p] + 30, 0) for p in range(PARTITIONS)}
    offsets = spark.read.parquet(str(tmp_path / "data")).select("partition", "offset").collect()
    assert len(offsets) == len(set(offsets)) == 690  # every record once


def batches(query: Any) -> list[dict[str, Any]]:
    return [p for p in (json.loads(item.json) for item in query.recentProgress) if p["numInputRows"]]


def started_s(progress: dict[str, Any]) -> float:
    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


def test_batches_stay_within_the_admission_limits(spark: Any, cluster: LocalCluster, tmp_path: Path) -> None:
    topic = "progress-admission"
    create_topic(cluster, topic, PARTITIONS, 1)
    bootstrap = cluster.bootstrap_servers or ""
    produce(bootstrap, topic, make_records(700, PARTITIONS))
    config = IngestConfig(
        topic=topic, output=str(tmp_path / "data"), checkpoint=str(tmp_path / "checkpoint"),
        bootstrap_servers=bootstrap, trigger=IngestTrigger("processing-time", 200), max_offsets_per_trigger=MAX_ROWS,
        source_options=(("minOffsetsPerTrigger", str(MIN_ROWS)), ("maxTriggerDelay", f"{DELAY_S}s")))
    query = start_ingest(spark, config)
    try:
        # 300 (the first trigger always runs), 300 (400 wait), then 100 wait: held for the delay
        wait_until("three batches", lambda: len(batches(query)) >= 3 or query.exception(), timeout_s=SPARK_TIMEOUT_S)
        assert query.exception() is None, query.exception()
        produce(bootstrap, topic, make_records(150, PARTITIONS, prefix="short-"))  # below the minimum: waits
        time.sleep(1.0)  # several 200 ms triggers see the 150 and hold them back
        produce(bootstrap, topic, make_records(100, PARTITIONS, prefix="more-"))  # 250: the minimum reached
        wait_until("four batches", lambda: len(batches(query)) >= 4 or query.exception(), timeout_s=SPARK_TIMEOUT_S)
        assert query.exception() is None, query.exception()
        seen = batches(query)
    finally:
        query.stop()
    assert [p["numInputRows"] for p in seen] == [300, 300, 100, 250]
    # the short batch ran only once maxTriggerDelay had passed since the batch before it
    assert started_s(seen[2]) - started_s(seen[1]) >= DELAY_S - 0.5, (seen[1]["timestamp"], seen[2]["timestamp"])
