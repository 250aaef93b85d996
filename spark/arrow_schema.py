"""The output schema of the Kafka source, as a Spark StructType and as the Arrow schema Spark wants.

Spark checks each RecordBatch a Python source yields against `to_arrow_schema(schema)`:
`timestamp[us, tz=UTC]`, int32 for int, int64 for long, `binary` (not large_binary), and
`headers` as `list<element: struct<key: string, value: binary>>`. `record_batch` builds one
from column lists gathered from confluent-kafka messages, with the per-column conversions
done by Arrow rather than per record in Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from common.units import US_PER_MS

Header = tuple[str, bytes | None]

HEADER_FIELDS: Final = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
BASE_FIELDS: Final = (
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
)
HEADERS_FIELD: Final = StructField("headers", ArrayType(HEADER_FIELDS))

ARROW_HEADERS: Final = pa.list_(pa.field("element", pa.struct([pa.field("key", pa.string()),
                                                               pa.field("value", pa.binary())])))
ARROW_FIELDS: Final = (
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
)
ARROW_SCHEMA: Final = pa.schema(ARROW_FIELDS)
ARROW_SCHEMA_WITH_HEADERS: Final = pa.schema([*ARROW_FIELDS, pa.field("headers", ARROW_HEADERS)])


def kafka_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema (KafkaRecordToRowConverter.kafkaSchema)."""
    return StructType([*BASE_FIELDS, *([HEADERS_FIELD] if include_headers else [])])


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema Spark expects for `kafka_schema(include_headers)`."""
    return ARROW_SCHEMA_WITH_HEADERS if include_headers else ARROW_SCHEMA


def record_batch(*, topic: str, partition: int, keys: Sequence[bytes | None], values: Sequence[bytes | None],
                 offsets: Sequence[int], timestamps_ms: Sequence[int], timestamp_types: Sequence[int],
                 headers: Sequence[Sequence[Header] | None] | None = None) -> pa.RecordBatch:
    """One batch of records of one partition.

    `timestamp_types` are librdkafka's (0 none, 1 CreateTime, 2 LogAppendTime); Spark's
    column holds Kafka's TimestampType id, one less (-1, 0, 1). `headers` None leaves the
    column out; a record without headers gets null, as Spark's Kafka source gives.
    """
    count = len(offsets)
    stamps = pa.array(timestamps_ms, pa.int64())
    columns: list[pa.Array] = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.array([topic] * count, pa.string()),
        pa.array([partition] * count, pa.int32()),
        pa.array(offsets, pa.int64()),
        pc.multiply(stamps, US_PER_MS).cast(pa.timestamp("us", tz="UTC")),
        pc.subtract(pa.array(timestamp_types, pa.int32()), pa.scalar(1, pa.int32())),
    ]
    if headers is None:
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
    # per header (not per record) Python work, paid only with includeHeaders=true
    column = pa.array([[{"key": k, "value": v} for k, v in record] if record else None for record in headers],
                      ARROW_HEADERS)
    return pa.RecordBatch.from_arrays([*columns, column], schema=ARROW_SCHEMA_WITH_HEADERS)
