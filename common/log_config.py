"""A partition log's settings (Kafka's LogConfig): the broker's `log.*` keys, overridden per
topic by the topic configs of common.topic_config.

    log_config = from_broker_config(config)      # the broker-wide defaults
    log_config.replace(segment_ms=60_000)        # a copy with some settings changed
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Final

from common.config import BROKER_KEYS, MS_PER_HOUR, flush_interval_ms, roll_ms
from common.config_schema import Config
from common.config import retention_ms as _retention_ms
from common.units import LONG_MAX

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)


class TimestampPolicy(Enum):
    """`message.timestamp.type`: keep the producer's CreateTime or stamp LogAppendTime."""

    CREATE_TIME = "CreateTime"
    LOG_APPEND_TIME = "LogAppendTime"


# Every broker key at Kafka's default: the one source of the topic configs' defaults.
KAFKA_DEFAULT_BROKER_CONFIG: Final = Config({key.name: key for key in BROKER_KEYS}, {})


def _number(name: str) -> int:
    value = KAFKA_DEFAULT_BROKER_CONFIG[name]
    assert isinstance(value, int), f"{name} is an INT or LONG broker key with a default"
    return value


def _ratio(name: str) -> float:
    value = KAFKA_DEFAULT_BROKER_CONFIG[name]
    assert isinstance(value, float), f"{name} is a DOUBLE broker key with a default"
    return value


def _strings(name: str) -> tuple[str, ...]:
    value = KAFKA_DEFAULT_BROKER_CONFIG[name]
    assert isinstance(value, tuple), f"{name} is a LIST broker key"
    return value


