"""Topic configs, in one place: their names, validation, broker synonyms and defaults.

    TOPIC_CONFIGS                       # every topic config tidelog accepts (Kafka's names)
    log_config = with_topic_overrides(from_broker_config(config), overrides)   # a log's settings
    defaults = broker_topic_defaults(config)    # what this broker's config makes of each
    described = describe_topic_configs(defaults, overrides, keys=None)   # DescribeConfigs

The controller validates topic configs with `TOPIC_CONFIGS` (quorum.topic_control), the
broker builds each partition's `LogConfig` from the same table, and DescribeConfigs answers
from it with the broker's effective defaults. A topic config only overrides: an unset key
falls back to its broker synonyms (Kafka's ServerTopicConfigSynonyms, first set wins) and
then to the broker key's default.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Any, Final

from common.config import BROKER_KEYS, COMPRESSION_TYPES, KAFKA_VERSION, parse_config
from common.config_schema import (
    REQUIRED,
    Config,
    ConfigKey,
    ConfigType,
    Validator,
    Value,
    at_least,
    between,
    matches,
    one_of,
)
from common.log_config import LogConfig, TimestampPolicy, from_broker_config

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

MIN_INSYNC_REPLICAS: Final = "min.insync.replicas"
UNCLEAN_LEADER_ELECTION_ENABLE: Final = "unclean.leader.election.enable"
CLEANUP_POLICY: Final = "cleanup.policy"


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    """One topic config: its key (name, type, check), the broker keys that give its default
    in Kafka's order (ServerTopicConfigSynonyms), and the LogConfig field it sets, if any."""

    key: ConfigKey
    broker_synonyms: tuple[str, ...]
    log_field: str | None = None
    default: Value = None  # Kafka's default of a config without broker synonyms

    @property
    def name(self) -> str:
        return self.key.name


def _topic(name: str, kind: ConfigType, doc: str, validator: Validator | None,
           synonyms: tuple[str, ...], log_field: str | None = None,
           default: Value = None) -> TopicConfigDef:
    return TopicConfigDef(ConfigKey(name, kind, None, doc, validator), synonyms, log_field, default)


@dataclass(frozen=True, slots=True)
class _Only:
    """Accept only `allowed`: a config tidelog stores but does not act on, where another value
    would change what Kafka does (`why` says what tidelog lacks)."""

    allowed: Value
    why: str

    def __call__(self, value: object) -> str | None:
        return None if value == self.allowed else f"must be {self.allowed!r} ({self.why}), got {value!r}"


_REPLICA_ENTRIES: Final = matches(r"[0-9]+:[0-9]+", "'*' or a list of partitionId:brokerId")


def _throttled_replicas(value: tuple[str, ...]) -> str | None:
    """Kafka's ThrottledReplicaListValidator: the lone literal `*`, or partitionId:brokerId entries."""
    return None if value == ("*",) else _REPLICA_ENTRIES(value)


_NO_TIERED_STORAGE: Final = "tidelog has no tiered storage, as Kafka with remote.log.storage.system.enable=false"


_INT, _LONG, _DOUBLE, _BOOLEAN, _STRING, _LIST = (
    ConfigType.INT, ConfigType.LONG, ConfigType.DOUBLE, ConfigType.BOOLEAN, ConfigType.STRING,
    ConfigType.LIST)

