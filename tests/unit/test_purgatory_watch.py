"""broker/purgatory.py's `Purgatory.watch`: a future of `then(answer)`, set where the operation is
decided (inside `check_and_complete`, or the deadline's timer), so whoever awaits it is woken with
the answer built and no task or coroutine waits in between (issue 35: an acks=all produce)."""

from __future__ import annotations

import asyncio

import pytest

from broker.purgatory import Purgatory
from broker.timers import TimerService
from tests.unit.test_purgatory import Join


def fake_clock_purgatory() -> tuple[list[int], Purgatory[str, str]]:
    now = [1_000]
    return now, Purgatory("test", TimerService(lambda: now[0]))


@pytest.mark.parametrize(("ready", "timeout_s", "expected"), [
    ({"a", "b"}, 5.0, "DONE"),  # satisfied on arrival: never watched
    ({"a"}, 0.0, "EXPIRED WITH ['B'] MISSING"),  # no time to wait: expires at once
])
async def test_decided_on_arrival_the_future_is_done_at_once(ready, timeout_s, expected):
    _, purgatory = fake_clock_purgatory()
    future = purgatory.watch(Join(ready, {"a", "b"}), ["a", "b"], timeout_s, str.upper)
    assert future.done() and future.result() == expected
    assert (purgatory.watched("a"), sum(purgatory.waited.counts)) == (0, 0)


async def test_the_check_that_satisfies_it_sets_the_answer_built_before_any_loop_pass():
    now, purgatory = fake_clock_purgatory()
    ready: set[str] = set()
    future = purgatory.watch(Join(ready, {"a", "b"}), ["a", "b"], 5.0, str.upper)
    ready.add("a")
    assert purgatory.check_and_complete("a") == 0 and not future.done()
    now[0] += 7
    ready.add("b")
    assert purgatory.check_and_complete("b") == 1
    assert future.result() == "DONE"  # no await: set inside the check
    assert (purgatory.watched("a"), purgatory.watched("b"), len(purgatory.operations)) == (0, 0, 0)
    assert (sum(purgatory.waited.counts), purgatory.waited.longest_ms) == (1, 7)


async def test_at_the_deadline_the_answer_is_then_of_the_expiration():
    now, purgatory = fake_clock_purgatory()
    future = purgatory.watch(Join(set(), {"b"}), ["b"], 0.2, str.upper)
    now[0] += 200
    purgatory.timers.run_due()
    assert future.result() == "EXPIRED WITH ['B'] MISSING"
    assert (purgatory.watched("b"), sum(purgatory.waited.counts), purgatory.waited.longest_ms) == (0, 1, 200)


async def test_one_timer_for_the_purgatory_at_the_earliest_deadline_of_what_waits():
    # not one per request (a schedule and a cancel each); a request done early while others wait
    # leaves its deadline armed, which finds nothing due and moves on; none once it fires with
    # nothing waiting
    now, purgatory = fake_clock_purgatory()
    ready: set[str] = set()
    a, b, c = (purgatory.watch(Join(ready, {key}), [key], timeout_s, str.upper)
               for key, timeout_s in (("a", 5.0), ("b", 5.0), ("c", 1.0)))
    assert len(purgatory.timers) == 1
    now[0] += 1_000
    purgatory.timers.run_due()
    assert c.result() == "EXPIRED WITH ['C'] MISSING" and not a.done() and len(purgatory.timers) == 1
    ready.add("a")
    assert purgatory.check_and_complete("a") == 1 and a.result() == "DONE" and len(purgatory.timers) == 1
    now[0] += 4_000
    purgatory.timers.run_due()
    assert b.result() == "EXPIRED WITH ['B'] MISSING"
    assert (len(purgatory.operations), len(purgatory.timers)) == (0, 0)


async def test_what_then_raises_goes_to_the_future_not_to_the_checker():
    _, purgatory = fake_clock_purgatory()
    ready: set[str] = set()

    def broken(answer: str) -> str:
        raise RuntimeError(f"cannot answer {answer}")

    future = purgatory.watch(Join(ready, {"a"}), ["a"], 5.0, broken)
    ready.add("a")
    assert purgatory.check_and_complete("a") == 1  # the follower fetch that moved the HW goes on
    with pytest.raises(RuntimeError, match="cannot answer done"):
        await future


async def test_an_abandoned_future_stays_watched_until_decided_as_kafka_s_delayed_produce():
    # Kafka does not take a DelayedProduce out of its purgatory when the client's connection
    # closes; it completes or expires. `wait` (a task that is cancelled) forgets at once.
    _, purgatory = fake_clock_purgatory()
    ready: set[str] = set()
    future = purgatory.watch(Join(ready, {"a"}), ["a"], 5.0, str.upper)
    future.cancel()
    assert purgatory.watched("a") == 1
    ready.add("a")
    assert purgatory.check_and_complete("a") == 1
    assert (purgatory.watched("a"), len(purgatory.operations)) == (0, 0)
    waiting = asyncio.create_task(purgatory.wait(Join(set(), {"b"}), ["b"], 5.0))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert (purgatory.watched("b"), len(purgatory.operations)) == (0, 0)


async def test_the_timer_outlives_what_it_waits_for_and_goes_when_it_fires_with_nothing_due():
    # At most one armed timer per purgatory, not "none when nothing waits": an acks=all canary
    # empties the Produce purgatory with every produce, and a cancel then and a schedule for the
    # next produce would cost both per produce. The timer stays armed at the done request's
    # deadline; the next request, due later, schedules nothing; the timer fires, finds nothing
    # due and moves to the next deadline, and goes once it fires with nothing waiting.
    now, purgatory = fake_clock_purgatory()
    timers, key = purgatory.timers, purgatory._timer_key
    ready: set[str] = set()
    first = purgatory.watch(Join(ready, {"a"}), ["a"], 5.0, str.upper)
    ready.add("a")
    assert purgatory.check_and_complete("a") == 1 and first.result() == "DONE"
    assert len(purgatory.operations) == 0 and timers.deadline(key) == 6_000 and len(timers) == 1
    now[0] = 2_000
    second = purgatory.watch(Join(set(), {"b"}), ["b"], 5.0, str.upper)
    assert timers.deadline(key) == 6_000  # the armed one is earlier: not rescheduled
    now[0] = 6_000
    assert timers.run_due() == 1 and not second.done() and timers.deadline(key) == 7_000
    now[0] = 7_000
    assert timers.run_due() == 1 and second.result() == "EXPIRED WITH ['B'] MISSING"
    assert len(timers) == 0
