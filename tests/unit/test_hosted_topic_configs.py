"""broker.hosted_topic_configs: a topic's LogConfig from its overrides, the configs a restarting
broker loads its logs with (from its checkpointed image), and which hosted partitions a topic's
configs reach (only its own: a new topic's cost does not grow with the partitions hosted)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, cast

from broker.hosted_topic_configs import HostedTopicConfigs, checkpointed_topic_configs, topic_log_config
from broker.log.log_manager import LogManager
from broker.replication.partition import Partition as ReplicaPartition
from common.log_config import LogConfig
from common.topic_partition import TopicPartition
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.records import BeginEpoch, Config, ConfigResourceType, Partition, Topic

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


# ---- HostedTopicConfigs: what a topic's configs touch --------------------------------------

class _Logs:
    """The two things HostedTopicConfigs asks of the log manager."""

    def __init__(self) -> None:
        self.default_config = DEFAULT
        self.configs: dict[str, LogConfig] = {}
        self.topics_with_logs: set[str] = set()

    def has_logs_of(self, topic: str) -> bool:
        return topic in self.topics_with_logs

    def update_topic_config(self, topic: str, config: LogConfig) -> None:
        self.configs[topic] = config


class _Hosted:
    def __init__(self, min_insync_replicas: int = 1) -> None:
        self.min_insync_replicas = min_insync_replicas


class _CountedScans(dict[TopicPartition, _Hosted]):
    """The hosted partitions, counting every pass over all of them."""

    scans = 0

    def __iter__(self) -> Iterator[TopicPartition]:
        self.scans += 1
        return super().__iter__()

    def items(self) -> Any:
        self.scans += 1
        return super().items()

    def values(self) -> Any:
        self.scans += 1
        return super().values()


def _topic(name: str, topic_id: str, partitions: int) -> list[Any]:
    return [Topic(name, topic_id), *(Partition(topic_id, i, (4,), (4,), leader=4) for i in range(partitions))]


def _hosted_configs(hosted: _CountedScans) -> tuple[HostedTopicConfigs, _Logs]:
    logs = _Logs()
    return HostedTopicConfigs(cast(LogManager, logs), cast(Mapping[TopicPartition, ReplicaPartition], hosted),
                              default_min_insync_replicas=1), logs


def test_a_new_topic_touches_only_its_own_partitions() -> None:
    """Creating topic N on a broker costs O(N's partitions), not O(every partition hosted)."""
    image = replay(BeginEpoch(1), *_topic("old", "O", 50), *_topic("new", "N", 3),
                   Config(ConfigResourceType.TOPIC, "new", "min.insync.replicas", "2"))
    hosted = _CountedScans({TopicPartition("old", i): _Hosted() for i in range(50)})
    configs, logs = _hosted_configs(hosted)
    configs.apply("old", image)
    hosted.update({TopicPartition("new", i): _Hosted() for i in range(3)})
    hosted.scans = 0
    configs.apply_new(["new", "old"], image)
    configs.refresh(image)  # the configs image moved since no full pass: every configured topic
    assert hosted.scans == 0
    assert [hosted[TopicPartition("new", i)].min_insync_replicas for i in range(3)] == [2, 2, 2]
    assert {hosted[TopicPartition("old", i)].min_insync_replicas for i in range(50)} == {1}
    assert set(logs.configs) == {"old", "new"}


def test_a_config_change_and_new_broker_defaults_reach_every_hosted_partition() -> None:
    base = replay(BeginEpoch(1), *_topic("a", "A", 2), *_topic("b", "B", 2))
    hosted = _CountedScans({TopicPartition(t, i): _Hosted() for t in "ab" for i in range(2)})
    configs, logs = _hosted_configs(hosted)
    configs.apply_new(["a", "b"], base)
    changed = apply(base, [(base.offset + 1, Config(ConfigResourceType.TOPIC, "a", "min.insync.replicas", "3")),
                           (base.offset + 2, Config(ConfigResourceType.TOPIC, "b", "retention.ms", "5"))])
    configs.refresh(changed)
    assert [hosted[TopicPartition("a", i)].min_insync_replicas for i in range(2)] == [3, 3]
    assert logs.configs["b"].retention_ms == 5
    configs.set_broker_defaults(LogConfig(segment_bytes=2 << 20), 2, changed)
    assert [hosted[TopicPartition(t, i)].min_insync_replicas for t in "ab" for i in range(2)] == [3, 3, 2, 2]
    assert (logs.configs["a"].segment_bytes, logs.configs["b"].retention_ms) == (2 << 20, 5)


def test_deleting_partitions_forgets_only_their_topics_once_no_log_is_left() -> None:
    image = replay(BeginEpoch(1), *_topic("gone", "G", 2), *_topic("half", "H", 2), *_topic("kept", "K", 2))
    hosted = _CountedScans({TopicPartition(t, i): _Hosted() for t in ("half", "kept") for i in range(2)})
    configs, logs = _hosted_configs(hosted)
    configs.apply_new(["gone", "half", "kept"], image)
    logs.topics_with_logs = {"half", "kept"}  # gone's logs were all deleted, one of half's is left
    hosted.scans = 0
    configs.forget_unhosted(["gone", "gone", "half"])
    assert hosted.scans == 0
    assert (configs.is_applied("gone"), configs.is_applied("half"), configs.is_applied("kept")) == (False, True, True)
