"""A future whose result one listener hears at once, in the setter's own turn.

An asyncio future runs its done callbacks through `call_soon`: a handle, and one loop pass
later. The broker's server writes an answer from the turn that makes it ready when its writer is
idle (broker/server.py `Connection._answer_in_turn`); for an acks=all Produce, whose answer the
high watermark's move decides inside a follower's fetch (broker/purgatory.py), that turn is the
setter's. So the purgatory makes its futures `AnswerFuture`s, and the server, instead of adding a
done callback, sets `listener`: the answer goes out in the follower fetch's turn, with no handle
and no extra loop pass (issue 35: the canary's tail is the wait for a core, and every pass
costs one).

The listener runs after the result (or exception) is set, and must not raise; awaiting and
done callbacks work as for any future (cancelling tells the listener nothing: whoever cancels
knows).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class AnswerFuture(asyncio.Future[T]):
    """`asyncio.Future` and one synchronous listener of its outcome (set at most once, by the
    one consumer of the answer)."""

    listener: Callable[[AnswerFuture[Any]], None] | None = None

    def set_result(self, result: T) -> None:
        super().set_result(result)
        listener = self.listener
        if listener is not None:
            listener(self)

    def set_exception(self, exception: type | BaseException) -> None:
        super().set_exception(exception)
        listener = self.listener
        if listener is not None:
            listener(self)
