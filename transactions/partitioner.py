"""Which `__transaction_state` partition coordinates a transactional id, and that topic's name.

Kafka's TransactionStateManager.partitionFor: `Utils.abs(transactionalId.hashCode()) %
transactionTopicPartitionCount`, the same function as the group coordinator's (Java's
String.hashCode, Kafka's abs), so tools that compute the coordinator agree with us.
"""

from __future__ import annotations

from typing import Final

from groups.partitioner import coordinator_partition

PURE = True

TRANSACTION_STATE_TOPIC_NAME: Final = "__transaction_state"


def partition_for(transactional_id: str, partition_count: int) -> int:
    return coordinator_partition(transactional_id, partition_count)
