"""What kafka-transactions.sh does (KIP-664), as pure steps both shells drive: the CLI's blocking
client (`tidelog.transaction_admin`) and the admin API's asyncio one (`quorum.transaction_api`).

    steps = find_hanging(cluster, topic="orders", partition=None, broker_id=None,
                         max_transaction_timeout_ms=15 * 60_000, now_ms=now)
    call = next(steps)                 # a Call: which broker, which request
    call = steps.send(response)        # ... until StopIteration.value: the hanging transactions

A step function is a generator: it yields a `Call` (a broker, an API, a kio request) or a
`Backoff` (wait before retrying a coordinator lookup), is sent the decoded response (an
`Unreachable` when the broker could not be reached), and returns its result. No sockets,
no clock: `now_ms` comes in, as the cluster view (`Cluster`: brokers, leaders and replicas).

Kafka's rules, mirrored from its TransactionsCommand and Admin client:
- list: ListTransactions on every broker, rows by coordinator.
- describe: FindCoordinator (key type TRANSACTION), then DescribeTransactions there.
- describe-producers: DescribeProducers on the leader (or on --broker-id's replica).
- abort --start-offset N: DescribeProducers on the leader, the producer whose current
  transaction starts at N, then WriteTxnMarkers (abort) to the leader with that producer's id
  and epoch and its latest coordinator epoch, 0 when the leader knows none (Kafka's
  AbortTransactionSpec: 0 is at most any epoch a coordinator ever had, so the leader accepts it).
- find-hanging: DescribeProducers on the partitions (those of --topic, or every partition with
  a replica on --broker-id); an open transaction whose producer last wrote more than the max
  transaction timeout ago is a candidate; ListTransactions filtered by the candidates'
  producer ids maps them to transactional ids; DescribeTransactions on their coordinators; a
  candidate is hanging when no coordinator knows its producer, or its transaction does not
  include the partition (the coordinator will never write that partition's marker).
"""

from __future__ import annotations

from common.units import MINUTE_MS
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from kio.schema.errors import ErrorCode as KafkaErrorCode  # every code Kafka has

from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol.primitives import Chunk, ProtocolError, Reader
from common.topic_partition import TopicPartition

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

WRITE_TXN_MARKERS: Final = ApiKey.WRITE_TXN_MARKERS
DESCRIBE_TRANSACTIONS: Final = ApiKey.DESCRIBE_TRANSACTIONS
LIST_TRANSACTIONS: Final = ApiKey.LIST_TRANSACTIONS
# Versions: the first of each (every one flexible); kio has no WriteTxnMarkers v0 (KIP-896).
LIST_TRANSACTIONS_VERSION: Final = 0
LIST_TRANSACTIONS_DURATION_VERSION: Final = 1  # KIP-994's duration_filter
DESCRIBE_TRANSACTIONS_VERSION: Final = 0
DESCRIBE_PRODUCERS_VERSION: Final = 0
WRITE_TXN_MARKERS_VERSION: Final = 1
FIND_COORDINATOR_VERSION: Final = 2  # classic (response header v0), with key_type (v1+)

MAX_BATCH_SIZE: Final = 500  # partitions per DescribeProducers, as Kafka's find-hanging batches
DEFAULT_MAX_TRANSACTION_TIMEOUT_MINUTES: Final = 15  # kafka-transactions.sh's default
COORDINATOR_ATTEMPTS: Final = 50  # FindCoordinator tries, a Backoff apart (5 s: a coordinator loading)
COORDINATOR_MOVES: Final = 5  # DescribeTransactions answered NOT_COORDINATOR (or loading): look it up again
NO_VALUE: Final = -1  # Kafka's "none" in DescribeProducers' epochs and offsets
_COORDINATOR_RETRY: Final = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                       ErrorCode.NOT_COORDINATOR})
TRANSACTIONAL_ID_NOT_FOUND: Final = 105


