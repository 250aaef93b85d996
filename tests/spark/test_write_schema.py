"""spark/writer.py's column rules (Spark's Kafka sink): checked on the driver, named in the error."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
from pyspark.sql.types import (  # noqa: E402
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from spark.options import OptionError, SinkOptions  # noqa: E402
from spark.writer import check_write_schema  # noqa: E402

WITH_TOPIC = SinkOptions(topic="t", kafka_params=(("bootstrap.servers", "h:1"),))
NO_TOPIC = SinkOptions(topic=None, kafka_params=(("bootstrap.servers", "h:1"),))


# a tiny DDL reader: Spark's own parser needs a JVM, and these tests need none
TYPES: dict[str, DataType] = {
    "binary": BinaryType(), "string": StringType(), "int": IntegerType(), "bigint": LongType(),
    "array<string>": ArrayType(StringType()),
    "array<struct<key:string,value:binary>>": ArrayType(StructType([StructField("key", StringType()),
                                                                    StructField("value", BinaryType())])),
}


def schema(text: str) -> StructType:
    return StructType([StructField(name, TYPES[kind]) for name, kind in
                       (column.strip().split(" ", 1) for column in text.split(", "))])


@pytest.mark.parametrize(("text", "options"), [
    ("value binary", WITH_TOPIC),
    ("key string, value string, extra int", WITH_TOPIC),  # other columns are ignored, as in Spark
    ("topic string, value binary, partition int", NO_TOPIC),
    ("key binary, value binary, headers array<struct<key:string,value:binary>>", WITH_TOPIC),
])
def test_accepted(text: str, options: SinkOptions) -> None:
    check_write_schema(schema(text), options)


@pytest.mark.parametrize(("text", "options", "message"), [
    ("key binary", WITH_TOPIC, "needs a 'value' column"),
    ("value int", WITH_TOPIC, "column 'value' must be binary or string"),
    ("key int, value binary", WITH_TOPIC, "column 'key' must be binary or string"),
    ("value binary", NO_TOPIC, "no topic: give the 'topic' option or a 'topic' column"),
    ("topic int, value binary", NO_TOPIC, "column 'topic' must be a string"),
    ("value binary, partition bigint", WITH_TOPIC, "column 'partition' must be an int"),
    ("value binary, headers array<string>", WITH_TOPIC, "column 'headers' must be array<struct<key: string"),
])
def test_rejected(text: str, options: SinkOptions, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        check_write_schema(schema(text), options)
