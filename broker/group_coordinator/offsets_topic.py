"""`__consumer_offsets` on demand, and FindCoordinator's answer.

The first FindCoordinator for a group asks the controllers to create the topic
(`offsets.topic.num.partitions`, `offsets.topic.replication.factor` capped to the live
brokers with a WARNING, the broker's `min.insync.replicas`) and answers
COORDINATOR_NOT_AVAILABLE until it exists; clients retry. The topic is compacted, as Kafka's:
the latest commit per (group, topic, partition) and the latest metadata per group stay, and
tombstones (expired offsets, deleted groups) go after `delete.retention.ms`.
The coordinator of a group is the leader of partition abs(hashCode(group.id)) % partitions.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Final

from broker.coordinator.location import Found
from broker.group_coordinator.runtime import CoordinatorSettings, GroupCoordinator
from common.errors import ErrorCode
from groups.partitioner import GROUP_METADATA_TOPIC_NAME, coordinator_partition
from metadata.image import MetadataImage

log = logging.getLogger(__name__)
E = ErrorCode
TOPIC_ALREADY_EXISTS: Final = int(ErrorCode.TOPIC_ALREADY_EXISTS)


def offsets_topic_configs(settings: CoordinatorSettings) -> dict[str, str]:
    """The topic configs Kafka gives __consumer_offsets (GroupCoordinator.groupMetadataTopicConfigs)."""
    return {"cleanup.policy": "compact", "segment.bytes": str(settings.offsets_topic_segment_bytes)}


class OffsetsTopic:
    """Creates `__consumer_offsets` once (one creation in flight at a time) and finds
    coordinators."""

    def __init__(self, coordinator: GroupCoordinator, topic_admin: Any,
                 endpoint: Callable[[MetadataImage, int], tuple[str, int] | None]) -> None:
        self.coordinator = coordinator
        self.topic_admin = topic_admin
        self._endpoint = endpoint
        self._creating: asyncio.Task[None] | None = None

    def find_coordinator(self, group_id: str, image: MetadataImage) -> Found:
        topic = image.topic(GROUP_METADATA_TOPIC_NAME)
        if topic is None or not topic.partitions:
            self._create(image)
            return Found(E.COORDINATOR_NOT_AVAILABLE, message=f"{GROUP_METADATA_TOPIC_NAME} is being created")
        partition = topic.partitions.get(coordinator_partition(group_id, len(topic.partitions)))
        leader = -1 if partition is None else partition.leader
        endpoint = self._endpoint(image, leader) if leader >= 0 else None
        if endpoint is None:
            return Found(E.COORDINATOR_NOT_AVAILABLE, message="the group's offsets partition has no leader")
        self.coordinator.ensure_started()
        return Found(E.NONE, leader, endpoint[0], endpoint[1])

    def _create(self, image: MetadataImage) -> None:
        if self._creating is not None or self.topic_admin is None:
            return
        settings = self.coordinator.settings
        live = sum(1 for b in image.cluster.brokers.values() if not b.fenced)
        replication = settings.offsets_topic_replication_factor
        if live < replication:
            log.warning("Creating %s with replication factor %d: offsets.topic.replication.factor=%d "
                        "but only %d broker(s) are alive", GROUP_METADATA_TOPIC_NAME, max(live, 1),
                        replication, live)
            replication = max(live, 1)
        admin = self.topic_admin

        async def create() -> None:
            try:
                reply = await admin.create_topic(
                    GROUP_METADATA_TOPIC_NAME, settings.offsets_topic_partitions, replication,
                    offsets_topic_configs(settings))
                code, message = reply.error_code, reply.error_message
                if code not in (0, TOPIC_ALREADY_EXISTS):
                    log.warning("Creating %s failed: error %d: %s", GROUP_METADATA_TOPIC_NAME, code, message)
                elif code == 0:
                    log.info("Created %s: %d partitions, replication factor %d, compacted",
                             GROUP_METADATA_TOPIC_NAME,
                             settings.offsets_topic_partitions, replication)
            except Exception:  # noqa: BLE001 - the next FindCoordinator tries again
                log.exception("Creating %s failed", GROUP_METADATA_TOPIC_NAME)
            finally:
                self._creating = None

        self._creating = asyncio.get_running_loop().create_task(create(), name="create-offsets-topic")

    async def close(self) -> None:
        if self._creating is not None:
            self._creating.cancel()
            await asyncio.gather(self._creating, return_exceptions=True)
