"""chaos.checkers.latency: each producer's send latency and each consumer's delivery latency,
p50/p99/max overall and during faults (a table of histories)."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.checkers.latency import check_latency, percentile


@pytest.mark.parametrize("values, pct, expected", [
    ([5.0], 50, 5.0), ([5.0], 99, 5.0), ([1.0, 2.0, 3.0, 4.0], 50, 2.0), ([1.0, 2.0, 3.0, 4.0], 99, 4.0),
    (list(map(float, range(1, 101))), 99, 99.0), (list(map(float, range(100, 0, -1))), 50, 50.0)])
def test_nearest_rank_percentile(values: list[float], pct: float, expected: float) -> None:
    assert percentile(values, pct) == expected


def sends(process: str, start: int, spans_ms: list[float], t0: float) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for n, ms in enumerate(spans_ms):
        value, t = f"{process}-{start + n}", t0 + n
        events += [{"t": t, "kind": "invoke", "process": process, "value": value, "partition": 0},
                   {"t": t + ms / 1000, "kind": "ok", "process": process, "value": value, "partition": 0,
                    "offset": start + n}]
    return events


def test_each_producer_and_consumer_gets_its_own_line() -> None:
    events = (sends("p0", 0, [2.0, 4.0, 6.0], 0.0)  # before the fault
              + [{"t": 9.5, "kind": "fault-start", "id": "f1", "description": "delay"}]
              + sends("p0", 3, [2000.0, 4000.0], 10.0)  # invoked while it lasts
              + [{"t": 15.0, "kind": "fault-end", "id": "f1"}]
              + sends("p1", 0, [1.0], 20.0)
              + [{"t": 0.5, "kind": "read", "consumer": "c0", "partition": 0, "offset": 0, "value": "p0-0"},
                 {"t": 0.6, "kind": "read", "consumer": "c0", "partition": 0, "offset": 0, "value": "p0-0"}])
    events.sort(key=lambda e: e["t"])
    result = check_latency(events)
    assert result.count == 0  # a measurement
    assert result.data["p0"] == {"kind": "produce", "count": 5, "p50_ms": 6.0, "p99_ms": 4000.0, "max_ms": 4000.0,
                                 "during_faults": {"count": 2, "p50_ms": 2000.0, "p99_ms": 4000.0,
                                                   "max_ms": 4000.0}}
    assert result.data["p1"]["count"] == 1 and result.data["p1"]["during_faults"] == {"count": 0}
    assert result.data["c0"] == {"kind": "consume", "count": 1, "p50_ms": 498.0, "p99_ms": 498.0, "max_ms": 498.0,
                                 "during_faults": {"count": 0}}  # the first read only
    assert result.examples[0] == ("p0: 5 acknowledged sends, p50 6 ms, p99 4000 ms, max 4000 ms; "
                                  "during faults (2) p50 2000 ms, p99 4000 ms")


def test_an_empty_history_measures_nothing() -> None:
    assert check_latency([]).summary == "no client measured"
