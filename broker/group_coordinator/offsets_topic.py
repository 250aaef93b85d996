"""`__consumer_offsets`: the group coordinator's internal topic (broker.coordinator.location).

Created on the first FindCoordinator for a group with `offsets.topic.num.partitions`,
`offsets.topic.replication.factor` (capped to the live brokers with a WARNING) and the
broker's `min.insync.replicas`. The topic is compacted, as Kafka's: the latest commit per
(group, topic, partition) and the latest metadata per group stay, and tombstones (expired
offsets, deleted groups) go after `delete.retention.ms`. The coordinator of a group is the
leader of partition abs(hashCode(group.id)) % partitions.
"""

from __future__ import annotations

from typing import Any

from broker.coordinator.location import Endpoint, InternalTopic, InternalTopicSpec
from broker.group_coordinator.runtime import CoordinatorSettings, GroupCoordinator
from groups.partitioner import GROUP_METADATA_TOPIC_NAME, coordinator_partition


def offsets_topic_configs(settings: CoordinatorSettings) -> dict[str, str]:
    """The topic configs Kafka gives __consumer_offsets (GroupCoordinator.groupMetadataTopicConfigs)."""
    return {"cleanup.policy": "compact", "segment.bytes": str(settings.offsets_topic_segment_bytes)}


def offsets_topic(coordinator: GroupCoordinator, topic_admin: Any, endpoint: Endpoint) -> InternalTopic:
    settings = coordinator.settings
    spec = InternalTopicSpec(GROUP_METADATA_TOPIC_NAME, settings.offsets_topic_partitions,
                             settings.offsets_topic_replication_factor, "offsets.topic.replication.factor",
                             coordinator_partition, lambda _replication: offsets_topic_configs(settings))
    return InternalTopic(spec, topic_admin, endpoint, started=coordinator.ensure_started)
