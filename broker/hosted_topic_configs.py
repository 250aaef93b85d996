"""The topic configs of the partitions a broker hosts, as the replica manager applies them:
each topic's overrides from the metadata image (the last ones applied), turned into its
`LogConfig` (handed to the log manager) and its partitions' min.insync.replicas, over the
broker-wide defaults (Kafka's ReplicaManager/LogManager topic-config updates and
DynamicLogConfig.reconfigure).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Final

from broker.log.log_manager import LogManager
from broker.replication.partition import Partition
from common.topic_partition import TopicPartition
from common.config_schema import ConfigError
from common.log_config import LogConfig
from common.topic_config import MIN_INSYNC_REPLICAS, TOPIC_LOG_KEYS, with_topic_overrides
from metadata.image import MetadataImage
from metadata.records import ConfigResourceType

log = logging.getLogger(__name__)

_LOG_KEYS: Final = frozenset(key.name for key in TOPIC_LOG_KEYS)
_NO_OVERRIDES: Final[Mapping[str, str]] = {}


class HostedTopicConfigs:
    """Each hosted topic's overrides as last applied, and what follows from them."""

    def __init__(self, log_manager: LogManager, partitions: Mapping[TopicPartition, Partition], *,
                 default_min_insync_replicas: int) -> None:
        self.log_manager = log_manager
        self._partitions = partitions  # the replica manager's own dict: always the hosted set
        self.default_min_insync_replicas = default_min_insync_replicas
        self._overrides: dict[str, dict[str, str]] = {}
        self._refreshed_configs: object | None = None  # the configs image of the last full pass

    def overrides(self, topic: str) -> Mapping[str, str]:
        return self._overrides.get(topic, _NO_OVERRIDES)

    def is_applied(self, topic: str) -> bool:
        return topic in self._overrides

    def min_insync_replicas(self, topic: str) -> int:
        return _int_or(self.overrides(topic).get(MIN_INSYNC_REPLICAS), self.default_min_insync_replicas)

    def forget_unhosted(self, topics: Iterable[str]) -> None:
        """Drop those of `topics` (the topics of partitions just deleted here) of which no log is
        left. Asking the log manager's per-topic index costs O(deleted partitions); a scan of
        every hosted partition per change set with deletes made deleting topics one by one
        quadratic at 100,000 partitions. (A replica that failed here may keep its topic's
        overrides while its log stays: a few strings.)"""
        for topic in sorted(set(topics)):
            if not self.log_manager.has_logs_of(topic):
                self._overrides.pop(topic, None)

    def set_broker_defaults(self, default_config: LogConfig, min_insync_replicas: int,
                            image: MetadataImage) -> None:
        """New broker-wide log defaults (a dynamic broker config changed): every hosted topic's
        LogConfig is rebuilt from them under its own overrides, at once (Kafka's
        DynamicLogConfig.reconfigure)."""
        self.log_manager.default_config = default_config
        self.default_min_insync_replicas = min_insync_replicas
        topics = sorted(self._overrides)
        self._overrides.clear()  # every topic re-derives, overrides unchanged or not
        for topic in topics:
            self.apply(topic, image)
        self._refreshed_configs = image.configs

    def refresh(self, image: MetadataImage) -> None:
        # Config records do not show up in LocalReplicaChanges: compare every configured topic,
        # unless no config record was replayed since the last pass (replay shares an untouched
        # configs image, so identity says it); a topic hosted since is configured by `apply_new`.
        # A 10k-partition change set arrives in 150 slices: a scan of every partition each was
        # costly. Every hosted topic is configured (`_hosted` and `apply_new` configure a topic
        # before its first log), so the configured topics cover the hosted ones: O(topics).
        if image.configs is self._refreshed_configs:
            return
        for topic in sorted(self._overrides):
            self.apply(topic, image)
        self._refreshed_configs = image.configs

    def apply_new(self, topics: Iterable[str], image: MetadataImage) -> None:
        """Configure the topics among `topics` not configured yet, in name order."""
        for topic in sorted(set(topics) - set(self._overrides)):
            self.apply(topic, image)

    def apply(self, topic: str, image: MetadataImage) -> None:
        overrides = dict(image.config(ConfigResourceType.TOPIC, topic))
        if topic in self._overrides and self._overrides[topic] == overrides:
            return
        self._overrides[topic] = overrides
        min_isr = self.min_insync_replicas(topic)
        # Only this topic's partitions, found through the image (its partition ids): a scan of
        # every hosted partition per new topic made creating topic N cost O(partitions hosted).
        # A hosted partition the image no longer lists belongs to a deleted topic, on its way out.
        topic_image = image.topic(topic)
        for partition_id in topic_image.partitions if topic_image is not None else ():
            partition = self._partitions.get(TopicPartition(topic, partition_id))
            if partition is not None:
                partition.min_insync_replicas = min_isr
        self.log_manager.update_topic_config(topic, topic_log_config(topic, self.log_manager.default_config,
                                                                     overrides))


def topic_log_config(topic: str, default: LogConfig, overrides: Mapping[str, str]) -> LogConfig:
    """A topic's LogConfig: its log overrides over the broker's defaults (the defaults alone,
    said in the log, when the overrides are unusable)."""
    log_overrides = {k: v for k, v in overrides.items() if k in _LOG_KEYS}
    try:
        return with_topic_overrides(default, log_overrides)
    except ConfigError as e:
        log.error("Ignoring invalid configs of topic %s (using the broker defaults): %s",
                  topic, "; ".join(e.problems))
        return default


def checkpointed_topic_configs(image: MetadataImage, default: LogConfig) -> dict[str, LogConfig]:
    """Every topic's LogConfig as the broker's checkpointed image says, for loading its logs
    before the metadata log has caught up: recovery must know which logs are compacted (the
    cleaner's offset gaps are legal there), and retention must not treat a compacted log as
    a deleting one."""
    return {topic.name: topic_log_config(topic.name, default, image.config(ConfigResourceType.TOPIC, topic.name))
            for topic in image.topics.by_id.values()}


def _int_or(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default
