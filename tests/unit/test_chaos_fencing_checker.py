"""chaos/checkers/fencing.py and the controller-log harvest it reads, as tables."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.checkers.fencing import check_fencing
from chaos.engine.harvest import parse_controller_log
from chaos.history import Event

STAMP = "2026-11-24 01:02:03,456"


def test_controller_lines_become_fencing_events_with_their_cause() -> None:
    lines = [
        f"{STAMP} INFO quorum.broker_control: Fencing broker 5 (no heartbeat for 3001 ms, session timeout 3000 ms): "
        "3 partition change(s)",
        f"{STAMP} INFO quorum.broker_control: Fencing broker 6 (its listener 127.0.0.6:9092 closed the controller's "
        "connection and now refuses new ones: the process exited): 0 partition change(s)",
        f"{STAMP} INFO quorum.broker_control: Fencing broker 4 (requested): 1 partition change(s)",
        "no stamp: Fencing broker 4 (requested): 1 partition change(s)",
        f"{STAMP} INFO something else entirely",
    ]
    found = parse_controller_log(lines)
    assert [(e["broker"], e["cause"]) for e in found] == [(5, "session"), (6, "process-gone"), (4, "other")]
    assert (found[0]["age_ms"], found[0]["session_ms"]) == (3001, 3000)
    assert len({e["wall"] for e in found}) == 1


def fault(t: float, action: str, target: int, fault_id: str = "f1", end: float | None = None) -> list[Event]:
    events: list[Event] = [{"t": t, "kind": "fault-start", "id": fault_id, "action": action, "targets": [target]}]
    if end is not None:
        events.append({"t": end, "kind": "fault-end", "id": fault_id, "action": action})
    return events


def fencing(t: float, broker: int, cause: str, **fields: Any) -> Event:
    return {"t": t, "kind": "fencing", "broker": broker, "cause": cause, "reason": "r", **fields}


@pytest.mark.parametrize(("events", "anomalies"), [
    ([*fault(10, "kill", 5, end=20), fencing(10.1, 5, "process-gone")], 0),
    ([*fault(10, "disk", 5), fencing(10.2, 5, "process-gone")], 0),  # never healed: still gone
    ([*fault(10, "shutdown", 5, end=20), fencing(12, 5, "process-gone")], 0),
    ([*fault(10, "pause", 5, end=20), fencing(12, 5, "process-gone")], 1),  # a paused process is not gone
    ([*fault(10, "partition", 5, end=20), fencing(12, 5, "process-gone")], 1),
    ([*fault(10, "kill", 4, end=20), fencing(12, 5, "process-gone")], 1),  # another broker was killed
    ([*fault(10, "kill", 5, end=20), fencing(30, 5, "process-gone")], 1),  # long after its restart
    ([fencing(5, 5, "process-gone")], 1),  # no fault at all: it crashed by itself
    ([*fault(10, "pause", 5, end=20), fencing(13, 5, "session", age_ms=3001, session_ms=3000)], 0),
    ([fencing(13, 5, "session", age_ms=2999, session_ms=3000)], 1),
    ([fencing(13, 5, "other")], 0),
])
def test_check_fencing(events: list[Event], anomalies: int) -> None:
    result = check_fencing(events)
    assert result.count == anomalies, result.examples
    assert len(result.examples) == anomalies


def test_the_fast_path_is_measured() -> None:
    result = check_fencing([*fault(10, "kill", 5, end=20), fencing(10.25, 5, "process-gone"),
                            *fault(30, "kill", 6, "f2", end=40), fencing(30.5, 6, "process-gone"),
                            fencing(50, 4, "session", age_ms=3100, session_ms=3000)])
    assert result.data["causes"] == {"session": 1, "process-gone": 2, "other": 0}
    assert result.data["gone_after_s"] == [0.25, 0.5]
    assert "fenced 0.25-0.50 s after the kill" in result.summary
