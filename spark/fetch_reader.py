"""Read one offset range of one partition with raw Fetch requests (a Spark task's work).

The fast path of `range_reader.read_range` on PLAINTEXT clusters: each Fetch response's
record batches become one RecordBatch in bulk (`fetch_columns`), with no Python object
per record. It keeps the confluent-kafka reader's semantics: gaps inside the range
(compaction, transaction markers, aborted records under read_committed) are crossed;
offsets no longer in the log are data loss (failOnDataLoss); a leader change or an
unreachable broker is retried until kafkaConsumer.pollTimeoutMs passes without progress.

kafka.* options honoured: bootstrap.servers, isolation.level (Spark's default, the Java
consumer's: read_uncommitted), max.partition.fetch.bytes / fetch.message.max.bytes,
fetch.wait.max.ms, check.crcs (CRCs are always checked here), client.id.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from typing import Final

import pyarrow as pa

from common.errors import ErrorCode
from common.limits import CLIENT_RETRY_BACKOFF
from common.protocol import fetch
from common.units import MIB
from spark.data_loss import no_progress, resume_point
from spark.fetch_client import (
    EARLIEST,
    LATEST,
    BrokerUnavailable,
    PartitionClient,
    bootstrap_addresses,
)
from common.record_batch import complete_prefix
from spark.fetch_columns import decode_fetched
from spark.offsets import OffsetRange
from spark.options import OptionError, SourceOptions

log = logging.getLogger("tidelog.spark")

DEFAULT_MAX_BYTES: Final = 4 * MIB  # per Fetch: ~40,000 records of 100 B, one Arrow batch each
DEFAULT_WAIT_MS: Final = 100
# errors after which the leader is looked up again (Kafka's consumer refreshes metadata on these)
_RETRIABLE: Final = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.OFFSET_NOT_AVAILABLE, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.REPLICA_NOT_AVAILABLE,
})
MAX_FETCH_BYTES: Final = 128 * MIB  # a batch larger than this fails the task


def read_committed(kafka: Mapping[str, str]) -> bool:
    level = kafka.get("isolation.level", "read_uncommitted").strip().lower()
    if level not in ("read_committed", "read_uncommitted"):
        raise OptionError(f"option 'kafka.isolation.level' must be read_committed or read_uncommitted, not {level!r}")
    return level == "read_committed"


def _int_option(kafka: Mapping[str, str], names: tuple[str, ...], default: int) -> int:
    for name in names:
        if name in kafka:
            try:
                value = int(kafka[name])
            except ValueError:
                raise OptionError(f"option 'kafka.{name}' must be an integer, not {kafka[name]!r}") from None
            if value < 0:
                raise OptionError(f"option 'kafka.{name}' must not be negative")
            return value
    return default


def read_range_fetched(offset_range: OffsetRange, options: SourceOptions) -> Iterator[pa.RecordBatch]:
    """Yield the records of [start, end) as RecordBatches in the source's Arrow schema."""
    kafka = options.kafka
    committed = read_committed(kafka)
    isolation = fetch.READ_COMMITTED if committed else fetch.READ_UNCOMMITTED
    max_bytes = max(1, _int_option(kafka, ("max.partition.fetch.bytes", "fetch.message.max.bytes"),
                                   DEFAULT_MAX_BYTES))
    wait_ms = _int_option(kafka, ("fetch.wait.max.ms", "fetch.max.wait.ms"), DEFAULT_WAIT_MS)
    timeout = options.poll_timeout_ms / 1000
    name = f"{offset_range.topic}-{offset_range.partition}"
    client = PartitionClient(bootstrap_addresses(kafka.get("bootstrap.servers", "")), offset_range.topic,
                             offset_range.partition, kafka.get("client.id", "tidelog-spark"))
    with client:
        position, end = offset_range.start, offset_range.end
        deadline = time.monotonic() + timeout
        while position < end:  # bounded: every pass advances, or runs towards the deadline
            if time.monotonic() > deadline:
                _timed_out(client, offset_range, position, isolation, options)
                return
            try:
                answer = client.fetch(position, isolation_level=isolation, max_bytes=max_bytes, max_wait_ms=wait_ms)
            except BrokerUnavailable as exc:
                _retry(client, f"reading {name} at offset {position}: {exc}")
                continue
            code = answer.error_code
            records = answer.records if isinstance(answer.records, (bytes, memoryview)) else None
            if code == ErrorCode.NONE and records and not complete_prefix(records):
                # not even one whole batch: it is larger than max_bytes (a broker older than KIP-74)
                if max_bytes >= MAX_FETCH_BYTES:
                    raise RuntimeError(f"a record batch of {name} at offset {position} is larger than "
                                       f"{MAX_FETCH_BYTES} bytes")
                max_bytes = min(2 * max_bytes, MAX_FETCH_BYTES)
            elif code == ErrorCode.NONE:
                got = decode_fetched(records,
                                     topic=offset_range.topic, partition=offset_range.partition, start=position,
                                     end=end, read_committed=committed, aborted=answer.aborted_transactions,
                                     include_headers=options.include_headers)
                if got.batch is not None:
                    yield got.batch
                visible_end = answer.last_stable_offset if committed else answer.high_watermark
                if got.next_offset > position:
                    position, deadline = got.next_offset, time.monotonic() + timeout
                elif visible_end >= end:
                    # nothing at or after `position` below the end: the rest of the range are gaps
                    return
            elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
                position, done = _out_of_range(client, offset_range, position, isolation, options)
                if done:
                    return
            elif code in _RETRIABLE:
                _retry(client, f"reading {name} at offset {position}: {ErrorCode(code).name}")
            else:
                raise RuntimeError(f"reading {name} at offset {position}: the broker answered "
                                   f"{_error_name(code)}")


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error code {code}"


def _retry(client: PartitionClient, message: str) -> None:
    """Back off, then find the leader again (the loop's deadline bounds the attempts)."""
    log.info("%s (retrying)", message)
    time.sleep(CLIENT_RETRY_BACKOFF)
    try:
        client.find_leader()
    except BrokerUnavailable as exc:
        log.info("finding the leader of %s-%s: %s", client.topic, client.partition, exc)


def _out_of_range(client: PartitionClient, offset_range: OffsetRange, position: int, isolation: int,
                  options: SourceOptions) -> tuple[int, bool]:
    """Offset `position` is not in the log: skip to what is left (data loss), or finish."""
    name = f"{offset_range.topic}-{offset_range.partition}"
    try:
        low = client.list_offset(EARLIEST, isolation)
        high = client.list_offset(LATEST, isolation)
    except BrokerUnavailable as exc:
        _retry(client, f"looking up the offsets of {name}: {exc}")
        return position, False
    next_position, done = resume_point(offset_range, position, low, high, options.fail_on_data_loss)
    if not done and next_position == position:
        _retry(client, f"{name}: offset {position} out of range although the log holds {low} to {high}")
    return next_position, done


def _timed_out(client: PartitionClient, offset_range: OffsetRange, position: int, isolation: int,
               options: SourceOptions) -> None:
    """No progress for kafkaConsumer.pollTimeoutMs: a log truncated below our position (data
    loss), else an error (Spark retries the task)."""
    try:
        high = client.list_offset(LATEST, isolation)
    except BrokerUnavailable as exc:
        name = f"{offset_range.topic}-{offset_range.partition}"
        raise TimeoutError(f"no records of {name} from offset {position} (up to {offset_range.end}) within "
                           f"kafkaConsumer.pollTimeoutMs={options.poll_timeout_ms}: {exc}") from None
    no_progress(offset_range, position, high, options.poll_timeout_ms, options.fail_on_data_loss)
