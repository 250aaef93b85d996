"""The Chaos page's pure half: a run's history events in, its live summary out.

    run = LiveRun()
    run.feed(events)            # history.jsonl events as they are written (any number of calls)
    run.view(results)           # phase, fault timeline, acks and latency per second, verdicts

`feed` keeps only what the page draws: the faults, one bucket per second of acknowledgements and
produce latencies (invoke -> ok of the same process and value), and the phase; memory is bounded by
MAX_SECONDS buckets and MAX_PENDING sends awaiting their answer. Verdicts come from the report's
results.json once the checkers have decided (the engine writes it when the run ends).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

PURE = True  # a pure core: no sockets, threads, clocks or files

MAX_SECONDS: Final = 3600  # buckets kept: an hour of workload
MAX_PENDING: Final = 100_000  # sends without an answer yet; older ones are dropped from the latency
MAX_FAULTS: Final = 1000
REPORT_FILES: Final = ("history.jsonl", "report.html", "results.json", "scenario.toml")


class LiveRun:
    """The summary of one run's history, fed incrementally."""

    def __init__(self) -> None:
        self.scenario: str | None = None
        self.seed: int | None = None
        self.phase = "starting"
        self.last_t = 0.0
        self.faults: dict[str, dict[str, Any]] = {}
        self.acks: dict[int, int] = {}
        self.latencies: dict[int, list[float]] = {}
        self._pending: dict[tuple[str, str], float] = {}
        self.events = 0

    def feed(self, events: Iterable[Mapping[str, Any]]) -> None:
        for e in events:  # bounded by what the caller read
            self.events += 1
            kind, t = e.get("kind"), float(e.get("t", 0.0))
            self.last_t = max(self.last_t, t)
            if kind == "note" and e.get("what") == "scenario":
                self.scenario, self.seed = e.get("name"), e.get("seed")
                for f in e.get("schedule", [])[:MAX_FAULTS]:
                    self.faults.setdefault(f["id"], {"id": f["id"], "description": f.get("fault"),
                                                     "planned_start_s": f.get("start_s"),
                                                     "planned_end_s": f.get("end_s"), "start_s": None,
                                                     "end_s": None})
            elif kind == "phase":
                self.phase = str(e.get("name"))
            elif kind in ("fault-start", "fault-end", "skip") and "id" in e:
                fault = self.faults.setdefault(e["id"], {"id": e["id"], "description": e.get("description"),
                                                         "start_s": None, "end_s": None})
                if kind == "fault-start":
                    fault.update(start_s=t, description=e.get("description") or fault.get("description"))
                elif kind == "fault-end":
                    fault["end_s"] = t
                else:
                    fault["skipped"] = e.get("why") or e.get("reason") or "skipped"
            elif kind == "invoke":
                if len(self._pending) < MAX_PENDING:
                    self._pending[(str(e.get("process")), str(e.get("value")))] = t
            elif kind == "ok":
                second = int(t)
                if second < MAX_SECONDS:
                    self.acks[second] = self.acks.get(second, 0) + 1
                    sent = self._pending.pop((str(e.get("process")), str(e.get("value"))), None)
                    if sent is not None:
                        self.latencies.setdefault(second, []).append((t - sent) * 1000)
            elif kind in ("fail", "info"):
                self._pending.pop((str(e.get("process")), str(e.get("value"))), None)

    def view(self, results: Mapping[str, Any] | None = None) -> dict[str, Any]:
        seconds = range(int(self.last_t) + 1 if self.acks else 0)
        per_second = []
        for s in seconds:
            values = sorted(self.latencies.get(s, ()))
            per_second.append({"t": s, "acks": self.acks.get(s, 0),
                               "p50_ms": _quantile(values, 0.5), "p99_ms": _quantile(values, 0.99)})
        return {"scenario": self.scenario, "seed": self.seed, "phase": self.phase, "t": round(self.last_t, 1),
                "events": self.events, "acks_total": sum(self.acks.values()),
                "faults": sorted(self.faults.values(), key=lambda f: f["id"]), "per_second": per_second[-MAX_SECONDS:],
                "finished": results is not None,
                "passed": None if results is None else results.get("passed"),
                "verdicts": [] if results is None else results.get("verdicts", [])}


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(values[min(len(values) - 1, int(q * len(values)))], 1)


def report_entry(name: str, files: Iterable[str], results: Mapping[str, Any] | None) -> dict[str, Any]:
    """One row of the reports list: which files it has and, when finished, whether it passed."""
    present = sorted(set(files) & set(REPORT_FILES))
    return {"name": name, "files": present, "finished": results is not None,
            "scenario": None if results is None else results.get("scenario"),
            "passed": None if results is None else results.get("passed")}
