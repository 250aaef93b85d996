"""Tests for quorum/active_controller.py against a scripted log (leadership and outcomes on demand).

The real MetadataLog is exercised by the integration tests; here the log is a
MetadataLogState behind the same interface, so lost leadership and UNKNOWN or FENCED
outcomes happen exactly when a test says so.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence

import pytest

from metadata.image import MetadataImage
from metadata.records import (
    AbortTransaction,
    BeginEpoch,
    BeginTransaction,
    EndTransaction,
    NoOp,
    Record,
    Topic,
    decode_records,
    encode_records,
)
from quorum.active_controller import (
    ActiveController,
    ControllerBusyError,
    NotActiveControllerError,
    joined_outcome,
)
from quorum.controller_result import ControllerResult
from quorum.log_state import AppendOutcome, MetadataLogState, OutcomeKind, split_records
from common.waiting import wait_until_async

WAIT_S = 2.0


class ScriptedLog:
    """A QuorumLog whose leadership a test sets and whose next outcomes it can force."""

    def __init__(self) -> None:
        self.state = MetadataLogState()
        self.leader = False
        self.term = 0
        self.forced: list[OutcomeKind] = []  # outcomes of the next appends, instead of applying
        self.appends: list[tuple[int, tuple[Record, ...]]] = []
        self.atomics: list[bool] = []  # the atomic flag of each append
        self.chunked: list[int] = []  # the chunk count of each append_chunks (a splittable result's)
        self.listeners: list[Callable[[], None]] = []
        self.gate: asyncio.Event | None = None  # when set up, appends wait for it
        self.entered = 0  # appends started, gated or not
        self.fatal: str | None = None

    def lead(self, term: int) -> None:
        self.leader, self.term = True, term
        for listener in self.listeners:
            listener()

    def leadership(self) -> tuple[bool, int]:
        return self.leader, self.term

    def fatal_error(self) -> str | None:
        return self.fatal

    def leader_address(self) -> str | None:
        return "127.0.0.9:9093" if not self.leader else "127.0.0.1:9093"

    def image(self) -> MetadataImage:
        return self.state.image

    def in_transaction(self) -> bool:
        return self.state.in_transaction

    async def append(self, records: Sequence[Record], epoch: int, timeout_s: float, *,
                     atomic: bool = True) -> AppendOutcome:
        self.entered += 1
        if self.gate is not None:
            await self.gate.wait()
        self.appends.append((epoch, tuple(records)))
        self.atomics.append(atomic)
        if self.forced:
            return AppendOutcome(self.forced.pop(0), epoch, reason="scripted")
        return self.state.apply_chunk(encode_records(records), epoch)

    async def append_chunks(self, chunks: Sequence[bytes], epoch: int, timeout_s: float) -> list[AppendOutcome]:
        """Each chunk applied on its own, in order; one entry in `appends` for the whole call (one decision)."""
        self.entered += 1
        if self.gate is not None:
            await self.gate.wait()
        self.appends.append((epoch, tuple(r for chunk in chunks for r in decode_records(chunk))))
        self.atomics.append(False)
        self.chunked.append(len(chunks))
        return [AppendOutcome(self.forced.pop(0), epoch, reason="scripted") if self.forced
                else self.state.apply_chunk(chunk, epoch) for chunk in chunks]

    def add_state_listener(self, listener: Callable[[], None]) -> None:
        self.listeners.append(listener)

    def remove_state_listener(self, listener: Callable[[], None]) -> None:
        self.listeners.remove(listener)


async def until(condition: Callable[[], bool]) -> None:
    await wait_until_async("the scripted log to reach the state", condition, WAIT_S, poll_s=0.005)


@pytest.fixture
async def log() -> ScriptedLog:
    return ScriptedLog()


@pytest.fixture
async def controller(log: ScriptedLog) -> AsyncIterator[ActiveController]:
    controller = ActiveController(log, queue_max=4)
    task = asyncio.create_task(controller.run())
    try:
        yield controller
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_follower_is_not_active(log: ScriptedLog, controller: ActiveController) -> None:
    await asyncio.sleep(0.1)
    assert not controller.is_active and controller.epoch is None and log.appends == []
    with pytest.raises(NotActiveControllerError) as info:
        await controller.append([NoOp()], 1.0)
    assert info.value.leader == "127.0.0.9:9093"


async def test_becomes_active_after_its_begin_epoch_commits(log: ScriptedLog,
                                                            controller: ActiveController) -> None:
    log.lead(term=3)
    await until(lambda: controller.is_active)
    assert controller.epoch == 3 and log.appends == [(3, (BeginEpoch(3),))]
    outcome = await controller.append([NoOp(), NoOp()], 1.0)
    assert outcome == AppendOutcome(OutcomeKind.COMMITTED, 3, 1, 2)


async def test_a_transaction_left_open_is_aborted_with_the_new_begin_epoch(
        log: ScriptedLog, controller: ActiveController) -> None:
    # The previous controller (epoch 2) committed the first chunk of a transaction, then died.
    assert log.state.apply_chunk(encode_records([BeginEpoch(2)]), 2).committed
    assert log.state.apply_chunk(encode_records([BeginTransaction("create orders"), Topic("orders", "t")]), 2).committed
    log.lead(term=3)
    await until(lambda: controller.is_active)
    assert log.appends == [(3, (AbortTransaction("controller failover"), BeginEpoch(3)))]
    assert not log.state.in_transaction and log.state.image.topic("orders") is None


async def test_begin_epoch_retries_when_the_open_transaction_ended_meanwhile(
        log: ScriptedLog, controller: ActiveController) -> None:
    # The controller saw an open transaction, but its End was still being applied: REJECTED, and
    # the retry reads the state then applied (no transaction) and begins without an Abort.
    assert log.state.apply_chunk(encode_records([BeginEpoch(2)]), 2).committed
    assert log.state.apply_chunk(encode_records([BeginTransaction(), Topic("orders", "t")]), 2).committed
    gate = asyncio.Event()
    log.gate = gate
    log.lead(term=3)
    await until(lambda: log.entered == 1)
    assert log.state.apply_chunk(encode_records([EndTransaction()]), 2).committed
    gate.set()
    await until(lambda: controller.is_active)
    assert [records for _, records in log.appends] == [
        (AbortTransaction("controller failover"), BeginEpoch(3)), (BeginEpoch(3),)]
    assert log.state.image.topic("orders") is not None


async def test_renounces_when_leadership_is_lost_and_begins_a_new_epoch(
        log: ScriptedLog, controller: ActiveController, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="quorum.active_controller")
    log.lead(term=1)
    await until(lambda: controller.is_active)
    log.leader = False
    await until(lambda: not controller.is_active)
    log.lead(term=4)
    await until(lambda: controller.epoch == 4)
    assert [records for _, records in log.appends] == [(BeginEpoch(1),), (BeginEpoch(4),)]
    assert "Became active controller with epoch 1" in caplog.text
    assert "Renounced active controller role at epoch 1" in caplog.text
    assert "Became active controller with epoch 4" in caplog.text


async def test_a_new_term_while_leader_is_a_new_epoch(log: ScriptedLog,
                                                     controller: ActiveController) -> None:
    log.lead(term=1)
    await until(lambda: controller.is_active)
    log.lead(term=2)
    await until(lambda: controller.epoch == 2)
    assert log.state.image.controller_epoch == 2


@pytest.mark.parametrize("kind", [OutcomeKind.UNKNOWN, OutcomeKind.FENCED])
async def test_an_unknown_or_fenced_append_renounces_and_begins_again(
        log: ScriptedLog, controller: ActiveController, kind: OutcomeKind) -> None:
    log.lead(term=5)
    await until(lambda: controller.is_active)
    log.forced = [kind]
    outcome = await controller.append([NoOp()], 1.0)
    assert outcome.kind is kind
    # Still the leader: it begins epoch 5 again, which settles the unknown append.
    await until(lambda: controller.is_active and len(log.appends) == 3)
    assert log.appends[2] == (5, (BeginEpoch(5),))
    assert (await controller.append([NoOp()], 1.0)).committed


async def test_decisions_run_in_order_on_the_committed_image(log: ScriptedLog,
                                                             controller: ActiveController) -> None:
    log.lead(term=1)
    await until(lambda: controller.is_active)
    seen: list[int] = []

    def decide(image: MetadataImage) -> list[Record]:
        seen.append(image.offset)
        return [NoOp()]

    outcomes = await asyncio.gather(*(controller.decide(decide, 1.0) for _ in range(4)))
    assert seen == [0, 1, 2, 3]  # each decision saw the previous one committed
    assert [o.first_offset for o in outcomes if o is not None] == [1, 2, 3, 4]


async def test_a_decision_that_raises_or_returns_nothing(log: ScriptedLog,
                                                         controller: ActiveController) -> None:
    log.lead(term=1)
    await until(lambda: controller.is_active)

    def refuse(image: MetadataImage) -> list[Record]:
        raise ValueError("topic 'orders' already exists")

    with pytest.raises(ValueError, match="already exists"):
        await controller.decide(refuse, 1.0)
    assert await controller.decide(lambda image: [], 1.0) is None
    assert controller.is_active and len(log.appends) == 1
    rejected = await controller.append([Topic("a", "t1"), Topic("a", "t2")], 1.0)
    assert rejected.kind is OutcomeKind.REJECTED and controller.is_active


async def test_a_full_queue_and_an_expired_decision(log: ScriptedLog, controller: ActiveController) -> None:
    log.lead(term=1)
    await until(lambda: controller.is_active)
    log.gate = asyncio.Event()  # appends hang until the gate opens
    first = asyncio.create_task(controller.append([NoOp()], 5.0))
    await until(lambda: log.entered == 2)  # taken by the loop, hanging in append
    queued = [asyncio.create_task(controller.append([NoOp()], 0.01)) for _ in range(4)]
    await asyncio.sleep(0)
    with pytest.raises(ControllerBusyError):
        await controller.append([NoOp()], 1.0)
    await asyncio.sleep(0.05)  # the queued decisions' timeouts pass while they wait
    log.gate.set()
    assert (await first).committed
    for task in queued:
        with pytest.raises(TimeoutError, match="nothing was appended"):
            await task


async def test_queued_decisions_fail_when_it_renounces(log: ScriptedLog,
                                                      controller: ActiveController) -> None:
    log.lead(term=1)
    await until(lambda: controller.is_active)
    log.gate = asyncio.Event()
    first = asyncio.create_task(controller.append([NoOp()], 5.0))
    await until(lambda: log.entered == 2)
    second = asyncio.create_task(controller.append([NoOp()], 5.0))
    await asyncio.sleep(0)
    log.forced = [OutcomeKind.UNKNOWN]
    log.gate.set()
    assert (await first).kind is OutcomeKind.UNKNOWN
    with pytest.raises(NotActiveControllerError, match="renounced"):
        await second


async def test_a_voter_with_a_fatal_error_renounces_and_never_begins(log: ScriptedLog,
                                                                    controller: ActiveController) -> None:
    log.lead(term=1)
    await until(lambda: controller.is_active)
    log.fatal = "cannot load metadata log dump"
    await until(lambda: not controller.is_active)
    log.lead(term=2)
    await asyncio.sleep(0.2)
    assert not controller.is_active and len(log.appends) == 1


async def test_stopping_mid_append_answers_unknown(log: ScriptedLog) -> None:
    controller = ActiveController(log)
    task = asyncio.create_task(controller.run())
    log.lead(term=1)
    await until(lambda: controller.is_active)
    log.gate = asyncio.Event()  # the next append hangs
    pending = asyncio.create_task(controller.append([NoOp()], 5.0))
    await until(lambda: log.entered == 2)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    outcome = await pending
    assert outcome.kind is OutcomeKind.UNKNOWN and "stopped while appending" in outcome.reason


async def test_losing_leadership_mid_append_stops_waiting_and_renounces_at_once(
        log: ScriptedLog, controller: ActiveController) -> None:
    """A deposed leader's append may never call back: the controller must not stay 'active' (and
    keep answering heartbeats) until the append's timeout, but renounce within a leadership poll."""
    log.lead(term=1)
    await until(lambda: controller.is_active)
    log.gate = asyncio.Event()  # the next append hangs, as a lost pysyncobj command does
    pending = asyncio.create_task(controller.append([NoOp()], 30.0))
    await until(lambda: log.entered == 2)
    log.leader = False
    assert not controller.is_active  # at once, not only after the decision loop notices
    async with asyncio.timeout(1.0):  # far below the append's 30 s
        outcome = await pending
    assert outcome.kind is OutcomeKind.UNKNOWN and "lost Raft leadership" in outcome.reason
    assert controller.epoch is None
    with pytest.raises(NotActiveControllerError):
        await controller.append([NoOp()], 1.0)