# Every topic config tidelog accepts. A topic config has no default of its own (None): the
# broker keys named after it give it one.
TOPIC_CONFIGS: Final[tuple[TopicConfigDef, ...]] = (
    _topic("segment.bytes", _INT, "segment file size", at_least(14),
           ("log.segment.bytes",), "segment_bytes"),
    _topic("segment.ms", _LONG, "roll a segment this old", at_least(1),
           ("log.roll.ms", "log.roll.hours"), "segment_ms"),
    _topic("segment.jitter.ms", _LONG, "each segment rolls up to this much before segment.ms",
           at_least(0), ("log.roll.jitter.ms", "log.roll.jitter.hours"), "segment_jitter_ms"),
    _topic("segment.index.bytes", _INT, "index size per segment", at_least(4),
           ("log.index.size.max.bytes",), "segment_index_bytes"),
    _topic("index.interval.bytes", _INT, "bytes between index entries", at_least(0),
           ("log.index.interval.bytes",), "index_interval_bytes"),
    _topic("retention.ms", _LONG, "delete segments older than this (-1: never)", at_least(-1),
           ("log.retention.ms", "log.retention.minutes", "log.retention.hours"), "retention_ms"),
    _topic("retention.bytes", _LONG, "delete old segments beyond this size (-1: never)",
           at_least(-1), ("log.retention.bytes",), "retention_bytes"),
    _topic("max.message.bytes", _INT, "largest record batch", at_least(0),
           ("message.max.bytes",), "max_message_bytes"),
    _topic("flush.messages", _LONG, "fsync after this many messages", at_least(1),
           ("log.flush.interval.messages",), "flush_messages"),
    _topic("flush.ms", _LONG, "fsync at least this often", at_least(0),
           ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"), "flush_ms"),
    _topic("file.delete.delay.ms", _LONG, "grace period before deleting a file", at_least(0),
           ("log.segment.delete.delay.ms",), "file_delete_delay_ms"),
    _topic("message.timestamp.type", _STRING, "CreateTime or LogAppendTime",
           one_of("CreateTime", "LogAppendTime"), ("log.message.timestamp.type",),
           "message_timestamp_type"),
    # Kafka checks each element only: an empty list is valid and keeps every record (KAFKA-19112
    # documents it as infinite retention), which clients set with an incremental SUBTRACT.
    _topic(CLEANUP_POLICY, _LIST, "delete and/or compact (empty: keep everything)",
           one_of("delete", "compact"), ("log.cleanup.policy",), "cleanup_policy"),
    _topic("min.cleanable.dirty.ratio", _DOUBLE, "dirty share of a log before the cleaner compacts it",
           between(0.0, 1.0), ("log.cleaner.min.cleanable.ratio",), "min_cleanable_dirty_ratio"),
    _topic("min.compaction.lag.ms", _LONG, "records younger than this are not compacted",
           at_least(0), ("log.cleaner.min.compaction.lag.ms",), "min_compaction_lag_ms"),
    _topic("max.compaction.lag.ms", _LONG, "records older than this are compacted regardless",
           at_least(1), ("log.cleaner.max.compaction.lag.ms",), "max_compaction_lag_ms"),
    _topic("delete.retention.ms", _LONG, "how long a tombstone stays after its cleaning",
           at_least(0), ("log.cleaner.delete.retention.ms",), "delete_retention_ms"),
    _topic(MIN_INSYNC_REPLICAS, _INT, "fewest ISR members for an acks=all produce to succeed",
           at_least(1), (MIN_INSYNC_REPLICAS,)),
    _topic(UNCLEAN_LEADER_ELECTION_ENABLE, _BOOLEAN,
           "elect an out-of-sync replica rather than stay offline (may lose data)", None,
           (UNCLEAN_LEADER_ELECTION_ENABLE,)),
    # produce-time checks and conversion (broker.log.log_validator)
    _topic("compression.type", _STRING, "codec stored: a codec, uncompressed, or producer's own",
           one_of(*COMPRESSION_TYPES), ("compression.type",), "compression_type"),
    _topic("compression.gzip.level", _INT, "gzip level when recompressing (-1: 6)",
           one_of(-1, *range(1, 10)), ("compression.gzip.level",), "compression_gzip_level"),
    _topic("compression.lz4.level", _INT, "lz4 level when recompressing", between(1, 17),
           ("compression.lz4.level",), "compression_lz4_level"),
    _topic("compression.zstd.level", _INT, "zstd level when recompressing", between(-131072, 22),
           ("compression.zstd.level",), "compression_zstd_level"),
    _topic("message.timestamp.before.max.ms", _LONG, "oldest accepted CreateTime against now",
           at_least(0), ("log.message.timestamp.before.max.ms",), "message_timestamp_before_max_ms"),
    _topic("message.timestamp.after.max.ms", _LONG, "furthest accepted CreateTime ahead of now",
           at_least(0), ("log.message.timestamp.after.max.ms",), "message_timestamp_after_max_ms"),
    _topic("message.timestamp.difference.max.ms", _LONG, "deprecated: both limits where unset",
           at_least(0), ("log.message.timestamp.difference.max.ms",),
           "message_timestamp_difference_max_ms"),
    # stored and described, acting on them is a no-op in Kafka too (docs/topic-configs.md)
    _topic("preallocate", _BOOLEAN, "preallocate segment files (a hint)", None, ("log.preallocate",)),
    _topic("message.downconversion.enable", _BOOLEAN, "down-convert for pre-0.11 fetches", None,
           ("log.message.downconversion.enable",)),
    _topic("message.format.version", _STRING, "deprecated, ignored since 3.0",
           matches(KAFKA_VERSION, "a Kafka version"), ("log.message.format.version",)),
    _topic("leader.replication.throttled.replicas", _LIST, "replicas throttled on the leader side",
           _throttled_replicas, (), default=()),
    _topic("follower.replication.throttled.replicas", _LIST,
           "replicas throttled on the follower side", _throttled_replicas, (), default=()),
    _topic("local.retention.ms", _LONG, "tiered storage's local retention (-2: retention.ms)",
           at_least(-2), ("log.local.retention.ms",)),
    _topic("local.retention.bytes", _LONG, "tiered storage's local retention (-2: retention.bytes)",
           at_least(-2), ("log.local.retention.bytes",)),
    _topic("remote.log.copy.disable", _BOOLEAN, "stop copying to tiered storage", None, (),
           default=False),
    _topic("remote.log.delete.on.disable", _BOOLEAN, "delete remote data when tiering is disabled",
           None, (), default=False),
    # refused unless at the default: Kafka would act on it, tidelog does not
    _topic("remote.storage.enable", _BOOLEAN, "tier this topic's segments to remote storage",
           _Only(False, _NO_TIERED_STORAGE), (), default=False),
)
TOPIC_CONFIGS_BY_NAME: Final = {d.name: d for d in TOPIC_CONFIGS}
TOPIC_CONFIG_KEYS: Final[tuple[ConfigKey, ...]] = tuple(d.key for d in TOPIC_CONFIGS)
# The ones a partition's log applies (the rest are the controller's and the ISR's).
TOPIC_LOG_KEYS: Final[tuple[ConfigKey, ...]] = tuple(d.key for d in TOPIC_CONFIGS if d.log_field)
_LOG_FIELDS: Final = {d.name: d.log_field for d in TOPIC_CONFIGS if d.log_field}
_BROKER_DEFAULTS: Final[dict[str, Value]] = {
    key.name: key.default for key in BROKER_KEYS if key.default is not REQUIRED}


def default_value(name: str) -> Value:
    """Kafka's default of topic config `name`: the default of its first broker synonym that
    has one (e.g. min.insync.replicas -> 1, unclean.leader.election.enable -> False)."""
    definition = TOPIC_CONFIGS_BY_NAME[name]
    for synonym in definition.broker_synonyms:
        value = _BROKER_DEFAULTS.get(synonym)
        if value is not None:
            return value
    if definition.default is not None:
        return definition.default
    raise KeyError(f"topic config {name!r} has no broker default")


def default_int(name: str) -> int:
    value = default_value(name)
    assert isinstance(value, int) and not isinstance(value, bool), f"{name} is not an INT/LONG config"
    return value


def default_bool(name: str) -> bool:
    value = default_value(name)
    assert isinstance(value, bool), f"{name} is not a BOOLEAN config"
    return value


def with_topic_overrides(base: LogConfig, overrides: Mapping[str, object]) -> LogConfig:
    """`base` with a topic's configs applied; ConfigError names any bad or unknown key."""
    parsed = parse_config(overrides, keys=TOPIC_LOG_KEYS, checks=())
    changes: dict[str, Any] = {}
    for name, value in parsed.originals.items():
        changes[_LOG_FIELDS[name]] = TimestampPolicy(value) if name == "message.timestamp.type" else value
    return base.replace(**changes)


def config_string(value: object) -> str:
    """A config value as Kafka writes it (ConfigDef.convertToString)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, Enum):
        return str(value.value)
    return str(value)


# ---- DescribeConfigs ---------------------------------------------------------------------


class ConfigSource(IntEnum):
    """Kafka's DescribeConfigsResponse.ConfigSource ids."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


# DescribeConfigs v3's config_type: Kafka's DescribeConfigsResponse.ConfigType ids.
CONFIG_TYPE_IDS: Final = {ConfigType.BOOLEAN: 1, ConfigType.STRING: 2, ConfigType.INT: 3,
                          ConfigType.LONG: 5, ConfigType.DOUBLE: 6, ConfigType.LIST: 7,
                          ConfigType.PASSWORD: 9}
UNKNOWN_CONFIG_TYPE: Final = 0


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None  # None: a sensitive value, hidden
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class DescribedConfig:
    """One topic or broker config as DescribeConfigs reports it."""

    name: str
    value: str | None
    source: ConfigSource
    synonyms: tuple[ConfigSynonym, ...]
    config_type: int = UNKNOWN_CONFIG_TYPE  # CONFIG_TYPE_IDS; unknown for a key tidelog lacks
    documentation: str | None = None
    read_only: bool = False
    sensitive: bool = False


@dataclass(frozen=True, slots=True)
class BrokerTopicDefaults:
    """What one broker's config makes of each topic config: the effective default value and
    its broker synonyms, in the order Kafka reports them."""

    values: Mapping[str, str]
    synonyms: Mapping[str, tuple[ConfigSynonym, ...]]


_NO_VALUES: Final[Mapping[str, str]] = {}


def config_synonyms(names: tuple[str, ...], static: Config, cluster_default: Mapping[str, str],
                    per_broker: Mapping[str, str], first: str) -> list[ConfigSynonym]:
    """Kafka's ConfigHelper.configSynonyms: each of `names` set dynamically for this broker
    (DYNAMIC_BROKER_CONFIG), then as the cluster default (DYNAMIC_DEFAULT_BROKER_CONFIG), then in
    the config file (STATIC_BROKER_CONFIG), then with a default (DEFAULT_CONFIG), dropping any
    before the first entry for `first`. A PASSWORD's value is hidden."""
    def shown(name: str, value: object) -> str | None:
        return None if static.definitions[name].type is ConfigType.PASSWORD else config_string(value)

    found = [ConfigSynonym(s, per_broker[s], ConfigSource.DYNAMIC_BROKER_CONFIG) for s in names if s in per_broker]
    found += [ConfigSynonym(s, cluster_default[s], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
              for s in names if s in cluster_default]
    found += [ConfigSynonym(s, shown(s, static.originals[s]), ConfigSource.STATIC_BROKER_CONFIG)
              for s in names if s in static.originals]
    found += [ConfigSynonym(s, shown(s, static.definitions[s].default), ConfigSource.DEFAULT_CONFIG)
              for s in names if static.definitions[s].default is not None]
    start = next((i for i, s in enumerate(found) if s.name == first), len(found))
    return found[start:]


def broker_topic_defaults(static: Config, *, effective: Config | None = None,
                          cluster_default: Mapping[str, str] = _NO_VALUES,
                          per_broker: Mapping[str, str] = _NO_VALUES) -> BrokerTopicDefaults:
    """Each topic config's default on this broker: the value its `effective` config (the static
    one with the dynamic broker configs applied; default: `static`) gives, and its broker
    synonyms in Kafka's order (`config_synonyms` from the first synonym on)."""
    config = static if effective is None else effective
    log_config = from_broker_config(config)
    values: dict[str, str] = {}
    synonyms: dict[str, tuple[ConfigSynonym, ...]] = {}
    for d in TOPIC_CONFIGS:
        if d.log_field:
            value = getattr(log_config, d.log_field)
        else:  # the first synonym with a value (segment.jitter.ms: ms, else hours in ms)
            value = next((config[s] for s in d.broker_synonyms if config[s] is not None), d.default)
        values[d.name] = config_string(value)
        if d.broker_synonyms:
            synonyms[d.name] = tuple(config_synonyms(d.broker_synonyms, static, cluster_default, per_broker,
                                                     d.broker_synonyms[0]))
        else:
            synonyms[d.name] = ()
    return BrokerTopicDefaults(values, synonyms)


def describe_topic_configs(defaults: BrokerTopicDefaults, overrides: Mapping[str, str],
                           keys: Iterable[str] | None = None) -> list[DescribedConfig]:
    """A topic's configs as DescribeConfigs answers them: the override (DYNAMIC_TOPIC_CONFIG)
    or the broker's effective default; every config (sorted) when `keys` is None or empty,
    as Kafka's ConfigHelperUtils filters, else the requested ones that exist, in the order asked."""
    known = {**defaults.values, **overrides}
    asked = None if keys is None else list(keys)
    names = sorted(known) if not asked else [k for k in asked if k in known]
    described = []
    for name in names:
        synonyms = defaults.synonyms.get(name, ())
        if name in overrides:
            synonyms = (ConfigSynonym(name, overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG), *synonyms)
        source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
        definition = TOPIC_CONFIGS_BY_NAME.get(name)
        kind, doc = (UNKNOWN_CONFIG_TYPE, None) if definition is None else \
            (CONFIG_TYPE_IDS.get(definition.key.type, UNKNOWN_CONFIG_TYPE), definition.key.doc)
        described.append(DescribedConfig(name, known[name], source, synonyms, kind, doc))
    return described
