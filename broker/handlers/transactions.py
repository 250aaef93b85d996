"""InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions and
ListTransactions: the transaction coordinator's APIs (broker/transaction_coordinator/).

InitProducerId without a transactional id is an idempotent producer's: a new producer id,
epoch 0, from this broker's block (`broker.producer_ids`), on any broker. With one, the
coordinator of the id answers (NOT_COORDINATOR elsewhere): a new id or an epoch bump, fencing
an older producer (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH before v4 as Kafka converts it),
aborting its ongoing transaction first (CONCURRENT_TRANSACTIONS: the client retries).

AddPartitionsToTxn v0-v3 is a client's; v4+ is the batched broker form whose `verify_only`
transactions are KIP-890 part 1's check by a partition leader before a transactional write
(answered from the coordinator's committed-or-pending state without writing); at v5 a
`verify_only=false` transaction is a leader adding the partition of a transactions v2 client
(KIP-890 part 2: that client sends no AddPartitionsToTxn; its Produce v12 starts the
transaction). EndTxn v5 is a transactions v2 client's: the end bumps the producer epoch and the
answer names the new producer id and epoch. A partition of
a topic that does not exist fails the request with UNKNOWN_TOPIC_OR_PARTITION and the others
OPERATION_NOT_ATTEMPTED, nothing written (Kafka's KafkaApis). AddOffsetsToTxn adds the group's
`__consumer_offsets` partition. PRODUCER_FENCED is INVALID_PRODUCER_EPOCH for the versions
before KIP-588's (InitProducerId < 4, the others < 2). A refused request is logged through
the refusal log (the responses of these APIs carry no message).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from functools import partial
from typing import Any, Final

from broker.coordinator.errors import CoordinatorError
from broker.handlers.context import BrokerContext, ClientInfo
from broker.producer_ids import init_producer_id_error
from broker.transaction_coordinator.coordinator import TransactionCoordinator, offsets_partition
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol.messages import NO_THROTTLE, build, milliseconds
from common.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from transactions import rules
from transactions.image import TransactionsImage
from transactions.records import TransactionMetadata
from transactions.rules import Decision
from transactions.state import TransactionState

log = logging.getLogger(__name__)

E = ErrorCode
FENCED_VERSION: Final = {ApiKey.INIT_PRODUCER_ID: 4, ApiKey.ADD_PARTITIONS_TO_TXN: 2,
                         ApiKey.ADD_OFFSETS_TO_TXN: 2, ApiKey.END_TXN: 2}  # KIP-588: PRODUCER_FENCED from here
BATCHED_VERSION: Final = 4  # AddPartitionsToTxn v4+: many transactions, the broker-to-broker form
# the first version of a transactions v2 (KIP-890 part 2) client's request, or a leader's for it
TV2_VERSION: Final = {ApiKey.END_TXN: 5, ApiKey.ADD_PARTITIONS_TO_TXN: 5}

# why InitProducerId refused (the response has no message field: the broker log says it)
INIT_REFUSALS: Final = {
    ErrorCode.INVALID_REQUEST: "producer id and epoch must both be set or both be -1, and a "
                               "transactional id must not be empty",
}


def _client_error(api_key: ApiKey, version: int, error: ErrorCode) -> ErrorCode:
    if error is E.PRODUCER_FENCED and version < FENCED_VERSION[api_key]:
        return E.INVALID_PRODUCER_EPOCH
    return error


def _refused(ctx: BrokerContext, client: ClientInfo, api: str, error: ErrorCode, reason: str) -> None:
    if error is not E.NONE and error not in (E.CONCURRENT_TRANSACTIONS, E.COORDINATOR_LOAD_IN_PROGRESS):
        ctx.refusals.refused(client, api, int(error), reason or error.name)


async def _run(coordinator: TransactionCoordinator, transactional_id: str,
               rule: Callable[[TransactionsImage], Decision]) -> Decision:
    """`rule` on the coordinator of `transactional_id`; NOT_COORDINATOR & co. when not here."""
    try:
        partition = coordinator.partition_for(transactional_id)
    except CoordinatorError as e:
        return Decision(e.code, reason=str(e))
    return await coordinator.run(partition, rule)


# ---- InitProducerId --------------------------------------------------------------------------


async def handle_init_producer_id(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's InitProducerIdRequest of `version` (v3+ carries the producer's id and
    epoch, KIP-360); the answer that version's response."""
    m = messages.response_module(ApiKey.INIT_PRODUCER_ID, version)

    def answer(code: ErrorCode, producer_id: int = NO_PRODUCER_ID, epoch: int = NO_PRODUCER_EPOCH) -> Any:
        return m.InitProducerIdResponse(throttle_time=NO_THROTTLE, error_code=code, producer_id=producer_id,
                                        producer_epoch=epoch)

    tid: str | None = req.transactional_id
    timeout_ms = milliseconds(req.transaction_timeout)
    producer_id, producer_epoch = getattr(req, "producer_id", NO_PRODUCER_ID), getattr(req, "producer_epoch",
                                                                                        NO_PRODUCER_EPOCH)
    error = init_producer_id_error(tid, producer_id, producer_epoch)
    if error is not None:
        ctx.refusals.refused(client, "InitProducerId", int(error), INIT_REFUSALS.get(error, error.name))
        return answer(error)
    if tid is None:
        return answer(*await _idempotent(ctx, producer_id, producer_epoch, client))
    coordinator = ctx.transactions
    config = coordinator.settings.rules
    expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)
    now = coordinator.now_ms
    transactional_id = tid

    def rule(new_id: int | None) -> Callable[[TransactionsImage], Decision]:
        return lambda image: rules.init_producer_id(image, transactional_id, timeout_ms, expected,
                                                    new_producer_id=new_id, config=config, now_ms=now())

    if not rules.validate_timeout(timeout_ms, config):  # Kafka checks it before the state
        decision = rules.init_producer_id(TransactionsImage.EMPTY, tid, timeout_ms, expected,
                                          new_producer_id=None, config=config, now_ms=now())
    else:
        decision = await _run(coordinator, tid, rule(None))
        if decision.needs_producer_id:
            producer_id = await ctx.producer_ids.next_id()
            if producer_id is None:  # the controllers cannot be reached: the client retries
                decision = Decision(E.COORDINATOR_LOAD_IN_PROGRESS, reason="no producer id block")
            else:
                decision = await _run(coordinator, tid, rule(producer_id))
                if decision.needs_producer_id:  # the id changed hands meanwhile: ask again
                    decision = Decision(E.CONCURRENT_TRANSACTIONS)
    code = _client_error(ApiKey.INIT_PRODUCER_ID, version, decision.error)
    _refused(ctx, client, "InitProducerId", code, decision.reason)
    if code is not E.NONE or decision.write is None:
        return answer(code if code is not E.NONE else E.UNKNOWN_SERVER_ERROR)
    return answer(E.NONE, decision.write.producer_id, decision.write.producer_epoch)