async def test_a_rules_result_says_whether_its_records_are_appended_atomically(
        log: ScriptedLog, controller: ActiveController) -> None:
    log.lead(term=1)
    await until(lambda: controller.is_active)
    await controller.decide(lambda image: ControllerResult((NoOp(),), None, atomic=True), 1.0)
    await controller.decide(lambda image: ControllerResult((NoOp(),), None), 1.0)  # Kafka's ControllerResult.of
    await controller.decide(lambda image: [NoOp()], 1.0, atomic=False)  # plain records: the caller says
    assert log.atomics[1:] == [True, False, False]


TOPICS = tuple(Topic(f"t{i:04d}", f"id{i:04d}") for i in range(1000))  # three chunks


async def test_a_splittable_result_goes_as_plain_chunks_without_a_transaction(
        log: ScriptedLog, controller: ActiveController) -> None:
    log.lead(term=1)
    await until(lambda: controller.is_active)
    before = log.image().offset
    outcome = await controller.decide(lambda image: ControllerResult(TOPICS, None, splittable=True), 1.0)
    assert log.chunked == [len(split_records(TOPICS))] and log.chunked[0] > 1
    assert outcome == AppendOutcome(OutcomeKind.COMMITTED, 1, before + 1, before + len(TOPICS))  # no markers
    assert log.image().offset == before + len(TOPICS) and log.image().topic("t0999") is not None
    await controller.decide(lambda image: ControllerResult(TOPICS[:1], None, splittable=True), 1.0)
    await controller.decide(lambda image: ControllerResult([Topic("big", "BIG"), *TOPICS[1:]], None), 1.0)
    assert len(log.chunked) == 1  # one chunk: as any append; not splittable: one (transaction) append


