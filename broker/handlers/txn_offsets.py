"""TxnOffsetCommit (API 28): a transactional producer's consumer offsets (KIP-98, KIP-447).

    response = await handle_txn_offset_commit(ctx, request, version, client)

Kafka's KafkaApis.handleTxnOffsetCommitRequest and GroupCoordinator.commitTransactionalOffsets:
the group's coordinator writes OffsetCommit records as the producer's transactional batch
(its id and epoch), pending (invisible to OffsetFetch) until the transaction coordinator's
WriteTxnMarkers commits or aborts them (`GroupCoordinator.complete_transaction`). A partition
of a topic this cluster does not know answers UNKNOWN_TOPIC_OR_PARTITION alone; v3+ (KIP-447)
carry the member id, generation and group instance id, checked as an OffsetCommit's are
(`groups/txn_offsets.py`). The request is on kio's generated messages at every version.

KIP-890, as Kafka's GroupCoordinatorService.commitTransactionalOffsets (its runtime's
maybeStartTransactionVerification): before the offsets join the producer's transaction, the
transaction coordinator vouches that the group's `__consumer_offsets` partition is in it. v0-v4
only ask (the client's AddOffsetsToTxn added it); v5 (transactions v2, whose client sends no
AddOffsetsToTxn) has the coordinator add it, starting the transaction if none is open.
A coordinator that cannot answer now is COORDINATOR_NOT_AVAILABLE to the client (Kafka's
GroupCoordinatorService.normalizeException of NOT_ENOUGH_REPLICAS), which it retries.
"""

from __future__ import annotations

from typing import Any

from broker.coordinator.errors import CoordinatorError
from broker.handlers.context import BrokerContext, ClientInfo
from broker.txn_verification import finish_verification, needs_verification, start_verification
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.topic_partition import TopicPartition
from groups.offsets import CommitPartition
from groups.partitioner import GROUP_METADATA_TOPIC_NAME
from groups.txn_offsets import NO_GENERATION, TxnCommitRequest

E = ErrorCode
NO_LEADER_EPOCH = -1  # v0-v1 carry no committed_leader_epoch
TV2_VERSION = 5  # TxnOffsetCommit v5: a transactions v2 client (no AddOffsetsToTxn before it)


async def handle_txn_offset_commit(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's TxnOffsetCommitRequest of `version`; the answer its response."""
    m = messages.response_module(ApiKey.TXN_OFFSET_COMMIT, version)
    codes: dict[tuple[str, int], ErrorCode] = {}
    image = ctx.groups.image()
    known: list[CommitPartition] = []
    for t in req.topics:
        for p in t.partitions:
            if image.topic(t.name) is None:
                codes[(t.name, p.partition_index)] = E.UNKNOWN_TOPIC_OR_PARTITION
            else:
                known.append(CommitPartition(t.name, p.partition_index, p.committed_offset,
                                             getattr(p, "committed_leader_epoch", NO_LEADER_EPOCH),
                                             p.committed_metadata))
    if known:
        codes.update(await _commit(ctx, req, version, tuple(known)))
    topics: dict[str, list[Any]] = {}
    for t in req.topics:  # answered in the request's order
        for p in t.partitions:
            topics.setdefault(t.name, []).append(m.TxnOffsetCommitResponsePartition(
                partition_index=p.partition_index, error_code=messages.error_code(codes[(t.name, p.partition_index)])))
    return m.TxnOffsetCommitResponse(throttle_time=messages.NO_THROTTLE, topics=tuple(
        m.TxnOffsetCommitResponseTopic(name=name, partitions=tuple(parts)) for name, parts in topics.items()))


async def _commit(ctx: BrokerContext, req: Any, version: int,
                  parts: tuple[CommitPartition, ...]) -> dict[tuple[str, int], ErrorCode]:
    coord = ctx.groups
    try:
        partition = coord.partition_for(req.group_id)
    except CoordinatorError as e:
        return {(p.topic, p.partition): e.code for p in parts}
    refused = await _verify(ctx, req, version, partition)
    if refused is not E.NONE:
        return {(p.topic, p.partition): refused for p in parts}
    core = TxnCommitRequest(req.group_id, req.producer_id, req.producer_epoch, parts,
                            getattr(req, "generation_id", NO_GENERATION), getattr(req, "member_id", ""),
                            getattr(req, "group_instance_id", None))
    answers, error = await coord.txn_commit_offsets(partition, core)
    return {(topic, index): error if code is E.NONE and error is not E.NONE else code
            for topic, index, code in answers}


async def _verify(ctx: BrokerContext, req: Any, version: int, partition: int) -> ErrorCode:
    """The transaction coordinator's word that `__consumer_offsets`-`partition` is in the
    producer's transaction (v5: added to it); NONE once it is, or the error to answer."""
    if ctx.txn_verifier is None:
        return E.NONE
    tp = TopicPartition(GROUP_METADATA_TOPIC_NAME, partition)
    hosted = ctx.replicas.get_partition(tp)
    if hosted is None:
        return E.NOT_COORDINATOR
    if not needs_verification(hosted, req.producer_id, req.producer_epoch):
        return E.NONE
    guard = start_verification(hosted, req.producer_id, req.producer_epoch)
    codes = await ctx.txn_verifier.verify(ctx.image(), req.transactional_id, req.producer_id, req.producer_epoch,
                                          [tp], add=version >= TV2_VERSION)
    code = codes[tp]
    if code is E.NOT_ENOUGH_REPLICAS:  # the verifier's "retry" (Produce's), a group client's retriable one
        code = E.COORDINATOR_NOT_AVAILABLE
    return finish_verification(hosted, req.producer_id, guard, code)