async def _idempotent(ctx: BrokerContext, old_id: int, old_epoch: int, client: ClientInfo
                      ) -> tuple[ErrorCode, int, int]:
    """A new producer id, epoch 0, for an idempotent producer (whatever id it had)."""
    producer_id = await ctx.producer_ids.next_id()
    if producer_id is None:
        return E.COORDINATOR_LOAD_IN_PROGRESS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
    if old_id != NO_PRODUCER_ID:  # KIP-360: an idempotent producer starting over
        log.debug("Producer %d (epoch %d) of client %s re-initialised as producer %d (epoch 0)",
                  old_id, old_epoch, client.client_id, producer_id)
    return E.NONE, producer_id, 0


# ---- AddPartitionsToTxn ----------------------------------------------------------------------


def _unknown_partitions(ctx: BrokerContext, partitions: list[tuple[str, int]]) -> set[tuple[str, int]]:
    image = ctx.image()
    unknown = set()
    for topic, partition in partitions:
        t = image.topic(topic)
        if t is None or partition not in t.partitions:
            unknown.add((topic, partition))
    return unknown


async def _add_partitions(ctx: BrokerContext, client: ClientInfo, version: int, tid: str, producer_id: int,
                          epoch: int, partitions: list[tuple[str, int]],
                          verify_only: bool) -> dict[tuple[str, int], ErrorCode]:
    coordinator = ctx.transactions
    if verify_only:
        try:
            partition = coordinator.partition_for(tid)
        except CoordinatorError as e:
            return {tp: e.code for tp in partitions}
        # the committed state, as Kafka's metadata changes only once its append completed: a
        # partition whose AddPartitionsToTxn is not durable yet is not vouched for
        return rules.verify_partitions(coordinator.committed(partition), tid, producer_id, epoch, partitions)
    unknown = _unknown_partitions(ctx, partitions)
    if unknown:
        _refused(ctx, client, "AddPartitionsToTxn", E.UNKNOWN_TOPIC_OR_PARTITION,
                 f"unknown partitions {sorted(unknown)[:5]}")
        return {tp: E.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else E.OPERATION_NOT_ATTEMPTED for tp in partitions}
    tv = client_transaction_version(ApiKey.ADD_PARTITIONS_TO_TXN, version)
    decision = await _run(coordinator, tid, lambda image: rules.add_partitions(
        image, tid, producer_id, epoch, partitions, now_ms=coordinator.now_ms(), client_version=tv))
    code = _client_error(ApiKey.ADD_PARTITIONS_TO_TXN, version, decision.error)
    _refused(ctx, client, "AddPartitionsToTxn", code, decision.reason)
    return {tp: code for tp in partitions}


