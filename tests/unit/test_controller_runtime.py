"""quorum/controller_runtime.py on a fake clock: the timer heap, fencing passes, a stalled controller.

The decision queue is a real ActiveController over the scripted log of
test_quorum_active_controller (leadership on demand); time moves only when a test says so.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from metadata.records import BrokerRegistrationChange, Listener, RegisterBroker
from quorum.active_controller import ActiveController
from quorum.admin_api import ApiSettings
from quorum.controller_runtime import ControllerRuntime, QueueTimeoutError, decide_result
from tests.unit.test_quorum_active_controller import ScriptedLog, until

SESSION_MS, INTERVAL_MS = 3000, 200


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
async def active() -> AsyncIterator[tuple[ScriptedLog, ActiveController]]:
    log = ScriptedLog()
    controller = ActiveController(log)
    task = asyncio.create_task(controller.run())
    log.lead(term=1)
    await until(lambda: controller.is_active)
    for broker in (4, 5):  # registered and unfenced
        outcome = await controller.append([RegisterBroker(broker, f"inc-{broker}", (
            Listener("PLAINTEXT", "127.0.0.1", 9000 + broker),))], 1.0)
        await controller.append([BrokerRegistrationChange(broker, outcome.first_offset, fenced=False)], 1.0)
    try:
        yield log, controller
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def runtime_for(log: ScriptedLog, controller: ActiveController, clock: Clock, *, rebalance_s: int = 0,
                watch_listeners: bool = False) -> ControllerRuntime:
    settings = ApiSettings(node_id=1, host="127.0.0.1", port=1, api_voters={}, quorum_ids={}, cluster_id="unit",
                           session_timeout_ms=SESSION_MS, heartbeat_interval_ms=INTERVAL_MS,
                           leader_imbalance_check_interval_s=rebalance_s)
    return ControllerRuntime(log, controller, settings, clock=clock, watch_listeners=watch_listeners)


def fenced(log: ScriptedLog) -> set[int]:
    return {b for b, r in log.image().cluster.brokers.items() if r.fenced}


async def step(runtime: ControllerRuntime, clock: Clock, to_ms: int) -> None:
    """Advance the fake clock timer by timer up to `to_ms`, running what falls due (as run() does)."""
    while (due := runtime.next_due_ms()) is not None and due <= to_ms:  # bounded: time only moves forward
        clock.now = max(clock.now, due)
        await runtime.run_due(clock.now)
    clock.now = to_ms


async def test_a_silent_broker_is_fenced_just_after_its_session_and_a_beating_one_never(active) -> None:
    log, controller = active
    clock = Clock()
    runtime = runtime_for(log, controller, clock)
    start = clock.now
    runtime.sessions()  # activation: every unfenced broker's session starts now
    epoch = log.image().broker(5).broker_epoch
    while clock.now < start + 2 * SESSION_MS:  # broker 5 heartbeats every interval, broker 4 never
        runtime.touch_on_arrival(5, epoch, 10)
        await step(runtime, clock, clock.now + INTERVAL_MS)
        if clock.now <= start + SESSION_MS:
            assert fenced(log) == set(), clock.now - start
    assert fenced(log) == {4}


async def test_a_pass_far_behind_its_time_restarts_sessions_instead_of_fencing(active) -> None:
    """A SIGSTOPped controller wakes up with every session expired by its own silence."""
    log, controller = active
    clock = Clock()
    runtime = runtime_for(log, controller, clock)
    runtime.sessions()
    clock.now += 10 * SESSION_MS  # stopped for ten sessions
    await runtime.run_due(clock.now)
    assert fenced(log) == set()
    assert runtime.heartbeat_ages() == {4: 0, 5: 0}
    await step(runtime, clock, clock.now + SESSION_MS + 2 * INTERVAL_MS)  # still silent a session later
    assert fenced(log) == {4, 5}


async def test_timers_run_in_due_order_and_reschedule_themselves() -> None:
    log = ScriptedLog()
    clock = Clock()
    runtime = runtime_for(log, ActiveController(log), clock)  # not active: the fencing task only reschedules
    ran: list[tuple[str, int]] = []

    def every(name: str, period: int):  # noqa: ANN202 - a test helper
        async def task(due: int) -> int | None:
            ran.append((name, due))
            return due + period if len(ran) < 6 else None
        return task

    runtime.schedule("b", clock.now + 30, every("b", 30))
    runtime.schedule("a", clock.now + 20, every("a", 20))
    await step(runtime, clock, clock.now + 60)
    # a tie at 60: the one scheduled first runs first
    assert [(n, d - 1_000_000) for n, d in ran] == [("a", 20), ("b", 30), ("a", 40), ("b", 60), ("a", 60)]


async def test_a_decision_that_timed_out_in_the_queue_says_so() -> None:
    # ActiveController.decide's only TimeoutError (its deadline passed in the queue, nothing
    # appended) becomes QueueTimeoutError, which the request router may safely send again
    class QueueTimingOut:
        async def decide(self, decision, timeout_s, *, on_committed=None):  # type: ignore[no-untyped-def]
            raise TimeoutError("the decision timed out in the queue; nothing was appended")

    with pytest.raises(QueueTimeoutError, match="in the queue"):
        await decide_result(QueueTimingOut(), lambda image: None, 1.0)  # type: ignore[arg-type]
