"""Replication rules: a leader's AlterPartition, and operator-requested leader elections.

Kafka's ReplicationControlManager.alterPartition and electLeaders over the committed
image. The ISR and election rules themselves live in `metadata.partition_change`; this
module finds the partition, checks the requester and turns outcomes into Kafka's errors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from common.errors import ErrorCode
from common.rpc_messages import AlterPartitionRequest, AlterPartitionTopic, AlterPartitionTopicReply
from common.rpc_messages import AlterPartitionReply as AlterPartitionRpcReply
from metadata.delta import merge_partition_change
from metadata.image import MetadataImage, PartitionRegistration
from metadata.partition_change import (
    AlterPartitionRejected,
    Election,
    IsrMember,
    alter_partition,
    elect_leader,
)
from metadata.records import LeaderRecoveryState, PartitionChange
from quorum.broker_control import check_broker_epoch
from quorum.controller_result import MAX_PARTITIONS_PER_DECISION, ControllerApiError, ControllerResult, PartitionKey
from quorum.topic_control import topic_election_config

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)


# The request field each AlterPartition rejection points at.
_ALTER_FIELDS: dict[ErrorCode, str | None] = {
    ErrorCode.FENCED_LEADER_EPOCH: "leader_epoch",
    ErrorCode.INVALID_UPDATE_VERSION: "partition_epoch",
    ErrorCode.INELIGIBLE_REPLICA: "new_isr",
    ErrorCode.INVALID_REQUEST: None,
    ErrorCode.NOT_CONTROLLER: None,
}


def alter_partition_batches(request: AlterPartitionRequest,
                            limit: int = MAX_PARTITIONS_PER_DECISION) -> list[AlterPartitionRequest]:
    """The request cut into requests of at most `limit` partitions, in its order (a topic's
    partitions may span two), each a decision of its own. A broker sends up to 5,000 ISR changes
    in one request (a restart's rejoin is bounded by its round trips): as one decision, its
    5,000 records held the active controller's event loop 0.3-0.9 s each, at 100,000 partitions,
    above the 1 s heartbeats may wait; the other bounded decisions (`MAX_PARTITIONS_PER_DECISION`)
    stay at a fifth of that. Kafka answers each partition on its own, so the cut changes no answer."""
    if limit < 1:
        raise ValueError(f"limit must be positive, not {limit}")
    batches: list[AlterPartitionRequest] = []
    topics: list[AlterPartitionTopic] = []
    room = limit
    for topic in request.topics:  # bounded by the request's partitions
        partitions = topic.partitions
        while True:  # bounded: each pass takes `room` partitions or ends the topic
            taken, partitions = partitions[:room], partitions[room:]
            if taken or not topic.partitions:  # a topic without partitions is kept as sent
                topics.append(AlterPartitionTopic(topic.topic_id, taken))
            room -= len(taken)
            if room == 0:
                batches.append(AlterPartitionRequest(request.broker_id, request.broker_epoch, tuple(topics)))
                topics, room = [], limit
            if not partitions:
                break
    if topics or not batches:
        batches.append(AlterPartitionRequest(request.broker_id, request.broker_epoch, tuple(topics)))
    return batches


def merged_alter_partition_replies(replies: Sequence[AlterPartitionRpcReply]) -> AlterPartitionRpcReply:
    """The replies of `alter_partition_batches`' requests as one: each topic once, in order, a
    topic cut across two batches joined again."""
    merged: dict[str, list[AlterPartitionTopicReply]] = {}
    for reply in replies:  # bounded by the batches
        for topic in reply.topics:
            merged.setdefault(topic.topic_id, []).append(topic)
    return AlterPartitionRpcReply(tuple(
        parts[0] if len(parts) == 1 else AlterPartitionTopicReply(
            topic_id, tuple(answer for part in parts for answer in part.partitions))
        for topic_id, parts in merged.items()))


@dataclass(frozen=True, slots=True)
class AlterPartitionReply:
    """AlterPartitionResponse.PartitionData: the partition as it stands once the records commit."""

    partition_id: int
    leader_id: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    leader_recovery_state: LeaderRecoveryState


def handle_alter_partition(image: MetadataImage, *, broker_id: int, broker_epoch: int, topic_id: str,
                           partition_id: int, leader_epoch: int, partition_epoch: int,
                           new_isr: Sequence[IsrMember], leader_recovery_state: LeaderRecoveryState | int,
                           ) -> ControllerResult[AlterPartitionReply]:
    """AlterPartition from the partition's leader: one PartitionChange (none if nothing changes)."""
    check_broker_epoch(image, broker_id, broker_epoch)
    topic = image.topic_by_id(topic_id)
    if topic is None:
        raise ControllerApiError(ErrorCode.UNKNOWN_TOPIC_ID, f"No topic with id {topic_id}.",
                                 field="topic_id")
    partition = topic.partitions.get(partition_id)
    if partition is None:
        raise ControllerApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"No such partition as {topic.name}-{partition_id}.", field="partition_id")
    config = topic_election_config(image, topic.name)
    outcome = alter_partition(partition, leader_id=broker_id, leader_epoch=leader_epoch,
                              partition_epoch=partition_epoch, new_isr=new_isr, broker_lookup=image.broker,
                              leader_recovery_state=leader_recovery_state,  # type: ignore[arg-type]
                              elr_enabled=config.elr_enabled, min_insync_replicas=config.min_insync_replicas)
    if isinstance(outcome, AlterPartitionRejected):
        raise ControllerApiError(ErrorCode(outcome.error), outcome.message,
                                 field=_ALTER_FIELDS.get(outcome.error))
    after = partition if outcome is None else merge_partition_change(partition, outcome)
    reply = AlterPartitionReply(partition_id, after.leader, after.leader_epoch, after.isr,
                                after.partition_epoch, after.leader_recovery_state)
    return ControllerResult(() if outcome is None else (outcome,), reply)


