"""`__transaction_state` on demand, and FindCoordinator's answer for a transactional id.

The first FindCoordinator of key type TRANSACTION asks the controllers to create the topic
(`transaction.state.log.num.partitions`, `transaction.state.log.replication.factor` capped to
the live brokers with a WARNING) and answers COORDINATOR_NOT_AVAILABLE until it exists;
clients retry. Its configs are Kafka's TransactionStateManager.transactionTopicConfigs:
compacted (the latest state per transactional id stays, an expired id's tombstone goes after
`delete.retention.ms`), uncompressed, no unclean election, `min.insync.replicas` =
`transaction.state.log.min.isr` and `segment.bytes` = `transaction.state.log.segment.bytes`.
Where the replication factor had to be capped below `min.isr`, min.insync.replicas is capped
to it too (same WARNING): Kafka would create the topic and then refuse every write with
NOT_ENOUGH_REPLICAS, a coordinator that never works.
The coordinator of a transactional id is the leader of partition
abs(hashCode(transactional.id)) % partitions.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from broker.transaction_coordinator.coordinator import TransactionCoordinator, TxnSettings
from common.errors import ErrorCode
from metadata.image import MetadataImage
from transactions.partitioner import TRANSACTION_STATE_TOPIC_NAME, partition_for

log = logging.getLogger(__name__)
E = ErrorCode
TOPIC_ALREADY_EXISTS: Final = int(ErrorCode.TOPIC_ALREADY_EXISTS)


@dataclass(frozen=True, slots=True)
class Found:
    """One key's FindCoordinator answer."""

    error: ErrorCode
    node_id: int = -1
    host: str = ""
    port: int = -1
    message: str | None = None


def transaction_topic_configs(settings: TxnSettings, min_isr: int | None = None) -> dict[str, str]:
    return {"cleanup.policy": "compact", "compression.type": "uncompressed",
            "unclean.leader.election.enable": "false",
            "min.insync.replicas": str(settings.min_isr if min_isr is None else min_isr),
            "segment.bytes": str(settings.segment_bytes)}


class TransactionStateTopic:
    """Creates `__transaction_state` once (one creation in flight at a time) and finds
    transaction coordinators."""

    def __init__(self, coordinator: TransactionCoordinator, topic_admin: Any,
                 endpoint: Callable[[MetadataImage, int], tuple[str, int] | None]) -> None:
        self.coordinator = coordinator
        self.topic_admin = topic_admin
        self._endpoint = endpoint
        self._creating: asyncio.Task[None] | None = None

    def find_coordinator(self, transactional_id: str, image: MetadataImage) -> Found:
        topic = image.topic(TRANSACTION_STATE_TOPIC_NAME)
        if topic is None or not topic.partitions:
            self._create(image)
            return Found(E.COORDINATOR_NOT_AVAILABLE, message=f"{TRANSACTION_STATE_TOPIC_NAME} is being created")
        partition = topic.partitions.get(partition_for(transactional_id, len(topic.partitions)))
        leader = -1 if partition is None else partition.leader
        endpoint = self._endpoint(image, leader) if leader >= 0 else None
        if endpoint is None:
            return Found(E.COORDINATOR_NOT_AVAILABLE,
                         message="the transactional id's partition of __transaction_state has no leader")
        self.coordinator.ensure_started()
        return Found(E.NONE, leader, endpoint[0], endpoint[1])

    def _create(self, image: MetadataImage) -> None:
        if self._creating is not None or self.topic_admin is None:
            return
        settings = self.coordinator.settings
        live = sum(1 for b in image.cluster.brokers.values() if not b.fenced)
        replication, min_isr = settings.replication_factor, settings.min_isr
        if live < replication:
            replication = max(live, 1)
            min_isr = min(min_isr, replication)
            log.warning("Creating %s with replication factor %d and min.insync.replicas %d: "
                        "transaction.state.log.replication.factor=%d (transaction.state.log.min.isr=%d) "
                        "but only %d broker(s) are alive", TRANSACTION_STATE_TOPIC_NAME, replication, min_isr,
                        settings.replication_factor, settings.min_isr, live)
        admin = self.topic_admin

        async def create() -> None:
            try:
                reply = await admin.create_topic(TRANSACTION_STATE_TOPIC_NAME, settings.partitions, replication,
                                                 transaction_topic_configs(settings, min_isr))
                code, message = reply.error_code, reply.error_message
                if code not in (0, TOPIC_ALREADY_EXISTS):
                    log.warning("Creating %s failed: error %d: %s", TRANSACTION_STATE_TOPIC_NAME, code, message)
                elif code == 0:
                    log.info("Created %s: %d partitions, replication factor %d, min.insync.replicas %d, compacted",
                             TRANSACTION_STATE_TOPIC_NAME, settings.partitions, replication, min_isr)
            except Exception:  # noqa: BLE001 - the next FindCoordinator tries again
                log.exception("Creating %s failed", TRANSACTION_STATE_TOPIC_NAME)
            finally:
                self._creating = None

        self._creating = asyncio.get_running_loop().create_task(create(), name="create-transaction-state-topic")

    async def close(self) -> None:
        if self._creating is not None:
            self._creating.cancel()
            await asyncio.gather(self._creating, return_exceptions=True)
