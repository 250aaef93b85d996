"""Produce.

Produce appends every partition before it returns or awaits, so appends follow request order
(`produce_now` runs in the server's read loop; acks 0 and 1 are answered there, with no
task); acks=all then waits for the appended
partitions together, with the request's one deadline (Kafka's DelayedProduce). From v10
(KIP-951) a partition answered NOT_LEADER_OR_FOLLOWER names the leader this broker knows of,
and the response carries that leader's endpoint, so the client retries there at once. A batch
the log validator rejects for some of its records (KIP-467) names them in `record_errors`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Final

from broker.handlers.context import BrokerContext, ClientInfo
from broker.handlers.leader_discovery import LeaderHint, lookup_leader, node_endpoints
from broker.replication.partition import VerificationGuard
from broker.server import Later
from broker.txn_verification import (
    TV2_PRODUCE_VERSION,
    finish_verification,
    needs_verification,
    start_verification,
    transactional_producer,
)
from common.topic_partition import TopicPartition
from common.errors import ErrorCode, KafkaError
from common.protocol import produce
from common.units import SECOND_MS
from metadata.image import MetadataImage

log = logging.getLogger(__name__)

NOT_REPLICATED: Final = "not replicated to the ISR within the request timeout"
NOT_LEADER_OR_FOLLOWER: Final = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
PartitionProduceResponse: Final = produce.PartitionProduceResponse
UNKNOWN_LEADER: Final = produce.UNKNOWN_LEADER

# (partition response, offset the HW must pass for acks=all) per partition, per topic
_Results = list[tuple[str, list[tuple[produce.PartitionProduceResponse, int]]]]


def produce_now(ctx: BrokerContext, req: produce.ProduceRequest, version: int,
                client: ClientInfo) -> produce.ProduceResponse | None | Later[produce.ProduceResponse] \
        | Later[produce.ProduceResponse | None]:
    """Append now (request order); answer now unless acks=all must wait, or a transactional
    batch must first be verified with its coordinator (KIP-890), then `Later`."""
    if req.transactional_id is not None and ctx.txn_verifier is not None:
        unverified = _unverified(ctx, req)
        if unverified is not None:
            return Later(_verify_then_produce(ctx, req, version, *unverified))
    return _produce(ctx, req, version)


def _produce(ctx: BrokerContext, req: produce.ProduceRequest, version: int,
             refused: Mapping[TopicPartition, ErrorCode] | None = None
             ) -> produce.ProduceResponse | None | Later[produce.ProduceResponse]:
    results, required = _append_all(ctx, req, refused or {})
    if req.acks == 0:
        return None
    if req.acks == -1:
        if required:
            # The answer is built where the HW move decides it (`ReplicaManager.watch_replication`):
            # no task or coroutine per acks=all produce waits for it. One deadline for the
            # request, never one per partition.
            answer = ctx.replicas.watch_replication(
                required, max(req.timeout_ms, 0) / SECOND_MS,
                lambda codes: _response(ctx, _with_codes(results, codes), version))
            return answer.result() if answer.done() else Later(answer)
    return _response(ctx, results, version)


def _unverified(ctx: BrokerContext, req: produce.ProduceRequest
                ) -> tuple[tuple[int, int], list[TopicPartition], list[VerificationGuard]] | None:
    """(producer id and epoch, partitions, their guards) whose transactional batch would start a
    transaction the coordinator has not vouched for here; None when no partition needs it."""
    producer = None
    tps, guards = [], []
    for topic in req.topic_data:
        for p in topic.partition_data:
            found = transactional_producer(p.records)
            partition = ctx.replicas.get_partition(TopicPartition(topic.name, p.index))
            if found is None or partition is None or not partition.is_leader(ctx.broker_id) \
                    or not needs_verification(partition, *found):
                continue  # the append answers what is not verifiable (not leader, ...)
            producer = found
            tps.append(partition.tp)
            guards.append(start_verification(partition, *found))
    return None if producer is None else (producer, tps, guards)


async def _verify_then_produce(ctx: BrokerContext, req: produce.ProduceRequest, version: int,
                               producer: tuple[int, int], tps: list[TopicPartition],
                               guards: list[VerificationGuard]) -> produce.ProduceResponse | None:
    """Ask the coordinator, then append what it vouched for; the rest is refused."""
    assert ctx.txn_verifier is not None and req.transactional_id is not None
    producer_id, producer_epoch = producer
    codes = await ctx.txn_verifier.verify(ctx.image(), req.transactional_id, producer_id, producer_epoch, tps,
                                          add=version >= TV2_PRODUCE_VERSION)
    refused: dict[TopicPartition, ErrorCode] = {}
    for tp, guard in zip(tps, guards):
        partition = ctx.replicas.get_partition(tp)
        code = codes[tp] if partition is None else finish_verification(partition, producer_id, guard, codes[tp])
        if code is not ErrorCode.NONE:
            refused[tp] = code
            log.info("Refused the transactional batch of producer %d (epoch %d, transactional id %s) on %s: %s",
                     producer_id, producer_epoch, req.transactional_id, tp, code.name)
    answer = _produce(ctx, req, version, refused)
    return await answer.answer if isinstance(answer, Later) else answer


async def handle_produce(ctx: BrokerContext, req: produce.ProduceRequest,
                         version: int, client: ClientInfo) -> produce.ProduceResponse | None:
    answer = produce_now(ctx, req, version, client)  # no await before the appends: request order
    return await answer.answer if isinstance(answer, Later) else answer


def _response(ctx: BrokerContext, results: _Results, version: int) -> produce.ProduceResponse:
    # list comprehensions and a plain loop, not generators: a generator resumes its frame per item,
    # and a bulk producer's answer has an entry per partition
    response = produce.ProduceResponse(tuple([
        produce.TopicProduceResponse(name, tuple([r for r, _ in parts])) for name, parts in results]))
    if version >= produce.LEADER_DISCOVERY_VERSION:
        for t in response.responses:
            for p in t.partitions:
                if p.error_code == NOT_LEADER_OR_FOLLOWER:
                    return with_current_leaders(ctx, response, ctx.image())
    return response


def with_current_leaders(ctx: BrokerContext, response: produce.ProduceResponse,
                         image: MetadataImage) -> produce.ProduceResponse:
    """KIP-951, as Kafka's handleProduceRequest: every NOT_LEADER_OR_FOLLOWER partition names its
    leader and leader epoch from this broker's image (-1, -1 when the topic is unknown), and the
    response lists the endpoints of those leaders that are alive (unfenced) on this listener."""
    hints: list[LeaderHint] = []
    topics = []
    for topic in response.responses:
        partitions = []
        for p in topic.partitions:
            if p.error_code == NOT_LEADER_OR_FOLLOWER:
                hint = lookup_leader(ctx, image, topic.name, p.partition_index)
                if hint is not None:
                    hints.append(hint)
                p = p._replace(current_leader=produce.UNKNOWN_LEADER if hint is None else hint.leader)
            partitions.append(p)
        topics.append(produce.TopicProduceResponse(topic.name, tuple(partitions)))
    return produce.ProduceResponse(tuple(topics), response.throttle_time_ms, node_endpoints(hints))


def _append_all(ctx: BrokerContext, req: produce.ProduceRequest, refused: Mapping[TopicPartition, ErrorCode]
                ) -> tuple[_Results, dict[TopicPartition, int]]:
    """Each partition's answer, and for acks=all the offset each appended partition's HW must
    pass (Kafka's DelayedProduce), keyed by the TopicPartition the append used."""
    results: _Results = []
    required: dict[TopicPartition, int] = {}
    acks_all = req.acks == -1
    append = ctx.replicas.leader_appender(req.acks)  # the acks checked and the clock read once
    new = tuple.__new__  # the NamedTuples built per partition, without their Python __new__
    for topic in req.topic_data:
        parts = []
        name = topic.name
        for p in topic.partition_data:
            tp = new(TopicPartition, (name, p.index))
            if refused and tp in refused:  # KIP-890: the coordinator did not vouch for it
                parts.append((produce.PartitionProduceResponse(
                    p.index, int(refused[tp]), -1, -1, -1, (),
                    "the partition is not in the producer's ongoing transaction"
                    if refused[tp] is ErrorCode.INVALID_TXN_STATE else None), -1))
                continue
            if p.records is None:
                parts.append((produce.PartitionProduceResponse(
                    p.index, int(ErrorCode.CORRUPT_MESSAGE), -1, -1, -1, (), "records are null"), -1))
                continue
            try:
                info = append(tp, p.records)
            except Exception as e:  # noqa: BLE001 - every failure answers this partition only
                parts.append((produce.PartitionProduceResponse(
                    p.index, ctx.partition_error(tp, e, ctx.image()), -1, -1, -1, _record_errors(e),
                    str(e) or None), -1))
                continue
            end_offset = info.last_offset + 1
            parts.append((new(PartitionProduceResponse, (
                p.index, 0, info.first_offset, info.log_append_time, info.log_start_offset, (), None,
                UNKNOWN_LEADER)), end_offset))
            if acks_all:
                required[tp] = end_offset
        results.append((name, parts))
    return results, required


def _record_errors(error: BaseException) -> tuple[produce.BatchIndexAndErrorMessage, ...]:
    """KIP-467: which records of the rejected batch broke a rule (a client fails those with their
    own message and the rest of the batch as failed because of them)."""
    if not isinstance(error, KafkaError) or not error.record_errors:
        return ()
    return tuple(produce.BatchIndexAndErrorMessage(e.batch_index, e.message) for e in error.record_errors)


def _with_codes(results: _Results, codes: dict[TopicPartition, int]) -> _Results:
    """The appended partitions' answers once replicated (or refused, or timed out)."""
    if not any(codes.values()):  # all replicated: the answers as appended
        return results
    out: _Results = []
    for name, parts in results:
        done = []
        for response, end_offset in parts:
            code = codes.get(TopicPartition(name, response.partition_index), 0) \
                if response.error_code == 0 else 0
            if code:
                response = produce.PartitionProduceResponse(
                    response.partition_index, code, -1, -1, -1, (), NOT_REPLICATED)
            done.append((response, end_offset))
        out.append((name, done))
    return out