def error_name(code: int) -> str:
    """Kafka's name of an error code: ours, else kio's (generated from Kafka's list)."""
    try:
        return ErrorCode(code).name
    except ValueError:
        pass
    try:
        return KafkaErrorCode(code).name.upper()
    except ValueError:
        return f"ERROR_CODE_{code}"


class TransactionToolError(Exception):
    """The cluster refused or a step found nothing to do; `error` is Kafka's name (or ours)."""

    def __init__(self, error: str, message: str, *, field: str | None = None) -> None:
        super().__init__(f"{error}: {message}")
        self.error, self.message, self.field = error, message, field


# ---- the steps' vocabulary -------------------------------------------------------------

ANY_BROKER: Final = -1  # a Call's broker: whichever answers first


@dataclass(frozen=True, slots=True)
class Call:
    """Send `request` (kio's dataclass, or a hand codec's) to `broker_id` and send back the response."""

    broker_id: int
    api_key: int
    version: int
    request: Any
    encode: Any = field(default=messages.encode_request, compare=False)
    decode: Any = field(default=None, compare=False)  # (body, version) -> response; None: kio's

    def decode_body(self, body: bytes | bytearray | memoryview) -> Any:
        if self.decode is not None:
            return self.decode(memoryview(body), self.version)
        return messages.decode_response(self.api_key, self.version, body)

    def encode_body(self) -> list[Chunk]:
        return list(self.encode(self.request, self.version))


@dataclass(frozen=True, slots=True)
class Backoff:
    """Wait the client's retry backoff before the next Call."""


@dataclass(frozen=True, slots=True)
class Unreachable:
    """Sent instead of a response: the broker could not be reached or answered wrongly."""

    reason: str


Step = Call | Backoff
Steps = Generator[Step, Any, Any]


@dataclass(frozen=True, slots=True)
class PartitionView:
    leader: int  # -1: offline
    replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Cluster:
    """What the shells know of the cluster: brokers and, per partition, its leader and replicas."""

    brokers: tuple[int, ...]
    partitions: Mapping[TopicPartition, PartitionView]
    topics: frozenset[str] = frozenset()

    def leader(self, tp: TopicPartition) -> int:
        view = self.partitions.get(tp)
        if view is None:
            raise TransactionToolError("UNKNOWN_TOPIC_OR_PARTITION", f"{tp} does not exist", field="partition")
        if view.leader < 0:
            raise TransactionToolError("LEADER_NOT_AVAILABLE", f"{tp} has no leader")
        return view.leader


# ---- results ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    coordinator: int
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    coordinator_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    transaction_timeout_ms: int
    transaction_start_time_ms: int | None  # None: no transaction is ongoing (Kafka's -1)
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int | None  # None: the leader knows none (Kafka's -1)
    current_transaction_start_offset: int | None  # None: no open transaction


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    tp: TopicPartition
    producer: ProducerState


@dataclass(frozen=True, slots=True)
class AbortSpec:
    """Kafka's AbortTransactionSpec: the marker WriteTxnMarkers writes."""

    tp: TopicPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int


# ---- decoding ---------------------------------------------------------------------------

def _or_none(value: int) -> int | None:
    return None if value < 0 else value


def producer_states(response: Any) -> dict[TopicPartition, tuple[int, str | None, tuple[ProducerState, ...]]]:
    """DescribeProducers' answer per partition: (error code, error message, active producers)."""
    out = {}
    for t in response.topics:
        for p in t.partitions:
            out[TopicPartition(str(t.name), int(p.partition_index))] = (int(p.error_code), p.error_message, tuple(
                ProducerState(int(s.producer_id), int(s.producer_epoch), int(s.last_sequence), int(s.last_timestamp),
                              _or_none(int(s.coordinator_epoch)), _or_none(int(s.current_txn_start_offset)))
                for s in p.active_producers))
    return out


@dataclass(frozen=True, slots=True)
class _DescribedState:
    error_code: int
    transactional_id: str
    state: str
    timeout_ms: int
    start_time_ms: int
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]


