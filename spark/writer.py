"""Batch and streaming writes: `df.write.format("tidelog")`, `df.writeStream.format("tidelog")`.

Columns as Spark's Kafka sink takes them: `value` (binary or string, required), `key`
(binary or string), `topic` (string; the `topic` option overrides it), `partition` (int;
null or absent: the partitioner decides), `headers` (array<struct<key string, value
binary>>); other columns are ignored. Each task produces its rows with one idempotent
acks=all producer; keyed rows go where a Java producer would put them (murmur2).

What a failure leaves behind, by default (Kafka has no way to take a record back): a task
that fails purges the records it had not yet sent (they never become visible) and raises;
records the brokers acknowledged before that stay. Spark then retries the task or aborts
the job, so the write is at-least-once — the same guarantee as Spark's own Kafka sink.
`abort` cannot hide acknowledged records; it logs how many there were.

With `transactional=true` (or a `kafka.transactional.id` prefix) the write is exactly once
for read_committed readers: each task writes in a transaction the driver commits in
`commit` or aborts in `abort` (spark/txn_sink.py tells the protocol and what each crash
leaves).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from common.units import SECONDS
from spark import kafka_clients, txn_sink
from spark.options import OptionError, SinkOptions
from spark.txn_protocol import transactional_id

log = logging.getLogger("tidelog.spark")

FLUSH_TIMEOUT: Final = 120 * SECONDS  # delivery.timeout.ms (librdkafka: 300 s) bounds each record anyway
QUEUE_FULL_WAIT: Final = 0.05 * SECONDS
POLL_EVERY: Final = 1_000  # serve delivery reports every this many records
UNASSIGNED: Final = -1  # librdkafka's RD_KAFKA_PARTITION_UA: let the partitioner choose


class WriteError(RuntimeError):
    """A record the brokers did not accept; earlier acknowledged records of the task stay written."""


@dataclass
class WriteSummary(WriterCommitMessage):
    """What one task wrote (its commit message): records per topic."""
    records: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.records.values())


def _type_ok(data_type: DataType, allowed: tuple[type, ...]) -> bool:
    return isinstance(data_type, allowed)


def check_write_schema(schema: StructType, options: SinkOptions) -> None:
    """Spark's Kafka sink rules for the DataFrame written; OptionError naming the column."""
    types = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in types:
        raise OptionError("the DataFrame to write needs a 'value' column (binary or string)")
    for name in ("key", "value"):
        if name in types and not _type_ok(types[name], (BinaryType, StringType)):
            raise OptionError(f"column '{name}' must be binary or string, not {types[name].simpleString()}")
    if options.topic is None and "topic" not in types:
        raise OptionError("no topic: give the 'topic' option or a 'topic' column")
    if "topic" in types and not _type_ok(types["topic"], (StringType,)):
        raise OptionError(f"column 'topic' must be a string, not {types['topic'].simpleString()}")
    if "partition" in types and not _type_ok(types["partition"], (IntegerType,)):
        raise OptionError(f"column 'partition' must be an int, not {types['partition'].simpleString()}")
    if "headers" in types:
        headers = types["headers"]
        element = headers.elementType if isinstance(headers, ArrayType) else None
        if not (isinstance(element, StructType) and [f.name for f in element.fields] == ["key", "value"]
                and isinstance(element.fields[0].dataType, StringType)
                and isinstance(element.fields[1].dataType, BinaryType)):
            raise OptionError("column 'headers' must be array<struct<key: string, value: binary>>, not "
                              f"{headers.simpleString()}")


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    index = next((i for i, n in enumerate(batch.schema.names) if n.lower() == name), None)
    return None if index is None else batch.column(index).to_pylist()


def produce_batches(batches: Iterator[pa.RecordBatch], options: SinkOptions) -> WriteSummary:
    """Produce every row of `batches`; raise WriteError after purging what was not sent."""
    failures: list[str] = []

    def on_error(err: Any, msg: Any) -> None:  # called for failed deliveries only
        failures.append(f"{msg.topic()}-{msg.partition()}: {err}")

    producer = kafka_clients.producer(options, on_error)
    summary = WriteSummary()
    try:
        for batch in batches:
            _produce_batch(producer, batch, options, summary.records, failures)
        left = producer.flush(FLUSH_TIMEOUT)
        if failures or left:
            raise WriteError(f"{len(failures)} record(s) not written ({'; '.join(failures[:3])})"
                             + (f", {left} still unacknowledged after {FLUSH_TIMEOUT:.0f} s" if left else ""))
        return summary
    except BaseException:
        producer.purge(in_queue=True, in_flight=False)  # never sent: never visible
        producer.flush(0)
        raise
    finally:
        producer.close()  # librdkafka's threads and sockets go now, not when the worker exits


