"""AlterPartitionReassignments on the active controller: Kafka's
ReplicationControlManager.alterPartitionReassignments over the committed image.

The rules themselves live in `metadata.reassignment`; this module finds each partition,
reads its topic's election config and gathers one answer per partition, Kafka's way: each
partition succeeds or fails on its own (ControllerResult.of, not atomic). Entries naming the
same partition twice see each other's effect, in request order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from common.errors import ErrorCode
from metadata.delta import merge_partition_change
from metadata.image import MetadataImage, PartitionRegistration
from metadata.partition_change import elect_leader
from metadata.reassignment import (
    ReassignmentRejected,
    cancel_reassignment,
    change_reassignment,
)
from metadata.records import PartitionChange
from quorum.controller_result import ControllerResult
from quorum.topic_control import TopicElectionConfig, topic_election_config


@dataclass(frozen=True, slots=True)
class ReassignmentRequest:
    """One ReassignablePartition: target replicas, or None to cancel."""

    topic: str
    partition_id: int
    replicas: tuple[int, ...] | None


@dataclass(frozen=True, slots=True)
class ReassignmentResult:
    """ReassignablePartitionResponse: NONE, or Kafka's error code and message."""

    topic: str
    partition_id: int
    error: ErrorCode
    message: str | None = None


def _is_active(image: MetadataImage) -> Callable[[int], bool]:
    def is_active(broker_id: int) -> bool:
        registration = image.broker(broker_id)
        return registration is not None and registration.is_active
    return is_active


def _one(image: MetadataImage, partition: PartitionRegistration, req: ReassignmentRequest
         ) -> ReassignmentRejected | PartitionChange | None:
    config = topic_election_config(image, req.topic)
    if req.replicas is None:
        return cancel_reassignment(partition, topic_name=req.topic, is_acceptable=_is_active(image),
                                   unclean_allowed=config.unclean_allowed, elr_enabled=config.elr_enabled,
                                   min_insync_replicas=config.min_insync_replicas)
    return change_reassignment(partition, req.replicas, broker_lookup=image.broker,
                               is_acceptable=_is_active(image), elr_enabled=config.elr_enabled,
                               min_insync_replicas=config.min_insync_replicas)


def alter_partition_reassignments(image: MetadataImage, requests: Sequence[ReassignmentRequest],
                                  ) -> ControllerResult[tuple[ReassignmentResult, ...]]:
    """One PartitionChange per partition that changes; one result per request entry."""
    records: list[PartitionChange] = []
    results: list[ReassignmentResult] = []
    working: dict[tuple[str, int], PartitionRegistration] = {}
    for req in requests:
        key = (req.topic, req.partition_id)
        topic = image.topic(req.topic)
        partition = working.get(key) or (None if topic is None else topic.partitions.get(req.partition_id))
        if partition is None:
            results.append(ReassignmentResult(req.topic, req.partition_id, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                              f"Unable to find partition {req.topic}:{req.partition_id}."))
            continue
        outcome = _one(image, partition, req)
        if isinstance(outcome, ReassignmentRejected):
            results.append(ReassignmentResult(req.topic, req.partition_id, outcome.error, outcome.message))
            continue
        if outcome is not None:
            records.append(outcome)
            working[key] = merge_partition_change(partition, outcome)
        results.append(ReassignmentResult(req.topic, req.partition_id, ErrorCode.NONE))
    return ControllerResult(records, tuple(results))


def complete_reassignments(image: MetadataImage) -> ControllerResult[int]:
    """Complete every reassignment whose ISR already allows it (a controller that just became
    active, or one whose completion was lost with its predecessor); the count completed.

    Reads only the partitions being reassigned (`TopicsImage.reassigning`, kept by replay as
    Kafka keeps reassigningTopics), in topic name and partition order: its cost follows the
    running reassignments, not the cluster's partition count."""
    records: list[PartitionChange] = []
    configs: dict[str, TopicElectionConfig] = {}
    by_id = image.topics.by_id
    for topic_id, partition_id in sorted(image.topics.reassigning,
                                         key=lambda key: (by_id[key[0]].name, key[1])):
        topic = by_id[topic_id]
        partition = topic.partitions[partition_id]
        config = configs.get(topic.name)
        if config is None:  # one lookup per topic
            config = configs[topic.name] = topic_election_config(image, topic.name)
        change = elect_leader(partition, is_acceptable=_is_active(image), unclean_allowed=config.unclean_allowed,
                              elr_enabled=config.elr_enabled, min_insync_replicas=config.min_insync_replicas)
        if change is not None and not merge_partition_change(partition, change).is_reassigning:
            records.append(change)
    return ControllerResult(records, len(records))