async def test_a_splittable_result_with_an_unknown_chunk_renounces(
        log: ScriptedLog, controller: ActiveController) -> None:
    log.lead(term=1)
    await until(lambda: controller.is_active)
    log.forced = [OutcomeKind.UNKNOWN]  # its first chunk's outcome never came
    appended = len(log.appends)
    outcome = await controller.decide(lambda image: ControllerResult(TOPICS, None, splittable=True), 1.0)
    assert outcome is not None and outcome.kind is OutcomeKind.UNKNOWN and outcome.first_offset is None
    # it renounced, and its BeginEpoch again settles what landed
    await until(lambda: controller.is_active and (1, (BeginEpoch(1),)) in log.appends[appended:])


def test_joined_outcomes_name_the_committed_prefix() -> None:
    committed = [AppendOutcome(OutcomeKind.COMMITTED, 2, 10, 19), AppendOutcome(OutcomeKind.COMMITTED, 2, 20, 29)]
    unknown = AppendOutcome(OutcomeKind.UNKNOWN, 2, reason="no outcome")
    assert joined_outcome(committed, 2) == AppendOutcome(OutcomeKind.COMMITTED, 2, 10, 29)
    assert joined_outcome([*committed, unknown, committed[0]], 2) == AppendOutcome(
        OutcomeKind.UNKNOWN, 2, 10, 29, reason="no outcome")
    assert joined_outcome([unknown, *committed], 2) == unknown  # nothing known to have committed