def decode_describe_transactions_response(body: memoryview, version: int) -> tuple[_DescribedState, ...]:
    """DescribeTransactions v0 by hand: kio's reader refuses the -1 start time Kafka sends for a
    transactional id with no ongoing transaction ("Cannot parse negative timestamp")."""
    if version != 0:
        raise ProtocolError(f"DescribeTransactions v{version} is not decoded here")
    r = Reader(body, flexible=True)
    r.int32()  # throttle_time_ms

    def topic(r: Reader) -> tuple[TopicPartition, ...]:
        name = r.string()
        partitions = r.int32_array()
        r.tagged_fields()
        return tuple(TopicPartition(name, p) for p in partitions)

    def state(r: Reader) -> _DescribedState:
        code, tid, name, timeout, start = r.int16(), r.string(), r.string(), r.int32(), r.int64()
        pid, epoch = r.int64(), r.int16()
        topics = r.array(topic, 2)
        r.tagged_fields()
        return _DescribedState(code, tid, name, timeout, start, pid, epoch, tuple(tp for t in topics for tp in t))

    states = r.array(state, 30)
    r.tagged_fields()
    return states


# ---- the requests ------------------------------------------------------------------------

def _list_call(broker_id: int, producer_ids: Iterable[int] = (), duration_filter_ms: int | None = None) -> Call:
    """ListTransactions v0, or v1 (KIP-994) when a duration filter is asked for, as Kafka's
    Admin client picks the version a filter needs."""
    version = LIST_TRANSACTIONS_VERSION if duration_filter_ms is None else LIST_TRANSACTIONS_DURATION_VERSION
    m = messages.request_module(LIST_TRANSACTIONS, version)
    extra = {} if duration_filter_ms is None else {"duration_filter": duration_filter_ms}
    return Call(broker_id, LIST_TRANSACTIONS, version, m.ListTransactionsRequest(
        state_filters=(), producer_id_filters=tuple(sorted(producer_ids)), **extra))


