"""Where a coordinator key (a group, a transactional id) is served: its internal topic,
created on demand, and FindCoordinator's answer for one key.

    topic = InternalTopic(spec, topic_admin, endpoint, started=coordinator.ensure_started)
    found = topic.find_coordinator(key, image)   # the leader of the key's partition, or why none
    await topic.close()

The first FindCoordinator for a key asks the controllers to create the topic (one creation in
flight at a time) and answers COORDINATOR_NOT_AVAILABLE until it exists; clients retry, as
with Kafka's KafkaApis.getOrCreateInternalTopic. The replication factor is capped to the live
brokers with a WARNING, so a small cluster still gets its coordinators. The coordinator of a
key is the leader of partition `spec.partition_of(key, partitions)`. `__consumer_offsets`
(broker.group_coordinator.offsets_topic) and `__transaction_state`
(broker.transaction_coordinator.state_topic) are two specs of this one mechanism.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from common.errors import ErrorCode
from metadata.image import MetadataImage

log = logging.getLogger(__name__)
E = ErrorCode
TOPIC_ALREADY_EXISTS: Final = int(ErrorCode.TOPIC_ALREADY_EXISTS)
Endpoint = Callable[[MetadataImage, int], "tuple[str, int] | None"]


@dataclass(frozen=True, slots=True)
class Found:
    """One key's FindCoordinator answer: the leader of its internal-topic partition, or why
    there is none (`error`, `message`)."""

    error: ErrorCode
    node_id: int = -1
    host: str = ""
    port: int = -1
    message: str | None = None


@dataclass(frozen=True, slots=True)
class InternalTopicSpec:
    """What an internal topic is made of, from its coordinator's settings."""

    name: str
    partitions: int
    replication_factor: int
    replication_key: str  # the config that sets the replication factor, named in the warning
    partition_of: Callable[[str, int], int]  # (key, partition count) -> the key's partition
    configs: Callable[[int], dict[str, str]]  # its topic configs at the replication factor it gets


class InternalTopic:
    def __init__(self, spec: InternalTopicSpec, topic_admin: Any, endpoint: Endpoint, *,
                 started: Callable[[], None]) -> None:
        self.spec = spec
        self.topic_admin = topic_admin
        self._endpoint = endpoint
        self._started = started
        self._creating: asyncio.Task[None] | None = None

    def find_coordinator(self, key: str, image: MetadataImage) -> Found:
        name = self.spec.name
        topic = image.topic(name)
        if topic is None or not topic.partitions:
            self._create(image)
            return Found(E.COORDINATOR_NOT_AVAILABLE, message=f"{name} is being created")
        index = self.spec.partition_of(key, len(topic.partitions))
        partition = topic.partitions.get(index)
        leader = -1 if partition is None else partition.leader
        endpoint = self._endpoint(image, leader) if leader >= 0 else None
        if endpoint is None:
            return Found(E.COORDINATOR_NOT_AVAILABLE, message=f"partition {index} of {name} has no leader")
        self._started()
        return Found(E.NONE, leader, endpoint[0], endpoint[1])

    def _create(self, image: MetadataImage) -> None:
        if self._creating is not None or self.topic_admin is None:
            return
        spec = self.spec
        live = sum(1 for b in image.cluster.brokers.values() if not b.fenced)
        replication = spec.replication_factor
        if live < replication:
            replication = max(live, 1)
            log.warning("Creating %s with replication factor %d (configs %s): %s=%d but only %d broker(s) "
                        "are alive", spec.name, replication, spec.configs(replication), spec.replication_key,
                        spec.replication_factor, live)
        configs = spec.configs(replication)
        admin = self.topic_admin

        async def create() -> None:
            try:
                reply = await admin.create_topic(spec.name, spec.partitions, replication, configs)
                code, message = reply.error_code, reply.error_message
                if code not in (0, TOPIC_ALREADY_EXISTS):
                    log.warning("Creating %s failed: error %d: %s", spec.name, code, message)
                elif code == 0:
                    log.info("Created %s: %d partitions, replication factor %d, configs %s",
                             spec.name, spec.partitions, replication, configs)
            except Exception:  # noqa: BLE001 - the next FindCoordinator tries again
                log.exception("Creating %s failed", spec.name)
            finally:
                self._creating = None

        self._creating = asyncio.get_running_loop().create_task(create(), name=f"create-{spec.name}")

    async def close(self) -> None:
        if self._creating is not None:
            self._creating.cancel()
            await asyncio.gather(self._creating, return_exceptions=True)
