"""broker/purgatory.py: complete when satisfied, else expire at the request's one deadline."""

from __future__ import annotations

import asyncio

import pytest

from broker.purgatory import Purgatory


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


@pytest.mark.parametrize(("ready", "timeout_s", "expected"), [
    ({"a", "b"}, 5.0, "done"),  # satisfied on arrival: never watched
    ({"a"}, 0.0, "expired with ['b'] missing"),  # no time to wait: expires at once
    ({"a"}, -1.0, "expired with ['b'] missing"),
])
async def test_on_arrival(ready, timeout_s, expected):
    purgatory: Purgatory[str] = Purgatory("test")
    op = Join(set(ready), {"a", "b"})
    assert await purgatory.wait(op, ["a", "b"], timeout_s) == expected
    assert purgatory.watched("a") == purgatory.watched("b") == 0


async def test_completes_on_the_check_that_satisfies_it_and_leaves_every_key():
    purgatory: Purgatory[str] = Purgatory("test")
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
    purgatory: Purgatory[str] = Purgatory("test")
    op = Join(set(), {f"k{i}" for i in range(20)})
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await purgatory.wait(op, sorted(op.needed), 0.05)
    assert result.startswith("expired") and op.expired == 1
    assert loop.time() - started < 0.5  # one timer, not one per key
    assert all(purgatory.watched(k) == 0 for k in op.needed)


async def test_a_check_completes_every_satisfied_operation_on_the_key():
    purgatory: Purgatory[str] = Purgatory("test")
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
    purgatory: Purgatory[str] = Purgatory("test")
    waiting = asyncio.create_task(purgatory.wait(Join(set(), {"a"}), ["a"], 5.0))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert purgatory.watched("a") == 0
    assert purgatory.check_and_complete("a") == 0
