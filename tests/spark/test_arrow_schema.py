"""spark/arrow_schema.py: batches Spark accepts as they are (its own to_arrow_schema, UTC)."""

from __future__ import annotations

import datetime

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")
from pyspark.sql.pandas.types import to_arrow_schema  # noqa: E402

from spark.arrow_schema import arrow_schema, kafka_schema, record_batch  # noqa: E402


@pytest.mark.parametrize("include_headers", [False, True])
def test_arrow_schema_is_what_spark_expects(include_headers: bool) -> None:
    assert arrow_schema(include_headers).equals(to_arrow_schema(kafka_schema(include_headers), timezone="UTC"))
    assert kafka_schema(include_headers).fieldNames()[:7] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


def test_record_batch_columns() -> None:
    batch = record_batch(topic="t", partition=2, keys=[b"k", None], values=[b"v", None], offsets=[7, 9],
                         timestamps_ms=[1_700_000_000_123, -1], timestamp_types=[1, 0],
                         headers=[[("a", b"1"), ("b", None)], None])
    assert batch.schema.equals(arrow_schema(True))
    row, tombstone = batch.to_pylist()
    assert row == {"key": b"k", "value": b"v", "topic": "t", "partition": 2, "offset": 7,
                   "timestamp": datetime.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=datetime.timezone.utc),
                   "timestampType": 0, "headers": [{"key": "a", "value": b"1"}, {"key": "b", "value": None}]}
    assert (tombstone["key"], tombstone["value"], tombstone["timestampType"], tombstone["headers"]) == \
        (None, None, -1, None)  # librdkafka type 0 (none) is Kafka's NO_TIMESTAMP_TYPE, -1


def test_record_batch_without_headers_and_empty() -> None:
    batch = record_batch(topic="t", partition=0, keys=[], values=[], offsets=[], timestamps_ms=[],
                         timestamp_types=[])
    assert batch.num_rows == 0 and batch.schema.equals(arrow_schema(False))
    batch = record_batch(topic="t", partition=0, keys=[None], values=[b"x"], offsets=[0], timestamps_ms=[5],
                         timestamp_types=[2])
    assert batch.column("timestampType").to_pylist() == [1]  # LogAppendTime
    assert batch.column("timestamp").type == pa.timestamp("us", tz="UTC")