async def handle_add_partitions_to_txn(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    m = messages.response_module(ApiKey.ADD_PARTITIONS_TO_TXN, version)

    def topic_results(errors: dict[tuple[str, int], ErrorCode]) -> tuple[Any, ...]:
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), error in errors.items():
            by_topic.setdefault(topic, []).append(m.AddPartitionsToTxnPartitionResult(
                partition_index=partition, partition_error_code=error))
        return tuple(m.AddPartitionsToTxnTopicResult(name=t, results_by_partition=tuple(p)) for t, p in by_topic.items())

    if version < BATCHED_VERSION:
        partitions = [(t.name, p) for t in req.v3_and_below_topics for p in dict.fromkeys(t.partitions)]
        errors = await _add_partitions(ctx, client, version, req.v3_and_below_transactional_id,
                                       req.v3_and_below_producer_id, req.v3_and_below_producer_epoch,
                                       partitions, False)
        return build(m.AddPartitionsToTxnResponse, throttle_time=NO_THROTTLE,
                     results_by_topic_v3_and_below=topic_results(errors))
    results = []
    for txn in req.transactions:
        partitions = [(t.name, p) for t in txn.topics for p in dict.fromkeys(t.partitions)]
        errors = await _add_partitions(ctx, client, version, txn.transactional_id, txn.producer_id,
                                       txn.producer_epoch, partitions, txn.verify_only)
        results.append(m.AddPartitionsToTxnResult(transactional_id=txn.transactional_id,
                                                  topic_results=topic_results(errors)))
    return build(m.AddPartitionsToTxnResponse, throttle_time=NO_THROTTLE, error_code=E.NONE,
                 results_by_transaction=tuple(results))


# ---- AddOffsetsToTxn and EndTxn --------------------------------------------------------------


