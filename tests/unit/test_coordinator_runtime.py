"""broker/coordinator/runtime.py on a fake clock and a fake partition writer: answers released
at commit in order, reverts on a failed append and a truncation (a timeout fails answers
only), concurrent writes batched into one append, unload answering NOT_COORDINATOR, timers as writes; transactional
writes in batches of their own, pending until their marker, and the same state by loading."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from broker.coordinator.errors import CoordinatorError
from broker.coordinator.runtime import CoordinatorResult, CoordinatorRuntime, Encoded, LoadSink, ShardStatus
from broker.timers import TimerService
from common.errors import ErrorCode as E
from common.errors import KafkaStorageError
from common.record_batch import NO_PRODUCER_ID

NOW = 1_000_000
COMMIT_TIMEOUT_MS = 5_000
State = tuple[str, ...]  # the fake coordinator's state: the values it has stored, in order


class Appends:
    """The fake coordinator: state is the tuple of values replayed; a transaction's values
    are held as "pid:value" until its marker turns them into values or drops them."""

    def empty(self) -> State:
        return ()

    def replay(self, state: State, key: bytes, value: bytes | None) -> State:
        return (*state, (value or b"").decode())

    def replay_transactional(self, state: State, producer_id: int, producer_epoch: int, key: bytes,
                             value: bytes | None) -> State:
        return (*state, f"{producer_id}:{(value or b'').decode()}")

    def replay_end_transaction(self, state: State, producer_id: int, producer_epoch: int, committed: bool) -> State:
        prefix = f"{producer_id}:"
        return tuple(v[len(prefix):] if v.startswith(prefix) else v for v in state
                     if committed or not v.startswith(prefix))


Stored = tuple[Encoded, int, bool | None]  # (record, producer id, marker: committed or None)


class FakeWriter:
    def __init__(self, stored: tuple[str, ...] = ()) -> None:
        self.epoch: int | None = 7
        self.log: list[Stored] = [((b"k", v.encode()), NO_PRODUCER_ID, None) for v in stored]
        self.batches: list[int] = []  # records per append (0: a marker)
        self.hw = len(self.log)
        self.refuse = False

    def leader_epoch(self, partition: int) -> int | None:
        return self.epoch

    def append(self, partition: int, leader_epoch: int, records: list[Encoded], *,
               producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1) -> int:
        if self.refuse:
            raise KafkaStorageError("the log directory failed")
        self.log.extend((r, producer_id, None) for r in records)
        self.batches.append(len(records))
        return len(self.log)

    def append_marker(self, partition: int, leader_epoch: int, *, producer_id: int, producer_epoch: int,
                      coordinator_epoch: int, committed: bool) -> int:
        if self.refuse:
            raise KafkaStorageError("the log directory failed")
        self.log.append(((None, None), producer_id, committed))
        self.batches.append(0)
        return len(self.log)

    def high_watermark(self, partition: int) -> int:
        return self.hw

    async def load(self, partition: int, leader_epoch: int, sink: LoadSink) -> int:
        for (key, value), producer_id, marker in self.log:
            if marker is not None:
                sink.end_transaction(producer_id, 0, marker)
                continue
            assert key is not None
            sink.record(key, value, producer_id, 0)
        return len(self.log)


def add(value: str, answer: str = "ok") -> Callable[[State], CoordinatorResult[State, str]]:
    return lambda state: CoordinatorResult(((b"k", value.encode()),), answer)  # state: by replay


def touch(answer: str) -> Callable[[State], CoordinatorResult[State, str]]:
    """A write without records (a heartbeat): state unchanged in records, answer deferred."""
    return lambda state: CoordinatorResult(answer=answer)


@pytest.fixture
async def setup():
    clock = [NOW]
    timers = TimerService(clock=lambda: clock[0], driven=False)
    writer = FakeWriter(("a", "b"))
    unloaded: list[int] = []
    runtime: CoordinatorRuntime[State] = CoordinatorRuntime(
        "test", Appends(), writer, timers, commit_timeout_ms=COMMIT_TIMEOUT_MS, on_unloaded=unloaded.append)
    runtime.on_partition_change(0)
    with pytest.raises(CoordinatorError) as loading:
        runtime.current(0)
    assert loading.value.code == E.COORDINATOR_LOAD_IN_PROGRESS
    await runtime.idle()
    assert runtime.status(0) is ShardStatus.ACTIVE and runtime.committed(0) == ("a", "b")
    yield runtime, writer, clock, timers, unloaded
    await runtime.close()


def commit(runtime: CoordinatorRuntime[State], writer: FakeWriter, hw: int) -> None:
    writer.hw = hw
    runtime.on_partition_change(0)


async def test_answers_are_released_when_their_records_commit_in_order(setup) -> None:
    runtime, writer, *_ = setup
    first = runtime.submit(0, add("c", "first"))
    await asyncio.sleep(0)  # the open batch is appended when the loop gets to it
    second = runtime.submit(0, add("d", "second"))
    beat = runtime.submit(0, touch("beat"))  # no records: waits for what it read to commit
    await asyncio.sleep(0)
    assert writer.batches == [1, 1] and runtime.current(0) == ("a", "b", "c", "d")
    assert runtime.committed(0) == ("a", "b") and not first.done()
    commit(runtime, writer, 3)
    assert first.result() == "first" and not second.done() and not beat.done()
    assert runtime.committed(0) == ("a", "b", "c")
    commit(runtime, writer, 4)
    assert (second.result(), beat.result()) == ("second", "beat")
    assert runtime.committed(0) == runtime.current(0) == ("a", "b", "c", "d")
    assert await runtime.write(0, touch("now")) == "now"  # nothing pending: answered at once


async def test_concurrent_writes_share_one_append(setup) -> None:
    runtime, writer, *_ = setup
    futures = [runtime.submit(0, add(str(i))) for i in range(50)]
    assert writer.batches == [1]  # the first of the turn goes at once: a lone writer never waits
    await asyncio.sleep(0)
    assert writer.batches == [1, 49]  # the rest of the turn: one append
    commit(runtime, writer, 52)
    assert all(f.result() == "ok" for f in futures) and runtime.appends_total == 2


async def test_a_full_batch_is_appended_at_once(setup) -> None:
    runtime, writer, *_ = setup
    runtime.max_batch_bytes = 10
    for value in ("wwww", "xxxx", "yyyy", "zzzz"):  # 5 bytes each with the key
        runtime.submit(0, add(value))
    assert writer.batches == [1, 2]  # the first at once; the fourth did not fit beside two
    await asyncio.sleep(0)
    assert writer.batches == [1, 2, 1]


async def test_a_refused_append_reverts_to_the_state_before_it(setup) -> None:
    runtime, writer, *_ = setup
    kept = runtime.submit(0, add("c"))
    await asyncio.sleep(0)
    writer.refuse = True
    refused = runtime.submit(0, add("d"))  # appended at once: refused at once
    assert isinstance(refused.exception(), CoordinatorError) and runtime.current(0) == ("a", "b", "c")
    lost = [refused, runtime.submit(0, add("e")), runtime.submit(0, touch("beat"))]
    assert runtime.current(0) == ("a", "b", "c", "e")  # pending in the open batch
    await asyncio.sleep(0)
    for future in lost:
        with pytest.raises(CoordinatorError) as error:
            future.result()
        assert error.value.code == E.KAFKA_STORAGE_ERROR
    assert runtime.current(0) == ("a", "b", "c")  # the pending write before it stands
    commit(runtime, writer, 3)
    assert kept.result() == "ok" and runtime.committed(0) == ("a", "b", "c")


async def test_a_commit_timeout_fails_the_answers_and_keeps_the_write_pending(setup) -> None:
    runtime, writer, clock, timers, _ = setup
    first = runtime.submit(0, add("c"))
    await asyncio.sleep(0)
    second = runtime.submit(0, add("d"))  # built on top of the first, with a timer of its own
    await asyncio.sleep(0)
    clock[0] += COMMIT_TIMEOUT_MS - 1
    timers.run_due()
    assert not first.done()
    clock[0] += 1
    timers.run_due()
    for future in (first, second):
        assert isinstance(future.exception(), CoordinatorError)
    assert first.exception().code == E.REQUEST_TIMED_OUT  # type: ignore[union-attr]
    # The records are in the log: the state keeps them pending rather than forgetting them
    assert runtime.current(0) == ("a", "b", "c", "d") and runtime.committed(0) == ("a", "b")
    commit(runtime, writer, 4)  # the log commits them later: the state is what a reload finds
    assert runtime.current(0) == runtime.committed(0) == ("a", "b", "c", "d")


async def test_a_timed_out_write_is_reverted_when_the_log_truncates_it(setup) -> None:
    runtime, writer, clock, timers, _ = setup
    runtime.submit(0, add("c"))
    await asyncio.sleep(0)
    clock[0] += COMMIT_TIMEOUT_MS
    timers.run_due()
    assert runtime.current(0) == ("a", "b", "c")
    runtime.on_truncated(0, 2)
    assert runtime.current(0) == runtime.committed(0) == ("a", "b")


async def test_a_truncation_reverts_the_writes_past_it(setup) -> None:
    runtime, writer, *_ = setup
    kept = runtime.submit(0, add("c"))
    await asyncio.sleep(0)
    lost = runtime.submit(0, add("d"))
    await asyncio.sleep(0)
    runtime.on_truncated(0, 3)
    assert lost.exception().code == E.NOT_COORDINATOR  # type: ignore[union-attr]
    assert runtime.current(0) == ("a", "b", "c") and not kept.done()
    commit(runtime, writer, 3)
    assert kept.result() == "ok"


async def test_unloading_answers_pending_writes_not_coordinator_and_cancels_timers(setup) -> None:
    runtime, writer, clock, timers, unloaded = setup
    pending = [runtime.submit(0, add("c")), runtime.submit(0, add("d"))]  # appended; open
    runtime.schedule_timer(0, "session", 10, lambda state, now: CoordinatorResult())
    writer.epoch = None  # leadership moved away
    runtime.on_partition_change(0)
    assert [f.exception().code for f in pending] == [E.NOT_COORDINATOR] * 2  # type: ignore[union-attr]
    assert unloaded == [0] and runtime.status(0) is None and len(timers) == 0
    with pytest.raises(CoordinatorError) as error:
        await runtime.write(0, add("d"))
    assert error.value.code == E.NOT_COORDINATOR
    await asyncio.sleep(0)
    assert writer.batches == [1]  # the open batch of the old epoch was never appended


async def test_a_new_leader_epoch_reloads_from_the_log(setup) -> None:
    runtime, writer, *_ = setup
    runtime.submit(0, add("c"))
    await asyncio.sleep(0)
    writer.epoch = 8
    runtime.on_partition_change(0)
    assert runtime.status(0) is ShardStatus.LOADING
    await runtime.idle()
    assert runtime.committed(0) == ("a", "b", "c")  # what the log holds, as loaded


async def test_a_timer_runs_as_a_write_at_its_deadline(setup) -> None:
    runtime, writer, clock, timers, _ = setup
    ran: list[int] = []

    def expire(state: State, now: int) -> CoordinatorResult[State, None]:
        ran.append(now)
        return CoordinatorResult(((b"k", b"expired"),))

    runtime.schedule_timer(0, "session", 10_000, expire)  # by delay, on the timer service's clock
    runtime.schedule_timer(0, "session", 10_001, expire)  # rescheduled by key
    assert runtime.timer_deadline(0, "session") == NOW + 10_001
    clock[0] = NOW + 10_000
    timers.run_due()
    assert ran == []
    clock[0] += 1
    timers.run_due()
    assert ran == [NOW + 10_001] and runtime.current(0)[-1] == "expired"
    await asyncio.sleep(0)
    commit(runtime, writer, 3)
    await runtime.idle()
    assert runtime.committed(0)[-1] == "expired"


async def test_an_unexpected_append_failure_fails_the_writes_and_the_partition_carries_on(setup) -> None:
    runtime, writer, *_ = setup
    append = writer.append

    def broken(partition: int, leader_epoch: int, records: list[Encoded]) -> int:
        raise RuntimeError("a bug below the runtime")

    writer.append = broken  # type: ignore[method-assign]
    failed = runtime.submit(0, add("c"))
    assert failed.exception().code == E.UNKNOWN_SERVER_ERROR  # type: ignore[union-attr]
    assert runtime.current(0) == ("a", "b")
    writer.append = append  # type: ignore[method-assign]
    await asyncio.sleep(0)
    later = runtime.submit(0, add("d"))
    commit(runtime, writer, 3)
    assert later.result() == "ok" and runtime.committed(0) == ("a", "b", "d")


def txn_add(producer_id: int, value: str) -> Callable[[State], CoordinatorResult[State, str]]:
    return lambda state: CoordinatorResult(((b"k", value.encode()),), "ok", producer_id=producer_id, producer_epoch=0)


@pytest.mark.parametrize("committed, expected", [(True, ("a", "b", "x", "c", "y")), (False, ("a", "b", "c", "y"))])
async def test_a_transaction_stays_pending_until_its_marker_and_loads_the_same(setup, committed, expected) -> None:
    runtime, writer, clock, timers, _ = setup
    runtime.submit(0, txn_add(7, "x"))
    runtime.submit(0, add("c"))  # not in the transaction: a batch of its own
    runtime.submit(0, add("y"))
    await asyncio.sleep(0)
    assert writer.batches == [1, 2]
    assert [p for _, p, _ in writer.log[2:]] == [7, NO_PRODUCER_ID, NO_PRODUCER_ID]
    assert runtime.current(0) == ("a", "b", "7:x", "c", "y")
    marker = runtime.complete_transaction(0, 7, 0, 3, committed)
    await asyncio.sleep(0)
    assert writer.batches == [1, 2, 0] and writer.log[-1][1:] == (7, committed)
    commit(runtime, writer, len(writer.log))
    assert marker.done() and marker.result() is None
    assert runtime.committed(0) == expected
    reloaded: CoordinatorRuntime[State] = CoordinatorRuntime("test", Appends(), writer, timers,
                                                             commit_timeout_ms=COMMIT_TIMEOUT_MS)
    reloaded.on_partition_change(0)
    await reloaded.idle()
    assert reloaded.committed(0) == expected  # loading replays records and markers alike
    await reloaded.close()


async def test_a_failed_marker_leaves_the_transaction_pending(setup) -> None:
    runtime, writer, *_ = setup
    runtime.submit(0, txn_add(7, "x"))
    commit(runtime, writer, 3)
    writer.refuse = True
    with pytest.raises(CoordinatorError) as failed:
        await runtime.complete_transaction(0, 7, 0, 3, True)
    assert failed.value.code == E.KAFKA_STORAGE_ERROR
    assert runtime.current(0) == runtime.committed(0) == ("a", "b", "7:x")


async def test_memory_only_state_is_applied_after_the_replay(setup) -> None:
    runtime, writer, *_ = setup
    await_it = runtime.submit(0, lambda state: CoordinatorResult(
        ((b"k", b"c"),), "ok", memory=lambda replayed: (*replayed, "soft")))
    assert runtime.current(0) == ("a", "b", "c", "soft")
    commit(runtime, writer, 3)
    assert await await_it == "ok"
