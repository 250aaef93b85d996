"""common/dynamic_config.py and broker/dynamic_config.py: which broker keys are dynamic, Kafka's
precedence (per-broker > cluster default > static > default), DescribeConfigs of BROKER
resources and of topics' synonyms with dynamic defaults, and the broker's one accessor applying
the image's Config records to live topics."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.dynamic_config import DynamicBrokerConfig, reconfigure_on_change
from broker.log.cleaner_manager import CleanerConfig, LogCleanerManager
from broker.log.log_manager import LogManager
from broker.replica_manager import ReplicaManager
from common.config import parse_config
from common.config_schema import Config
from common.dynamic_config import (
    DYNAMIC_BROKER_KEYS,
    DynamicLayers,
    describe_broker_configs,
    effective_config,
    unread_key_hint,
    unread_keys,
)
from common.log_config import from_broker_config
from common.topic_config import ConfigSource, ConfigSynonym, broker_topic_defaults, describe_topic_configs
from metadata.delta import apply
from metadata.image import MetadataImage
from metadata.local_changes import changes_for_broker
from metadata.records import Config as ConfigRecord
from metadata.records import ConfigResourceType, Partition, Topic

BROKER = ConfigResourceType.BROKER
DYN, DEF_DYN, STATIC, DEFAULT = (ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
                                 ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG)
STATIC_CONFIG = parse_config({"node.id": "4", "process.roles": "broker", "log.retention.hours": "24",
                              "log.segment.bytes": "100000", "controller.cluster.password": "s3cret"})


def test_the_dynamic_set_is_kafkas_log_synonyms_tidelog_applies() -> None:
    for key in ("log.retention.ms", "log.retention.hours", "log.segment.bytes", "log.cleanup.policy",
                "min.insync.replicas", "unclean.leader.election.enable", "compression.type", "message.max.bytes",
                "log.cleaner.min.cleanable.ratio", "log.roll.ms", "log.cleaner.backoff.ms"):
        assert key in DYNAMIC_BROKER_KEYS
    for key in ("log.dirs", "listeners", "node.id", "num.partitions", "log.retention.check.interval.ms", "log.cleaner.threads",
                "log.message.format.version", "replica.lag.time.max.ms"):
        assert key not in DYNAMIC_BROKER_KEYS


@pytest.mark.parametrize(("default", "own", "key", "expected"), [
    ({}, {}, "log.segment.bytes", 100000),  # static
    ({}, {}, "log.retention.bytes", -1),  # Kafka's default
    ({"log.segment.bytes": "2048"}, {}, "log.segment.bytes", 2048),  # cluster default over static
    ({"log.segment.bytes": "2048"}, {"log.segment.bytes": "4096"}, "log.segment.bytes", 4096),  # per-broker first
    ({}, {"min.insync.replicas": "2"}, "min.insync.replicas", 2),
    ({"log.segment.bytes": "nope"}, {}, "log.segment.bytes", 100000),  # unusable: ignored
    ({"log.dirs": "/elsewhere"}, {}, "log.dirs", ("/tmp/kraft-combined-logs",)),  # not dynamic: ignored
])
def test_precedence(default: dict[str, str], own: dict[str, str], key: str, expected: object) -> None:
    config, _ = effective_config(STATIC_CONFIG, DynamicLayers.of(default, own))
    assert config[key] == expected


def test_keys_merge_one_by_one_as_kafka_merges_properties() -> None:
    """A dynamic log.retention.ms wins over a static log.retention.hours (ms > minutes > hours)."""
    config, problems = effective_config(STATIC_CONFIG, DynamicLayers.of({"log.retention.ms": "60000"}, {}))
    assert from_broker_config(config).retention_ms == 60000 and problems == []
    assert from_broker_config(STATIC_CONFIG).retention_ms == 24 * 3600 * 1000


def test_unusable_values_are_reported() -> None:
    _, problems = effective_config(STATIC_CONFIG, DynamicLayers.of({"log.segment.bytes": "x"}, {"log.dirs": "/y"}))
    assert len(problems) == 2 and "log.segment.bytes" in problems[0] and "log.dirs" in problems[1]


LAYERS = DynamicLayers.of({"log.retention.ms": "1000", "log.segment.bytes": "2048"}, {"log.segment.bytes": "4096"})


def entries(per_broker: bool, keys: list[str] | None = None) -> dict[str, tuple[object, ...]]:
    return {d.name: (d.value, d.source, d.read_only, d.sensitive, [(s.name, s.value, s.source) for s in d.synonyms])
            for d in describe_broker_configs(STATIC_CONFIG, LAYERS, per_broker=per_broker, keys=keys)}


def test_describe_one_broker_sources_and_synonyms_in_kafkas_order() -> None:
    got = entries(True)
    assert got["log.segment.bytes"] == ("4096", DYN, False, False, [
        ("log.segment.bytes", "4096", DYN), ("log.segment.bytes", "2048", DEF_DYN),
        ("log.segment.bytes", "100000", STATIC), ("log.segment.bytes", "1073741824", DEFAULT)])
    assert got["log.retention.ms"] == ("1000", DEF_DYN, False, False, [
        ("log.retention.ms", "1000", DEF_DYN), ("log.retention.hours", "24", STATIC),
        ("log.retention.hours", "168", DEFAULT)])
    # synonyms before the key itself are dropped (Kafka's dropWhile)
    assert got["log.retention.hours"][4] == [("log.retention.hours", "24", STATIC), ("log.retention.hours", "168", DEFAULT)]
    assert got["log.dirs"][:3] == ("/tmp/kraft-combined-logs", DEFAULT, True)
    assert got["controller.cluster.password"] == (None, STATIC, True, True,
                                                  [("controller.cluster.password", None, STATIC)])


def test_describe_the_cluster_default_lists_only_what_is_set_there() -> None:
    got = entries(False)
    assert sorted(got) == ["log.retention.ms", "log.segment.bytes"]
    # no DYNAMIC_BROKER_CONFIG synonym at the cluster level (Kafka filters them out)
    assert got["log.segment.bytes"] == ("2048", DEF_DYN, False, False, [
        ("log.segment.bytes", "2048", DEF_DYN), ("log.segment.bytes", "100000", STATIC),
        ("log.segment.bytes", "1073741824", DEFAULT)])


def test_describe_named_keys_in_the_order_asked() -> None:
    assert list(entries(True, ["log.segment.bytes", "nope", "log.dirs"])) == ["log.segment.bytes", "log.dirs"]
    assert len(entries(True, [])) == len(STATIC_CONFIG.definitions)  # empty: every key, as Kafka


def test_topic_synonyms_include_the_dynamic_broker_defaults() -> None:
    effective, _ = effective_config(STATIC_CONFIG, LAYERS)
    defaults = broker_topic_defaults(STATIC_CONFIG, effective=effective, cluster_default=LAYERS.cluster_default,
                                     per_broker=LAYERS.per_broker)
    [segment, retention] = describe_topic_configs(defaults, {"retention.ms": "5"}, ["segment.bytes", "retention.ms"])
    assert (segment.value, segment.source) == ("4096", DYN)
    assert segment.synonyms[:2] == (ConfigSynonym("log.segment.bytes", "4096", DYN),
                                    ConfigSynonym("log.segment.bytes", "2048", DEF_DYN))
    assert retention.synonyms[:2] == (ConfigSynonym("retention.ms", "5", ConfigSource.DYNAMIC_TOPIC_CONFIG),
                                      ConfigSynonym("log.retention.ms", "1000", DEF_DYN))


# ---- broker/dynamic_config.py ------------------------------------------------------------------


def image_with(*records: ConfigRecord) -> MetadataImage:
    return apply(MetadataImage(), list(enumerate(records)))


def test_the_accessor_follows_the_image_and_calls_listeners_once_per_change() -> None:
    dynamic = DynamicBrokerConfig(4, STATIC_CONFIG)
    calls: list[tuple[object, object]] = []
    dynamic.add_listener(lambda old, new: calls.append((old["log.segment.bytes"], new["log.segment.bytes"])))
    segment = dynamic.reader("log.segment.bytes")
    image = image_with(ConfigRecord(BROKER, "", "log.segment.bytes", "2048"),
                       ConfigRecord(BROKER, "5", "log.segment.bytes", "9999"))  # another broker's: not ours
    assert dynamic.update(image) is True and segment() == 2048 and dynamic.value("log.segment.bytes") == 2048
    assert dynamic.update(image) is False  # same records: nothing to do
    image = apply(image, [(2, ConfigRecord(BROKER, "4", "log.segment.bytes", "4096"))])
    assert dynamic.update(image) is True and segment() == 4096
    image = apply(image, [(3, ConfigRecord(BROKER, "4", "log.segment.bytes", None)),
                          (4, ConfigRecord(BROKER, "", "log.segment.bytes", None))])
    dynamic.update(image)
    assert calls == [(100000, 2048), (2048, 4096), (4096, 100000)] and segment() == 100000
    with pytest.raises(KeyError):
        dynamic.reader("log.segment.byte")


def test_a_failing_listener_does_not_stop_the_others() -> None:
    dynamic = DynamicBrokerConfig(4, STATIC_CONFIG)
    seen: list[Config] = []

    def broken(old: Config, new: Config) -> None:
        raise RuntimeError("bug")

    dynamic.add_listener(broken)
    dynamic.add_listener(lambda old, new: seen.append(new))
    dynamic.update(image_with(ConfigRecord(BROKER, "", "min.insync.replicas", "2")))
    assert [c["min.insync.replicas"] for c in seen] == [2]


def test_live_topics_take_new_log_defaults(tmp_path: Path) -> None:
    """The node's wiring: a listener hands the new defaults to the replicas, which rebuild each
    hosted topic's LogConfig under its own overrides (here: none, then retention.ms)."""
    log_manager = LogManager([tmp_path], from_broker_config(STATIC_CONFIG), now_ms=0)
    replicas = ReplicaManager(4, log_manager, now_ms=lambda: 0)
    cleaners = LogCleanerManager(log_manager, CleanerConfig.from_config(STATIC_CONFIG), now_ms=lambda: 0)
    dynamic = DynamicBrokerConfig(4, STATIC_CONFIG)
    reconfigure_on_change(dynamic, replicas, cleaners)
    follow = dynamic.applied_before(replicas.apply_changes)
    image = apply(MetadataImage(), [
        (0, Topic("t", "AAAAAAAAAAAAAAAAAAAAAA")),
        (1, Partition("AAAAAAAAAAAAAAAAAAAAAA", 0, (4,), (4,), leader=4, leader_epoch=0)),
        (2, Topic("u", "AQAAAAAAAAAAAAAAAAAAAA")),
        (3, Partition("AQAAAAAAAAAAAAAAAAAAAA", 0, (4,), (4,), leader=4, leader_epoch=0)),
        (4, ConfigRecord(ConfigResourceType.TOPIC, "u", "retention.ms", "5"))])
    follow(changes_for_broker(MetadataImage(), image, 4), image)
    after = apply(image, [(5, ConfigRecord(BROKER, "", "log.retention.ms", "60000")),
                          (6, ConfigRecord(BROKER, "", "min.insync.replicas", "2")),
                          (7, ConfigRecord(BROKER, "4", "log.cleaner.backoff.ms", "250"))])
    follow(changes_for_broker(image, after, 4), after)
    assert log_manager.config_for("t").retention_ms == 60000  # the new default
    assert log_manager.config_for("u").retention_ms == 5  # its own override still wins
    assert {tp.topic: p.min_insync_replicas for tp, p in replicas.partitions.items()} == {"t": 2, "u": 2}
    assert cleaners.config.backoff_ms == 250
    log_manager.shutdown()