def _elect_one(image: MetadataImage, topic_name: str, partition: PartitionRegistration,
               election: Election, is_active: Callable[[int], bool]) -> tuple[ErrorCode, PartitionChange | None]:
    """Kafka's electLeader for one existing partition: (error, record)."""
    if (election is Election.PREFERRED and partition.leader == partition.preferred_replica) \
            or (election is Election.UNCLEAN and partition.has_leader):
        return ErrorCode.ELECTION_NOT_NEEDED, None
    config = topic_election_config(image, topic_name)
    change = elect_leader(partition, is_acceptable=is_active, election=election,
                          unclean_allowed=config.unclean_allowed, elr_enabled=config.elr_enabled,
                          min_insync_replicas=config.min_insync_replicas)
    if change is None:
        return (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE if election is Election.PREFERRED
                else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE), None
    return ErrorCode.NONE, change


def elect_leaders(image: MetadataImage, *, election: Election, partitions: Sequence[PartitionKey] | None,
                  max_elections: int | None = None) -> ControllerResult[dict[PartitionKey, ErrorCode]]:
    """ElectLeaders (PREFERRED or UNCLEAN); None means every partition, leaving out ELECTION_NOT_NEEDED.

    `max_elections` (with every partition only): stop once that many leaders were elected, as
    Kafka's periodic preferred-leader balancing stops at MAX_ELECTIONS_PER_IMBALANCE and runs
    again at once; the partitions after it are left for that next run (`more_elections_left`)."""
    if election not in (Election.PREFERRED, Election.UNCLEAN):
        raise ControllerApiError(ErrorCode.INVALID_REQUEST,
                                 f"Unknown election type {election!r}: expected PREFERRED or UNCLEAN",
                                 field="election")

    def is_active(broker_id: int) -> bool:
        registration = image.broker(broker_id)
        return registration is not None and registration.is_active

    if partitions is None:
        wanted = [(name, p) for name in sorted(image.topics.by_name)
                  for p in sorted(image.topics.by_name[name].partitions)]
    else:
        wanted = list(dict.fromkeys(partitions))  # one election per partition, in request order
    records: list[PartitionChange] = []
    results: dict[PartitionKey, ErrorCode] = {}
    for name, partition_id in wanted:  # bounded by the partitions, or by max_elections
        if max_elections is not None and partitions is None and len(records) >= max_elections:
            break
        topic = image.topic(name)
        partition = None if topic is None else topic.partitions.get(partition_id)
        if partition is None:
            results[(name, partition_id)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            continue
        error, change = _elect_one(image, name, partition, election, is_active)
        if change is not None:
            records.append(change)
        if partitions is not None or error is not ErrorCode.ELECTION_NOT_NEEDED:
            results[(name, partition_id)] = error
    return ControllerResult(records, results)


def more_elections_left(results: dict[PartitionKey, ErrorCode], max_elections: int) -> bool:
    """Whether an `elect_leaders` bounded by `max_elections` stopped with partitions left."""
    return sum(1 for code in results.values() if code is ErrorCode.NONE) >= max_elections


def unclean_elections(image: MetadataImage, records: Sequence[object]) -> list[str]:
    """One operator line for each record electing a leader from outside the ISR: unclean ones
    (RECOVERING), worded as Kafka's controller does (which partition, who leads, whom the ISR
    held), and clean ones from the ELR (KIP-966: the ISR was empty and the new leader is an
    eligible leader replica, which has every committed record). Elections from the ISR are
    the ordinary case and get no line here."""
    lines = []
    for record in records:
        if not isinstance(record, PartitionChange) or record.leader is None or record.leader < 0:
            continue
        topic = image.topic_by_id(record.topic_id)
        before = None if topic is None else topic.partitions.get(record.partition_id)
        name = f"{topic.name if topic else record.topic_id}-{record.partition_id}"
        if record.leader_recovery_state is LeaderRecoveryState.RECOVERING:
            if before is None:
                lines.append(f"Unclean leader election for {name}: broker {record.leader} leads")
                continue
            lines.append(f"Unclean leader election for {name}: broker {record.leader} leads at leader epoch "
                         f"{before.leader_epoch + 1} though not in the ISR {list(before.isr)}; records only "
                         "the old ISR had are lost")
        elif before is not None and record.leader != before.leader and record.leader not in before.isr \
                and record.leader in before.elr:
            lines.append(f"Leader election from the ELR for {name}: broker {record.leader} leads at leader epoch "
                         f"{before.leader_epoch + 1}; the ISR {list(before.isr)} had no live member and broker "
                         f"{record.leader} is an eligible leader replica (ELR {list(before.elr)}), which has every "
                         "committed record (KIP-966): a clean election")
    return lines