def _describe_producers_call(broker_id: int, tps: Sequence[TopicPartition]) -> Call:
    m = messages.request_module(ApiKey.DESCRIBE_PRODUCERS, DESCRIBE_PRODUCERS_VERSION)
    by_topic: dict[str, list[int]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return Call(broker_id, ApiKey.DESCRIBE_PRODUCERS, DESCRIBE_PRODUCERS_VERSION, m.DescribeProducersRequest(
        topics=tuple(m.TopicRequest(name=t, partition_indexes=tuple(ps)) for t, ps in sorted(by_topic.items()))))


def _write_abort_marker_call(broker_id: int, spec: AbortSpec) -> Call:
    m = messages.request_module(WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION)
    marker = m.WritableTxnMarker(producer_id=spec.producer_id, producer_epoch=spec.producer_epoch,
                                 transaction_result=False, coordinator_epoch=spec.coordinator_epoch,
                                 topics=(m.WritableTxnMarkerTopic(name=spec.tp.topic,
                                                                  partition_indexes=(spec.tp.partition,)),))
    return Call(broker_id, WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, m.WriteTxnMarkersRequest(markers=(marker,)))


def _answered(response: Any, what: str) -> Any:
    if isinstance(response, Unreachable):
        raise TransactionToolError("BROKER_NOT_AVAILABLE", f"{what}: {response.reason}")
    return response


# ---- the steps ----------------------------------------------------------------------------

def list_transactions(cluster: Cluster, producer_ids: Iterable[int] = (), *,
                      duration_filter_ms: int | None = None) -> Steps:
    """ListTransactions on every broker: {broker id: its listings}, as Kafka's allByBrokerId;
    with duration_filter_ms, only transactions running longer than that (KIP-994)."""
    wanted = tuple(producer_ids)
    out: dict[int, list[TransactionListing]] = {}
    for broker_id in cluster.brokers:
        response = _answered((yield _list_call(broker_id, wanted, duration_filter_ms)),
                             f"ListTransactions to broker {broker_id}")
        if int(response.error_code) != 0:
            raise TransactionToolError(error_name(int(response.error_code)),
                                       f"broker {broker_id} could not list its transactions")
        out[broker_id] = [TransactionListing(str(s.transactional_id), broker_id, int(s.producer_id),
                                             str(s.transaction_state)) for s in response.transaction_states]
    return out


def find_transaction_coordinator(transactional_id: str) -> Steps:
    """FindCoordinator (key type TRANSACTION), retried while no coordinator is ready; its broker id."""
    request = messages.request_module(ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION).FindCoordinatorRequest(
        key=transactional_id, key_type=messages.KEY_TYPE_TRANSACTION)
    for _ in range(COORDINATOR_ATTEMPTS):
        response = _answered((yield Call(ANY_BROKER, ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION, request,
                                         messages.encode_request, messages.response_decoder(ApiKey.FIND_COORDINATOR))),
                             "FindCoordinator")
        if response.error_code == 0:
            return int(response.node_id)
        if response.error_code not in _COORDINATOR_RETRY:
            raise TransactionToolError(error_name(response.error_code),
                                       response.error_message or f"no coordinator for {transactional_id!r}")
        yield Backoff()
    raise TransactionToolError("COORDINATOR_NOT_AVAILABLE", f"no coordinator for {transactional_id!r} after "
                               f"{COORDINATOR_ATTEMPTS} attempts")


def describe_transaction(transactional_id: str) -> Steps:
    """DescribeTransactions at the transactional id's coordinator: a TransactionDescription."""
    for _ in range(COORDINATOR_MOVES):
        coordinator = yield from find_transaction_coordinator(transactional_id)
        m = messages.request_module(DESCRIBE_TRANSACTIONS, DESCRIBE_TRANSACTIONS_VERSION)
        states = _answered((yield Call(coordinator, DESCRIBE_TRANSACTIONS, DESCRIBE_TRANSACTIONS_VERSION,
                                       m.DescribeTransactionsRequest(transactional_ids=(transactional_id,)),
                                       decode=decode_describe_transactions_response)),
                           f"DescribeTransactions to broker {coordinator}")
        found = next((s for s in states if s.transactional_id == transactional_id), None)
        if found is None:
            raise TransactionToolError("UNKNOWN_SERVER_ERROR", f"broker {coordinator} did not answer for "
                                       f"{transactional_id!r}")
        if found.error_code in _COORDINATOR_RETRY:
            yield Backoff()
            continue
        if found.error_code:
            raise TransactionToolError(error_name(found.error_code),
                                       f"cannot describe transactional id {transactional_id!r}",
                                       field="transactional_id")
        return TransactionDescription(coordinator, transactional_id, found.producer_id, found.producer_epoch,
                                      found.state, found.timeout_ms, _or_none(found.start_time_ms),
                                      tuple(sorted(found.partitions)))
    raise TransactionToolError("COORDINATOR_NOT_AVAILABLE", f"the coordinator of {transactional_id!r} kept moving")


def describe_producers(cluster: Cluster, tp: TopicPartition, broker_id: int | None = None) -> Steps:
    """DescribeProducers for one partition on its leader (or on `broker_id`'s replica)."""
    target = cluster.leader(tp) if broker_id is None else broker_id
    response = _answered((yield _describe_producers_call(target, (tp,))), f"DescribeProducers to broker {target}")
    code, message, producers = producer_states(response).get(tp, (ErrorCode.UNKNOWN_SERVER_ERROR, None, ()))
    if code:
        where = f"broker {broker_id}" if broker_id is not None else "leader"
        raise TransactionToolError(error_name(code), f"Failed to describe producers for partition {tp} on "
                                   f"{where}" + (f": {message}" if message else ""))
    return producers


def abort_spec(producers: Iterable[ProducerState], tp: TopicPartition, start_offset: int) -> AbortSpec:
    """The producer whose open transaction starts at `start_offset`, as Kafka's buildAbortSpec."""
    found = next((p for p in producers if p.current_transaction_start_offset == start_offset), None)
    if found is None:
        raise TransactionToolError("INVALID_REQUEST", f"Could not find any open transactions starting at offset "
                                   f"{start_offset} on partition {tp}", field="start_offset")
    coordinator_epoch = 0 if found.coordinator_epoch is None else found.coordinator_epoch
    return AbortSpec(tp, found.producer_id, found.producer_epoch, coordinator_epoch)


def abort_transaction(cluster: Cluster, tp: TopicPartition, start_offset: int) -> Steps:
    """DescribeProducers, then WriteTxnMarkers (abort) on the partition's leader: the AbortSpec written."""
    spec = abort_spec((yield from describe_producers(cluster, tp)), tp, start_offset)
    return (yield from write_abort_marker(cluster, spec))


def write_abort_marker(cluster: Cluster, spec: AbortSpec) -> Steps:
    """WriteTxnMarkers (abort) for `spec` on its partition's leader, as Kafka's Admin.abortTransaction."""
    tp = spec.tp
    leader = cluster.leader(tp)
    response = _answered((yield _write_abort_marker_call(leader, spec)), f"WriteTxnMarkers to broker {leader}")
    codes = [int(p.error_code) for m in response.markers for t in m.topics for p in t.partitions]
    if not codes:
        raise TransactionToolError("UNKNOWN_SERVER_ERROR", f"broker {leader} answered no result for {tp}")
    if any(codes):
        raise TransactionToolError(error_name(next(c for c in codes if c)), f"Failed to abort transaction {spec}")
    return spec


def partitions_to_search(cluster: Cluster, *, topic: str | None, partition: int | None,
                         broker_id: int | None) -> list[TopicPartition]:
    """find-hanging's scope: --topic [--partition], else every partition with a replica on --broker-id."""
    if topic is None and broker_id is None:
        raise TransactionToolError("INVALID_REQUEST", "The `find-hanging` command requires either --topic or "
                                   "--broker-id to limit the scope of the search", field="topic")
    if partition is not None and topic is None:
        raise TransactionToolError("INVALID_REQUEST", "The --partition argument requires --topic to be provided",
                                   field="partition")
    if topic is not None and partition is not None:
        return [TopicPartition(topic, partition)]
    if topic is not None and topic not in cluster.topics:
        raise TransactionToolError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {topic!r} does not exist", field="topic")
    return sorted(tp for tp, view in cluster.partitions.items()
                  if (topic is None or tp.topic == topic) and (broker_id is None or broker_id in view.replicas))


def candidates(producers: Mapping[TopicPartition, Iterable[ProducerState]], *, now_ms: int,
               max_transaction_timeout_ms: int) -> list[OpenTransaction]:
    """Open transactions whose producer last wrote longer ago than the max transaction timeout."""
    return [OpenTransaction(tp, p) for tp, states in sorted(producers.items()) for p in states
            if p.current_transaction_start_offset is not None
            and now_ms - p.last_timestamp > max_transaction_timeout_ms]


def hanging(open_transactions: Iterable[OpenTransaction], transactional_ids: Mapping[int, str],
            descriptions: Mapping[str, TransactionDescription | None]) -> list[OpenTransaction]:
    """Kafka's filterHangingTransactions: no transactional id for the producer, no description
    for it, or a description whose partitions do not include this one."""
    out = []
    for candidate in open_transactions:
        tid = transactional_ids.get(candidate.producer.producer_id)
        description = None if tid is None else descriptions.get(tid)
        if description is None or candidate.tp not in description.partitions:
            out.append(candidate)
    return out


def find_hanging(cluster: Cluster, *, topic: str | None, partition: int | None, broker_id: int | None,
                 max_transaction_timeout_ms: int, now_ms: int) -> Steps:
    """Kafka's FindHangingTransactionsCommand: the hanging transactions (a list of OpenTransaction)."""
    tps = partitions_to_search(cluster, topic=topic, partition=partition, broker_id=broker_id)
    found: dict[TopicPartition, tuple[ProducerState, ...]] = {}
    for start in range(0, len(tps), MAX_BATCH_SIZE):  # bounded: one request per batch and broker
        by_broker: dict[int, list[TopicPartition]] = {}
        for tp in tps[start:start + MAX_BATCH_SIZE]:
            by_broker.setdefault(cluster.leader(tp) if broker_id is None else broker_id, []).append(tp)
        for target, batch in sorted(by_broker.items()):
            response = _answered((yield _describe_producers_call(target, batch)),
                                 f"DescribeProducers to broker {target}")
            for tp, (code, message, producers) in producer_states(response).items():
                if code:
                    raise TransactionToolError(error_name(code), f"Failed to describe producers for {tp} on broker "
                                               f"{target}" + (f": {message}" if message else ""))
                found[tp] = producers
    open_transactions = candidates(found, now_ms=now_ms, max_transaction_timeout_ms=max_transaction_timeout_ms)
    if not open_transactions:
        return []
    listed = yield from list_transactions(cluster, {t.producer.producer_id for t in open_transactions})
    wanted = {t.producer.producer_id for t in open_transactions}
    transactional_ids = {x.producer_id: x.transactional_id for xs in listed.values() for x in xs
                         if x.producer_id in wanted}
    descriptions: dict[str, TransactionDescription | None] = {}
    for tid in sorted(set(transactional_ids.values())):
        try:
            descriptions[tid] = yield from describe_transaction(tid)
        except TransactionToolError as e:
            if e.error != error_name(TRANSACTIONAL_ID_NOT_FOUND):
                raise
            descriptions[tid] = None
    return hanging(open_transactions, transactional_ids, descriptions)


# ---- output --------------------------------------------------------------------------------

LIST_HEADERS: Final = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS: Final = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                           "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                           "TopicPartitions")
PRODUCERS_HEADERS: Final = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                            "LastTimestamp", "CurrentTransactionStartOffset")
HANGING_HEADERS: Final = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                          "LastTimestamp", "Duration(min)")


