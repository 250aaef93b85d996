"""confluent-kafka clients configured from the source and sink options.

Every client is opened inside the method that uses it (readers and writers are pickled to
Spark's workers, and a socket does not pickle) and closed there. The `kafka.*` options are
librdkafka settings (it accepts, and ignores, a few Java client names); one it does not
know becomes an error naming the option rather than librdkafka's bare message.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, Final

import confluent_kafka
from confluent_kafka.admin import AdminClient

from spark.options import OptionError, SinkOptions, SourceOptions

# Set after the user's kafka.* options: the source reads exact offset ranges, never commits,
# and must see "end of partition" and "offset out of range" instead of a silent reset.
CONSUMER_FIXED: Final = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "error",
    "enable.partition.eof": True,
}
CONSUMER_DEFAULTS: Final = {
    "fetch.wait.max.ms": 100,  # a range's tail should not wait out the default 500 ms
    "log_level": 4,  # warnings and worse: librdkafka's notices would flood Spark's worker logs
}
# Safe by default, as the Java producer since Kafka 3.0: every record on every in-sync replica,
# no duplicates from the producer's own retries, keyed records where a Java producer puts them.
PRODUCER_DEFAULTS: Final = {
    "acks": "all",
    "enable.idempotence": True,
    "partitioner": "murmur2_random",  # Java's default for keys: murmur2, positive, modulo
    "linger.ms": 5,
    "log_level": 4,
}
ADMIN_DEFAULTS: Final = {"log_level": 4}
MAX_PREFETCH_RECORDS: Final = 100_000  # librdkafka's own queued.min.messages default


def _create(kind: Any, config: Mapping[str, Any], user_keys: set[str]) -> Any:
    try:
        return kind(dict(config))
    except (confluent_kafka.KafkaException, ValueError, TypeError) as exc:
        text = str(exc)
        named = [key for key in sorted(user_keys) if key in text]
        option = f"option 'kafka.{named[0]}'" if named else "the kafka.* options"
        raise OptionError(f"{option} rejected by librdkafka: {text}") from None


def consumer(options: SourceOptions, role: str, records: int | None = None) -> confluent_kafka.Consumer:
    """A consumer that reads by assignment only; `role` (driver/executor) goes into its group id.

    `records`: how many the consumer is meant to read. librdkafka prefetches up to
    queued.min.messages (100,000) per partition, which for a small range would mostly be
    records past its end, read from the broker for nothing.
    """
    user = options.kafka
    config: dict[str, Any] = {**CONSUMER_DEFAULTS, **user, **CONSUMER_FIXED}
    if records is not None and "queued.min.messages" not in user:
        config["queued.min.messages"] = max(1, min(MAX_PREFETCH_RECORDS, records))
    config.setdefault("group.id", f"{options.group_id_prefix}-{uuid.uuid4()}-{role}")  # never joined
    return _create(confluent_kafka.Consumer, config, set(user))


def admin(options: SourceOptions) -> AdminClient:
    """An admin client for metadata and ListOffsets (the driver's offset look-ups)."""
    user = {key: value for key, value in options.kafka.items() if key not in _CONSUMER_ONLY}
    return _create(AdminClient, {**ADMIN_DEFAULTS, **user}, set(user))


def producer(options: SinkOptions, on_error: Any) -> confluent_kafka.Producer:
    """An idempotent acks=all producer; `on_error(err, msg)` hears of every failed delivery only."""
    user = options.kafka
    config: dict[str, Any] = {**PRODUCER_DEFAULTS, **user, "on_delivery": on_error,
                              # one Python call per failed record, none per delivered one
                              "delivery.report.only.error": True}
    return _create(confluent_kafka.Producer, config, set(user))


def transactional_producer(options: SinkOptions, transactional_id: str, on_error: Any, on_stats: Any,
                           stats_interval_ms: int) -> confluent_kafka.Producer:
    """A producer of the exactly-once sink: `producer` settings plus its transactional.id, and
    librdkafka's statistics every `stats_interval_ms` to `on_stats(json)` (they carry the
    producer id and epoch the driver's EndTxn needs)."""
    user = options.kafka
    config: dict[str, Any] = {**PRODUCER_DEFAULTS, **user, "on_delivery": on_error,
                              "delivery.report.only.error": True, "transactional.id": transactional_id,
                              "stats_cb": on_stats, "statistics.interval.ms": stats_interval_ms}
    return _create(confluent_kafka.Producer, config, set(user))


# consumer settings an admin client (librdkafka "*"-scope only) would reject
_CONSUMER_ONLY: Final = frozenset({
    "group.id", "group.instance.id", "isolation.level", "fetch.min.bytes", "fetch.max.bytes", "fetch.wait.max.ms",
    "max.partition.fetch.bytes", "fetch.message.max.bytes", "queued.min.messages", "queued.max.messages.kbytes",
    "session.timeout.ms", "heartbeat.interval.ms", "max.poll.interval.ms", "check.crcs", "client.rack",
    "partition.assignment.strategy", "auto.commit.interval.ms", "enable.partition.eof",
})
