"""What one checker found: a count, a few examples, a line saying what was checked."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

EXAMPLES_MAX: Final = 8  # a report lists this many examples per checker; the count says the rest


@dataclass(frozen=True, slots=True)
class CheckResult:
    """`count` anomalies of kind `name` (0: none); `examples` the first few, worded for a person.

    `info` results (availability windows, explained losses) are measurements, not anomalies:
    the scenario's expectations decide whether they pass.
    """

    name: str
    count: int
    summary: str
    examples: tuple[str, ...] = ()
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "count": self.count, "summary": self.summary,
                "examples": list(self.examples), "data": self.data}


def examples(items: list[str]) -> tuple[str, ...]:
    return tuple(items[:EXAMPLES_MAX])
