"""One history of a chaos run: JSON lines, every event on one monotonic clock.

    with History.create(run_dir / "history.jsonl") as history:
        history.record("invoke", process="p0", value="17", partition=2)
        history.record("ok", process="p0", value="17", partition=2, offset=5)
    events = load(run_dir / "history.jsonl")        # the checkers and the report read only this

Every event is a flat JSON object with `t` (seconds since the run began, time.monotonic)
and `kind`. The first line is a `header` that also holds the wall-clock time at t=0, so
lines harvested from the nodes' logs (wall clock) can be placed on the same axis. Kinds
(Jepsen's names for operations): invoke / ok / fail / info (a send whose outcome is
unknown), read (one record polled), final-read (the catch-up read after the last heal),
sample (a partition's leader, ISR, epoch, high watermark from the admin API),
fault-start / fault-end, skip (a fault the harness could not apply, with why), admin-invoke / admin-ok /
admin-fail / admin-info / admin-final (topic creations and what exists of them at the end),
group-assign / group-read / group-commit (a consumer group's members: each assignment with the
member's generation, each record polled, each offset committed),
txn-* (transactions and their readers: chaos.checkers.transactions describes them),
election / truncation / fencing (harvested from node logs), phase, note.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, Final, TextIO

KINDS: Final = frozenset({
    "header", "invoke", "ok", "fail", "info", "read", "final-read", "sample", "fault-start",
    "fault-end", "skip", "election", "truncation", "fencing", "controller-epoch", "phase", "note", "divergence",
    "admin-invoke", "admin-ok", "admin-fail", "admin-info", "admin-final",
    "group-assign", "group-read", "group-commit",
    "cgroup-assign", "cgroup-revoke", "cgroup-read", "cgroup-commit", "share-read", "share-ack", "member-end",
    "txn-invoke", "txn-write", "txn-commit-invoke", "txn-ok", "txn-fail", "txn-info", "txn-read", "txn-probe",
    "power-replicas", "power-loss", "broker-metadata", "quorum-metadata",  # chaos.nemeses.power's and its checker's
})
Event = dict[str, Any]


class History:
    """Appends events to a JSONL file from any thread; a line is written whole or not at all."""

    def __init__(self, out: TextIO, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self._out, self._clock = out, clock
        self._lock = threading.Lock()
        self._start = clock()
        self.wall_start = wall()
        self.counts: dict[str, int] = {}
        self.record("header", wall_start=self.wall_start, version=1)

    @classmethod
    def create(cls, path: Path) -> History:
        path.parent.mkdir(parents=True, exist_ok=True)
        return cls(path.open("w", encoding="utf-8"))

    def now(self) -> float:
        """Seconds since the run began, on the history's clock."""
        return self._clock() - self._start

    def at_wall(self, wall_seconds: float) -> float:
        """A wall-clock instant (a node's log line) on the history's axis."""
        return wall_seconds - self.wall_start

    def record(self, kind: str, *, t: float | None = None, **fields: Any) -> Event:
        if kind not in KINDS:
            raise ValueError(f"unknown history event kind {kind!r}")
        event: Event = {"t": round(self.now() if t is None else t, 6), "kind": kind, **fields}
        line = json.dumps(event, separators=(",", ":"), sort_keys=False)
        with self._lock:
            self._out.write(line + "\n")
            self.counts[kind] = self.counts.get(kind, 0) + 1
        return event

    def flush(self) -> None:
        with self._lock:
            self._out.flush()

    def close(self) -> None:
        with self._lock:
            self._out.close()

    def __enter__(self) -> History:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


def load(path: Path) -> list[Event]:
    """Every event of a history file, in file order (a torn last line of a crashed run is skipped)."""
    events: list[Event] = []
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # only a crash mid-write leaves one; the rest of the history stands
    return events


def parse_lines(lines: Iterable[str]) -> list[Event]:
    """Events from JSON lines in memory (tests write histories by hand)."""
    return [json.loads(line) for line in lines if line.strip()]


def of_kind(events: Iterable[Event], *kinds: str) -> list[Event]:
    return [e for e in events if e["kind"] in kinds]
