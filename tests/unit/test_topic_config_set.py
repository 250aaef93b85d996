"""common/topic_config.py against Kafka 3.9's topic configs: the whole set
`kafka-configs.sh --describe --all` lists, Kafka's defaults, and every bad value refused
with INVALID_CONFIG naming the key (through the controller's validate_topic_config, which
CreateTopics, IncrementalAlterConfigs and the admin API all use)."""

from __future__ import annotations

import pytest

from common.config import parse_config
from common.config_schema import ConfigError
from common.errors import ErrorCode
from common.log_config import LogConfig, from_broker_config
from common.topic_config import (
    TOPIC_CONFIGS,
    TOPIC_CONFIG_KEYS,
    ConfigSource,
    broker_topic_defaults,
    describe_topic_configs,
    with_topic_overrides,
)
from quorum.controller_result import ControllerApiError
from quorum.topic_control import validate_topic_config

LONG_MAX = "9223372036854775807"

# Kafka 3.9, `kafka-configs.sh --describe --all --entity-type topics` on a fresh topic.
KAFKA_39_DEFAULTS = {
    "cleanup.policy": "delete", "compression.gzip.level": "-1", "compression.lz4.level": "9",
    "compression.type": "producer", "compression.zstd.level": "3",
    "delete.retention.ms": "86400000", "file.delete.delay.ms": "60000",
    "flush.messages": LONG_MAX, "flush.ms": LONG_MAX,
    "follower.replication.throttled.replicas": "", "index.interval.bytes": "4096",
    "leader.replication.throttled.replicas": "", "local.retention.bytes": "-2",
    "local.retention.ms": "-2", "max.compaction.lag.ms": LONG_MAX, "max.message.bytes": "1048588",
    "message.downconversion.enable": "true", "message.format.version": "3.0-IV1",
    "message.timestamp.after.max.ms": LONG_MAX, "message.timestamp.before.max.ms": LONG_MAX,
    "message.timestamp.difference.max.ms": LONG_MAX, "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.5", "min.compaction.lag.ms": "0", "min.insync.replicas": "1",
    "preallocate": "false", "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false", "remote.storage.enable": "false",
    "retention.bytes": "-1", "retention.ms": "604800000", "segment.bytes": "1073741824",
    "segment.index.bytes": "10485760", "segment.jitter.ms": "0", "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
}


def broker(**settings: str):
    return parse_config({"node.id": "1", "process.roles": "broker", **settings})


def test_the_whole_kafka_39_set_with_kafka_defaults():
    assert {d.name for d in TOPIC_CONFIGS} == set(KAFKA_39_DEFAULTS)
    described = describe_topic_configs(broker_topic_defaults(broker()), {})
    assert {e.name: e.value for e in described} == KAFKA_39_DEFAULTS
    assert all(e.source is ConfigSource.DEFAULT_CONFIG for e in described)


