"""The virtual clock and the event heap: (due_ms, seq, kind, target, payload).

Kafka's RaftEventSimulationTest and TigerBeetle's VOPR: time only moves when the next event
is popped, and `seq` breaks ties in scheduling order, so one seed gives one order.
"""

from __future__ import annotations

import heapq
from typing import Any, NamedTuple


class Event(NamedTuple):
    due_ms: int
    seq: int
    kind: str  # "msg" (a delivery), "timer" (periodic work), "beat" (a broker heartbeat), "heal" (a fault ends)
    target: str  # node name ("c0", "b1", "p0") or "world"
    payload: Any


class EventQueue:
    """A heap of events and the virtual now (ms); the only clock of a simulation."""

    __slots__ = ("_heap", "_seq", "now_ms")

    def __init__(self) -> None:
        self.now_ms = 0
        self._heap: list[Event] = []
        self._seq = 0

    def at(self, due_ms: int, kind: str, target: str, payload: Any = None) -> None:
        self._seq += 1
        heapq.heappush(self._heap, Event(max(due_ms, self.now_ms), self._seq, kind, target, payload))

    def after(self, delay_ms: int, kind: str, target: str, payload: Any = None) -> None:
        self.at(self.now_ms + delay_ms, kind, target, payload)

    def pop(self) -> Event:
        """The earliest event; the clock moves to its due time (never backwards)."""
        event = heapq.heappop(self._heap)
        self.now_ms = max(self.now_ms, event.due_ms)
        return event

    def __len__(self) -> int:
        return len(self._heap)
