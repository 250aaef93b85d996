"""The exactly-once sink and read_committed reads: real Spark, a real 3-broker cluster.

A streaming query copies a topic into another through the transactional sink in its own
process (tests/spark/eos_query.py). Its driver (the Python process and its JVM, one process
group) is SIGKILLed twice mid-batch: once with batch 0's transactions prepared but not
committed, once with them committed but before Spark's own commit log has the batch. The
third run finishes the stream. Read back read_committed, every input row is in the output
exactly once; read_uncommitted also shows the aborted first attempt of batch 0. The batch
source reads committed and aborted transactions read_committed and read_uncommitted, a
read_committed stream stops at an open transaction (the LSO) and goes on once it commits, and a
batch write (`df.write`, transactional) becomes visible whole on commit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

from tests.integration.cluster_fixtures import wait_until
from tests.spark.spark_fixtures import CLIENT_TIMEOUT_S, create_topic, make_records, produce, spark_session
from localcluster.launcher import LocalCluster

pytest.importorskip("pyspark")

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 2
RECORDS = 400  # two micro-batches of 200 (eos_query.MAX_OFFSETS_PER_TRIGGER)
DRIVER_TIMEOUT_S = 180.0
SOURCE, SINK = "eos-in", "eos-out"


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    with spark_session("tidelog-spark-eos") as session:
        yield session


class Driver:
    """One run of eos_query in its own process group, killed with it on exit."""

    def __init__(self, cluster: LocalCluster, tmp: Path, log_name: str, *args: str) -> None:
        self.markers = tmp / "markers"
        self.markers.mkdir(exist_ok=True)
        self.log = tmp / log_name
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.spark.eos_query", cluster.bootstrap_servers or "", SOURCE, SINK,
                 str(tmp / "checkpoint"), str(self.markers), *args],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        """SIGKILL the driver: the Python process, its JVM and the JVM's Python workers."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(CLIENT_TIMEOUT_S)

    def wait_for_marker(self, name: str) -> None:
        def reached() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"the driver exited {self.process.returncode} before {name}: "
                                     f"{self.log.read_text()[-3000:]}")
            return (self.markers / name).exists()
        wait_until(f"the driver at {name}", reached, timeout_s=DRIVER_TIMEOUT_S)


def read_values(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    """Every value of `topic` a consumer with `isolation` sees, read by assignment to the end."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "eos-never-joined",
                                         "enable.auto.commit": False, "isolation.level": isolation,
                                         "enable.partition.eof": True, "log_level": 3})
    values: list[bytes] = []
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in range(PARTITIONS)])
        at_end: set[int] = set()
        while len(at_end) < PARTITIONS:  # bounded by wait_until's deadline through consume's timeout
            batch = consumer.consume(500, 1.0)
            for msg in batch:
                if msg.error() is not None and msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                elif msg.error() is not None:
                    raise AssertionError(msg.error())
                else:
                    values.append(msg.value())
        return values
    finally:
        consumer.close()


@pytest.mark.long  # two streaming runs and a kill (~2.5 min): make test-long
@pytest.mark.timeout(420)
def test_a_stream_killed_mid_batch_and_restarted_writes_every_row_once(cluster: LocalCluster,
                                                                        tmp_path: Path) -> None:
    bootstrap = cluster.bootstrap_servers or ""
    create_topic(cluster, SOURCE, PARTITIONS, 3)
    create_topic(cluster, SINK, PARTITIONS, 3)
    produced = [r.value for r in produce(bootstrap, SOURCE, make_records(RECORDS, PARTITIONS))]

    prepared = Driver(cluster, tmp_path, "run1.log", "--hook", "before:0")
    try:
        prepared.wait_for_marker("before-0")  # batch 0's transactions open, the driver not committing
    finally:
        prepared.kill()
    committed = Driver(cluster, tmp_path, "run2.log", "--hook", "after:0")
    try:
        committed.wait_for_marker("after-0")  # batch 0 replayed and committed; Spark's commit log lacks it
    finally:
        committed.kill()
    last = Driver(cluster, tmp_path, "run3.log", "--available-now")
    try:
        assert last.process.wait(DRIVER_TIMEOUT_S) == 0, last.log.read_text()[-3000:]
    finally:
        last.kill()

    seen = Counter(read_values(bootstrap, SINK, "read_committed"))
    assert sum(seen.values()) == RECORDS and seen == Counter(produced), \
        f"{sum(seen.values())} rows, duplicates: {[v for v, n in seen.items() if n > 1][:3]}"
    # the first run's batch 0, prepared then aborted by the replay's fencing, is in the log
    assert len(read_values(bootstrap, SINK, "read_uncommitted")) > RECORDS


def produce_in_transactions(bootstrap: str, topic: str, rounds: list[tuple[bool, list[bytes]]]) -> None:
    """One transaction per round across every partition, committed (True) or aborted."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-writer",
                                         "log_level": 3})
    producer.init_transactions(CLIENT_TIMEOUT_S)
    for commit, values in rounds:
        producer.begin_transaction()
        for i, value in enumerate(values):
            producer.produce(topic, value, partition=i % PARTITIONS)
        if commit:
            producer.commit_transaction(CLIENT_TIMEOUT_S)
        else:
            producer.flush(CLIENT_TIMEOUT_S)  # written, then aborted: in the log, never committed
            producer.abort_transaction(CLIENT_TIMEOUT_S)
    producer.flush(CLIENT_TIMEOUT_S)