_DEFAULT_TIMESTAMP_TYPE: Final = TimestampPolicy(KAFKA_DEFAULT_BROKER_CONFIG["log.message.timestamp.type"])


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Kafka's topic-level log settings; the defaults are the broker keys' (common.config)."""

    segment_bytes: int = _number("log.segment.bytes")
    segment_ms: int = roll_ms(KAFKA_DEFAULT_BROKER_CONFIG)
    segment_jitter_ms: int = 0  # Kafka's default (log.roll.jitter.hours 0)
    segment_index_bytes: int = _number("log.index.size.max.bytes")
    index_interval_bytes: int = _number("log.index.interval.bytes")
    retention_ms: int = _retention_ms(KAFKA_DEFAULT_BROKER_CONFIG)  # -1: keep forever
    retention_bytes: int = _number("log.retention.bytes")  # -1: no size limit
    max_message_bytes: int = _number("message.max.bytes")
    flush_messages: int = _number("log.flush.interval.messages")
    flush_ms: int = flush_interval_ms(KAFKA_DEFAULT_BROKER_CONFIG)
    file_delete_delay_ms: int = _number("log.segment.delete.delay.ms")
    message_timestamp_type: TimestampPolicy = _DEFAULT_TIMESTAMP_TYPE
    # CreateTime limits (KIP-937); LONG_MAX: unset, then difference.max.ms decides
    message_timestamp_before_max_ms: int = _number("log.message.timestamp.before.max.ms")
    message_timestamp_after_max_ms: int = _number("log.message.timestamp.after.max.ms")
    message_timestamp_difference_max_ms: int = _number("log.message.timestamp.difference.max.ms")
    compression_type: str = str(KAFKA_DEFAULT_BROKER_CONFIG["compression.type"])  # COMPRESSION_TYPES
    compression_gzip_level: int = _number("compression.gzip.level")
    compression_lz4_level: int = _number("compression.lz4.level")
    compression_zstd_level: int = _number("compression.zstd.level")
    cleanup_policy: tuple[str, ...] = field(default=_strings("log.cleanup.policy"))
    # log compaction (read only when cleanup.policy holds compact)
    min_cleanable_dirty_ratio: float = _ratio("log.cleaner.min.cleanable.ratio")
    min_compaction_lag_ms: int = _number("log.cleaner.min.compaction.lag.ms")
    max_compaction_lag_ms: int = _number("log.cleaner.max.compaction.lag.ms")
    delete_retention_ms: int = _number("log.cleaner.delete.retention.ms")
    # Kafka's defaults (producer's codec, CreateTime, no timestamp window): the leader stores
    # produced batches as sent. Derived once, as every append reads it.
    plain_produce: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        plain = (self.compression_type == "producer"
                 and self.message_timestamp_type is TimestampPolicy.CREATE_TIME
                 and self.message_timestamp_before_max_ms == LONG_MAX
                 and self.message_timestamp_after_max_ms == LONG_MAX
                 and self.message_timestamp_difference_max_ms == LONG_MAX)
        object.__setattr__(self, "plain_produce", plain)

    @property
    def compact(self) -> bool:
        """cleanup.policy holds `compact` (the log cleaner compacts this log)."""
        return "compact" in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """Age at which the active segment rolls: a compacted log also rolls by
        max.compaction.lag.ms, or its records could outlive that lag uncleaned (KIP-354)."""
        if self.compact:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    @property
    def timestamp_before_max_ms(self) -> int:
        """How far a CreateTime record may lag the broker's clock: before.max.ms when set,
        else the deprecated difference.max.ms (Kafka's LogConfig, KIP-937)."""
        if self.message_timestamp_before_max_ms != LONG_MAX:
            return self.message_timestamp_before_max_ms
        return self.message_timestamp_difference_max_ms

    @property
    def timestamp_after_max_ms(self) -> int:
        """How far a CreateTime record may lead the broker's clock (as above)."""
        if self.message_timestamp_after_max_ms != LONG_MAX:
            return self.message_timestamp_after_max_ms
        return self.message_timestamp_difference_max_ms

    def replace(self, **changes: Any) -> LogConfig:
        """A copy with some settings changed."""
        return replace(self, **changes)


def from_broker_config(config: Config) -> LogConfig:
    """The broker-wide default LogConfig from the `log.*` settings."""
    number = config.get_int
    return LogConfig(
        segment_bytes=number("log.segment.bytes"),
        segment_ms=roll_ms(config),
        segment_jitter_ms=roll_jitter_ms(config),
        segment_index_bytes=number("log.index.size.max.bytes"),
        index_interval_bytes=number("log.index.interval.bytes"),
        retention_ms=_retention_ms(config),
        retention_bytes=number("log.retention.bytes"),
        max_message_bytes=number("message.max.bytes"),
        flush_messages=number("log.flush.interval.messages"),
        flush_ms=flush_interval_ms(config),
        file_delete_delay_ms=number("log.segment.delete.delay.ms"),
        message_timestamp_type=TimestampPolicy(config["log.message.timestamp.type"]),
        message_timestamp_before_max_ms=number("log.message.timestamp.before.max.ms"),
        message_timestamp_after_max_ms=number("log.message.timestamp.after.max.ms"),
        message_timestamp_difference_max_ms=number("log.message.timestamp.difference.max.ms"),
        compression_type=config.get_str("compression.type"),
        compression_gzip_level=number("compression.gzip.level"),
        compression_lz4_level=number("compression.lz4.level"),
        compression_zstd_level=number("compression.zstd.level"),
        cleanup_policy=config.get_list("log.cleanup.policy"),
        min_cleanable_dirty_ratio=config.get_double("log.cleaner.min.cleanable.ratio"),
        min_compaction_lag_ms=config.get_int("log.cleaner.min.compaction.lag.ms"),
        max_compaction_lag_ms=config.get_int("log.cleaner.max.compaction.lag.ms"),
        delete_retention_ms=config.get_int("log.cleaner.delete.retention.ms"),
    )


def roll_jitter_ms(config: Config) -> int:
    """Segment roll jitter in ms: log.roll.jitter.ms when set, else log.roll.jitter.hours."""
    if config["log.roll.jitter.ms"] is not None:
        return config.get_int("log.roll.jitter.ms")
    return config.get_int("log.roll.jitter.hours") * MS_PER_HOUR
