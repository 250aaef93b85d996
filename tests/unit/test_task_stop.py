"""common.task_stop: a task that absorbs its cancel is cancelled again; the wait is bounded."""

from __future__ import annotations

import asyncio
import logging

import pytest

from common.task_stop import cancel_and_wait


async def _absorbs_one_cancel(absorbed: list[int]) -> None:
    # as a request whose cancel was taken for its own timeout, then retried
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        absorbed.append(1)
    await asyncio.sleep(3600)


async def _fails() -> None:
    raise ValueError("its own error")


@pytest.mark.asyncio
async def test_a_task_that_absorbed_its_cancel_is_cancelled_again(caplog: pytest.LogCaptureFixture) -> None:
    absorbed: list[int] = []
    stubborn = asyncio.create_task(_absorbs_one_cancel(absorbed), name="stubborn")
    plain = asyncio.create_task(asyncio.sleep(3600), name="plain")
    failed = asyncio.create_task(_fails(), name="failed")
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING):
        left = await asyncio.wait_for(cancel_and_wait([stubborn, plain, failed], owner="Broker 4", every=0.05,
                                                      bound=5), timeout=5)
    assert not left
    assert absorbed == [1] and stubborn.cancelled() and plain.cancelled()
    assert isinstance(failed.exception(), ValueError)
    assert any("Broker 4: task stubborn still running" in r.getMessage() for r in caplog.records)


async def _absorbs_cancels_while(holding: list[bool]) -> None:
    while holding:  # bounded: the test empties `holding` once it has checked the bound
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            pass


@pytest.mark.asyncio
async def test_the_wait_is_bounded_and_names_what_it_left(caplog: pytest.LogCaptureFixture) -> None:
    holding = [True]
    never = asyncio.create_task(_absorbs_cancels_while(holding), name="never")
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING):
        left = await asyncio.wait_for(cancel_and_wait([never], owner="Controller 1", every=0.05, bound=0.3),
                                      timeout=5)
    assert left == {never} and not never.done()
    assert any("Controller 1: task never did not end within" in r.getMessage() for r in caplog.records)
    holding.clear()
    never.cancel()
    await asyncio.wait_for(asyncio.wait({never}), timeout=5)
    assert never.done()
