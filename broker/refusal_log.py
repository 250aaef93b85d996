"""Why a request was refused, in the broker log: one INFO line per refusal class and client.

    refusals = RefusalLog()                                  # the broker's, on BrokerContext
    refusals.refused(client, "FindCoordinator(TRANSACTION)", ErrorCode.COORDINATOR_NOT_AVAILABLE,
                     "transactions are not supported by tidelog")       # client: a ClientInfo
    # INFO Refused FindCoordinator(TRANSACTION) from client 'rdkafka' at /127.0.0.1:
    #      COORDINATOR_NOT_AVAILABLE: transactions are not supported by tidelog

A client that keeps asking what the broker refuses (librdkafka retries a transactional
FindCoordinator until init_transactions times out, 30-120 s later) shows its user only a
timeout; the broker's log is where an operator learns why. Kafka logs most of these at DEBUG
(request logging); we log each (client id, API, error, reason) once at INFO, and again at most
once per REFUSAL_LOG_INTERVAL_MS, counting the ones left out, so a retrying client costs one
line per interval, not one per retry.

`RefusalLimiter` is the pure core (keys and `now_ms` in, decisions out); `RefusalLog` the shell
with the clock and the logger. The reason is the error message the response already carries.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from broker.timers import monotonic_ms
from common.errors import ErrorCode
from common.units import MINUTE_MS, SECOND_MS

log = logging.getLogger(__name__)

REFUSAL_LOG_INTERVAL_MS: Final = 10 * MINUTE_MS  # one line per refusal class and client per interval
MAX_TRACKED_REFUSALS: Final = 4096  # (client, refusal) pairs remembered; the least recent forgotten first
MAX_REASON_CHARS: Final = 300  # of a reason in the log line: a client-chosen name must not flood it


class Requester(Protocol):
    """Who sent the request (broker.handlers.context.ClientInfo)."""

    @property
    def client_id(self) -> str: ...

    @property
    def host(self) -> str: ...


@dataclass(frozen=True, slots=True)
class RefusalKey:
    """A refusal class, per client: who, which API, which error, why."""

    client_id: str
    api: str
    error: int
    reason: str


@dataclass(slots=True)
class _Seen:
    logged_ms: int  # when the last line for this key was written
    suppressed: int  # refusals left out since


class RefusalLimiter:
    """Decides which refusals are logged: a key's first, then at most one per `interval_ms`.

    Memory is bounded by `max_tracked` keys; a forgotten key is logged again when it recurs
    (one more line, never a missing first one)."""

    def __init__(self, *, interval_ms: int = REFUSAL_LOG_INTERVAL_MS,
                 max_tracked: int = MAX_TRACKED_REFUSALS) -> None:
        if interval_ms < 0 or max_tracked < 1:
            raise ValueError(f"interval_ms {interval_ms} must be >= 0 and max_tracked {max_tracked} >= 1")
        self.interval_ms = interval_ms
        self.max_tracked = max_tracked
        self._seen: OrderedDict[RefusalKey, _Seen] = OrderedDict()

    def admit(self, key: RefusalKey, now_ms: int) -> int | None:
        """None: leave this refusal out; else log it, with this many left out since the last line."""
        seen = self._seen.get(key)
        if seen is None:
            self._seen[key] = _Seen(now_ms, 0)
            if len(self._seen) > self.max_tracked:
                self._seen.popitem(last=False)
            return 0
        self._seen.move_to_end(key)
        if now_ms - seen.logged_ms < self.interval_ms:
            seen.suppressed += 1
            return None
        left_out, seen.suppressed, seen.logged_ms = seen.suppressed, 0, now_ms
        return left_out

    def __len__(self) -> int:
        return len(self._seen)


def describe_refusal(key: RefusalKey, host: str, left_out: int, interval_ms: int) -> str:
    """The log line for a refusal `RefusalLimiter.admit` let through."""
    try:
        error = ErrorCode(key.error).name
    except ValueError:
        error = f"error {key.error}"
    reason = key.reason if len(key.reason) <= MAX_REASON_CHARS else key.reason[:MAX_REASON_CHARS] + "..."
    at = f" at {host}" if host else ""
    line = f"Refused {key.api} from client {key.client_id!r}{at}: {error}: {reason}"
    if left_out:
        line += f" ({left_out} more since the last such line, logged once per {interval_ms // SECOND_MS} s)"
    return line


class RefusalLog:
    """The shell: the limiter on a clock, writing INFO lines to this module's logger."""

    def __init__(self, limiter: RefusalLimiter | None = None,
                 clock_ms: Callable[[], int] = monotonic_ms) -> None:
        self.limiter = limiter if limiter is not None else RefusalLimiter()  # (an empty one is falsy)
        self._clock_ms = clock_ms

    def refused(self, client: Requester, api: str, error: int, reason: str | None) -> None:
        """Note one refusal of `api` to `client` with `error` for `reason` (0: not a refusal)."""
        if error == ErrorCode.NONE:
            return
        key = RefusalKey(client.client_id, api, int(error), reason or "(no message)")
        left_out = self.limiter.admit(key, self._clock_ms())
        if left_out is not None:
            log.info("%s", describe_refusal(key, client.host, left_out, self.limiter.interval_ms))
