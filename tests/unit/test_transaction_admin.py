"""common/transaction_admin.py: kafka-transactions.sh's steps driven against fake brokers (kio's
own response dataclasses), its hanging-transaction rule as a table, its tables' bytes."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as K

from common import transaction_admin as ta
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol.primitives import ProtocolError, Writer
from common.topic_partition import TopicPartition

TP0, TP1, OTHER = TopicPartition("orders", 0), TopicPartition("orders", 1), TopicPartition("audit", 0)
CLUSTER = ta.Cluster((1, 2, 3), {TP0: ta.PartitionView(1, (1, 2)), TP1: ta.PartitionView(2, (2, 3)),
                                 OTHER: ta.PartitionView(3, (3, 1))}, frozenset({"orders", "audit"}))
NOW = 10_000_000
MINUTES_15 = 15 * ta.MINUTE_MS
LT = messages.response_module(ta.LIST_TRANSACTIONS, 0)
DP = messages.response_module(ApiKey.DESCRIBE_PRODUCERS, 0)
WM = messages.response_module(ta.WRITE_TXN_MARKERS, 1)
FC = messages.response_module(ApiKey.FIND_COORDINATOR, ta.FIND_COORDINATOR_VERSION)


def coordinator_at(error: K, node_id: int, host: str, port: int) -> Any:
    """A FindCoordinator answer, as kio decodes one."""
    return FC.FindCoordinatorResponse(throttle_time=timedelta(0), error_code=error, error_message=None,
                                      node_id=node_id, host=host, port=port)


def producer(pid: int, *, start: int | None, last: int, epoch: int = 3, coordinator_epoch: int = 7) -> Any:
    return DP.ProducerState(producer_id=pid, producer_epoch=epoch, last_sequence=9, last_timestamp=last,
                            coordinator_epoch=coordinator_epoch,
                            current_txn_start_offset=-1 if start is None else start)


def producers_response(by_tp: dict[TopicPartition, tuple[Any, ...]], error: K = K.none) -> Any:
    topics: dict[str, list[Any]] = {}
    for tp, states in sorted(by_tp.items()):
        topics.setdefault(tp.topic, []).append(DP.PartitionResponse(
            partition_index=tp.partition, error_code=error, error_message=None, active_producers=states))
    return DP.DescribeProducersResponse(throttle_time=timedelta(0), topics=tuple(
        DP.TopicResponse(name=t, partitions=tuple(ps)) for t, ps in topics.items()))


def describe_transactions_body(tid: str, *, partitions: tuple[TopicPartition, ...], start_ms: int = -1,
                               state: str = "Ongoing", error: int = 0) -> bytes:
    """DescribeTransactions v0's response bytes (Kafka's schema; kio cannot read start -1)."""
    w = Writer(flexible=True)
    w.int32(0)

    def topic(w: Writer, tp: TopicPartition) -> None:
        w.string(tp.topic)
        w.int32_array((tp.partition,))
        w.tagged_fields()

    def one(w: Writer, _: None) -> None:
        w.int16(error), w.string(tid), w.string(state), w.int32(60_000), w.int64(start_ms)
        w.int64(4000), w.int16(2)
        w.array(partitions, topic)
        w.tagged_fields()

    w.array([None], one)
    w.tagged_fields()
    return w.to_bytes()


def drive(steps: ta.Steps, answer: Callable[[ta.Call], Any]) -> tuple[Any, list[ta.Call]]:
    calls: list[ta.Call] = []
    try:
        step = next(steps)
        while True:
            if isinstance(step, ta.Backoff):
                step = steps.send(None)
                continue
            calls.append(step)
            step = steps.send(answer(step))
    except StopIteration as done:
        return done.value, calls


def test_list_asks_every_broker_and_keeps_its_coordinator() -> None:
    def answer(call: ta.Call) -> Any:
        assert call.api_key == ta.LIST_TRANSACTIONS and call.request.producer_id_filters == ()
        states = (LT.TransactionState(transactional_id=f"app-{call.broker_id}", producer_id=100 + call.broker_id,
                                      transaction_state="Ongoing"),) if call.broker_id != 2 else ()
        return LT.ListTransactionsResponse(throttle_time=timedelta(0), error_code=K.none, unknown_state_filters=(),
                                           transaction_states=states)

    listings, calls = drive(ta.list_transactions(CLUSTER), answer)
    assert [c.broker_id for c in calls] == [1, 2, 3]
    assert ta.list_rows(listings) == [("app-1", "1", "101", "Ongoing"), ("app-3", "3", "103", "Ongoing")]


def test_list_with_a_duration_filter_asks_v1() -> None:
    def answer(call: ta.Call) -> Any:
        assert (call.version, call.request.duration_filter) == (1, 60_000)
        messages.encode_request(call.request, call.version)
        return LT.ListTransactionsResponse(throttle_time=timedelta(0), error_code=K.none, unknown_state_filters=(),
                                           transaction_states=())

    listings, calls = drive(ta.list_transactions(CLUSTER, duration_filter_ms=60_000), answer)
    assert listings == {1: [], 2: [], 3: []} and len(calls) == 3
    _, calls = drive(ta.list_transactions(CLUSTER), lambda c: LT.ListTransactionsResponse(
        throttle_time=timedelta(0), error_code=K.none, unknown_state_filters=(), transaction_states=()))
    assert {c.version for c in calls} == {0}


def test_list_names_an_unreachable_broker() -> None:
    with pytest.raises(ta.TransactionToolError, match="BROKER_NOT_AVAILABLE.*broker 1: refused"):
        drive(ta.list_transactions(CLUSTER), lambda call: ta.Unreachable("refused"))


def test_describe_finds_the_coordinator_retrying_while_it_loads() -> None:
    answers = iter([coordinator_at(K.coordinator_load_in_progress, -1, "", -1),
                    coordinator_at(K.none, 2, "127.0.0.5", 9092)])

    def answer(call: ta.Call) -> Any:
        if call.api_key == ApiKey.FIND_COORDINATOR:
            assert call.request.key == "app-1" and call.request.key_type == 1  # TRANSACTION
            return next(answers)
        assert call.broker_id == 2
        return call.decode_body(describe_transactions_body("app-1", partitions=(TP1, TP0), start_ms=NOW - 5000))

    description, _ = drive(ta.describe_transaction("app-1"), answer)
    assert description == ta.TransactionDescription(2, "app-1", 4000, 2, "Ongoing", 60_000, NOW - 5000, (TP0, TP1))
    assert ta.describe_row(description, NOW) == ("2", "app-1", "4000", "2", "Ongoing", "60000", str(NOW - 5000),
                                                 "5000", "orders-0,orders-1")


def test_describe_looks_the_coordinator_up_again_when_it_moved() -> None:
    coordinators = iter([1, 3])
    answers = iter([describe_transactions_body("app-1", partitions=(), error=16),  # NOT_COORDINATOR
                    describe_transactions_body("app-1", partitions=(TP0,), start_ms=5)])

    def answer(call: ta.Call) -> Any:
        if call.api_key == ApiKey.FIND_COORDINATOR:
            return coordinator_at(K.none, next(coordinators), "h", 1)
        return call.decode_body(next(answers))

    description, calls = drive(ta.describe_transaction("app-1"), answer)
    assert description.coordinator_id == 3 and description.partitions == (TP0,)
    assert [c.broker_id for c in calls if c.api_key == ta.DESCRIBE_TRANSACTIONS] == [1, 3]


def test_describe_of_an_idle_id_reads_start_time_minus_one_as_none() -> None:
    def answer(call: ta.Call) -> Any:
        if call.api_key == ApiKey.FIND_COORDINATOR:
            return coordinator_at(K.none, 1, "h", 1)
        return call.decode_body(describe_transactions_body("idle", partitions=(), state="CompleteCommit"))

    description, _ = drive(ta.describe_transaction("idle"), answer)
    assert description.transaction_start_time_ms is None
    assert ta.describe_row(description, NOW)[5:] == ("60000", "None", "None", "")


def test_describe_of_an_unknown_id_is_transactional_id_not_found() -> None:
    def answer(call: ta.Call) -> Any:
        if call.api_key == ApiKey.FIND_COORDINATOR:
            return coordinator_at(K.none, 1, "h", 1)
        return call.decode_body(describe_transactions_body("nope", partitions=(), error=105))

    with pytest.raises(ta.TransactionToolError, match="TRANSACTIONAL_ID_NOT_FOUND") as e:
        drive(ta.describe_transaction("nope"), answer)
    assert e.value.field == "transactional_id"


def test_describe_transactions_decoder_refuses_truncation() -> None:
    body = describe_transactions_body("app-1", partitions=(TP0,))
    for cut in range(len(body)):
        with pytest.raises(ProtocolError):
            ta.decode_describe_transactions_response(memoryview(body[:cut]), 0)


def test_describe_producers_goes_to_the_leader_or_the_named_replica() -> None:
    states = (producer(4000, start=120, last=NOW), producer(4001, start=None, last=NOW, coordinator_epoch=-1))
    result, calls = drive(ta.describe_producers(CLUSTER, TP1), lambda c: producers_response({TP1: states}))
    assert calls[0].broker_id == 2 and calls[0].request.topics[0].partition_indexes == (1,)
    assert ta.producer_rows(result) == [("4000", "3", "7", "9", str(NOW), "120"),
                                        ("4001", "3", "-1", "9", str(NOW), "None")]
    _, calls = drive(ta.describe_producers(CLUSTER, TP1, broker_id=3), lambda c: producers_response({TP1: ()}))
    assert calls[0].broker_id == 3


def test_describe_producers_error_names_kafkas_error() -> None:
    with pytest.raises(ta.TransactionToolError, match="NOT_LEADER_OR_FOLLOWER.*orders-1 on broker 3"):
        drive(ta.describe_producers(CLUSTER, TP1, broker_id=3),
              lambda c: producers_response({TP1: ()}, K.not_leader_or_follower))
    with pytest.raises(ta.TransactionToolError, match="UNKNOWN_TOPIC_OR_PARTITION"):
        drive(ta.describe_producers(CLUSTER, TopicPartition("orders", 9)), lambda c: None)


def test_abort_writes_an_abort_marker_for_the_producer_starting_there() -> None:
    states = (producer(4000, start=120, last=NOW, epoch=5, coordinator_epoch=-1), producer(4001, start=300, last=NOW))

    def answer(call: ta.Call) -> Any:
        if call.api_key == ApiKey.DESCRIBE_PRODUCERS:
            return producers_response({TP0: states})
        return WM.WriteTxnMarkersResponse(markers=(WM.WritableTxnMarkerResult(producer_id=4000, topics=(
            WM.WritableTxnMarkerTopicResult(name="orders", partitions=(
                WM.WritableTxnMarkerPartitionResult(partition_index=0, error_code=K.none),)),)),))

    spec, calls = drive(ta.abort_transaction(CLUSTER, TP0, 120), answer)
    # Kafka's AbortTransactionSpec: coordinator epoch 0 when the leader knows none
    assert spec == ta.AbortSpec(TP0, 4000, 5, 0)
    marker = calls[1].request.markers[0]
    assert calls[1].broker_id == 1 and calls[1].version == 1
    assert (marker.producer_id, marker.producer_epoch, marker.transaction_result, marker.coordinator_epoch) == (
        4000, 5, False, 0)
    assert [(t.name, t.partition_indexes) for t in marker.topics] == [("orders", (0,))]
    messages.encode_request(calls[1].request, 1)  # a whole WriteTxnMarkers v1


def test_abort_of_an_offset_no_transaction_starts_at_changes_nothing() -> None:
    _, calls = [], []
    with pytest.raises(ta.TransactionToolError, match="Could not find any open transactions starting at offset 7"):
        drive(ta.abort_transaction(CLUSTER, TP0, 7),
              lambda c: calls.append(c) or producers_response({TP0: (producer(1, start=8, last=0),)}))
    assert [c.api_key for c in calls] == [ApiKey.DESCRIBE_PRODUCERS]


def test_abort_reports_the_markers_error() -> None:
    def answer(call: ta.Call) -> Any:
        if call.api_key == ApiKey.DESCRIBE_PRODUCERS:
            return producers_response({TP0: (producer(1, start=8, last=0),)})
        return WM.WriteTxnMarkersResponse(markers=(WM.WritableTxnMarkerResult(producer_id=1, topics=(
            WM.WritableTxnMarkerTopicResult(name="orders", partitions=(
                WM.WritableTxnMarkerPartitionResult(partition_index=0,
                                                    error_code=K.transaction_coordinator_fenced),)),)),))

    with pytest.raises(ta.TransactionToolError, match="TRANSACTION_COORDINATOR_FENCED"):
        drive(ta.abort_transaction(CLUSTER, TP0, 8), answer)


@pytest.mark.parametrize(("topic", "partition", "broker_id", "expected"), [
    ("orders", None, None, [TP0, TP1]),
    ("orders", 1, None, [TP1]),
    (None, None, 1, [OTHER, TP0]),  # every partition with a replica on broker 1
    ("orders", None, 3, [TP1]),
])
def test_find_hanging_scope(topic: str | None, partition: int | None, broker_id: int | None,
                            expected: list[TopicPartition]) -> None:
    assert ta.partitions_to_search(CLUSTER, topic=topic, partition=partition, broker_id=broker_id) == expected


@pytest.mark.parametrize(("topic", "partition", "broker_id", "field"), [
    (None, None, None, "topic"), (None, 0, 1, "partition"), ("nope", None, None, "topic")])
def test_find_hanging_scope_errors_name_the_option(topic: str | None, partition: int | None,
                                                   broker_id: int | None, field: str) -> None:
    with pytest.raises(ta.TransactionToolError) as e:
        ta.partitions_to_search(CLUSTER, topic=topic, partition=partition, broker_id=broker_id)
    assert e.value.field == field


OLD = NOW - MINUTES_15 - 1
DESCRIBED = ta.TransactionDescription(1, "app", 4000, 3, "Ongoing", 60_000, OLD, (TP0,))


@pytest.mark.parametrize(("candidate", "ids", "descriptions", "is_hanging"), [
    # no transactional id lists the producer: nobody will ever end it
    (ta.OpenTransaction(TP1, ta.ProducerState(9, 0, 0, OLD, None, 5)), {}, {}, True),
    # the id is known but its coordinator answered TRANSACTIONAL_ID_NOT_FOUND
    (ta.OpenTransaction(TP1, ta.ProducerState(4000, 0, 0, OLD, 1, 5)), {4000: "app"}, {"app": None}, True),
    # the coordinator's transaction covers another partition only
    (ta.OpenTransaction(TP1, ta.ProducerState(4000, 0, 0, OLD, 1, 5)), {4000: "app"}, {"app": DESCRIBED}, True),
    # ... or this one: the coordinator will still write its marker
    (ta.OpenTransaction(TP0, ta.ProducerState(4000, 0, 0, OLD, 1, 5)), {4000: "app"}, {"app": DESCRIBED}, False),
])
def test_hanging_rule(candidate: ta.OpenTransaction, ids: dict[int, str],
                      descriptions: dict[str, ta.TransactionDescription | None], is_hanging: bool) -> None:
    assert ta.hanging([candidate], ids, descriptions) == ([candidate] if is_hanging else [])


def test_candidates_are_open_and_older_than_the_max_timeout() -> None:
    states = {TP0: (ta.ProducerState(1, 0, 0, OLD, None, 5),            # open, old: a candidate
                    ta.ProducerState(2, 0, 0, NOW - MINUTES_15, None, 5),  # exactly the timeout: not yet
                    ta.ProducerState(3, 0, 0, OLD, None, None))}          # no open transaction
    assert [c.producer.producer_id for c in ta.candidates(
        states, now_ms=NOW, max_transaction_timeout_ms=MINUTES_15)] == [1]


def test_find_hanging_end_to_end() -> None:
    """orders-0: producer 4000 (id app, whose transaction covers orders-0 only) and producer 4001
    (listed by no coordinator); orders-1: producer 4000 again, which its coordinator does not list."""
    dp = {TP0: (producer(4000, start=10, last=OLD), producer(4001, start=12, last=OLD),
                producer(4002, start=14, last=NOW)),
          TP1: (producer(4000, start=3, last=OLD),)}

    def answer(call: ta.Call) -> Any:
        if call.api_key == ApiKey.DESCRIBE_PRODUCERS:
            return producers_response({TopicPartition(t.name, p): dp[TopicPartition(t.name, p)]
                                       for t in call.request.topics for p in t.partition_indexes})
        if call.api_key == ta.LIST_TRANSACTIONS:
            assert call.request.producer_id_filters == (4000, 4001)
            listed = (LT.TransactionState(transactional_id="app", producer_id=4000, transaction_state="Ongoing"),)
            return LT.ListTransactionsResponse(throttle_time=timedelta(0), error_code=K.none,
                                               unknown_state_filters=(),
                                               transaction_states=listed if call.broker_id == 1 else ())
        if call.api_key == ApiKey.FIND_COORDINATOR:
            return coordinator_at(K.none, 1, "h", 1)
        return call.decode_body(describe_transactions_body("app", partitions=(TP0,), start_ms=OLD))

    found, calls = drive(ta.find_hanging(CLUSTER, topic="orders", partition=None, broker_id=None,
                                         max_transaction_timeout_ms=MINUTES_15, now_ms=NOW), answer)
    assert [(t.tp, t.producer.producer_id) for t in found] == [(TP0, 4001), (TP1, 4000)]
    assert [c.broker_id for c in calls if c.api_key == ApiKey.DESCRIBE_PRODUCERS] == [1, 2]  # the leaders
    assert ta.hanging_rows(found, NOW)[0] == ("orders", "0", "4001", "3", "7", "12", str(OLD), "15")


def test_find_hanging_with_no_candidates_asks_no_coordinator() -> None:
    found, calls = drive(ta.find_hanging(CLUSTER, topic="orders", partition=0, broker_id=None,
                                         max_transaction_timeout_ms=MINUTES_15, now_ms=NOW),
                         lambda c: producers_response({TP0: (producer(1, start=3, last=NOW),)}))
    assert found == [] and len(calls) == 1


def test_kafka_table_pads_every_cell_and_ends_each_with_a_tab() -> None:
    assert ta.kafka_table(("ProducerId", "X"), [("12345678901", "None")]) == [
        "ProducerId \tX   \t", "12345678901\tNone\t"]
    assert ta.kafka_table(ta.LIST_HEADERS, []) == ["TransactionalId\tCoordinator\tProducerId\tTransactionState\t"]


def test_error_names_come_from_kafkas_list() -> None:
    assert ta.error_name(105) == "TRANSACTIONAL_ID_NOT_FOUND"
    assert ta.error_name(6) == "NOT_LEADER_OR_FOLLOWER"
    assert ta.error_name(9999) == "ERROR_CODE_9999"
