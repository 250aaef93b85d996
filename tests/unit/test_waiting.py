"""Tests for common/waiting.py: the first truthy value, errors as "not yet", a bounded failure."""

from __future__ import annotations

import time

import pytest

from common.waiting import WaitTimeout, wait_until, wait_until_async


def test_returns_the_first_truthy_value() -> None:
    answers = iter([0, None, [], "ready", "later"])
    assert wait_until("ready", lambda: next(answers), 1.0, poll_s=0.001) == "ready"


def test_connection_errors_are_not_yet() -> None:
    calls = iter([ConnectionRefusedError("down"), 7])

    def condition() -> int:
        value = next(calls)
        if isinstance(value, Exception):
            raise value
        return value

    assert wait_until("up", condition, 1.0, poll_s=0.001) == 7


def test_other_errors_propagate() -> None:
    with pytest.raises(KeyError):
        wait_until("x", lambda: {}["missing"], 1.0)


def test_times_out_naming_what_and_the_last_value() -> None:
    started = time.monotonic()
    with pytest.raises(WaitTimeout, match=r"waiting for the moon \(last: ''\)"):
        wait_until("the moon", lambda: "", 0.05, poll_s=0.01)
    assert time.monotonic() - started < 1.0


def test_last_value_is_reported() -> None:
    with pytest.raises(WaitTimeout, match=r"last: 0"):
        wait_until("nonzero", lambda: 0, 0.02, poll_s=0.005)


async def test_async_variant() -> None:
    answers = iter([False, False, 3])
    assert await wait_until_async("three", lambda: next(answers), 1.0, poll_s=0.001) == 3
    with pytest.raises(WaitTimeout):
        await wait_until_async("never", lambda: False, 0.02, poll_s=0.005)