def _text(value: int | None) -> str:
    return "None" if value is None else str(value)


def list_rows(listings: Mapping[int, Sequence[TransactionListing]]) -> list[tuple[str, ...]]:
    return [(x.transactional_id, str(broker), str(x.producer_id), x.state)
            for broker, xs in sorted(listings.items()) for x in xs]


def describe_row(d: TransactionDescription, now_ms: int) -> tuple[str, ...]:
    start = d.transaction_start_time_ms
    return (str(d.coordinator_id), d.transactional_id, str(d.producer_id), str(d.producer_epoch), d.state,
            str(d.transaction_timeout_ms), _text(start), _text(None if start is None else now_ms - start),
            ",".join(str(tp) for tp in d.partitions))


def producer_rows(producers: Iterable[ProducerState]) -> list[tuple[str, ...]]:
    return [(str(p.producer_id), str(p.producer_epoch), str(NO_VALUE if p.coordinator_epoch is None
                                                            else p.coordinator_epoch),
             str(p.last_sequence), str(p.last_timestamp), _text(p.current_transaction_start_offset))
            for p in producers]


def hanging_rows(transactions: Iterable[OpenTransaction], now_ms: int) -> list[tuple[str, ...]]:
    return [(t.tp.topic, str(t.tp.partition), str(t.producer.producer_id), str(t.producer.producer_epoch),
             str(NO_VALUE if t.producer.coordinator_epoch is None else t.producer.coordinator_epoch),
             str(NO_VALUE if t.producer.current_transaction_start_offset is None
                 else t.producer.current_transaction_start_offset),
             str(t.producer.last_timestamp), str((now_ms - t.producer.last_timestamp) // MINUTE_MS))
            for t in transactions]


def kafka_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """kafka-transactions.sh's prettyPrintTable: each cell padded to its column's width and
    followed by a tab (the last too), so `cut -f` and awk -F'\\t' read it as they read Kafka's."""
    table = [tuple(headers), *(tuple(r) for r in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    return ["".join(cell.ljust(width) + "\t" for cell, width in zip(row, widths)) for row in table]
