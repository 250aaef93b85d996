"""The one bounded wait, for tests, benches, chaos runs and the pytest plugin.

Everything that waits for a cluster to reach a state polls a condition until it holds or a
deadline passes, then fails naming what it waited for and the last thing it saw. A
connection error counts as "not yet" (a node may not be listening yet, or any more).
"""

from __future__ import annotations

import asyncio
import time
import urllib.error
from collections.abc import Callable
from typing import TypeVar

from common.units import SECONDS

T = TypeVar("T")

DEFAULT_POLL: float = 0.05 * SECONDS
NOT_YET_ERRORS: tuple[type[BaseException], ...] = (OSError, urllib.error.URLError)


class WaitTimeout(AssertionError):
    """A bounded wait ran out. An AssertionError, so that pytest reports it as a failed check."""


def wait_until(what: str, condition: Callable[[], T | None], timeout_s: float, *,
               poll_s: float = DEFAULT_POLL,
               not_yet: tuple[type[BaseException], ...] = NOT_YET_ERRORS) -> T:
    """condition()'s first truthy value; WaitTimeout naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:  # bounded: returns or raises once the deadline passes
        try:
            value = condition()
        except not_yet as exc:
            last = exc
        else:
            if value:
                return value
            last = value
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout_s:g} s waiting for {what} (last: {last!r:.300})")
        time.sleep(poll_s)


async def wait_until_async(what: str, condition: Callable[[], T | None], timeout_s: float, *,
                           poll_s: float = DEFAULT_POLL / 5) -> T:
    """`wait_until` for code on an event loop: the condition is checked between sleeps."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:  # bounded: returns or raises once the deadline passes
        value = condition()
        if value:
            return value
        last = value
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout_s:g} s waiting for {what} (last: {last!r:.300})")
        await asyncio.sleep(poll_s)
