"""`__transaction_state`: the transaction coordinator's internal topic (broker.coordinator.location).

Created on the first FindCoordinator of key type TRANSACTION with
`transaction.state.log.num.partitions` and `transaction.state.log.replication.factor` (capped
to the live brokers with a WARNING). Its configs are Kafka's TransactionStateManager.transactionTopicConfigs:
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

from typing import Any

from broker.coordinator.location import Endpoint, InternalTopic, InternalTopicSpec
from broker.transaction_coordinator.coordinator import TransactionCoordinator, TxnSettings
from transactions.partitioner import TRANSACTION_STATE_TOPIC_NAME, partition_for


def transaction_topic_configs(settings: TxnSettings, replication: int) -> dict[str, str]:
    """Kafka's TransactionStateManager.transactionTopicConfigs, at the replication factor the
    topic gets: min.insync.replicas capped to it when the live brokers capped it."""
    min_isr = min(settings.min_isr, replication) if replication < settings.replication_factor else settings.min_isr
    return {"cleanup.policy": "compact", "compression.type": "uncompressed",
            "unclean.leader.election.enable": "false", "min.insync.replicas": str(min_isr),
            "segment.bytes": str(settings.segment_bytes)}


def transaction_state_topic(coordinator: TransactionCoordinator, topic_admin: Any, endpoint: Endpoint) -> InternalTopic:
    settings = coordinator.settings
    spec = InternalTopicSpec(TRANSACTION_STATE_TOPIC_NAME, settings.partitions, settings.replication_factor,
                             "transaction.state.log.replication.factor", partition_for,
                             lambda replication: transaction_topic_configs(settings, replication))
    return InternalTopic(spec, topic_admin, endpoint, started=coordinator.ensure_started)
