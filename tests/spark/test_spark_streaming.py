"""Streaming ingest into Parquet, exactly once: real Spark local[2], a real 3-broker cluster.

The suite's cluster (conftest.py) and one SparkSession for the module. The ingest query
(the tidelog source into Spark's file sink, what `tidelog spark ingest` runs) is stopped
mid-stream, the topic gets more records and a new partition, and a restart from the
checkpoint leaves every record in the output exactly once. `tidelog spark ingest` runs
through the CLI's main() in this process (the module's session, not a second JVM) and
returns 0 with a progress line per micro-batch. A stream copies one topic into another
(the streaming writer); a deleted topic fails the query or not, per failOnDataLoss. Last,
a broker is shut down (controlled shutdown) under a running ingest of an RF 3 topic,
which keeps going and ends exactly once.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark.ingest_job import IngestConfig, IngestTrigger, start_ingest
from tests.integration.cluster_fixtures import http, wait_until
from tests.spark.spark_fixtures import (
    READY_S,
    SPARK_TIMEOUT_S,
    Record,
    create_topic,
    leaders,
    make_records,
    produce,
    spark_session,
)
from tidelog import cli
from localcluster.launcher import LocalCluster
from localcluster.node_process import NodeProcess
from tidelog.partitioner import partition_for_key

pytest.importorskip("pyspark")

REPLICATION_FACTOR = 3
PARTITIONS = 3
MAX_OFFSETS_PER_TRIGGER = 250  # micro-batches cost ~1-3 s each here: few of them
FAST = IngestTrigger("processing-time", 200)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    with spark_session("tidelog-spark-streaming") as session:
        yield session


def ingest_config(cluster: LocalCluster, topic: str, out: Path, trigger: IngestTrigger) -> IngestConfig:
    return IngestConfig(topic=topic, output=str(out / "data"), checkpoint=str(out / "checkpoint"),
                        bootstrap_servers=cluster.bootstrap_servers or "", trigger=trigger,
                        max_offsets_per_trigger=MAX_OFFSETS_PER_TRIGGER)


def progress(query: Any) -> list[dict[str, Any]]:
    return [json.loads(p.json) for p in query.recentProgress]


def end_offsets(query: Any) -> dict[str, dict[str, int]]:
    last = query.lastProgress
    return {} if last is None else json.loads(last.json)["sources"][0].get("endOffset") or {}


def ends_of(records: list[Record], topic: str) -> dict[str, dict[str, int]]:
    ends: dict[str, int] = {}
    for r in records:
        ends[str(r.partition)] = max(ends.get(str(r.partition), 0), r.offset + 1)
    return {topic: dict(sorted(ends.items(), key=lambda item: int(item[0])))}


def assert_exactly_once(spark: Any, out: Path, produced: list[Record]) -> None:
    """The Parquet output (as Spark reads it: committed batches only) holds each record once."""
    table = spark.read.parquet(str(out / "data")).select("partition", "offset", "key", "value").toArrow()
    got = list(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist()))
    assert len(got) == len(set(got)) == len(produced), (len(got), len(set(got)), len(produced))
    assert set(got) == {(r.partition, r.offset) for r in produced}
    values = dict(zip(got, table.column("value").to_pylist()))
    assert all(values[(r.partition, r.offset)] == r.value for r in produced)


def stop(query: Any) -> None:
    query.stop()
    assert not query.isActive


def test_ingest_stopped_mid_stream_then_restarted_is_exactly_once(spark: Any, cluster: LocalCluster,
                                                                   tmp_path: Path) -> None:
    topic = "events"
    create_topic(cluster, topic, PARTITIONS, REPLICATION_FACTOR)
    bootstrap = cluster.bootstrap_servers or ""
    produced = produce(bootstrap, topic, make_records(900, PARTITIONS))
    query = start_ingest(spark, ingest_config(cluster, topic, tmp_path, FAST))
    try:
        wait_until("two micro-batches with rows", lambda: sum(
            1 for p in progress(query) if p["numInputRows"]) >= 2 or query.exception(), timeout_s=SPARK_TIMEOUT_S)
        assert query.exception() is None, query.exception()
    finally:
        stop(query)  # mid-stream: 900 records at 250 per batch
    first_run = progress(query)
    assert all(p["numInputRows"] <= MAX_OFFSETS_PER_TRIGGER for p in first_run)  # admission control
    assert sum(p["numInputRows"] for p in first_run) < len(produced), "the query was not stopped mid-stream"

    # more records, and a partition the first run never saw
    status, answer = http(f"{cluster.admin_url}/v1/topics/{topic}/partitions", "POST", {"count": PARTITIONS + 1})
    assert status in (200, 201), answer
    wait_until("partition 3 led", lambda: leaders(cluster, topic).get(PARTITIONS, -1) >= 0, timeout_s=READY_S)
    produced += produce(bootstrap, topic, make_records(400, PARTITIONS + 1, prefix="second-"))

    query = start_ingest(spark, ingest_config(cluster, topic, tmp_path, IngestTrigger("available-now")))
    try:
        assert query.awaitTermination(SPARK_TIMEOUT_S), "available-now did not finish"
        assert query.exception() is None
    finally:
        stop(query)
    assert all(p["numInputRows"] <= MAX_OFFSETS_PER_TRIGGER for p in progress(query))
    assert end_offsets(query) == ends_of(produced, topic)
    assert_exactly_once(spark, tmp_path, produced)


def test_cli_ingest_available_now_prints_progress_and_exits_0(spark: Any, cluster: LocalCluster, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    topic = "clicks"
    create_topic(cluster, topic, PARTITIONS, REPLICATION_FACTOR)
    produced = produce(cluster.bootstrap_servers or "", topic, make_records(500, PARTITIONS))
    # in this process: `tidelog spark ingest` reuses the module's session (and leaves it running)
    # instead of paying for a second JVM; the command line, job and output are the same
    status = cli.main(["spark", "ingest", "--topic", topic, "--to", str(tmp_path / "data"),
                       "--checkpoint", str(tmp_path / "checkpoint"), "--bootstrap-servers",
                       cluster.bootstrap_servers or "", "--max-offsets-per-trigger", "200"])
    out = capsys.readouterr().out
    assert status == 0, out
    lines = [line for line in out.splitlines() if line.startswith("batch ")]
    assert len(lines) == 3, out  # 200 + 200 + 100, available-now then exit
    assert sum(int(line.split("rows=")[1].split()[0]) for line in lines) == len(produced), out
    assert lines[0].split("lag=")[1].split()[0] == "300" and lines[-1].split("lag=")[1].split()[0] == "0", out
    assert f"offsets={topic}:0=" in lines[-1], out
    assert_exactly_once(spark, tmp_path, produced)
    assert spark.range(1).count() == 1  # the session still works


def test_stream_copy_into_another_topic(spark: Any, cluster: LocalCluster, tmp_path: Path) -> None:
    source, copy = "copy-from", "copy-to"
    create_topic(cluster, source, PARTITIONS, REPLICATION_FACTOR)
    create_topic(cluster, copy, PARTITIONS, REPLICATION_FACTOR)
    produced = produce(cluster.bootstrap_servers or "", source, make_records(300, PARTITIONS))
    query = spark.readStream.format("tidelog").options(**{
        "kafka.bootstrap.servers": cluster.bootstrap_servers, "subscribe": source, "startingOffsets": "earliest",
        "includeHeaders": "true"}).load().select("key", "value", "headers").writeStream.format("tidelog") \
        .option("kafka.bootstrap.servers", cluster.bootstrap_servers).option("topic", copy) \
        .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start()
    try:
        assert query.awaitTermination(SPARK_TIMEOUT_S), "available-now did not finish"
        assert query.exception() is None
    finally:
        stop(query)
    copied = spark.read.format("tidelog").option("kafka.bootstrap.servers", cluster.bootstrap_servers) \
        .option("subscribe", copy).option("includeHeaders", "true").load().toArrow().to_pylist()
    assert sorted((r["key"] or b"", r["value"], tuple((h["key"], h["value"]) for h in r["headers"] or ()))
                  for r in copied) == sorted((r.key or b"", r.value, r.headers) for r in produced)
    assert all(r["partition"] == partition_for_key(r["key"], PARTITIONS) for r in copied if r["key"] is not None)


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_a_deleted_topic_follows_fail_on_data_loss(spark: Any, cluster: LocalCluster, tmp_path: Path,
                                                   fail_on_data_loss: bool) -> None:
    topic = f"doomed-{str(fail_on_data_loss).lower()}"
    create_topic(cluster, topic, PARTITIONS, REPLICATION_FACTOR)
    produce(cluster.bootstrap_servers or "", topic, make_records(60, PARTITIONS))
    query = spark.readStream.format("tidelog").options(**{
        "kafka.bootstrap.servers": cluster.bootstrap_servers, "subscribe": topic, "startingOffsets": "earliest",
        "failOnDataLoss": str(fail_on_data_loss).lower(), "fetchOffset.retryIntervalMs": "200"}).load() \
        .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "checkpoint")) \
        .trigger(processingTime="200 milliseconds").start()
    try:
        wait_until("the records read", lambda: sum(p["numInputRows"] for p in progress(query)) == 60
                   or query.exception(), timeout_s=SPARK_TIMEOUT_S)
        status, answer = http(f"{cluster.admin_url}/v1/topics/{topic}", "DELETE")
        assert status in (200, 202, 204), answer
        if fail_on_data_loss:
            with pytest.raises(Exception, match=f"partition {topic}-0 is gone"):
                query.awaitTermination(SPARK_TIMEOUT_S)
        else:  # a warning; the batch that drops the partitions runs, and the query carries on
            wait_until("a batch past the deletion", lambda: end_offsets(query) == {} or query.exception(),
                       timeout_s=SPARK_TIMEOUT_S)
            assert query.exception() is None and query.isActive
    finally:
        stop(query)


def test_ingest_keeps_running_through_a_controlled_shutdown(spark: Any, cluster: LocalCluster,
                                                            tmp_path: Path) -> None:
    topic = "replicated"
    create_topic(cluster, topic, PARTITIONS, 3)
    bootstrap = cluster.bootstrap_servers or ""
    produced = produce(bootstrap, topic, make_records(600, PARTITIONS))
    victim = leaders(cluster, topic)[0]
    node = cluster.node(victim)
    query = start_ingest(spark, ingest_config(cluster, topic, tmp_path, FAST))
    try:
        wait_until("a micro-batch with rows", lambda: any(p["numInputRows"] for p in progress(query))
                   or query.exception(), timeout_s=SPARK_TIMEOUT_S)
        node.send(signal.SIGTERM)  # controlled shutdown: leadership moves to the other replicas
        produced += produce(bootstrap, topic, make_records(300, PARTITIONS, prefix="during-"))
        wait_until(f"broker {victim} to exit", lambda: not node.running(), timeout_s=READY_S)
        assert node.exit_status == 0, node.log_tail()
        produced += produce(bootstrap, topic, make_records(300, PARTITIONS, prefix="after-"))
        want = ends_of(produced, topic)
        wait_until("the ingest to catch up", lambda: end_offsets(query) == want or query.exception(),
                   timeout_s=SPARK_TIMEOUT_S)
        assert query.exception() is None, query.exception()
        assert query.isActive
    finally:
        stop(query)
        if not node.running():  # back, so the module's cluster stops cleanly
            cluster.nodes[cluster.nodes.index(node)] = NodeProcess.spawn(node.spec)
            cluster.write_cluster_file()
    assert_exactly_once(spark, tmp_path, produced)
