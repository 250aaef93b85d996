"""A broker's failed replicas: the controller's rule, pure (records out, no state changed).

A broker that cannot create or open one partition's files (an OSError: EMFILE, ENOSPC, EACCES,
ENOTDIR...) keeps serving the rest and reports that replica offline in every heartbeat
(`BrokerHeartbeatRequest.offline_replicas`). The active controller then writes, per decision:

- `OfflineReplicas(broker, broker_epoch, topic_id, partition_ids)`: replayed into the broker's
  registration, so every image knows the replica failed (Metadata's offline_replicas, the
  admin API's describe, the ISR rules) until the broker registers again with a new epoch;
- for each such partition the broker leads or is in the ISR of, `remove_from_isr`: it leaves
  the ISR and, where it led, another in-sync replica is elected, with the topic's
  unclean.leader.election.enable, min.insync.replicas and ELR settings, as fencing does.

Kafka's KRaft controller does the same for a whole log dir (BrokerHeartbeatRequest
OfflineLogDirs -> ReplicationControlManager.handleDirectoriesOffline, which calls
generateLeaderAndIsrUpdates with the partitions of that dir); the ZooKeeper-era controller
did it per replica (onReplicasBecomeOffline on a LogDirEventNotification). tidelog fails one
replica, not its directory, so the heartbeat names replicas.

No-ops, decided here: a stale broker epoch (an old incarnation's heartbeat), a replica
already recorded offline, a partition or topic that no longer exists, a broker that is not
one of the partition's replicas. One decision takes at most `MAX_OFFLINE_REPLICAS_PER_DECISION`
replicas; the broker repeats the rest in its next heartbeat.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from metadata.image import MetadataImage, PartitionRegistration
from metadata.partition_change import remove_from_isr
from metadata.records import OfflineReplicas, Record
from quorum.controller_result import ControllerResult
from quorum.topic_control import topic_election_config

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

# Replicas one decision marks offline: each may add a PartitionChange, and a broker that failed
# thousands of replicas (EMFILE) must not hold the controller's queue for one huge decision.
MAX_OFFLINE_REPLICAS_PER_DECISION: Final = 1000


@dataclass(frozen=True, slots=True)
class OfflineReplicasMarked:
    """What one decision did, for the controller's log: (topic name, partition) marked offline,
    and how many of those lost their leader here (the broker led them)."""

    broker_id: int
    broker_epoch: int
    replicas: tuple[tuple[str, int], ...]
    leaders_moved: int


def news(image: MetadataImage, broker_id: int, broker_epoch: int,
         reported: Iterable[tuple[str, int]]) -> bool:
    """Whether a heartbeat's offline replicas hold anything `handle_offline_replicas` would act
    on (cheap: checked before queueing a decision, on every heartbeat that reports any)."""
    registration = image.broker(broker_id)
    if registration is None or registration.broker_epoch != broker_epoch:
        return False
    return any(_is_new(image, broker_id, registration.offline_replicas, key) for key in reported)


def _is_new(image: MetadataImage, broker_id: int, known: frozenset[tuple[str, int]],
            key: tuple[str, int]) -> bool:
    if key in known:
        return False
    partition = image.partition(*key)
    return partition is not None and broker_id in partition.replicas


def failed_isr_members(image: MetadataImage, topic_id: str, partition_id: int,
                       isr: Iterable[int]) -> list[int]:
    """Members of an AlterPartition's proposed ISR whose replica of this partition failed: the
    leader never brings one back (Kafka refuses an ineligible replica with INELIGIBLE_REPLICA;
    a failed replica is ineligible until its broker registers again)."""
    out = []
    for broker_id in isr:
        registration = image.broker(broker_id)
        if registration is not None and registration.is_replica_offline(topic_id, partition_id):
            out.append(broker_id)
    return out


def handle_offline_replicas(image: MetadataImage, *, broker_id: int, broker_epoch: int,
                            reported: Iterable[tuple[str, int]],
                            limit: int = MAX_OFFLINE_REPLICAS_PER_DECISION
                            ) -> ControllerResult[OfflineReplicasMarked]:
    """The records that mark `reported` (topic_id, partition_id) replicas of `broker_id` offline
    and move them out of their ISR and leadership; none when nothing is new."""
    registration = image.broker(broker_id)
    if registration is None or registration.broker_epoch != broker_epoch:
        return ControllerResult([], OfflineReplicasMarked(broker_id, broker_epoch, (), 0))
    known = registration.offline_replicas
    new = sorted({key for key in reported if _is_new(image, broker_id, known, key)})[:limit]
    by_topic: dict[str, list[int]] = {}
    for topic_id, partition_id in new:
        by_topic.setdefault(topic_id, []).append(partition_id)
    records: list[Record] = [OfflineReplicas(broker_id, broker_epoch, topic_id, tuple(ids))
                             for topic_id, ids in by_topic.items()]
    marked: list[tuple[str, int]] = []
    leaders_moved = 0
    for topic_id, ids in by_topic.items():
        topic = image.topic_by_id(topic_id)
        assert topic is not None  # _is_new found its partitions
        config = topic_election_config(image, topic.name)
        for partition_id in ids:
            partition = topic.partitions[partition_id]
            marked.append((topic.name, partition_id))
            if broker_id not in partition.isr and partition.leader != broker_id:
                continue  # already out of the ISR (lagging, or fenced before): nothing to move
            change = remove_from_isr(partition, broker_id, is_acceptable=_acceptable(image, partition),
                                     unclean_allowed=config.unclean_allowed, elr_enabled=config.elr_enabled,
                                     min_insync_replicas=config.min_insync_replicas)
            if change is not None:
                records.append(change)
                leaders_moved += partition.leader == broker_id
    return ControllerResult(records, OfflineReplicasMarked(broker_id, broker_epoch, tuple(marked), leaders_moved))


def _acceptable(image: MetadataImage, partition: PartitionRegistration) -> Callable[[int], bool]:
    """A leader candidate: an active broker whose replica of this partition has not failed
    (`remove_from_isr` never elects the reporting broker itself)."""
    key = (partition.topic_id, partition.partition_id)

    def acceptable(broker_id: int) -> bool:
        registration = image.broker(broker_id)
        return (registration is not None and registration.is_active
                and not registration.is_replica_offline(*key))
    return acceptable
