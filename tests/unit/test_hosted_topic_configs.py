"""broker.hosted_topic_configs' pure parts: a topic's LogConfig from its overrides, and the
configs a restarting broker loads its logs with, from its checkpointed image."""

from __future__ import annotations

from typing import Any

from broker.hosted_topic_configs import checkpointed_topic_configs, topic_log_config
from common.log_config import LogConfig
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.records import BeginEpoch, Config, ConfigResourceType, Topic

DEFAULT = LogConfig(segment_bytes=1 << 20)


def replay(*records: Any) -> MetadataImage:
    return apply(EMPTY_IMAGE, enumerate(records, start=EMPTY_IMAGE.offset + 1))


def test_overrides_over_the_broker_defaults() -> None:
    config = topic_log_config("t", DEFAULT, {"cleanup.policy": "compact", "retention.ms": "5",
                                             "min.insync.replicas": "2"})  # not a log key: ignored
    assert (config.compact, config.retention_ms, config.segment_bytes) == (True, 5, 1 << 20)
    assert topic_log_config("t", DEFAULT, {"retention.ms": "soon"}) == DEFAULT  # unusable: said, defaults


def test_a_restart_loads_each_topic_with_its_checkpointed_config() -> None:
    image = replay(BeginEpoch(1), Topic("changelog", "C"), Topic("events", "E"), Topic("empty-policy", "P"),
                   Config(ConfigResourceType.TOPIC, "changelog", "cleanup.policy", "compact"),
                   Config(ConfigResourceType.TOPIC, "empty-policy", "cleanup.policy", ""))
    configs = checkpointed_topic_configs(image, DEFAULT)
    assert set(configs) == {"changelog", "events", "empty-policy"}
    assert configs["changelog"].compact and configs["changelog"].segment_bytes == 1 << 20
    assert configs["events"] == DEFAULT
    assert configs["empty-policy"].cleanup_policy == () and not configs["empty-policy"].compact
    assert checkpointed_topic_configs(EMPTY_IMAGE, DEFAULT) == {}
