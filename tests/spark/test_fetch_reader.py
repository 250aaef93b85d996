"""The raw-Fetch range reader (spark.fetch_reader) against the suite's real 3-broker cluster.

In-process, without Spark: per codec, the raw-Fetch reader and the confluent-kafka reader
give the same rows (headers included) for the same ranges, both equal to what was
produced; records deleted from the log (DeleteRecords, a real admin client) are data loss:
an error with failOnDataLoss=true, the rest of the range with false; an unreachable
cluster ends the task with a timeout instead of hanging; a fetch size smaller than a batch
still makes progress. (A leader moving mid-read: test_spark_streaming's controlled shutdown.)
"""

from __future__ import annotations

from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient

from spark.data_loss import DataLossError
from spark.fetch_reader import read_range_fetched
from spark.offsets import OffsetRange
from spark.options import parse_source_options
from spark.range_reader import read_range_consumed
from tests.integration.cluster_fixtures import wait_until
from tests.spark.spark_fixtures import CLIENT_TIMEOUT_S, create_topic, make_records
from localcluster.launcher import LocalCluster, free_ports

pytest.importorskip("pyspark")

PARTITIONS = 2
RECORDS = 3000


def options(bootstrap: str, topic: str, **extra: str) -> Any:
    return parse_source_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                                 "includeHeaders": "true", **extra}, streaming=False)


def produce_with(bootstrap: str, topic: str, codec: str, count: int, partitions: int = PARTITIONS) -> dict[int, int]:
    """`count` records (make_records: null keys, headers) with `codec`; the end offset per partition."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                                         "compression.type": codec, "log_level": 3})
    # a topic created a moment ago may not be in every broker's metadata yet
    wait_until(f"{topic}'s partitions in metadata", lambda: len(getattr(
        producer.list_topics(topic, timeout=5).topics.get(topic), "partitions", {})) == partitions,
        timeout_s=CLIENT_TIMEOUT_S)
    failures: list[Any] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(err)
    for r in make_records(count, partitions, prefix=codec):
        producer.produce(topic, value=r.value, key=r.key, partition=r.partition, headers=list(r.headers) or None,
                         timestamp=r.timestamp_ms, on_delivery=report)
        producer.poll(0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0, "records left undelivered"
    assert not failures, failures[:3]
    return {p: count // partitions + (1 if p < count % partitions else 0) for p in range(partitions)}


def rows(batches: Any) -> list[dict[str, Any]]:
    return [row for batch in batches for row in batch.to_pylist()]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_fetch_reader_equals_the_consumer_reader(cluster: LocalCluster, codec: str) -> None:
    topic = f"fetch-{codec}"
    create_topic(cluster, topic, PARTITIONS, 3)
    bootstrap = cluster.bootstrap_servers or ""
    ends = produce_with(bootstrap, topic, codec, RECORDS)
    opts = options(bootstrap, topic)
    for p, end in ends.items():
        for start, stop in [(0, end), (17, end - 5)]:  # whole partitions, and cut inside batches
            offset_range = OffsetRange(topic, p, start, stop)
            fetched = rows(read_range_fetched(offset_range, opts))
            assert fetched == rows(read_range_consumed(offset_range, opts))
            assert [r["offset"] for r in fetched] == list(range(start, stop))
    produced = [r for r in make_records(RECORDS, PARTITIONS, prefix=codec) if r.partition == 0]
    got = rows(read_range_fetched(OffsetRange(topic, 0, 0, ends[0]), opts))
    assert [(r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"] or []]) for r in got] == \
        [(r.key, r.value, list(r.headers)) for r in produced]


def test_deleted_records_are_data_loss(cluster: LocalCluster) -> None:
    topic = "fetch-purged"
    create_topic(cluster, topic, 1, 3)
    bootstrap = cluster.bootstrap_servers or ""
    end = produce_with(bootstrap, topic, "none", 200, 1)[0] + produce_with(bootstrap, topic, "none", 200, 1)[0]
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    futures = admin.delete_records([confluent_kafka.TopicPartition(topic, 0, 150)], request_timeout=30)
    for future in futures.values():
        future.result(timeout=CLIENT_TIMEOUT_S)
    whole = OffsetRange(topic, 0, 0, end)
    with pytest.raises(DataLossError, match="offsets 0 to 149 .* are gone"):
        rows(read_range_fetched(whole, options(bootstrap, topic)))
    rest = rows(read_range_fetched(whole, options(bootstrap, topic, failOnDataLoss="false")))
    assert [r["offset"] for r in rest] == list(range(150, end))


def test_an_unreachable_cluster_times_out() -> None:
    (port,) = free_ports(("127.0.0.1",), 1)  # nobody listens there
    opts = options(f"127.0.0.1:{port}", "t", **{"kafkaConsumer.pollTimeoutMs": "1000"})
    with pytest.raises(TimeoutError, match="pollTimeoutMs=1000"):
        rows(read_range_fetched(OffsetRange("t", 0, 0, 10), opts))


def test_a_fetch_size_below_one_batch_still_reads_everything(cluster: LocalCluster) -> None:
    # Kafka (KIP-74) returns a whole first batch even beyond the limit; a reader must make progress
    topic = "fetch-small"
    create_topic(cluster, topic, 1, 3)
    bootstrap = cluster.bootstrap_servers or ""
    end = produce_with(bootstrap, topic, "none", 500, 1)[0]
    opts = options(bootstrap, topic, **{"kafka.max.partition.fetch.bytes": "64"})
    assert [r["offset"] for r in rows(read_range_fetched(OffsetRange(topic, 0, 0, end), opts))] == list(range(end))
