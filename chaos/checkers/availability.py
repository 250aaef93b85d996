"""Availability: per partition, the windows with no acknowledged write, beside the faults.

A window is a gap between consecutive acknowledgements of one partition (or from the
workload's start to the first, or from the last to the workload's end) longer than
`min_gap_s`. A measurement, not an anomaly: scenarios bound it with expectations
(`max_unavailable_s`, or `min_unavailable_s` where an outage is the promise).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence

from chaos.checkers.result import CheckResult, examples
from chaos.history import Event

MIN_GAP_S = 1.0  # the producer sends every few ms: a second without an ack is an outage


def workload_span(events: Sequence[Event]) -> tuple[float, float] | None:
    marks = {e["name"]: e["t"] for e in events if e["kind"] == "phase"}
    if "workload" not in marks:
        return None
    return marks["workload"], marks.get("catch-up", max(e["t"] for e in events))


def gaps(events: Sequence[Event], min_gap_s: float = MIN_GAP_S) -> dict[int, list[tuple[float, float]]]:
    """partition -> [(start, end)] of the windows without an acknowledged write."""
    span = workload_span(events)
    partitions = sorted({e["partition"] for e in events if e["kind"] == "invoke"})
    times: dict[int, list[float]] = defaultdict(list)
    for e in events:
        if e["kind"] == "ok":
            times[e["partition"]].append(e["t"])
    out: dict[int, list[tuple[float, float]]] = {}
    for partition in partitions:
        start, end = span if span is not None else (0.0, max(e["t"] for e in events))
        marks = [start, *sorted(t for t in times[partition] if start <= t <= end), end]
        out[partition] = [(a, b) for a, b in itertools.pairwise(marks) if b - a > min_gap_s]
    return out


def fault_windows(events: Sequence[Event]) -> list[tuple[float, float, str]]:
    """(start, end, description) of every fault; a fault never healed ends at the last event."""
    starts: dict[str, Event] = {}
    windows: list[tuple[float, float, str]] = []
    for e in events:
        if e["kind"] == "fault-start":
            starts[e["id"]] = e
        elif e["kind"] == "fault-end" and e["id"] in starts:
            s = starts.pop(e["id"])
            windows.append((s["t"], e["t"], s["description"]))
    end = max((e["t"] for e in events), default=0.0)
    windows += [(s["t"], end, s["description"]) for s in starts.values()]
    return sorted(windows)


def outage_per_fault(events: Sequence[Event], windows: dict[int, list[tuple[float, float]]]
                     ) -> dict[str, float]:
    """fault id -> the longest window without an acknowledged write (any partition) that began
    during the fault, measured from the fault's start: the unavailability it caused."""
    out: dict[str, float] = {}
    for e in events:
        if e["kind"] != "fault-start":
            continue
        end = next((f["t"] for f in events if f["kind"] == "fault-end" and f["id"] == e["id"]), float("inf"))
        caused = [b - e["t"] for w in windows.values() for a, b in w if e["t"] - MIN_GAP_S <= a <= end]
        out[e["id"]] = round(max(caused, default=0.0), 3)
    return out


def check_availability(events: Sequence[Event], min_gap_s: float = MIN_GAP_S) -> CheckResult:
    windows = gaps(events, min_gap_s)
    longest = {p: max((b - a for a, b in w), default=0.0) for p, w in windows.items()}
    lines = [f"partition {p}: no acknowledged write from t={a:.2f} to t={b:.2f} s ({b - a:.2f} s)"
             for p, w in sorted(windows.items()) for a, b in w]
    worst = max(longest.values(), default=0.0)
    return CheckResult("availability", 0, f"longest window without an acknowledged write: {worst:.2f} s "
                       f"({len(lines)} windows over {min_gap_s:.1f} s)", examples(lines),
                       {"longest_s": {str(p): round(v, 3) for p, v in longest.items()}, "worst_s": round(worst, 3),
                        "windows": {str(p): w for p, w in windows.items()},
                        "per_fault_s": outage_per_fault(events, windows)})
