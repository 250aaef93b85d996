"""broker/transaction_coordinator/markers.py with a fake coordinator and fake partition leaders:
one WriteTxnMarkers per broker per round carrying every transaction bound there, retriable
errors and a missing leader retried until answered, a deleted topic's marker dropped, a fenced
answer stopping the transaction's markers, and the completion written once every partition
answered (and tried again when that write fails while still coordinating)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from broker.transaction_coordinator.markers import MarkerSender
from common.errors import ErrorCode
from common.protocol import messages
from common.topic_partition import TopicPartition
from metadata.records import Partition, Topic
from tests.unit.test_request_handler import CLUSTER, replay
from transactions.records import TransactionMetadata
from transactions.rules import Decision
from transactions.state import TransactionState

E = ErrorCode
S = TransactionState
IMAGE = replay(CLUSTER, Topic("a", "A"), Partition("A", 0, (1,), (1,), leader=1),
               Partition("A", 1, (2,), (2,), leader=2), Topic("b", "B"), Partition("B", 0, (1,), (1,), leader=1))
NO_LEADER = replay(IMAGE, Partition("A", 1, (2,), (2,), leader=-1))
B_DELETED = replay(CLUSTER, Topic("a", "A"), Partition("A", 0, (1,), (1,), leader=1),
                   Partition("A", 1, (2,), (2,), leader=2))


def txn(tid: str, pid: int, *parts: tuple[str, int], commit: bool = True) -> TransactionMetadata:
    return TransactionMetadata(tid, pid, 0, 60_000, S.PREPARE_COMMIT if commit else S.PREPARE_ABORT,
                               frozenset(parts), 0, 0)


class Coordinator:
    broker_id = 1

    def __init__(self) -> None:
        self.current = IMAGE
        self.completed: list[str] = []
        self.fail_completions = 0
        self.epoch: int | None = 7

    def image(self) -> Any:
        return self.current

    def leader_epoch(self, partition: int) -> int | None:
        return self.epoch

    def complete(self, partition: int, coordinator_epoch: int, m: TransactionMetadata) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.fail_completions:
            self.fail_completions -= 1
            future.set_result(Decision(E.COORDINATOR_NOT_AVAILABLE))
        else:
            self.completed.append(m.transactional_id)
            future.set_result(Decision())
        return future


class Leaders:
    """Answers each partition with the next error of its script (then NONE)."""

    def __init__(self) -> None:
        self.script: dict[tuple[str, int], list[ErrorCode]] = {}
        self.sent: list[tuple[str, Any]] = []

    async def connect(self, host: str, port: int) -> Any:
        leaders = self

        class Conn:
            closed = False

            async def request(self, api_key: Any, version: int, body: list[Any], decode: Any) -> Any:
                request = messages.decode_request(api_key, version, b"".join(body))
                leaders.sent.append((host, request))
                m = messages.response_module(api_key, version)

                def code(t: str, p: int) -> ErrorCode:
                    script = leaders.script.get((t, p), [])
                    return script.pop(0) if script else E.NONE

                response = m.WriteTxnMarkersResponse(markers=tuple(m.WritableTxnMarkerResult(
                    producer_id=marker.producer_id, topics=tuple(m.WritableTxnMarkerTopicResult(
                        name=t.name, partitions=tuple(m.WritableTxnMarkerPartitionResult(
                            partition_index=p, error_code=code(t.name, p)) for p in t.partition_indexes))
                        for t in marker.topics)) for marker in request.markers))
                return decode(memoryview(messages.encode(response)), version)

            def abort(self) -> None:
                self.closed = True

        return Conn()


def sender(coordinator: Coordinator, leaders: Leaders) -> MarkerSender:
    return MarkerSender(coordinator, lambda image, broker: (f"127.0.0.{broker}", 9092), client_id="t",
                        connect=leaders.connect, retry_backoff_ms=1)


async def until(condition: Any) -> None:
    for _ in range(500):  # bounded
        if condition():
            return
        await asyncio.sleep(0.002)
    raise AssertionError("never")


async def test_markers_are_batched_per_broker_then_completed() -> None:
    coordinator, leaders = Coordinator(), Leaders()
    s = sender(coordinator, leaders)
    try:
        s.send(0, 7, txn("t1", 1, ("a", 0), ("a", 1)))
        s.send(0, 7, txn("t2", 2, ("b", 0), commit=False))
        await until(lambda: sorted(coordinator.completed) == ["t1", "t2"])
        first_round = [(host, sorted((mk.producer_id, mk.transaction_result, mk.coordinator_epoch) for mk in r.markers))
                       for host, r in leaders.sent[:2]]
        assert sorted(first_round) == [("127.0.0.1", [(1, True, 7), (2, False, 7)]), ("127.0.0.2", [(1, True, 7)])]
        await until(lambda: s.pending() == {})
        assert len(leaders.sent) == 2
    finally:
        await s.close()


async def test_retriable_errors_and_a_missing_leader_are_retried() -> None:
    coordinator, leaders = Coordinator(), Leaders()
    coordinator.current = NO_LEADER
    leaders.script[("a", 0)] = [E.NOT_LEADER_OR_FOLLOWER, E.NOT_ENOUGH_REPLICAS]
    s = sender(coordinator, leaders)
    try:
        s.send(0, 7, txn("t1", 1, ("a", 0), ("a", 1)))
        await until(lambda: s.pending() == {"t1": {TopicPartition("a", 1)}})  # a-0 answered at its third try
        assert not leaders.script[("a", 0)] and coordinator.completed == []  # no leader for a-1 yet
        coordinator.current = IMAGE
        await until(lambda: coordinator.completed == ["t1"])
    finally:
        await s.close()


async def test_a_deleted_topics_marker_is_dropped() -> None:
    coordinator, leaders = Coordinator(), Leaders()
    coordinator.current = B_DELETED
    s = sender(coordinator, leaders)
    try:
        s.send(0, 7, txn("t1", 1, ("a", 0), ("b", 0)))
        await until(lambda: coordinator.completed == ["t1"])
        assert all(t.name == "a" for _, r in leaders.sent for mk in r.markers for t in mk.topics)
    finally:
        await s.close()


async def test_a_fenced_answer_stops_the_transactions_markers() -> None:
    coordinator, leaders = Coordinator(), Leaders()
    leaders.script[("a", 0)] = [E.TRANSACTION_COORDINATOR_FENCED]
    s = sender(coordinator, leaders)
    try:
        s.send(0, 7, txn("t1", 1, ("a", 0)))
        await until(lambda: s.pending() == {})
        assert coordinator.completed == []
    finally:
        await s.close()


async def test_a_failed_completion_is_tried_again_and_a_moved_coordinator_stops() -> None:
    coordinator, leaders = Coordinator(), Leaders()
    coordinator.fail_completions = 2
    s = sender(coordinator, leaders)
    try:
        s.send(0, 7, txn("t1", 1, ("a", 0)))
        await until(lambda: coordinator.completed == ["t1"])
        coordinator.epoch = 8  # this broker now coordinates in another epoch: the old job goes
        leaders.script[("a", 0)] = [E.NOT_LEADER_OR_FOLLOWER] * 3
        s.send(0, 7, txn("t2", 2, ("a", 0)))
        await until(lambda: s.pending() == {})
        assert coordinator.completed == ["t1"]
    finally:
        await s.close()


@pytest.mark.parametrize(("own", "expected"), [(("127.0.0.3", 9092), "127.0.0.3"), (("localhost", 9092), None),
                                               (("0.0.0.0", 9092), None), (None, None)])
def test_markers_leave_from_the_brokers_own_address(own: tuple[str, int] | None, expected: str | None) -> None:
    coordinator = Coordinator()
    s = MarkerSender(coordinator, lambda image, broker: own, client_id="t")
    assert s._local_host() == expected


async def test_an_address_that_cannot_be_bound_falls_back_to_any() -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    coordinator = Coordinator()
    s = MarkerSender(coordinator, lambda image, broker: ("192.0.2.1", 9092), client_id="t")  # TEST-NET: not local
    try:
        conn = await s._open("127.0.0.1", port)
        assert not conn.closed and s._local_host() is None
        conn.abort()
    finally:
        server.close()
        await server.wait_closed()
        await s.close()
