"""Read one offset range of one partition into Arrow RecordBatches (a Spark task's work).

On a PLAINTEXT cluster the range is read with raw Fetch requests and decoded in bulk
(`fetch_reader`). With TLS or SASL (which that client does not speak), a consumer assigned to the partition (no group: nothing joined, nothing committed) reads
with `consume(num_messages=...)` until the end offset, never past it; each call's messages
become one RecordBatch built column by column. What is per record in Python: one pass
separating errors from records, and the `key()`/`value()`/`offset()`/`timestamp()` calls of
the column comprehensions (plus headers with includeHeaders) — nothing else.

Gaps inside the range (compaction, transaction markers) are normal. Offsets no longer in
the log (retention, truncation) are data loss: an error with failOnDataLoss=true, else a
warning and the read carries on at what is still there.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Iterator
from typing import Any, Final

import confluent_kafka
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from common.units import SECONDS
from spark import fetch_client, kafka_clients
from spark.arrow_schema import record_batch
from spark.data_loss import DataLossError, no_progress, report_data_loss, resume_point
from spark.fetch_reader import read_range_fetched
from spark.offsets import OffsetRange
from spark.options import SourceOptions

log = logging.getLogger("tidelog.spark")
__all__ = ["DataLossError", "RangePartition", "read_partition", "read_range", "report_data_loss"]

MAX_MESSAGES_PER_CONSUME: Final = 10_000  # one RecordBatch at most this long
CONSUME_WAIT: Final = 1 * SECONDS  # per consume() call; the poll timeout bounds the whole wait
WATERMARK_TIMEOUT: Final = 10 * SECONDS


class RangePartition(InputPartition):
    """The InputPartition of one task: an offset range (pickled to the worker)."""

    def __init__(self, offset_range: OffsetRange) -> None:
        super().__init__(offset_range)
        self.range = offset_range


def read_partition(partition: InputPartition, options: SourceOptions) -> Iterator[pa.RecordBatch]:
    """The records of a RangePartition; nothing for Spark's placeholder partition (no ranges)."""
    if isinstance(partition, RangePartition) and partition.range.size > 0:
        yield from read_range(partition.range, options)


def read_range(offset_range: OffsetRange, options: SourceOptions) -> Iterator[pa.RecordBatch]:
    """Yield the records of [start, end) as RecordBatches in the source's Arrow schema:
    by raw Fetch on a PLAINTEXT cluster, else (TLS, SASL) through confluent-kafka."""
    if fetch_client.supports(options.kafka):
        return read_range_fetched(offset_range, options)
    return read_range_consumed(offset_range, options)


def read_range_consumed(offset_range: OffsetRange, options: SourceOptions) -> Iterator[pa.RecordBatch]:
    """`read_range` through a confluent-kafka consumer (per-record Python: see the module doc)."""
    consumer = kafka_clients.consumer(options, "executor", records=offset_range.size)
    tp = confluent_kafka.TopicPartition(offset_range.topic, offset_range.partition, offset_range.start)
    try:
        consumer.assign([tp])
        position, end = offset_range.start, offset_range.end
        timeout = options.poll_timeout_ms / 1000
        deadline = time.monotonic() + timeout
        while position < end:  # bounded: every pass either advances or runs towards the deadline
            messages = consumer.consume(num_messages=min(MAX_MESSAGES_PER_CONSUME, end - position),
                                        timeout=CONSUME_WAIT)
            records = [m for m in messages if m.error() is None]
            if records:
                batch, position = _to_batch(offset_range, records, options.include_headers)
                deadline = time.monotonic() + timeout
                if batch.num_rows:
                    yield batch
            if len(records) != len(messages) and position < end:  # events after the records
                position, done = _handle_events(consumer, offset_range, position, messages, options)
                if done:
                    break
            if not records and time.monotonic() > deadline:
                _timed_out(consumer, offset_range, position, options)
                break
    finally:
        consumer.close()