def _produce_batch(producer: Any, batch: pa.RecordBatch, options: SinkOptions, records: dict[str, int],
                   failures: list[str]) -> None:
    """One produce() per row: the Kafka client API is per record, so this loop is too."""
    rows = batch.num_rows
    values = _column(batch, "value") or [None] * rows
    keys = _column(batch, "key") or [None] * rows
    topics = [options.topic] * rows if options.topic is not None else _column(batch, "topic") or [None] * rows
    partitions = _column(batch, "partition") or [None] * rows
    headers = _column(batch, "headers")
    for i in range(rows):
        if failures:
            raise WriteError(f"a record was not written ({failures[0]})")
        topic = topics[i]
        if topic is None:
            raise WriteError("a row has a null topic and no 'topic' option is set")
        partition = partitions[i]
        record_headers = None if headers is None or not headers[i] else [(h["key"], h["value"]) for h in headers[i]]
        while True:  # bounded: each pass waits for deliveries, and delivery.timeout.ms bounds those
            try:
                producer.produce(topic, values[i], keys[i], UNASSIGNED if partition is None else partition,
                                 headers=record_headers)
                break
            except BufferError:  # the local queue is full: wait for deliveries
                producer.poll(QUEUE_FULL_WAIT)
        records[topic] = records.get(topic, 0) + 1
        if i % POLL_EVERY == 0:
            producer.poll(0)


class TidelogBatchWriter(DataSourceArrowWriter):
    """`df.write.format("tidelog").mode("append")`: rows become records, at least once; with
    `transactional`, all of them or none (each task's transaction commits on the driver)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        # made on the driver, pickled to every task: one transactional id per task of this write
        self.write_id = uuid.uuid4().hex if options.transactional else None

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        if self.write_id is None:
            return produce_batches(iterator, self.options)
        return txn_sink.prepare(iterator, self.options, self._transactional_id(self.write_id), None,
                                self._produce_rows)

    def _transactional_id(self, scope: str) -> str:
        assert self.options.transactional_id_prefix is not None
        return transactional_id(self.options.transactional_id_prefix, scope, _task_context().partitionId())

    def _produce_rows(self, producer: Any, batch: pa.RecordBatch, records: dict[str, int],
                      failures: list[str]) -> None:
        _produce_batch(producer, batch, self.options, records, failures)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        txn_sink.end_transactions(self.options, _prepared(messages), commit=True)
        log.info("wrote %d records", _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.write_id is not None:
            txn_sink.end_transactions(self.options, _prepared(messages), commit=False)
            log.warning("write aborted: the transactions of %d tasks that finished are aborted (a failed task's "
                        "is aborted by the coordinator after transaction.timeout.ms)", len(_prepared(messages)))
            return
        log.warning("write aborted: %d records of tasks that finished are written and stay visible "
                    "(Kafka cannot take records back)", _total(messages))


class TidelogStreamWriter(DataSourceStreamArrowWriter):
    """`df.writeStream.format("tidelog")`: each micro-batch's rows become records, at least
    once; with `transactional`, exactly once (spark/txn_sink.py)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        if not self.options.transactional:
            return produce_batches(iterator, self.options)
        assert self.options.transactional_id_prefix is not None
        context = _task_context()
        query_id, batch_id = context.getLocalProperty(txn_sink.TASK_QUERY_ID), \
            context.getLocalProperty(txn_sink.TASK_BATCH_ID)
        if not query_id or batch_id is None:
            raise RuntimeError(f"Spark gave the task no {txn_sink.TASK_QUERY_ID} / {txn_sink.TASK_BATCH_ID}: the "
                               "exactly-once sink cannot name its transactions")
        tid = transactional_id(self.options.transactional_id_prefix, query_id, context.partitionId())
        return txn_sink.prepare(iterator, self.options, tid, int(batch_id), self._produce_rows)

    def _produce_rows(self, producer: Any, batch: pa.RecordBatch, records: dict[str, int],
                      failures: list[str]) -> None:
        _produce_batch(producer, batch, self.options, records, failures)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 (Spark's name)
        txn_sink.end_transactions(self.options, _prepared(messages), commit=True)
        skipped = sum(isinstance(m, txn_sink.AlreadyCommitted) for m in messages)
        log.info("batch %d: wrote %d records%s", batchId, _total(messages),
                 f" ({skipped} tasks found the batch already committed)" if skipped else "")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        if self.options.transactional:
            txn_sink.end_transactions(self.options, _prepared(messages), commit=False)
            log.warning("batch %d aborted: its transactions are aborted; the batch is written again when the "
                        "query restarts", batchId)
            return
        log.warning("batch %d aborted: %d records of tasks that finished are written and stay visible; the "
                    "batch will be written again when the query restarts", batchId, _total(messages))


def _task_context() -> TaskContext:
    context = TaskContext.get()
    if context is None:
        raise RuntimeError("the tidelog writer's write() runs in a Spark task only")
    return context


def _prepared(messages: list[WriterCommitMessage | None]) -> list[txn_sink.PreparedTransaction]:
    return [m for m in messages if isinstance(m, txn_sink.PreparedTransaction)]


def _total(messages: list[WriterCommitMessage | None]) -> int:
    return sum(m.total for m in messages
               if isinstance(m, (WriteSummary, txn_sink.PreparedTransaction, txn_sink.AlreadyCommitted)))
