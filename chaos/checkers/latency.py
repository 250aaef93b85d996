"""The latency each client saw: per producer, from a send's invoke to its acknowledgement; per
consumer, from a value's acknowledgement to the consumer's first read of it. p50, p99 and the
maximum over the whole run and over the sends made while a fault was active (a link fault's
cost shows there). A measurement, not an anomaly: the count is always 0.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Final

from chaos.checkers.availability import fault_windows
from chaos.checkers.result import CheckResult
from chaos.history import Event

PERCENTILES: Final = (50, 99)


def percentile(values: Sequence[float], pct: float) -> float:
    """The nearest-rank percentile of `values` (non-empty)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def _during(t: float, windows: Sequence[tuple[float, float, str]]) -> bool:
    return any(start <= t <= end for start, end, _ in windows)


def _stats(values_ms: Sequence[float]) -> dict[str, float | int]:
    stats: dict[str, float | int] = {"count": len(values_ms)}
    if values_ms:
        for pct in PERCENTILES:
            stats[f"p{pct}_ms"] = round(percentile(values_ms, pct), 1)
        stats["max_ms"] = round(max(values_ms), 1)
    return stats


def _line(client: str, what: str, overall: dict[str, float | int], faulty: dict[str, float | int]) -> str:
    if not overall["count"]:
        return f"{client}: no {what}"
    text = (f"{client}: {overall['count']} {what}, p50 {overall['p50_ms']:g} ms, p99 {overall['p99_ms']:g} ms, "
            f"max {overall['max_ms']:g} ms")
    if faulty["count"]:
        text += f"; during faults ({faulty['count']}) p50 {faulty['p50_ms']:g} ms, p99 {faulty['p99_ms']:g} ms"
    return text


def check_latency(events: Sequence[Event]) -> CheckResult:
    windows = fault_windows(events)
    invoked: dict[str, float] = {}
    acked: dict[str, float] = {}
    produce: dict[str, list[tuple[float, float]]] = defaultdict(list)  # process -> (invoke t, ms)
    consume: dict[str, list[tuple[float, float]]] = defaultdict(list)  # consumer -> (ack t, ms)
    first_read: set[tuple[str, str]] = set()
    for e in events:
        kind = e["kind"]
        if kind == "invoke":
            invoked[e["value"]] = e["t"]
        elif kind == "ok" and e["value"] in invoked:
            acked[e["value"]] = e["t"]
            produce[str(e.get("process", "?"))].append((invoked[e["value"]], (e["t"] - invoked[e["value"]]) * 1000))
        elif kind == "read" and e["value"] in acked and (e["consumer"], e["value"]) not in first_read:
            first_read.add((e["consumer"], e["value"]))
            consume[str(e["consumer"])].append((acked[e["value"]], max(0.0, (e["t"] - acked[e["value"]]) * 1000)))
    lines, data = [], {}
    for kind, what, table in (("produce", "acknowledged sends", produce), ("consume", "values read after their ack",
                                                                              consume)):
        for client in sorted(table):
            samples = table[client]
            overall = _stats([ms for _, ms in samples])
            faulty = _stats([ms for t, ms in samples if _during(t, windows)])
            lines.append(_line(client, what, overall, faulty))
            data[client] = {"kind": kind, **overall, "during_faults": faulty}
    summary = "; ".join(lines) if lines else "no client measured"
    return CheckResult("latency", 0, summary, tuple(lines), data)
