"""The settings of one partition's log: broker defaults (`log.*`) overlaid by topic configs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum

from common.config import (
    Config,
    ConfigKey,
    ConfigType,
    all_of,
    at_least,
    between,
    flush_interval_ms,
    non_empty,
    one_of,
    parse_config,
    retention_ms,
    roll_ms,
)
from common.units import DAY_MS, LONG_MAX


class TimestampPolicy(Enum):
    """`message.timestamp.type`: keep the producer's CreateTime or stamp LogAppendTime."""

    CREATE_TIME = "CreateTime"
    LOG_APPEND_TIME = "LogAppendTime"


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Kafka's topic-level log settings, with Kafka's defaults."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * DAY_MS
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * DAY_MS  # -1: keep forever
    retention_bytes: int = -1  # -1: no size limit
    max_message_bytes: int = 1048588
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60_000
    message_timestamp_type: TimestampPolicy = TimestampPolicy.CREATE_TIME
    cleanup_policy: tuple[str, ...] = field(default=("delete",))
    # log compaction (only read when cleanup.policy holds compact)
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    delete_retention_ms: int = DAY_MS

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

    def replace(self, **changes: object) -> LogConfig:
        """A copy with some settings changed."""
        return replace(self, **changes)


def _long(name: str, doc: str, minimum: int) -> ConfigKey:
    return ConfigKey(name, ConfigType.LONG, None, doc, at_least(minimum))


# Topic-level overrides of the log settings (Kafka's topic config names). A topic config
# only overrides; unset keys fall back to the broker's `log.*` values.
TOPIC_LOG_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("segment.bytes", ConfigType.INT, None, "segment file size", at_least(14)),
    _long("segment.ms", "roll a segment this old", 1),
    ConfigKey("segment.index.bytes", ConfigType.INT, None, "index size per segment",
              at_least(4)),
    ConfigKey("index.interval.bytes", ConfigType.INT, None, "bytes between index entries",
              at_least(0)),
    _long("retention.ms", "delete segments older than this (-1: never)", -1),
    _long("retention.bytes", "delete old segments beyond this size (-1: never)", -1),
    ConfigKey("max.message.bytes", ConfigType.INT, None, "largest record batch", at_least(0)),
    _long("flush.messages", "fsync after this many messages", 1),
    _long("flush.ms", "fsync at least this often", 0),
    _long("file.delete.delay.ms", "grace period before deleting a file", 0),
    ConfigKey("message.timestamp.type", ConfigType.STRING, None, "CreateTime or LogAppendTime",
              one_of("CreateTime", "LogAppendTime")),
    ConfigKey("cleanup.policy", ConfigType.LIST, None, "delete and/or compact",
              all_of(non_empty, one_of("delete", "compact"))),
    ConfigKey("min.cleanable.dirty.ratio", ConfigType.DOUBLE, None,
              "dirty share of a log before the cleaner compacts it", between(0.0, 1.0)),
    _long("min.compaction.lag.ms", "records younger than this are not compacted", 0),
    _long("max.compaction.lag.ms", "records older than this are compacted regardless", 1),
    _long("delete.retention.ms", "how long a tombstone stays after its cleaning", 0),
)

_TOPIC_FIELDS = {
    "segment.bytes": "segment_bytes", "segment.ms": "segment_ms",
    "segment.index.bytes": "segment_index_bytes", "index.interval.bytes": "index_interval_bytes",
    "retention.ms": "retention_ms", "retention.bytes": "retention_bytes",
    "max.message.bytes": "max_message_bytes", "flush.messages": "flush_messages",
    "flush.ms": "flush_ms", "file.delete.delay.ms": "file_delete_delay_ms",
    "message.timestamp.type": "message_timestamp_type", "cleanup.policy": "cleanup_policy",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "max.compaction.lag.ms": "max_compaction_lag_ms", "delete.retention.ms": "delete_retention_ms",
}


def from_broker_config(config: Config) -> LogConfig:
    """The broker-wide default LogConfig from the `log.*` settings."""
    return LogConfig(
        segment_bytes=int(config["log.segment.bytes"]),  # type: ignore[arg-type]
        segment_ms=roll_ms(config),
        segment_index_bytes=int(config["log.index.size.max.bytes"]),  # type: ignore[arg-type]
        index_interval_bytes=int(config["log.index.interval.bytes"]),  # type: ignore[arg-type]
        retention_ms=retention_ms(config),
        retention_bytes=int(config["log.retention.bytes"]),  # type: ignore[arg-type]
        max_message_bytes=int(config["message.max.bytes"]),  # type: ignore[arg-type]
        flush_messages=int(config["log.flush.interval.messages"]),  # type: ignore[arg-type]
        flush_ms=flush_interval_ms(config),
        file_delete_delay_ms=int(config["log.segment.delete.delay.ms"]),  # type: ignore[arg-type]
        message_timestamp_type=TimestampPolicy(config["log.message.timestamp.type"]),
        cleanup_policy=tuple(config["log.cleanup.policy"]),  # type: ignore[arg-type]
        min_cleanable_dirty_ratio=float(config["log.cleaner.min.cleanable.ratio"]),  # type: ignore[arg-type]
        min_compaction_lag_ms=int(config["log.cleaner.min.compaction.lag.ms"]),  # type: ignore[arg-type]
        max_compaction_lag_ms=int(config["log.cleaner.max.compaction.lag.ms"]),  # type: ignore[arg-type]
        delete_retention_ms=int(config["log.cleaner.delete.retention.ms"]),  # type: ignore[arg-type]
    )


def with_topic_overrides(base: LogConfig, overrides: Mapping[str, object]) -> LogConfig:
    """`base` with a topic's configs applied; ConfigError names any bad or unknown key."""
    parsed = parse_config(overrides, keys=TOPIC_LOG_KEYS, checks=())
    changes: dict[str, object] = {}
    for name, value in parsed.originals.items():
        if name == "message.timestamp.type":
            value = TimestampPolicy(value)
        changes[_TOPIC_FIELDS[name]] = value
    return base.replace(**changes)
