"""broker/applied_offset.py: waiters woken by the follower's `advanced`, bounded in time and number."""

from __future__ import annotations

import asyncio

from broker.applied_offset import AppliedOffsetWaiters


class Image:
    def __init__(self, offset: int) -> None:
        self.offset = offset

    def advance(self, waiters: AppliedOffsetWaiters, offset: int) -> None:
        self.offset = offset
        waiters.advanced(offset)


async def test_already_applied_answers_at_once():
    waiters = AppliedOffsetWaiters(lambda: 10)
    assert await waiters.wait_for(10, timeout=0) and await waiters.wait_for(3, timeout=0)
    assert waiters.waiting == 0


async def test_woken_by_replay_in_offset_order():
    image = Image(5)
    waiters = AppliedOffsetWaiters(lambda: image.offset)
    seven = asyncio.create_task(waiters.wait_for(7, timeout=5))
    nine = asyncio.create_task(waiters.wait_for(9, timeout=5))
    await asyncio.sleep(0)
    assert waiters.waiting == 2
    image.advance(waiters, 6)
    await asyncio.sleep(0)
    assert not seven.done() and not nine.done()
    image.advance(waiters, 8)
    assert await seven and not nine.done()
    image.advance(waiters, 12)  # past it: woken too
    assert await nine and waiters.waiting == 0


async def test_times_out_and_forgets_the_waiter():
    image = Image(0)
    waiters = AppliedOffsetWaiters(lambda: image.offset)
    assert not await waiters.wait_for(1, timeout=0.01)
    assert waiters.waiting == 0
    image.advance(waiters, 1)  # nobody left to wake: no error


async def test_at_most_max_waiters_wait():
    waiters = AppliedOffsetWaiters(lambda: 0, max_waiters=2)
    tasks = [asyncio.create_task(waiters.wait_for(5, timeout=5)) for _ in range(2)]
    await asyncio.sleep(0)
    assert not await waiters.wait_for(5, timeout=5)  # the third answers at once, without the guarantee
    waiters.advanced(5)
    assert await asyncio.gather(*tasks) == [True, True]


async def test_a_cancelled_waiter_leaves_no_entry():
    waiters = AppliedOffsetWaiters(lambda: 0)
    task = asyncio.create_task(waiters.wait_for(3, timeout=5))
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert waiters.waiting == 0
