"""The transaction coordinator's APIs through the real RequestHandler, ReplicaManager and log
(no processes): FindCoordinator(TRANSACTION), InitProducerId (idempotent and transactional:
new id, epoch bump, fencing), AddPartitionsToTxn (client and verify-only broker forms, unknown
partitions), AddOffsetsToTxn, EndTxn, the markers sent to each partition's leader (a fake
broker answers them) and the CompleteCommit written after them, DescribeTransactions,
ListTransactions, and the state reloaded from `__transaction_state` by a new coordinator."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from broker.log.log_manager import LogManager
from broker.producer_ids import init_producer_id_error
from broker.replica_manager import ReplicaManager
from broker.request_handler import RequestHandler
from broker.transaction_coordinator.markers import MarkerSender
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.log_config import LogConfig
from metadata.image import EMPTY_IMAGE
from metadata.local_changes import changes_for_broker
from metadata.records import Partition, Topic
from tests.log_helpers import NOW
from tests.unit.test_request_handler import (
    ADVERTISED,
    CLUSTER,
    ME,
    FakeAdmin,
    FakeControllerClient,
    call,
    kio_call,
    replay,
)
from transactions.partitioner import TRANSACTION_STATE_TOPIC_NAME

E = ErrorCode
IMAGE = replay(CLUSTER, Topic(TRANSACTION_STATE_TOPIC_NAME, "TXNS"), Partition("TXNS", 0, (1,), (1,), leader=1),
               Topic("orders", "ORDERS"), Partition("ORDERS", 0, (1,), (1,), leader=1),
               Partition("ORDERS", 1, (2, 1), (2, 1), leader=2))
TID = "tx-1"


class FakeBroker:
    """The partition leaders' side of WriteTxnMarkers: records each request, answers `error`."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, Any]] = []
        self.error = E.NONE
        self.closed = False

    async def connect(self, host: str, port: int) -> Any:
        broker = self

        class Conn:
            closed = False

            async def request(self, api_key: ApiKey, version: int, body: list[Any], decode: Any) -> Any:
                request = messages.decode_request(api_key, version, b"".join(body))
                broker.requests.append((f"{host}:{port}", request))
                m = messages.response_module(api_key, version)
                response = m.WriteTxnMarkersResponse(markers=tuple(m.WritableTxnMarkerResult(
                    producer_id=marker.producer_id, topics=tuple(m.WritableTxnMarkerTopicResult(
                        name=t.name, partitions=tuple(m.WritableTxnMarkerPartitionResult(
                            partition_index=p, error_code=broker.error) for p in t.partition_indexes))
                        for t in marker.topics)) for marker in request.markers))
                return decode(memoryview(messages.encode(response)), version)

            def abort(self) -> None:
                self.closed = True

        return Conn()


@pytest.fixture
def cluster(tmp_path: Any) -> Iterator[tuple[Any, ReplicaManager, FakeBroker]]:
    log_manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    replicas = ReplicaManager(ME, log_manager, now_ms=lambda: NOW)
    replicas.apply_changes(changes_for_broker(EMPTY_IMAGE, IMAGE, ME), IMAGE)
    leaders = FakeBroker()

    def new_handler() -> RequestHandler:
        handler = RequestHandler(ME, replicas, lambda: IMAGE, ADVERTISED, FakeControllerClient(),  # type: ignore[arg-type]
                                 topic_admin=FakeAdmin())
        coordinator = handler.context.transactions
        coordinator.markers = MarkerSender(coordinator, lambda image, b: ("127.0.0.%d" % b, 9092),
                                           client_id="test", connect=leaders.connect, retry_backoff_ms=5)
        return handler

    yield new_handler, replicas, leaders
    log_manager.shutdown()


async def init(handler: RequestHandler, tid: str | None = TID, timeout_ms: int = 60_000, producer: int = -1,
               epoch: int = -1, version: int = 4) -> tuple[int, int, int]:
    for _ in range(200):  # bounded: the first ones may find the partition loading
        r = await kio_call(handler, ApiKey.INIT_PRODUCER_ID, version, transactional_id=tid,
                           transaction_timeout=timedelta(milliseconds=timeout_ms), producer_id=producer,
                           producer_epoch=epoch)
        if r.error_code not in (E.COORDINATOR_LOAD_IN_PROGRESS, E.CONCURRENT_TRANSACTIONS):
            return r.error_code, r.producer_id, r.producer_epoch
        await asyncio.sleep(0.01)
    raise AssertionError("InitProducerId kept answering a retriable error")


