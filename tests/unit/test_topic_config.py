"""common/topic_config.py: one table of topic configs, the broker's effective defaults, and
DescribeConfigs' values, sources and synonyms as Kafka's ConfigHelper reports them."""

from __future__ import annotations

import dataclasses

import pytest

from common.config import BROKER_KEYS, parse_config
from common.config_schema import ConfigError
from common.log_config import LogConfig, from_broker_config
from common.topic_config import (
    TOPIC_CONFIGS,
    TOPIC_LOG_KEYS,
    ConfigSource,
    ConfigSynonym,
    broker_topic_defaults,
    default_bool,
    default_int,
    describe_topic_configs,
    with_topic_overrides,
)

TOPIC, STATIC, DEFAULT = (ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.STATIC_BROKER_CONFIG,
                          ConfigSource.DEFAULT_CONFIG)


def broker(**settings: str):
    raw = {"node.id": "1", "process.roles": "broker"}
    raw.update({k.replace("_", "."): v for k, v in settings.items()})
    return parse_config(raw)


def described(config, overrides=None, name=None):
    entries = describe_topic_configs(broker_topic_defaults(config), overrides or {}, None)
    return {e.name: e for e in entries} if name is None else {e.name: e for e in entries}[name]


def test_every_synonym_is_a_broker_key_and_every_log_field_is_set():
    broker_keys = {key.name for key in BROKER_KEYS}
    for d in TOPIC_CONFIGS:
        assert d.key.default is None, f"{d.name}: defaults come from the broker keys"
        assert set(d.broker_synonyms) <= broker_keys, d.name
        # Kafka's configs without a server synonym (remote storage, throttled replicas) carry their own
        assert bool(d.broker_synonyms) != (d.default is not None), d.name
    fields = {f.name for f in dataclasses.fields(LogConfig) if f.init}
    assert {d.log_field for d in TOPIC_CONFIGS if d.log_field} == fields
    assert {k.name for k in TOPIC_LOG_KEYS} == {d.name for d in TOPIC_CONFIGS if d.log_field}


def test_kafka_defaults():
    assert (default_int("min.insync.replicas"), default_bool("unclean.leader.election.enable")) == (1, False)
    assert from_broker_config(broker()) == LogConfig()


# (broker settings, topic overrides, topic config, value, source, synonyms)
DESCRIBE = [
    pytest.param({}, {}, "min.insync.replicas", "1", DEFAULT,
                 [("min.insync.replicas", "1", DEFAULT)], id="min-isr-default"),
    pytest.param({"min.insync.replicas": "2"}, {}, "min.insync.replicas", "2", STATIC,
                 [("min.insync.replicas", "2", STATIC), ("min.insync.replicas", "1", DEFAULT)],
                 id="min-isr-static"),
    pytest.param({"min.insync.replicas": "2"}, {"min.insync.replicas": "3"}, "min.insync.replicas",
                 "3", TOPIC, [("min.insync.replicas", "3", TOPIC), ("min.insync.replicas", "2", STATIC),
                              ("min.insync.replicas", "1", DEFAULT)], id="min-isr-topic"),
    pytest.param({"unclean.leader.election.enable": "true"}, {}, "unclean.leader.election.enable",
                 "true", STATIC, [("unclean.leader.election.enable", "true", STATIC),
                                  ("unclean.leader.election.enable", "false", DEFAULT)],
                 id="unclean-static"),
    pytest.param({}, {}, "unclean.leader.election.enable", "false", DEFAULT,
                 [("unclean.leader.election.enable", "false", DEFAULT)], id="unclean-default"),
    pytest.param({"log.retention.ms": "1000"}, {}, "retention.ms", "1000", STATIC,
                 [("log.retention.ms", "1000", STATIC), ("log.retention.hours", "168", DEFAULT)],
                 id="retention-ms-static"),
    # Kafka drops the synonyms before the first one named log.retention.ms: with only
    # log.retention.hours set the value is right and the source DEFAULT_CONFIG, no synonyms.
    pytest.param({"log.retention.hours": "24"}, {}, "retention.ms", "86400000", DEFAULT, [],
                 id="retention-hours-static"),
    pytest.param({}, {}, "segment.ms", "604800000", DEFAULT, [], id="segment-ms-from-roll-hours"),
    pytest.param({"log.cleanup.policy": "delete"}, {}, "cleanup.policy", "delete", STATIC,
                 [("log.cleanup.policy", "delete", STATIC), ("log.cleanup.policy", "delete", DEFAULT)],
                 id="list-static"),
    pytest.param({}, {"retention.bytes": "5"}, "retention.bytes", "5", TOPIC,
                 [("retention.bytes", "5", TOPIC), ("log.retention.bytes", "-1", DEFAULT)],
                 id="long-topic"),
]


@pytest.mark.parametrize(("settings", "overrides", "name", "value", "source", "synonyms"), DESCRIBE)
def test_describe_topic_configs(settings, overrides, name, value, source, synonyms):
    entry = described(broker(**settings), overrides, name)
    assert (entry.value, entry.source) == (value, source)
    assert entry.synonyms == tuple(ConfigSynonym(*s) for s in synonyms)


def test_describe_lists_every_config_sorted_or_the_keys_asked_in_order():
    defaults = broker_topic_defaults(broker())
    every = [e.name for e in describe_topic_configs(defaults, {"x.unknown": "1"})]
    assert every == sorted({d.name for d in TOPIC_CONFIGS} | {"x.unknown"})
    types = {e.name: e.config_type for e in describe_topic_configs(defaults, {"x.unknown": "1"})}
    assert (types["retention.ms"], types["segment.bytes"], types["cleanup.policy"],
            types["unclean.leader.election.enable"], types["message.timestamp.type"],
            types["x.unknown"]) == (5, 3, 7, 1, 2, 0)  # LONG, INT, LIST, BOOLEAN, STRING, UNKNOWN
    # Kafka: an empty key list asks for every config, as null does.
    assert [e.name for e in describe_topic_configs(defaults, {"x.unknown": "1"}, ())] == every
    asked = describe_topic_configs(defaults, {}, ("segment.bytes", "nope", "min.insync.replicas"))
    assert [e.name for e in asked] == ["segment.bytes", "min.insync.replicas"]


def test_log_overrides_apply_and_name_bad_keys():
    assert with_topic_overrides(LogConfig(), {"retention.ms": "5"}).retention_ms == 5
    with pytest.raises(ConfigError, match="min.insync.replicas"):
        with_topic_overrides(LogConfig(), {"min.insync.replicas": "2"})  # not a log setting
    assert with_topic_overrides(LogConfig(), {"cleanup.policy": "compact,delete"}).compact
    with pytest.raises(ConfigError, match="cleanup.policy"):
        with_topic_overrides(LogConfig(), {"cleanup.policy": "shred"})
    with pytest.raises(ConfigError, match="min.cleanable.dirty.ratio"):
        with_topic_overrides(LogConfig(), {"min.cleanable.dirty.ratio": "1.5"})
