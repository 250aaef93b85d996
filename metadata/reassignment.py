"""Partition reassignment rules (KIP-455), as Kafka's ReplicationControlManager applies
AlterPartitionReassignments: each returns one PartitionChange, None (nothing to change) or a
`ReassignmentRejected`; only replay changes state.

- `change_reassignment`: validate the target (Kafka's validateManualPartitionAssignment:
  not empty, no duplicate, every broker registered -- fenced ones are allowed, they catch up
  once back), then grow the replicas to target + current-not-in-target with the adding and
  removing sets. The same PartitionChangeBuilder step as every other change completes it at
  once when nothing is added (an RF decrease, or a target equal to the original replicas,
  which is how Kafka cancels by re-submitting them). A target equal to the current replicas
  of a partition not being reassigned changes nothing.
- `cancel_reassignment`: NO_REASSIGNMENT_IN_PROGRESS when none runs; else Kafka's revert
  (the adding replicas leave the replicas and the ISR), refused with
  INVALID_REPLICA_ASSIGNMENT when no original replica is left in the ISR and the topic does
  not allow an unclean election.
- `list_reassignments`: the partitions being reassigned (ListPartitionReassignments).

Completion on a later ISR change is not here: every rule of `metadata.partition_change`
completes a running reassignment once its target ISR allows it (AlterPartition above all).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from common.errors import ErrorCode
from metadata.image import BrokerRegistration, MetadataImage, PartitionRegistration
from metadata.partition_change import Election, IsAcceptable, _build
from metadata.reassignment_replicas import reassignment_replicas, revert
from metadata.records import PartitionChange


@dataclass(frozen=True, slots=True)
class ReassignmentRejected:
    """A reassignment refused for one partition: Kafka's error code and why, in words."""

    error: ErrorCode
    message: str


@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    """ListPartitionReassignmentsResponse's OngoingPartitionReassignment."""

    topic: str
    partition_id: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


def validate_target(target: Sequence[int],
                    broker_lookup: Callable[[int], BrokerRegistration | None]) -> ReassignmentRejected | None:
    """Kafka's validateManualPartitionAssignment, with its messages, checking ids in sorted order."""
    bad = ErrorCode.INVALID_REPLICA_ASSIGNMENT
    if not target:
        return ReassignmentRejected(bad, "The manual partition assignment includes an empty replica list.")
    previous = None
    for broker_id in sorted(target):
        if broker_id < 0 or broker_lookup(broker_id) is None:
            return ReassignmentRejected(bad, f"The manual partition assignment includes broker {broker_id}, "
                                        "but no such broker is registered.")
        if broker_id == previous:
            return ReassignmentRejected(bad, f"The manual partition assignment includes the broker "
                                        f"{broker_id} more than once.")
        previous = broker_id
    return None


def change_reassignment(partition: PartitionRegistration, target: Sequence[int], *,
                        broker_lookup: Callable[[int], BrokerRegistration | None],
                        is_acceptable: IsAcceptable, elr_enabled: bool = False, min_insync_replicas: int = 1,
                        ) -> ReassignmentRejected | PartitionChange | None:
    """Start (or replace) a reassignment of `partition` to `target`."""
    rejected = validate_target(target, broker_lookup)
    if rejected is not None:
        return rejected
    moves = reassignment_replicas(partition.replicas, tuple(target))
    return _build(partition, target_isr=partition.isr, is_acceptable=is_acceptable, election=Election.ONLINE,
                  elr_enabled=elr_enabled, min_insync_replicas=min_insync_replicas,
                  target_replicas=moves.replicas, target_adding=moves.adding, target_removing=moves.removing)


def cancel_reassignment(partition: PartitionRegistration, *, topic_name: str, is_acceptable: IsAcceptable,
                        unclean_allowed: bool = False, elr_enabled: bool = False, min_insync_replicas: int = 1,
                        ) -> ReassignmentRejected | PartitionChange | None:
    """Revert a running reassignment to the original replicas."""
    if not partition.is_reassigning:
        return ReassignmentRejected(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                                    "No partition reassignment is in progress for this topic-partition.")
    back = revert(partition.replicas, partition.isr, partition.adding_replicas)
    if back.unclean and not unclean_allowed:
        return ReassignmentRejected(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                    f"Unable to revert partition assignment for {topic_name}:"
                                    f"{partition.partition_id} because it would require an unclean "
                                    "leader election.")
    change = _build(partition, target_isr=back.isr, is_acceptable=is_acceptable, election=Election.ONLINE,
                    unclean_allowed=unclean_allowed, elr_enabled=elr_enabled,
                    min_insync_replicas=min_insync_replicas,
                    target_replicas=back.replicas, target_adding=(), target_removing=())
    if back.unclean and (change is None or change.isr is None):
        return ReassignmentRejected(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                    f"Unable to revert partition assignment for {topic_name}:"
                                    f"{partition.partition_id}: no original replica can lead it.")
    return change


def list_reassignments(image: MetadataImage,
                       partitions: Iterable[tuple[str, int]] | None = None) -> tuple[OngoingReassignment, ...]:
    """The partitions being reassigned, by topic name and partition id; `partitions` (None: all)
    narrows the answer, and an unknown one is left out, as Kafka's listPartitionReassignments does."""
    if partitions is None:  # the running ones (kept by replay), not a pass over every partition
        by_id = image.topics.by_id
        wanted = sorted((by_id[topic_id].name, p) for topic_id, p in image.topics.reassigning)
    else:
        wanted = list(dict.fromkeys(partitions))
    out = []
    for name, partition_id in wanted:
        topic = image.topic(name)
        partition = None if topic is None else topic.partitions.get(partition_id)
        if partition is not None and partition.is_reassigning:
            out.append(OngoingReassignment(name, partition_id, partition.replicas, partition.adding_replicas,
                                           partition.removing_replicas))
    return tuple(out)