def _to_batch(offset_range: OffsetRange, records: list[Any], include_headers: bool) -> tuple[pa.RecordBatch, int]:
    """The records below the range's end as a batch, and the position after the last record."""
    offsets = [m.offset() for m in records]
    if offsets[-1] >= offset_range.end:  # librdkafka fetched past the end: cut there
        keep = bisect.bisect_left(offsets, offset_range.end)
        records, offsets = records[:keep], offsets[:keep]
        position = offset_range.end
    else:
        position = offsets[-1] + 1
    stamps = [m.timestamp() for m in records]
    batch = record_batch(
        topic=offset_range.topic, partition=offset_range.partition,
        keys=[m.key() for m in records], values=[m.value() for m in records], offsets=offsets,
        timestamp_types=[kind for kind, _ in stamps], timestamps_ms=[ms for _, ms in stamps],
        headers=[m.headers() for m in records] if include_headers else None)
    return batch, position


def _handle_events(consumer: Any, offset_range: OffsetRange, position: int, messages: list[Any],
                   options: SourceOptions) -> tuple[int, bool]:
    """React to librdkafka's events: (new position, whether the range is done)."""
    for event in (m for m in messages if m.error() is not None):
        error = event.error()
        code = error.code()
        if code == confluent_kafka.KafkaError._PARTITION_EOF:
            # the partition's high watermark at that fetch; at or past our end, the rest are gaps
            if event.offset() >= offset_range.end:
                return offset_range.end, True
        elif code in (confluent_kafka.KafkaError._AUTO_OFFSET_RESET, confluent_kafka.KafkaError.OFFSET_OUT_OF_RANGE):
            return _out_of_range(consumer, offset_range, position, options)
        elif error.fatal() or (not error.retriable() and code not in _TRANSIENT):
            raise RuntimeError(f"reading {offset_range.topic}-{offset_range.partition} at offset {position}: {error}")
        else:
            log.info("reading %s-%s: %s (retrying)", offset_range.topic, offset_range.partition, error)
    return position, False


_TRANSIENT: Final = frozenset({
    confluent_kafka.KafkaError._TRANSPORT, confluent_kafka.KafkaError._ALL_BROKERS_DOWN,
    confluent_kafka.KafkaError.NOT_LEADER_FOR_PARTITION, confluent_kafka.KafkaError.LEADER_NOT_AVAILABLE,
    confluent_kafka.KafkaError._MSG_TIMED_OUT, confluent_kafka.KafkaError._TIMED_OUT,
    confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART, confluent_kafka.KafkaError.FENCED_LEADER_EPOCH,
    confluent_kafka.KafkaError.UNKNOWN_LEADER_EPOCH, confluent_kafka.KafkaError.OFFSET_NOT_AVAILABLE,
})


def _out_of_range(consumer: Any, offset_range: OffsetRange, position: int,
                  options: SourceOptions) -> tuple[int, bool]:
    """Offset `position` is not in the log: skip to what is left (data loss), or finish."""
    tp = confluent_kafka.TopicPartition(offset_range.topic, offset_range.partition)
    low, high = consumer.get_watermark_offsets(tp, timeout=WATERMARK_TIMEOUT, cached=False)
    next_position, done = resume_point(offset_range, position, low, high, options.fail_on_data_loss)
    if not done:
        consumer.assign([confluent_kafka.TopicPartition(offset_range.topic, offset_range.partition, next_position)])
    return next_position, done


def _timed_out(consumer: Any, offset_range: OffsetRange, position: int, options: SourceOptions) -> None:
    """No record for kafkaConsumer.pollTimeoutMs: a log truncated below our position (data
    loss), else an error (Spark retries the task)."""
    tp = confluent_kafka.TopicPartition(offset_range.topic, offset_range.partition)
    _, high = consumer.get_watermark_offsets(tp, timeout=WATERMARK_TIMEOUT, cached=False)
    no_progress(offset_range, position, high, options.poll_timeout_ms, options.fail_on_data_loss)
