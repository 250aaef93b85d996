"""broker/node.py's periodic jobs on the broker's timer service: log maintenance (flush.ms
checks, retention, recovery-point checkpoints), each at its own interval on a fake clock,
and none after it is cancelled or the timer service closes."""

from __future__ import annotations

import pytest

from broker.node import (
    CHECKPOINT_TIMER,
    FLUSH_CHECK_INTERVAL_MS,
    FLUSH_TIMER,
    RETENTION_TIMER,
    schedule_maintenance,
)
from broker.timers import TimerService
from common.config import parse_config

NOW = 5_000_000  # the timers' monotonic clock
WALL = 1_700_000_000_000  # the logs' wall clock: what each job is given
MINIMAL = {"node.id": "3", "process.roles": "broker", "listeners": "PLAINTEXT://127.0.0.1:9092",
           "controller.api.voters": "1@127.0.0.1:9080", "log.dirs": "/tmp/a"}


class FakeLogs:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.fail_flush = False

    def flush_due(self, now_ms: int) -> None:
        self.calls.append(("flush", now_ms))
        if self.fail_flush:
            raise OSError("No space left on device")

    def cleanup(self, now_ms: int) -> None:
        self.calls.append(("retention", now_ms))

    def checkpoint(self) -> None:
        self.calls.append(("checkpoint", -1))

    def count(self, what: str) -> int:
        return sum(1 for name, _ in self.calls if name == what)


def setup(retention_ms: int, checkpoint_ms: int) -> tuple[list[int], TimerService, FakeLogs, tuple[object, ...]]:
    clock = [NOW]
    timers = TimerService(clock=lambda: clock[0], driven=False)
    logs = FakeLogs()
    config = parse_config({**MINIMAL, "log.retention.check.interval.ms": str(retention_ms),
                           "log.flush.offset.checkpoint.interval.ms": str(checkpoint_ms)})
    keys = schedule_maintenance(timers, logs, config, now_ms=lambda: WALL + clock[0] - NOW)  # type: ignore[arg-type]
    return clock, timers, logs, keys


def test_each_maintenance_job_runs_at_its_own_interval_on_the_logs_wall_clock() -> None:
    clock, timers, logs, keys = setup(retention_ms=2_500, checkpoint_ms=4_000)
    assert keys == (FLUSH_TIMER, RETENTION_TIMER, CHECKPOINT_TIMER)
    for ms in range(1, 10_001):  # every millisecond of ten seconds: nothing early, nothing late
        clock[0] = NOW + ms
        timers.run_due()
        assert logs.count("flush") == ms // FLUSH_CHECK_INTERVAL_MS
        assert logs.count("retention") == ms // 2_500
        assert logs.count("checkpoint") == ms // 4_000
    assert ("retention", WALL + 2_500) in logs.calls and ("flush", WALL + 1_000) in logs.calls


def test_no_checkpoint_job_at_interval_zero_and_a_storage_error_keeps_the_period() -> None:
    clock, timers, logs, keys = setup(retention_ms=300_000, checkpoint_ms=0)
    assert CHECKPOINT_TIMER not in keys and CHECKPOINT_TIMER not in timers
    logs.fail_flush = True  # logged at ERROR, and the next check still comes
    clock[0] = NOW + 3 * FLUSH_CHECK_INTERVAL_MS
    for _ in range(3):
        timers.run_due()
        clock[0] += FLUSH_CHECK_INTERVAL_MS
    assert logs.count("flush") == 3


@pytest.mark.parametrize("stop", ["cancel", "close"])
def test_maintenance_stops_when_its_timers_are_cancelled_or_the_service_closes(stop: str) -> None:
    clock, timers, logs, keys = setup(retention_ms=1_000, checkpoint_ms=1_000)
    clock[0] = NOW + 1_000
    timers.run_due()
    assert len(logs.calls) == 3
    if stop == "cancel":
        assert all(timers.cancel(key) for key in keys)
    else:
        timers.close()
    clock[0] = NOW + 60_000
    assert timers.run_due() == 0 and len(logs.calls) == 3 and len(timers) == 0