def test_the_batch_source_reads_committed_rows_only(spark: Any, cluster: LocalCluster) -> None:
    """Aborted transactions between committed ones: read_committed skips them (Fetch's aborted
    list, markers) and ends at the LSO; read_uncommitted shows them."""
    topic = "eos-read"
    bootstrap = cluster.bootstrap_servers or ""
    create_topic(cluster, topic, PARTITIONS, 3)
    rounds = [(n % 3 != 1, [f"{n}-{i}".encode() for i in range(50)]) for n in range(6)]  # rounds 1, 4 aborted
    produce_in_transactions(bootstrap, topic, rounds)

    def read(isolation: str) -> list[bytes]:
        frame = (spark.read.format("tidelog").option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", topic).option("kafka.isolation.level", isolation).load())
        return sorted(bytes(row.value) for row in frame.select("value").collect())
    assert read("read_committed") == sorted(v for commit, values in rounds if commit for v in values)
    assert read("read_uncommitted") == sorted(v for _, values in rounds for v in values)


def test_a_transactional_batch_write_is_visible_when_committed(spark: Any, cluster: LocalCluster) -> None:
    topic = "eos-batch"
    create_topic(cluster, topic, PARTITIONS, 3)
    rows = spark.range(500).selectExpr("CAST(id AS STRING) AS value").repartition(3)
    (rows.write.format("tidelog").mode("append").option("kafka.bootstrap.servers", cluster.bootstrap_servers)
     .option("topic", topic).option("transactional", "true").save())
    read = (spark.read.format("tidelog").option("kafka.bootstrap.servers", cluster.bootstrap_servers)
            .option("subscribe", topic).option("kafka.isolation.level", "read_committed").load())
    assert sorted(int(r.value) for r in read.selectExpr("CAST(value AS STRING) AS value").collect()) == \
        list(range(500))


def test_a_read_committed_stream_stops_at_an_open_transaction(spark: Any, cluster: LocalCluster,
                                                             tmp_path: Path) -> None:
    """An open transaction holds the LSO: a read_committed stream reads the committed rows
    before it and, once it commits, the rest; never the open transaction's rows early."""
    topic = "eos-stream-read"
    bootstrap = cluster.bootstrap_servers or ""
    create_topic(cluster, topic, PARTITIONS, 3)
    produce_in_transactions(bootstrap, topic, [(True, [b"committed-%d" % i for i in range(40)])])
    open_one = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-open",
                                         "log_level": 3})
    open_one.init_transactions(CLIENT_TIMEOUT_S)
    open_one.begin_transaction()
    for i in range(30):
        open_one.produce(topic, b"late-%d" % i, partition=i % PARTITIONS)
    assert open_one.flush(CLIENT_TIMEOUT_S) == 0
    produce_in_transactions(bootstrap, topic, [(True, [b"after-%d" % i for i in range(20)])])  # above the LSO

    def run() -> list[bytes]:
        """Every value in the Parquet output after one available-now run from the checkpoint."""
        query = (spark.readStream.format("tidelog").option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", topic).option("startingOffsets", "earliest")
                 .option("kafka.isolation.level", "read_committed").load().select("value")
                 .writeStream.format("parquet").option("path", str(tmp_path / "out"))
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
        try:
            assert query.awaitTermination(int(CLIENT_TIMEOUT_S * 2)), "available-now did not finish"
            assert query.exception() is None, query.exception()
        finally:
            query.stop()
        return sorted(bytes(row.value) for row in spark.read.parquet(str(tmp_path / "out")).collect())

    committed = [b"committed-%d" % i for i in range(40)]
    try:
        assert run() == sorted(committed)
        open_one.commit_transaction(CLIENT_TIMEOUT_S)
    finally:
        open_one.close()  # aborts the transaction if the first run failed
    # the same checkpoint: the second run goes on from where the first stopped (the LSO then)
    assert run() == sorted(committed + [b"late-%d" % i for i in range(30)] + [b"after-%d" % i for i in range(20)])