UNREAD = DynamicLayers.of({"cleanup.policy": "compact", "log.retention.ms": "1000"}, {"cleanup.policy": "delete",
                                                                                      "my.own.key": "x"})


def test_keys_no_broker_knows_are_described_as_kafka_does_and_not_applied() -> None:
    """Kafka's ConfigHelper: an unknown key's type is unknown, so it is sensitive (value hidden),
    read-only, of UNKNOWN type; its source is where it is set."""
    config, problems = effective_config(STATIC_CONFIG, UNREAD)
    assert problems == [] and "cleanup.policy" not in config.definitions

    def described(per_broker: bool) -> dict[str, tuple[object, ...]]:
        return {d.name: (d.value, d.source, d.read_only, d.sensitive, d.config_type, d.documentation,
                         [(s.name, s.value, s.source) for s in d.synonyms])
                for d in describe_broker_configs(STATIC_CONFIG, UNREAD, per_broker=per_broker)
                if d.name in ("cleanup.policy", "my.own.key")}

    assert described(True) == {
        "cleanup.policy": (None, DYN, True, True, 0, None, [("cleanup.policy", None, DYN),
                                                            ("cleanup.policy", None, DEF_DYN)]),
        "my.own.key": (None, DYN, True, True, 0, None, [("my.own.key", None, DYN)])}
    assert described(False) == {
        "cleanup.policy": (None, DEF_DYN, True, True, 0, None, [("cleanup.policy", None, DEF_DYN)])}


@pytest.mark.parametrize(("name", "hint"), [
    ("cleanup.policy", "not a broker config (did you mean 'log.cleanup.policy'?)"),
    ("log.retention.mss", "not a broker config (did you mean 'log.retention.ms'?)"),
    ("zzz", "not a broker config"),
])
def test_an_unread_key_names_the_broker_key_it_is_nearest_to(name: str, hint: str) -> None:
    assert unread_keys([name, "log.retention.ms"]) == [name]
    assert unread_key_hint(name) == hint
