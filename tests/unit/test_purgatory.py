"""broker/purgatory.py: complete when satisfied, else expire at the request's one deadline.

The sans-IO core on a fake clock (as the group coordinator drives it), then the asyncio shell."""

from __future__ import annotations

import asyncio

import pytest

from broker.purgatory import DelayedOperations, Purgatory
from broker.timers import TimerService


class Join:
    """A delayed operation over several keys: done once every key has been seen ready."""

    def __init__(self, ready: set[str], needed: set[str]) -> None:
        self.ready = ready
        self.needed = needed
        self.checks = 0
        self.expired = 0

    def try_complete(self) -> str | None:
        self.checks += 1
        return "done" if self.needed <= self.ready else None

    def on_expiration(self) -> str:
        self.expired += 1
        return f"expired with {sorted(self.needed - self.ready)} missing"


# ---- the core, on a fake clock -----------------------------------------------------------


def test_core_expires_by_deadline_in_order_and_only_once():
    core: DelayedOperations[str, str] = DelayedOperations()
    late, early = Join(set(), {"a"}), Join(set(), {"a", "b"})
    late_id = core.watch(late, ["a"], deadline_ms=200)
    early_id = core.watch(early, ["a", "b", "a"], deadline_ms=100)
    assert (core.watched("a"), core.watched("b"), len(core)) == (2, 1, 2)
    assert core.next_deadline_ms() == 100
    assert core.expire(99) == []
    assert core.expire(150) == [(early_id, "expired with ['a', 'b'] missing")]
    assert (core.watched("a"), core.watched("b"), core.next_deadline_ms()) == (1, 0, 200)
    assert core.expire(10_000) == [(late_id, "expired with ['a'] missing")]
    assert (len(core), core.next_deadline_ms(), core.expire(20_000)) == (0, None, [])


def test_core_completion_unwatches_every_key_and_cancels_its_deadline():
    core: DelayedOperations[str, str] = DelayedOperations()
    ready: set[str] = set()
    op = Join(ready, {"a", "b"})
    op_id = core.watch(op, ["a", "b"], deadline_ms=100)
    ready.add("a")
    assert core.check_and_complete("a") == []
    ready.add("b")
    assert core.check_and_complete("b") == [(op_id, "done")]
    assert (core.watched("a"), core.watched("b"), core.next_deadline_ms()) == (0, 0, None)
    assert core.expire(1_000) == [] and op.expired == 0


def test_core_cancel_and_no_keys():
    core: DelayedOperations[str, str] = DelayedOperations()
    op_id = core.watch(Join(set(), {"a"}), ["a"], deadline_ms=100)
    core.cancel(op_id)
    assert (core.watched("a"), len(core), core.expire(1_000)) == (0, 0, [])
    with pytest.raises(ValueError, match="watch key"):
        core.watch(Join(set(), {"a"}), [], deadline_ms=100)


# ---- the asyncio shell -------------------------------------------------------------------


@pytest.mark.parametrize(("ready", "timeout_s", "expected"), [
    ({"a", "b"}, 5.0, "done"),  # satisfied on arrival: never watched
    ({"a"}, 0.0, "expired with ['b'] missing"),  # no time to wait: expires at once
    ({"a"}, -1.0, "expired with ['b'] missing"),
])
async def test_on_arrival(ready, timeout_s, expected):
    purgatory: Purgatory[str, str] = Purgatory("test")
    op = Join(set(ready), {"a", "b"})
    assert await purgatory.wait(op, ["a", "b"], timeout_s) == expected
    assert purgatory.watched("a") == purgatory.watched("b") == 0


async def test_completes_on_the_check_that_satisfies_it_and_leaves_every_key():
    purgatory: Purgatory[str, str] = Purgatory("test")
    ready: set[str] = set()
    op = Join(ready, {"a", "b"})
    waiting = asyncio.create_task(purgatory.wait(op, ["a", "b", "a"], 5.0))
    await asyncio.sleep(0)
    assert purgatory.watched("a") == purgatory.watched("b") == 1  # duplicates watched once
    ready.add("a")
    assert purgatory.check_and_complete("a") == 0
    ready.add("b")
    assert purgatory.check_and_complete("b") == 1
    assert purgatory.check_and_complete("b") == 0  # already completed: not checked again
    assert await waiting == "done"
    assert purgatory.watched("a") == purgatory.watched("b") == 0
    assert (op.checks, op.expired) == (3, 0)


async def test_one_deadline_for_all_its_keys():
    purgatory: Purgatory[str, str] = Purgatory("test")
    op = Join(set(), {f"k{i}" for i in range(20)})
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await purgatory.wait(op, sorted(op.needed), 0.05)
    assert result.startswith("expired") and op.expired == 1
    assert loop.time() - started < 0.5  # one timer, not one per key
    assert all(purgatory.watched(k) == 0 for k in op.needed)


async def test_a_check_completes_every_satisfied_operation_on_the_key():
    purgatory: Purgatory[str, str] = Purgatory("test")
    ready: set[str] = set()
    ops = [Join(ready, {"p"}), Join(ready, {"p"}), Join(ready, {"p", "q"})]
    waiting = [asyncio.create_task(purgatory.wait(op, sorted(op.needed), 5.0)) for op in ops]
    await asyncio.sleep(0)
    assert purgatory.watched("p") == 3
    ready.add("p")
    assert purgatory.check_and_complete("p") == 2
    assert purgatory.watched("p") == 1  # the third still needs q
    ready.add("q")
    assert purgatory.check_and_complete("q") == 1
    assert await asyncio.gather(*waiting) == ["done", "done", "done"]


async def test_a_cancelled_waiter_leaves_no_watch_behind():
    purgatory: Purgatory[str, str] = Purgatory("test")
    waiting = asyncio.create_task(purgatory.wait(Join(set(), {"a"}), ["a"], 5.0))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert purgatory.watched("a") == 0
    assert purgatory.check_and_complete("a") == 0


async def test_waits_are_counted_from_watch_to_completion_or_expiry():
    """What /metrics shows per purgatory: a request satisfied on arrival never waited; a
    watched one is counted once when it completes, and once when it expires."""
    now = [1_000]
    purgatory: Purgatory[str, str] = Purgatory("test", TimerService(lambda: now[0]))
    assert await purgatory.wait(Join({"a"}, {"a"}), ["a"], 5.0) == "done"
    assert sum(purgatory.waited.counts) == 0
    ready: set[str] = set()
    waiting = asyncio.create_task(purgatory.wait(Join(ready, {"a"}), ["a"], 5.0))
    await asyncio.sleep(0)
    now[0] += 30
    ready.add("a")
    assert purgatory.check_and_complete("a") == 1
    assert await waiting == "done"
    assert (sum(purgatory.waited.counts), purgatory.waited.longest_ms) == (1, 30)
    expiring = asyncio.create_task(purgatory.wait(Join(set(), {"b"}), ["b"], 0.2))
    await asyncio.sleep(0)
    now[0] += 200
    purgatory.timers.run_due()
    assert (await expiring).startswith("expired")
    assert (sum(purgatory.waited.counts), purgatory.waited.longest_ms) == (2, 200)
