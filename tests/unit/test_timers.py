"""broker/timers.py: the timer queue (schedule, reschedule and cancel by key) on a fake clock,
and the asyncio shell firing at a deadline, to the millisecond."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from broker.timers import MAX_DUE_PER_PASS, STALE_SLACK, TimerQueue, TimerService, monotonic_ms

NOW = 1_000_000


@pytest.mark.parametrize("steps, now, due, left", [
    ((("a", 10), ("b", 5), ("c", 20)), 10, ["b", "a"], ["c"]),
    ((("a", 10), ("a", 30)), 10, [], ["a"]),  # rescheduled later: the old deadline is gone
    ((("a", 30), ("a", 10)), 10, ["a"], []),  # rescheduled earlier
    ((("a", 10), ("b", 10), ("c", 10)), 10, ["a", "b", "c"], []),  # ties: scheduling order
    ((("a", 10), ("cancel", "a"), ("b", 11)), 11, ["b"], []),
    ((("a", 10),), 9, [], ["a"]),  # one ms early: not due
], ids=["order", "later", "earlier", "ties", "cancel", "early"])
def test_queue_pops_due_keys_in_deadline_order(steps: tuple, now: int, due: list[str], left: list[str]) -> None:
    queue: TimerQueue[str, int] = TimerQueue()
    for key, deadline in steps:
        if key == "cancel":
            assert queue.cancel(deadline)
        else:
            queue.schedule(key, deadline, deadline)
    popped = list(iter(lambda: queue.pop(now), None))  # each value is its deadline when scheduled
    assert [key for key, _ in popped] == due and all(deadline <= now for _, deadline in popped)
    assert sorted(k for k in ("a", "b", "c") if k in queue) == left
    assert len(queue) == len(left)


def test_queue_stays_bounded_under_reschedules() -> None:
    queue: TimerQueue[str, None] = TimerQueue()
    for deadline in range(10_000):
        queue.schedule("session", NOW + deadline, None)
    assert len(queue) == 1 and queue.heap_size() < 200
    assert queue.next_deadline_ms() == NOW + 9_999
    assert queue.pop(NOW + 9_998) is None and queue.pop(NOW + 9_999) == ("session", None)
    assert queue.next_deadline_ms() is None


def test_fake_clock_runs_actions_at_their_deadline_and_actions_may_schedule_more() -> None:
    clock = [NOW]
    timers = TimerService(clock=lambda: clock[0], driven=False)
    ran: list[tuple[str, int]] = []

    def chained(now: int) -> None:
        ran.append(("first", now))
        timers.schedule("second", now, lambda n: ran.append(("second", n)))  # due at once

    timers.schedule("first", NOW + 100, chained)
    timers.schedule_in("third", 200, lambda n: ran.append(("third", n)))
    def boom(now: int) -> None:
        raise ZeroDivisionError(now)

    timers.schedule("boom", NOW + 100, boom)  # logged; the others still run
    clock[0] = NOW + 99
    assert timers.run_due() == 0 and ran == []
    clock[0] = NOW + 100
    assert timers.run_due() == 3
    assert ran == [("first", NOW + 100), ("second", NOW + 100)]
    assert timers.cancel("third") and not timers.cancel("third")
    clock[0] = NOW + 1_000
    assert timers.run_due() == 0 and len(timers) == 0


def test_one_pass_is_bounded() -> None:
    timers = TimerService(clock=lambda: NOW, driven=False)
    ran: list[int] = []
    for i in range(MAX_DUE_PER_PASS + 5):
        timers.schedule(i, NOW, ran.append)
    assert timers.run_due() == MAX_DUE_PER_PASS
    assert timers.run_due() == 5 and len(ran) == MAX_DUE_PER_PASS + 5


async def test_the_shell_fires_at_the_deadline_to_the_millisecond() -> None:
    timers = TimerService()
    fired: list[int] = []
    done = asyncio.get_running_loop().create_future()

    def action(now: int) -> None:
        fired.append(now)
        done.set_result(None)

    deadline = monotonic_ms() + 30
    timers.schedule("late", deadline + 10_000, lambda now: None)
    timers.schedule("soon", deadline, action)  # earlier than what is armed: re-armed for it
    await asyncio.wait_for(done, 2)
    assert fired[0] >= deadline and monotonic_ms() - deadline < 25  # not a polling tick later
    assert "late" in timers and "soon" not in timers
    timers.close()
    assert len(timers) == 0 and timers._armed is None


async def test_a_cancelled_timer_never_runs() -> None:
    timers = TimerService()
    ran: list[int] = []
    timers.schedule("x", monotonic_ms() + 5, ran.append)
    timers.cancel("x")
    flag = asyncio.Event()
    timers.schedule("y", monotonic_ms() + 20, lambda now: flag.set())
    await asyncio.wait_for(flag.wait(), 2)
    assert ran == []


def test_a_periodic_job_runs_at_each_interval_and_stops_on_cancel_or_close() -> None:
    clock = [NOW]
    timers = TimerService(clock=lambda: clock[0], driven=False)
    ran: list[int] = []
    failing: list[int] = []

    def fails(now: int) -> None:
        failing.append(now)
        raise OSError("disk")  # logged; the job keeps its period

    timers.schedule_every("job", 1_000, ran.append)
    timers.schedule_every("fails", 1_000, fails, first_delay_ms=0)
    timers.run_due()
    assert ran == [] and failing == [NOW]  # first_delay_ms=0: at once
    for step in range(1, 4):
        clock[0] = NOW + step * 1_000 - 1
        timers.run_due()
        assert len(ran) == step - 1  # not a ms early
        clock[0] += 1
        timers.run_due()
        assert ran[-1] == NOW + step * 1_000
    assert failing == [NOW + k * 1_000 for k in range(4)]
    assert timers.deadline("job") == NOW + 4_000  # re-armed an interval after its run
    assert timers.cancel("job")
    clock[0] = NOW + 10_000
    timers.run_due()
    assert len(ran) == 3 and "job" not in timers
    timers.close()
    clock[0] = NOW + 20_000
    assert timers.run_due() == 0 and len(failing) == 5 and len(timers) == 0


def test_a_periodic_job_that_cancels_itself_stops_and_run_soon_keeps_the_period() -> None:
    clock = [NOW]
    timers = TimerService(clock=lambda: clock[0], driven=False)
    ran: list[int] = []

    def once(now: int) -> None:
        ran.append(now)
        timers.cancel("once")

    timers.schedule_every("once", 100, once)
    timers.schedule_every("job", 1_000, ran.append)
    clock[0] = NOW + 100
    timers.run_due()
    assert ran == [NOW + 100] and "once" not in timers
    assert timers.run_soon("job") and not timers.run_soon("once")
    timers.run_due()
    assert ran == [NOW + 100, NOW + 100] and timers.deadline("job") == NOW + 1_100
    with pytest.raises(ValueError, match="interval_ms"):
        timers.schedule_every("bad", 0, ran.append)


async def test_schedule_and_cancel_churn_arms_the_loop_timer_once_and_keeps_the_heap_bounded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A timer per waiting request (issue 35: each parked follower fetch, cancelled when a change
    answers it) costs a heap push and a dict pop: the loop timer is armed by the first schedule
    and then left, even when a cancel leaves nothing scheduled (it fires, finds nothing, goes);
    cancelled entries go stale on the heap, which stays bounded by the live keys."""
    loop = asyncio.get_running_loop()
    armed: list[float] = []
    call_later = loop.call_later

    def counted(delay: float, *args: Any) -> asyncio.TimerHandle:
        armed.append(delay)
        return call_later(delay, *args)

    monkeypatch.setattr(loop, "call_later", counted)
    timers = TimerService(clock=lambda: NOW, name="test")
    timers.schedule("isr-expiration", NOW + 60_000, lambda now: None)
    for fetch in range(100_000):
        timers.schedule(("fetch", fetch), NOW + 500, lambda now: None)
        assert timers.cancel(("fetch", fetch))
        assert timers._queue.heap_size() <= 2 * (len(timers) + 1) + STALE_SLACK  # (+1: the key just cancelled)
    assert len(armed) == 2 and len(timers) == 1  # the first fetch's deadline was earlier than isr-expiration's
    assert timers.cancel("isr-expiration")
    for fetch in range(100_000):  # with nothing else scheduled, too: each cancel empties the service
        timers.schedule(fetch, NOW + 500, lambda now: None)
        assert timers.cancel(fetch)
    assert len(armed) == 2 and len(timers) == 0 and timers._queue.heap_size() <= 2 + STALE_SLACK
    assert timers.run_due(NOW + 500) == 0 and timers._queue.heap_size() == 0  # the armed pass: nothing ran
    timers.close()


def test_an_action_that_reschedules_or_cancels_a_key_due_in_its_pass_is_heard() -> None:
    """Due keys are popped one at a time, so an action's reschedule or cancel of a key due in
    the same pass holds: the rescheduled key runs once, at its new time, the cancelled never."""
    clock = [NOW]
    timers = TimerService(clock=lambda: clock[0], driven=False)
    ran: list[tuple[str, int]] = []

    def first(now: int) -> None:
        ran.append(("first", now))
        timers.schedule("moved", NOW + 300, lambda n: ran.append(("moved", n)))
        timers.cancel("cancelled")

    timers.schedule("first", NOW + 100, first)
    timers.schedule("moved", NOW + 100, lambda n: ran.append(("moved early", n)))
    timers.schedule("cancelled", NOW + 100, lambda n: ran.append(("cancelled", n)))
    clock[0] = NOW + 200
    assert timers.run_due() == 1 and ran == [("first", NOW + 200)]
    clock[0] = NOW + 299
    assert timers.run_due() == 0
    clock[0] = NOW + 300
    assert timers.run_due() == 1 and ran == [("first", NOW + 200), ("moved", NOW + 300)] and len(timers) == 0
