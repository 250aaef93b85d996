"""Stopping a node's tasks: cancel, and cancel again whatever did not end.

A cancel can be lost. One that lands as a request's own timeout fires may be taken for that
timeout (the request is then retried, as after any timeout), and a task awaiting another task
hands its cancel to that task, which may end normally anyway. One `cancel()` and an unbounded
`gather` then wait for as long as the retries go on: a broker stopping with its controllers
paused waited out every metadata fetch timeout, round after round, and never exited. So a task
still running `RECANCEL_EVERY` after its cancel is cancelled again, up to `STOP_BOUND`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any, Final

from common.units import SECONDS

logger = logging.getLogger(__name__)

RECANCEL_EVERY: Final = 0.5 * SECONDS
STOP_BOUND: Final = 10 * SECONDS


async def cancel_and_wait(tasks: Iterable[asyncio.Future[Any]], *, owner: str,
                          every: float = RECANCEL_EVERY, bound: float = STOP_BOUND) -> set[asyncio.Future[Any]]:
    """Cancel `tasks` and wait until each has ended, cancelling again every `every` seconds any
    that has not; after `bound` seconds stop waiting. The tasks still running then (normally none),
    each logged as a warning naming `owner`. An error a task ended with is taken, not raised."""
    given = list(tasks)
    pending = {task for task in given if not task.done()}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound
    rounds = 0
    while pending:  # bounded by `deadline`
        for task in pending:
            task.cancel()
        left = deadline - loop.time()
        if left <= 0:
            break
        _, pending = await asyncio.wait(pending, timeout=min(every, left))
        rounds += 1
        for task in pending:
            logger.warning("%s: task %s still running %.1f s after its cancel; cancelling it again",
                           owner, _name(task), rounds * every)
    for task in pending:
        logger.warning("%s: task %s did not end within %.0f s of its cancel; not waiting for it",
                       owner, _name(task), bound)
    for task in given:  # as gather(return_exceptions=True): a task's error is its own log's matter
        if task.done() and not task.cancelled():
            task.exception()
    return pending


def _name(task: asyncio.Future[Any]) -> str:
    return task.get_name() if isinstance(task, asyncio.Task) else repr(task)
