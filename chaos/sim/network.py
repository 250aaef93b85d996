"""The simulated network: delays, drops, duplicates, reordering and partitions between nodes.

Every message is delivered as a "msg" event after a seeded delay; two messages on one link
can overtake each other (reordering) because each draws its own delay. A cut link (network
partition) drops everything both ways; a `LinkFault` on a pair adds loss, duplication and
extra delay. Nothing here decides anything about the cluster: it only moves messages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the caller owns the generator: no global random here
    from random import Random

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from chaos.sim.events import EventQueue

BASE_DELAY_MS = (1, 4)  # loopback-like latency of a healthy link


@dataclass(frozen=True, slots=True)
class LinkFault:
    """A degraded link between two nodes (both directions)."""

    drop: float = 0.0
    duplicate: float = 0.0
    max_extra_delay_ms: int = 0

    def __post_init__(self) -> None:
        if not (0 <= self.drop <= 1 and 0 <= self.duplicate <= 1 and self.max_extra_delay_ms >= 0):
            raise ValueError(f"invalid link fault {self}")


def _pair(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


class Network:
    """Moves messages between named nodes through the event queue."""

    def __init__(self, rng: Random, queue: EventQueue) -> None:
        self._rng = rng
        self._queue = queue
        self._cut: set[tuple[str, str]] = set()
        self._faults: dict[tuple[str, str], LinkFault] = {}
        self.sent = 0
        self.dropped = 0

    def connected(self, a: str, b: str) -> bool:
        return a == b or _pair(a, b) not in self._cut

    def send(self, src: str, dst: str, message: Any) -> None:
        self.sent += 1
        pair = _pair(src, dst)
        if pair in self._cut:
            self.dropped += 1
            return
        fault = self._faults.get(pair)
        copies = 1
        if fault is not None:
            if fault.drop and self._rng.random() < fault.drop:
                self.dropped += 1
                return
            if fault.duplicate and self._rng.random() < fault.duplicate:
                copies = 2
        for _ in range(copies):
            delay = self._rng.randint(*BASE_DELAY_MS)
            if fault is not None and fault.max_extra_delay_ms:
                delay += self._rng.randint(0, fault.max_extra_delay_ms)
            self._queue.after(delay, "msg", dst, (src, message))

    def partition(self, side: Iterable[str], everyone: Iterable[str]) -> None:
        """Cut every link between `side` and the other nodes of `everyone`."""
        inside = set(side)
        for a in sorted(inside):
            for b in sorted(set(everyone) - inside):
                self._cut.add(_pair(a, b))

    def degrade(self, a: str, b: str, fault: LinkFault) -> None:
        self._faults[_pair(a, b)] = fault

    def heal(self) -> None:
        self._cut.clear()
        self._faults.clear()

    @property
    def healthy(self) -> bool:
        return not self._cut and not self._faults