async def handle_add_offsets_to_txn(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    m = messages.response_module(ApiKey.ADD_OFFSETS_TO_TXN, version)
    coordinator = ctx.transactions
    tp = offsets_partition(ctx.image(), req.group_id, ctx.groups.settings.offsets_topic_partitions)
    decision = await _run(coordinator, req.transactional_id, lambda image: rules.add_partitions(
        image, req.transactional_id, req.producer_id, req.producer_epoch, [(tp.topic, tp.partition)],
        now_ms=coordinator.now_ms()))
    code = _client_error(ApiKey.ADD_OFFSETS_TO_TXN, version, decision.error)
    _refused(ctx, client, "AddOffsetsToTxn", code, decision.reason)
    return build(m.AddOffsetsToTxnResponse, throttle_time=NO_THROTTLE, error_code=code)


def client_transaction_version(api_key: ApiKey, version: int) -> int:
    """The transaction version a request speaks (Kafka's TransactionVersion.transactionVersionFor*):
    EndTxn v5 and AddPartitionsToTxn v5 (a leader adding a TV2 client's partition) are TV2."""
    return rules.TV_2 if version >= TV2_VERSION[api_key] else rules.TV_0


async def handle_end_txn(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """v5 (transactions v2) answers the producer id and epoch the end bumped to."""
    m = messages.response_module(ApiKey.END_TXN, version)
    coordinator = ctx.transactions
    tv = client_transaction_version(ApiKey.END_TXN, version)

    def rule(new_id: int | None) -> Callable[[TransactionsImage], Decision]:
        return lambda image: rules.end_txn(image, req.transactional_id, req.producer_id, req.producer_epoch,
                                           req.committed, now_ms=coordinator.now_ms(), client_version=tv,
                                           new_producer_id=new_id)

    decision = await _run(coordinator, req.transactional_id, rule(None))
    if decision.needs_producer_id:  # TV2 at an exhausted epoch: the next producer id
        producer_id = await ctx.producer_ids.next_id()
        if producer_id is None:
            decision = Decision(E.COORDINATOR_LOAD_IN_PROGRESS, reason="no producer id block")
        else:
            decision = await _run(coordinator, req.transactional_id, rule(producer_id))
            if decision.needs_producer_id:
                decision = Decision(E.CONCURRENT_TRANSACTIONS)
    code = _client_error(ApiKey.END_TXN, version, decision.error)
    _refused(ctx, client, f"EndTxn({'commit' if req.committed else 'abort'})", code, decision.reason)
    producer_id, epoch = rules.end_txn_answer(decision) if code is E.NONE else (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
    return build(m.EndTxnResponse, throttle_time=NO_THROTTLE, error_code=code, producer_id=producer_id,
                 producer_epoch=epoch)


# ---- DescribeTransactions and ListTransactions -----------------------------------------------


def _millis(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)


async def handle_describe_transactions(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    m = messages.response_module(ApiKey.DESCRIBE_TRANSACTIONS, version)
    coordinator = ctx.transactions
    states = []
    for tid in req.transactional_ids:
        # an error's row: the schema's defaults (no "default" given: zeros), as Kafka's
        blank = partial(m.TransactionState, transactional_id=tid, transaction_state="",
                        transaction_timeout=datetime.timedelta(0), transaction_start_time=_millis(0),
                        producer_id=0, producer_epoch=0, topics=())
        if not tid:
            states.append(blank(error_code=E.INVALID_REQUEST))
            continue
        try:
            found = coordinator.committed(coordinator.partition_for(tid)).get(tid)
        except CoordinatorError as e:
            states.append(blank(error_code=e.code))
            continue
        if found is None:
            states.append(blank(error_code=E.TRANSACTIONAL_ID_NOT_FOUND))
            continue
        states.append(_described(m, found))
    return build(m.DescribeTransactionsResponse, throttle_time=NO_THROTTLE, transaction_states=tuple(states))


def _described(m: Any, found: TransactionMetadata) -> Any:
    topics = tuple(m.TopicData(topic=t.topic, partitions=t.partitions) for t in found.topic_partitions())
    return m.TransactionState(error_code=E.NONE, transactional_id=found.transactional_id,
                              transaction_state=found.state.label,
                              transaction_timeout=datetime.timedelta(milliseconds=found.timeout_ms),
                              transaction_start_time=_millis(found.start_ms), producer_id=found.producer_id,
                              producer_epoch=found.producer_epoch, topics=topics)


async def handle_list_transactions(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    m = messages.response_module(ApiKey.LIST_TRANSACTIONS, version)
    coordinator = ctx.transactions
    coordinator.ensure_started()
    known = {s.label for s in TransactionState}
    unknown = tuple(s for s in req.state_filters if s not in known)
    duration = getattr(req, "duration_filter", -1)
    if any(coordinator.runtime.status(p) is not None and p not in coordinator.active_partitions()
           for p in coordinator.runtime.shards):
        return build(m.ListTransactionsResponse, throttle_time=NO_THROTTLE, error_code=E.COORDINATOR_LOAD_IN_PROGRESS,
                     unknown_state_filters=unknown, transaction_states=())
    listed = []
    for partition in sorted(coordinator.active_partitions()):
        listed += rules.list_transactions(coordinator.committed(partition),
                                          states=frozenset(req.state_filters) & known,
                                          producer_ids=frozenset(req.producer_id_filters),
                                          min_duration_ms=duration, now_ms=coordinator.now_ms())
    if unknown and not set(req.state_filters) & known:
        listed = []  # only unknown states asked for: none can match
    return build(m.ListTransactionsResponse, throttle_time=NO_THROTTLE, error_code=E.NONE,
                 unknown_state_filters=unknown, transaction_states=tuple(
                     m.TransactionState(transactional_id=t.transactional_id, producer_id=t.producer_id,
                                        transaction_state=t.state.label) for t in listed))