async def add(handler: RequestHandler, pid: int, epoch: int, *parts: tuple[str, int], version: int = 3,
              tid: str = TID) -> dict[tuple[str, int], int]:
    m = messages.request_module(ApiKey.ADD_PARTITIONS_TO_TXN, version)
    topics: dict[str, list[int]] = {}
    for t, p in parts:
        topics.setdefault(t, []).append(p)
    r = await kio_call(handler, ApiKey.ADD_PARTITIONS_TO_TXN, version, v3_and_below_transactional_id=tid,
                       v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch, v3_and_below_topics=tuple(
                           m.AddPartitionsToTxnTopic(name=t, partitions=tuple(ps)) for t, ps in topics.items()))
    return {(t.name, p.partition_index): p.partition_error_code for t in r.results_by_topic_v3_and_below
            for p in t.results_by_partition}


async def end(handler: RequestHandler, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    r = await kio_call(handler, ApiKey.END_TXN, version, transactional_id=TID, producer_id=pid,
                       producer_epoch=epoch, committed=commit)
    return int(r.error_code)


async def describe(handler: RequestHandler, *tids: str) -> list[Any]:
    r = await kio_call(handler, ApiKey.DESCRIBE_TRANSACTIONS, 0, transactional_ids=tids)
    return list(r.transaction_states)


async def describe_loaded(handler: RequestHandler) -> Any:
    """DescribeTransactions of TID once its partition has loaded."""
    for _ in range(200):  # bounded: the partition loads
        (found,) = await describe(handler, TID)
        if found.error_code != E.COORDINATOR_LOAD_IN_PROGRESS:
            return found
        await asyncio.sleep(0.01)
    raise AssertionError(f"{TID}'s partition never loaded")


def stored(handler: RequestHandler) -> str:
    """The committed state of TID (DescribeTransactions of an Empty one carries start time -1,
    which kio's reader, the test's client, refuses to parse; Kafka's clients read it)."""
    found = handler.context.transactions.committed(0).get(TID)
    return "absent" if found is None else found.state.label


async def state_of(handler: RequestHandler, want: str) -> Any:
    for _ in range(300):  # bounded: markers go out and the completion commits
        (found,) = await describe(handler, TID)
        if found.transaction_state == want:
            return found
        await asyncio.sleep(0.01)
    raise AssertionError(f"{TID} never reached {want}: {found}")


async def test_find_coordinator_for_a_transactional_id(cluster: Any) -> None:
    new_handler, _, _ = cluster
    handler = new_handler()
    try:
        r = await kio_call(handler, ApiKey.FIND_COORDINATOR, 3, key=TID, key_type=1)
        assert (r.error_code, r.node_id, (r.host, r.port)) == (0, ME, ADVERTISED)
        batched = await kio_call(handler, ApiKey.FIND_COORDINATOR, 4, key_type=1, coordinator_keys=(TID, "b"))
        assert [(c.key, c.error_code, c.node_id) for c in batched.coordinators] == [(TID, 0, ME), ("b", 0, ME)]
        odd = await kio_call(handler, ApiKey.FIND_COORDINATOR, 3, key="x", key_type=7)
        assert odd.error_code == E.INVALID_REQUEST
    finally:
        await handler.close()


async def test_a_transaction_commits_and_its_markers_reach_each_leader(cluster: Any) -> None:
    new_handler, _, leaders = cluster
    handler = new_handler()
    try:
        error, pid, epoch = await init(handler)
        assert (error, epoch) == (0, 0)
        assert await add(handler, pid, epoch, ("orders", 0), ("orders", 1)) == {("orders", 0): 0, ("orders", 1): 0}
        (ongoing,) = await describe(handler, TID)
        assert (ongoing.transaction_state, ongoing.producer_id) == ("Ongoing", pid)
        assert [(t.topic, t.partitions) for t in ongoing.topics] == [("orders", (0, 1))]
        r = await kio_call(handler, ApiKey.ADD_OFFSETS_TO_TXN, 3, transactional_id=TID, producer_id=pid,
                           producer_epoch=epoch, group_id="g")
        assert r.error_code == E.NONE
        assert await end(handler, pid, epoch, True) == 0
        done = await state_of(handler, "CompleteCommit")
        assert done.topics == ()
        sent = {(address, t.name, p, marker.transaction_result, marker.producer_epoch)
                for address, request in leaders.requests for marker in request.markers
                for t in marker.topics for p in t.partition_indexes}
        assert {(a, t, p) for a, t, p, _, _ in sent} >= {("127.0.0.1:9092", "orders", 0),
                                                           ("127.0.0.2:9092", "orders", 1)}
        assert all(commit and e == epoch for _, _, _, commit, e in sent)
        # a retried EndTxn is answered as done; an abort now is in the wrong state
        assert await end(handler, pid, epoch, True) == 0
        assert await end(handler, pid, epoch, False) == E.INVALID_TXN_STATE
        listed = await kio_call(handler, ApiKey.LIST_TRANSACTIONS, 1, state_filters=("CompleteCommit", "Nope"),
                                producer_id_filters=(), duration_filter=-1)
        assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [(TID, "CompleteCommit")]
        assert listed.unknown_state_filters == ("Nope",)
    finally:
        await handler.close()


async def test_a_new_producer_fences_the_old_one(cluster: Any) -> None:
    new_handler, _, _ = cluster
    handler = new_handler()
    try:
        _, pid, old_epoch = await init(handler)
        assert await add(handler, pid, old_epoch, ("orders", 0)) == {("orders", 0): 0}
        error, same_pid, new_epoch = await init(handler)  # aborts the open transaction first (retried)
        assert (error, same_pid, new_epoch) == (0, pid, old_epoch + 2)  # the abort's bump, then the new one
        assert await add(handler, pid, old_epoch, ("orders", 0)) == {("orders", 0): E.PRODUCER_FENCED}
        assert await add(handler, pid, old_epoch, ("orders", 0), version=1) == {("orders", 0): E.INVALID_PRODUCER_EPOCH}
        assert await end(handler, pid, old_epoch, True) == E.PRODUCER_FENCED
        assert await end(handler, pid, old_epoch, True, version=1) == E.INVALID_PRODUCER_EPOCH
        assert (await init(handler, producer=pid, epoch=old_epoch))[0] == E.PRODUCER_FENCED
        assert (await init(handler, producer=pid, epoch=old_epoch, version=3))[0] == E.INVALID_PRODUCER_EPOCH
        assert stored(handler) == "Empty"  # the new producer's epoch bump after the abort
    finally:
        await handler.close()


async def test_bad_requests_write_nothing(cluster: Any) -> None:
    new_handler, _, _ = cluster
    handler = new_handler()
    try:
        assert (await init(handler, timeout_ms=900_001))[0] == E.INVALID_TRANSACTION_TIMEOUT
        assert (await describe_loaded(handler)).error_code == E.TRANSACTIONAL_ID_NOT_FOUND
        _, pid, epoch = await init(handler)
        assert await add(handler, pid, epoch, ("orders", 0), ("nope", 0)) == {
            ("orders", 0): E.OPERATION_NOT_ATTEMPTED, ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
        assert stored(handler) == "Empty"
        assert await end(handler, pid, epoch, True) == E.INVALID_TXN_STATE
        assert await add(handler, pid + 1, epoch, ("orders", 0)) == {("orders", 0): E.INVALID_PRODUCER_ID_MAPPING}
        assert (await describe(handler, ""))[0].error_code == E.INVALID_REQUEST
    finally:
        await handler.close()


async def test_verify_only_is_answered_per_partition(cluster: Any) -> None:
    new_handler, _, _ = cluster
    handler = new_handler()
    try:
        _, pid, epoch = await init(handler)
        await add(handler, pid, epoch, ("orders", 0))
        m = messages.request_module(ApiKey.ADD_PARTITIONS_TO_TXN, 4)
        r = await kio_call(handler, ApiKey.ADD_PARTITIONS_TO_TXN, 4, transactions=(m.AddPartitionsToTxnTransaction(
            transactional_id=TID, producer_id=pid, producer_epoch=epoch, verify_only=True,
            topics=(m.AddPartitionsToTxnTopic(name="orders", partitions=(0, 1)),)),))
        (result,) = r.results_by_transaction
        assert {(t.name, p.partition_index): p.partition_error_code for t in result.topic_results
                for p in t.results_by_partition} == {("orders", 0): E.NONE, ("orders", 1): E.INVALID_TXN_STATE}
    finally:
        await handler.close()


async def test_a_new_coordinator_reloads_the_state_and_resends_markers(cluster: Any) -> None:
    new_handler, _, leaders = cluster
    handler = new_handler()
    leaders.error = E.NOT_LEADER_OR_FOLLOWER  # markers keep failing: the commit stays prepared
    try:
        _, pid, epoch = await init(handler)
        await add(handler, pid, epoch, ("orders", 0))
        assert await end(handler, pid, epoch, True) == 0
        assert (await describe(handler, TID))[0].transaction_state == "PrepareCommit"
        waiting = await kio_call(handler, ApiKey.INIT_PRODUCER_ID, 4, transactional_id=TID,
                                 transaction_timeout=timedelta(milliseconds=60_000))
        assert waiting.error_code == E.CONCURRENT_TRANSACTIONS  # the markers are still pending
    finally:
        await handler.close()
    leaders.error = E.NONE
    again = new_handler()
    try:
        await state_of(again, "CompleteCommit")  # loaded PrepareCommit, resent the markers, completed
    finally:
        await again.close()


INIT_RULES = [  # (transactional id, producer id, epoch, refused before any lookup with)
    (None, -1, -1, None),
    (None, 4000, 3, None),  # KIP-360: an idempotent producer starting over gets a new id
    (None, 4000, -1, E.INVALID_REQUEST),  # an id without an epoch (KafkaApis)
    (None, -1, 0, E.INVALID_REQUEST),  # an epoch without an id
    ("", -1, -1, E.INVALID_REQUEST),  # TransactionCoordinator: empty transactional id
    ("", 5, -1, E.INVALID_REQUEST),
    ("tx", -1, -1, None),  # on to the transaction coordinator
    ("tx", 5, 1, None),
]


@pytest.mark.parametrize(("transactional_id", "producer_id", "epoch", "expected"), INIT_RULES)
def test_init_producer_id_refusals(transactional_id: str | None, producer_id: int, epoch: int,
                                   expected: ErrorCode | None) -> None:
    assert init_producer_id_error(transactional_id, producer_id, epoch) == expected


@pytest.mark.parametrize("version", [3, 4, 5])
async def test_idempotent_init_producer_id_is_unchanged(cluster: Any, version: int) -> None:
    new_handler, _, _ = cluster
    handler = new_handler()
    try:
        first = await init(handler, None, version=version)
        assert first == (0, 1000, 0)
        assert await init(handler, None, producer=1000, epoch=0, version=version) == (0, 1001, 0)
        assert await init(handler, None, producer=1000, epoch=-1, version=version) == (E.INVALID_REQUEST, -1, -1)
    finally:
        await handler.close()


async def test_a_prepared_transaction_without_markers_under_way_gets_them(cluster: Any) -> None:
    """The timeout-abort pass starts the markers of a committed PrepareCommit nobody is sending
    (its EndTxn answer timed out while the write stayed pending and committed later)."""
    new_handler, _, leaders = cluster
    handler = new_handler()
    leaders.error = E.NOT_LEADER_OR_FOLLOWER
    try:
        _, pid, epoch = await init(handler)
        await add(handler, pid, epoch, ("orders", 0))
        assert await end(handler, pid, epoch, True) == 0
        coordinator = handler.context.transactions
        coordinator.markers.forget(0)  # as if they had never started
        assert coordinator.markers.pending() == {}
        leaders.error = E.NONE
        coordinator._abort_timed_out(0)
        assert set(coordinator.markers.pending()) == {TID}
        await state_of(handler, "CompleteCommit")
    finally:
        await handler.close()


async def test_an_unused_transactional_id_expires(cluster: Any) -> None:
    """transactional.id.expiration.ms: the coordinator's expiration pass (its timer,
    transaction.remove.expired.transaction.cleanup.interval.ms) writes a tombstone for an id whose
    last transaction completed that long ago and not for a younger one; the id is then unknown
    (TRANSACTIONAL_ID_NOT_FOUND), also to a coordinator that loads `__transaction_state` again."""
    new_handler, _, _ = cluster
    handler = new_handler()
    try:
        _, pid, epoch = await init(handler)
        await add(handler, pid, epoch, ("orders", 0))
        assert await end(handler, pid, epoch, True) == 0
        await state_of(handler, "CompleteCommit")
        coordinator = handler.context.transactions
        completed_ms = coordinator.committed(0).get(TID).last_update_ms
        coordinator.now_ms = lambda: completed_ms + coordinator.settings.id_expiration_ms - 1
        coordinator._expire_ids(0)  # the timer's pass, one millisecond early
        assert stored(handler) == "CompleteCommit"
        coordinator.now_ms = lambda: completed_ms + coordinator.settings.id_expiration_ms
        coordinator._expire_ids(0)
        for _ in range(300):  # bounded: the tombstone commits
            if stored(handler) == "absent":
                break
            await asyncio.sleep(0.01)
        assert stored(handler) == "absent"
        assert [d.error_code for d in await describe(handler, TID)] == [E.TRANSACTIONAL_ID_NOT_FOUND]
    finally:
        await handler.close()
    again = new_handler()
    try:
        assert (await describe_loaded(again)).error_code == E.TRANSACTIONAL_ID_NOT_FOUND
    finally:
        await again.close()
