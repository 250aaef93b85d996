"""Batch reads and writes through `format("tidelog")`: real Spark local[2], a real 3-broker cluster.

The suite's cluster (conftest.py) and one SparkSession for the module. A 3-partition
topic with keys, null keys, headers and explicit timestamps is read back exactly (offsets
included); JSON offset ranges, startingTimestamp, minPartitions splitting; bad options
fail the load with the option's name; a keyed DataFrame written to a topic lands in the
partitions Java's default partitioner picks (murmur2).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.spark.spark_fixtures import (
    SPARK_TIMEOUT_S,
    Record,
    consume_partitions,
    create_topic,
    make_records,
    produce,
    spark_session,
)
from localcluster.launcher import LocalCluster
from tidelog.partitioner import partition_for_key

pytest.importorskip("pyspark")

REPLICATION_FACTOR = 3
PARTITIONS = 3
RECORDS = 300
TOPIC = "orders"


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    with spark_session("tidelog-spark-batch") as session:
        yield session


@pytest.fixture(scope="module")
def produced(cluster: LocalCluster) -> list[Record]:
    create_topic(cluster, TOPIC, PARTITIONS, REPLICATION_FACTOR)
    assert cluster.bootstrap_servers
    return produce(cluster.bootstrap_servers, TOPIC, make_records(RECORDS, PARTITIONS))


def read(spark: Any, cluster: LocalCluster, **options: str) -> Any:
    return spark.read.format("tidelog").option("kafka.bootstrap.servers", cluster.bootstrap_servers) \
        .options(**options).load()


def rows(df: Any) -> list[dict[str, Any]]:
    """Every row as a dict, through Arrow (timestamps stay UTC-aware, no local-time detour)."""
    return df.toArrow().to_pylist()


def as_record(row: dict[str, Any]) -> Record:
    headers = tuple((h["key"], h["value"]) for h in row["headers"]) if row.get("headers") else ()
    return Record(row["partition"], row["offset"], row["key"], row["value"], headers,
                  int(row["timestamp"].timestamp() * 1000))


def test_batch_read_equals_what_was_produced(spark: Any, cluster: LocalCluster, produced: list[Record]) -> None:
    df = read(spark, cluster, subscribe=TOPIC, includeHeaders="true")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"), ("offset", "bigint"),
        ("timestamp", "timestamp"), ("timestampType", "int"),
        ("headers", "array<struct<key:string,value:binary>>")]
    got = rows(df)
    assert {r["topic"] for r in got} == {TOPIC}
    assert {r["timestampType"] for r in got} == {0}  # CreateTime, as produced
    assert sorted(map(as_record, got), key=lambda r: (r.partition, r.offset)) == \
        sorted(produced, key=lambda r: (r.partition, r.offset))
    without = {(r.partition, r.offset) for r in produced if not r.headers}
    assert all(r["headers"] is None for r in got if (r["partition"], r["offset"]) in without)  # as Spark's
    # without includeHeaders: Spark's 7 columns, same records
    assert sorted((r["partition"], r["offset"], r["key"]) for r in rows(read(spark, cluster, assign=json.dumps(
        {TOPIC: list(range(PARTITIONS))})))) == sorted((r.partition, r.offset, r.key) for r in produced)


def test_json_offset_ranges(spark: Any, cluster: LocalCluster, produced: list[Record]) -> None:
    starting = {TOPIC: {"0": 10, "1": -2, "2": 40}}
    ending = {TOPIC: {"0": 20, "1": 5, "2": -1}}
    got = rows(read(spark, cluster, subscribe=TOPIC, startingOffsets=json.dumps(starting),
                    endingOffsets=json.dumps(ending)))
    high = {p: max(r.offset for r in produced if r.partition == p) + 1 for p in range(PARTITIONS)}
    want = {(0, o) for o in range(10, 20)} | {(1, o) for o in range(0, 5)} | {(2, o) for o in range(40, high[2])}
    assert sorted((r["partition"], r["offset"]) for r in got) == sorted(want)
    by_offset = {(r.partition, r.offset): r.value for r in produced}
    assert all(by_offset[(r["partition"], r["offset"])] == r["value"] for r in got)


def test_starting_timestamp(spark: Any, cluster: LocalCluster, produced: list[Record]) -> None:
    cut = sorted(r.timestamp_ms for r in produced)[RECORDS // 2]
    got = rows(read(spark, cluster, subscribe=TOPIC, startingTimestamp=str(cut)))
    # per partition: from the first record at or after `cut` (timestamps rise with offsets here)
    assert sorted((r["partition"], r["offset"]) for r in got) == \
        sorted((r.partition, r.offset) for r in produced if r.timestamp_ms >= cut)


def test_min_partitions_splits_large_ranges(spark: Any, cluster: LocalCluster, produced: list[Record]) -> None:
    df = read(spark, cluster, subscribe=TOPIC, minPartitions="7")
    assert df.rdd.getNumPartitions() >= 7
    got = sorted((r["partition"], r["offset"]) for r in rows(df))
    assert got == sorted((r.partition, r.offset) for r in produced)  # no gap, no overlap between the pieces
    assert read(spark, cluster, subscribe=TOPIC).rdd.getNumPartitions() == PARTITIONS
    capped = read(spark, cluster, subscribe=TOPIC, maxRecordsPerPartition="25")
    assert capped.rdd.getNumPartitions() == RECORDS // 25 and capped.count() == RECORDS


# every rule has its unit test (test_options.py); these show the message gets through Spark
@pytest.mark.parametrize(("options", "message"), [
    ({"subscribe": TOPIC, "startingOfsets": "earliest"},
     "unknown option 'startingofsets'.*did you mean 'startingOffsets'"),
    ({"subscribe": TOPIC, "assign": json.dumps({TOPIC: [0]})}, "'subscribe' and 'assign' cannot be used together"),
    ({"subscribe": TOPIC, "startingOffsets": "latest"}, "starting offset can't be latest for batch queries"),
    ({"subscribe": TOPIC, "startingOffsets": json.dumps({TOPIC: {"0": 1}})}, "must give every partition"),
])
def test_bad_options_fail_with_the_option_named(spark: Any, cluster: LocalCluster, produced: list[Record],
                                                 options: dict[str, str], message: str) -> None:
    with pytest.raises(Exception, match=message):
        read(spark, cluster, **options).collect()


def test_streaming_rejects_ending_offsets(spark: Any, cluster: LocalCluster) -> None:
    query = spark.readStream.format("tidelog").option("kafka.bootstrap.servers", cluster.bootstrap_servers) \
        .option("subscribe", TOPIC).option("endingOffsets", "latest").load().writeStream.format("noop").start()
    try:
        with pytest.raises(Exception, match="'endingOffsets' is not valid in streaming queries"):
            query.awaitTermination(SPARK_TIMEOUT_S)
    finally:
        query.stop()


def test_keyed_rows_land_where_java_puts_them(spark: Any, cluster: LocalCluster, tmp_path: Path) -> None:
    topic = "keyed"
    create_topic(cluster, topic, PARTITIONS, REPLICATION_FACTOR)
    keys = [f"user-{i}" for i in range(150)]
    df = spark.createDataFrame([(k, f"payload {k}".encode(), [("source", b"spark")]) for k in keys],
                               "key string, value binary, headers array<struct<key:string,value:binary>>")
    df.write.format("tidelog").option("kafka.bootstrap.servers", cluster.bootstrap_servers) \
        .option("topic", topic).mode("append").save()
    written = rows(read(spark, cluster, subscribe=topic, includeHeaders="true"))
    assert sorted(r["key"] for r in written) == sorted(k.encode() for k in keys)
    for r in written:
        assert r["partition"] == partition_for_key(r["key"], PARTITIONS), r["key"]
        assert r["headers"] == [{"key": "source", "value": b"spark"}]
    # Kafka's own vectors, through the same path: toPositive(murmur2(k)) % 3
    assert {k: partition_for_key(k, PARTITIONS) for k in (b"21", b"foobar", b"abc")} == \
        {b"21": (-973932308 & 0x7FFFFFFF) % 3, b"foobar": (-790332482 & 0x7FFFFFFF) % 3,
         b"abc": 479470107 % 3}
    assert len(consume_partitions(cluster.bootstrap_servers or "", topic, _ends(written))) == len(keys)


def test_topic_and_partition_columns(spark: Any, cluster: LocalCluster) -> None:
    topic = "routed"
    create_topic(cluster, topic, PARTITIONS, REPLICATION_FACTOR)
    df = spark.createDataFrame([(topic, 2, None, f"v{i}") for i in range(20)],
                               "topic string, partition int, key binary, value string")
    df.write.format("tidelog").option("kafka.bootstrap.servers", cluster.bootstrap_servers).mode("append").save()
    got = rows(read(spark, cluster, subscribe=topic))
    assert sorted((r["partition"], r["value"]) for r in got) == sorted((2, f"v{i}".encode()) for i in range(20))
    with pytest.raises(Exception, match="no topic: give the 'topic' option or a 'topic' column"):
        spark.createDataFrame([("v",)], "value string").write.format("tidelog") \
            .option("kafka.bootstrap.servers", cluster.bootstrap_servers).mode("append").save()
    with pytest.raises(Exception, match="'overwrite' is not supported"):
        df.write.format("tidelog").option("kafka.bootstrap.servers", cluster.bootstrap_servers) \
            .mode("overwrite").save()


def _ends(rows_read: list[dict[str, Any]]) -> dict[int, int]:
    ends: dict[int, int] = {}
    for r in rows_read:
        ends[r["partition"]] = max(ends.get(r["partition"], 0), r["offset"] + 1)
    return ends
