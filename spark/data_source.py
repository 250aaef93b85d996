"""`TidelogDataSource`: the `tidelog` format, wiring options to readers and writers.

Each entry point checks its options first (on the driver), so a wrong or contradictory
option fails the `load()`/`start()`/`save()` with a message naming it, before any task runs.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from spark.arrow_schema import kafka_schema
from spark.batch_reader import TidelogBatchReader
from common.client_security import SaslRefused
from security.sasl_client import ClientSecurityError, client_security
from spark import txn_sink
from spark.options import (
    OptionError,
    SinkOptions,
    include_headers,
    parse_sink_options,
    parse_source_options,
)
from spark.stream_reader import TidelogStreamReader
from spark.writer import TidelogBatchWriter, TidelogStreamWriter, check_write_schema


class TidelogDataSource(DataSource):
    """Read and write tidelog (or any Kafka) topics with the options of Spark's Kafka source."""

    @classmethod
    def name(cls) -> str:
        return "tidelog"

    def schema(self) -> StructType:
        """Spark's Kafka schema: key, value, topic, partition, offset, timestamp, timestampType[, headers]."""
        return kafka_schema(include_headers(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        return TidelogBatchReader(parse_source_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TidelogStreamReader(parse_source_options(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:  # Kafka cannot drop what a topic holds (Spark's Kafka sink refuses too)
            raise OptionError("save mode 'overwrite' is not supported: a topic can only be appended to; "
                              "use mode('append')")
        options = parse_sink_options(self.options, streaming=False)
        check_write_schema(schema, options)
        _check_sink_security(options)
        return TidelogBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        # complete output mode asks to overwrite: Spark's Kafka sink appends then too
        options = parse_sink_options(self.options, streaming=True)
        check_write_schema(schema, options)
        _check_sink_security(options)
        return TidelogStreamWriter(options)


def _check_sink_security(options: SinkOptions) -> None:
    """The exactly-once sink's commit log and EndTxn go through tidelog's own client: an
    ssl.* / sasl.* setting it cannot use, or credentials the cluster refuses, fail the write here
    with a message naming them, before any task."""
    if not options.transactional:
        return
    try:
        client_security(options.kafka)
    except ClientSecurityError as exc:
        raise OptionError(f"the exactly-once sink's own client (commit log, EndTxn), kafka.* options: {exc}") \
            from None
    try:
        txn_sink.check_login(options)
    except SaslRefused as exc:
        raise OptionError(f"the exactly-once sink cannot log in with the kafka.sasl.* options: {exc}") from None