def test_a_broker_key_is_the_static_default_and_a_topic_override_wins():
    defaults = broker_topic_defaults(broker(**{"compression.type": "zstd"}))
    [static] = describe_topic_configs(defaults, {}, ["compression.type"])
    assert (static.value, static.source) == ("zstd", ConfigSource.STATIC_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in static.synonyms] == [
        ("compression.type", "zstd", ConfigSource.STATIC_BROKER_CONFIG),
        ("compression.type", "producer", ConfigSource.DEFAULT_CONFIG)]
    [topic] = describe_topic_configs(defaults, {"compression.type": "lz4"}, ["compression.type"])
    assert (topic.value, topic.source) == ("lz4", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert from_broker_config(broker(**{"compression.type": "zstd"})).compression_type == "zstd"


# (key, value, canonical string) every one accepted
GOOD = [
    ("compression.type", "zstd", "zstd"), ("compression.type", "uncompressed", "uncompressed"),
    ("compression.type", "producer", "producer"), ("compression.gzip.level", "-1", "-1"),
    ("compression.gzip.level", "9", "9"), ("compression.lz4.level", "17", "17"),
    ("compression.zstd.level", "-131072", "-131072"), ("compression.zstd.level", "22", "22"),
    ("message.timestamp.type", "LogAppendTime", "LogAppendTime"),
    ("message.timestamp.before.max.ms", "0", "0"), ("message.timestamp.after.max.ms", "3600000", "3600000"),
    ("message.timestamp.difference.max.ms", "1000", "1000"),
    ("preallocate", "true", "true"), ("message.downconversion.enable", "false", "false"),
    ("message.format.version", "2.8", "2.8"), ("message.format.version", "3.0-IV1", "3.0-IV1"),
    ("leader.replication.throttled.replicas", "*", "*"),
    ("follower.replication.throttled.replicas", "0:1, 1:2", "0:1,1:2"),
    ("local.retention.ms", "-2", "-2"), ("local.retention.bytes", "1000", "1000"),
    ("remote.log.copy.disable", "true", "true"), ("remote.log.delete.on.disable", "true", "true"),
    ("remote.storage.enable", "false", "false"), ("segment.jitter.ms", "0", "0"),
    ("segment.jitter.ms", "3600000", "3600000"),
    ("index.interval.bytes", "0", "0"), ("segment.index.bytes", "4", "4"),
    ("file.delete.delay.ms", "0", "0"), ("max.message.bytes", "100", "100"),
]

# (key, value, words the INVALID_CONFIG message must hold besides the key)
BAD = [
    ("compression.type", "brotli", "must be one of"), ("compression.type", "GZIP", "must be one of"),
    ("compression.type", "", "must be one of"),
    ("compression.gzip.level", "0", "must be one of"), ("compression.gzip.level", "10", "must be one of"),
    ("compression.gzip.level", "fast", "expects an integer"),
    ("compression.lz4.level", "0", "between 1 and 17"), ("compression.lz4.level", "18", "between 1 and 17"),
    ("compression.zstd.level", "23", "between -131072 and 22"),
    ("compression.zstd.level", "-131073", "between -131072 and 22"),
    ("message.timestamp.type", "BrokerTime", "must be one of"),
    ("message.timestamp.before.max.ms", "-1", "at least 0"),
    ("message.timestamp.after.max.ms", "soon", "expects an integer"),
    ("message.timestamp.difference.max.ms", "-5", "at least 0"),
    ("preallocate", "yes", "boolean"), ("message.downconversion.enable", "1", "boolean"),
    ("message.format.version", "latest", "a Kafka version"),
    ("leader.replication.throttled.replicas", "0-1", "partitionId:brokerId"),
    ("follower.replication.throttled.replicas", "*,0:1", "partitionId:brokerId"),
    ("local.retention.ms", "-3", "at least -2"), ("local.retention.bytes", "x", "expects an integer"),
    ("remote.storage.enable", "true", "no tiered storage"),
    ("remote.log.copy.disable", "maybe", "boolean"),
    ("segment.jitter.ms", "-1", "at least 0"),
    ("index.interval.bytes", "-1", "at least 0"), ("segment.index.bytes", "3", "at least 4"),
    ("max.message.bytes", "-1", "at least 0"), ("max.message.bytes", "2147483648", "32-bit"),
    ("file.delete.delay.ms", "-1", "at least 0"),
    ("compresion.type", "gzip", "did you mean 'compression.type'"),
]


@pytest.mark.parametrize(("key", "value", "canonical"), GOOD, ids=[f"{k}={v}" for k, v, _ in GOOD])
def test_accepted(key, value, canonical):
    assert validate_topic_config(key, value) == canonical


@pytest.mark.parametrize(("key", "value", "words"), BAD, ids=[f"{k}={v}" for k, v, _ in BAD])
def test_refused_with_invalid_config_naming_the_key(key, value, words):
    with pytest.raises(ControllerApiError) as caught:
        validate_topic_config(key, value)
    assert caught.value.code is ErrorCode.INVALID_CONFIG
    assert caught.value.field == key
    assert key in str(caught.value) and words in str(caught.value)


def test_every_refusal_is_also_a_config_error_of_the_topic_keys():
    for key, value, _ in BAD:
        with pytest.raises(ConfigError):
            parse_config({key: value}, keys=TOPIC_CONFIG_KEYS, checks=())


# (overrides, (before, after)): KIP-937's fallback to the deprecated difference.max.ms
WINDOWS = [
    ({}, (int(LONG_MAX), int(LONG_MAX))),
    ({"message.timestamp.difference.max.ms": "1000"}, (1000, 1000)),
    ({"message.timestamp.difference.max.ms": "1000", "message.timestamp.after.max.ms": "5"}, (1000, 5)),
    ({"message.timestamp.before.max.ms": "7"}, (7, int(LONG_MAX))),
]


@pytest.mark.parametrize(("overrides", "window"), WINDOWS)
def test_timestamp_window(overrides, window):
    config = with_topic_overrides(LogConfig(), overrides)
    assert (config.timestamp_before_max_ms, config.timestamp_after_max_ms) == window


def test_segment_jitter_from_the_broker_keys():
    assert from_broker_config(broker(**{"log.roll.jitter.hours": "2"})).segment_jitter_ms == 7_200_000
    assert from_broker_config(broker(**{"log.roll.jitter.hours": "2", "log.roll.jitter.ms": "5"})
                              ).segment_jitter_ms == 5


def test_log_settings_from_topic_overrides():
    config = with_topic_overrides(LogConfig(), {"compression.type": "lz4", "compression.lz4.level": "3",
                                                "message.timestamp.type": "LogAppendTime"})
    assert (config.compression_type, config.compression_lz4_level) == ("lz4", 3)
    assert config.message_timestamp_type.value == "LogAppendTime"
