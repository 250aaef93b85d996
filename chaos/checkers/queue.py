"""Jepsen's queue checks over a history: lost, unseen, inconsistent offsets, duplicates, G1a.

Pure functions of the history's events (chaos.history). A write is identified by its
unique value; `ok` says at which (partition, offset) the cluster acknowledged it; `read` and
`final-read` say what consumers saw there. The final read is the catch-up read after every
fault healed: everything below each partition's high watermark.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chaos.checkers.result import CheckResult, examples

if TYPE_CHECKING:  # a type alias; the history's file and clock stay in chaos.history
    from chaos.history import Event

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)


@dataclass(frozen=True, slots=True)
class Ack:
    value: str
    partition: int
    offset: int
    t: float


def acks(events: Sequence[Event]) -> list[Ack]:
    return [Ack(e["value"], e["partition"], e["offset"], e["t"]) for e in events if e["kind"] == "ok"]


def final_reads(events: Sequence[Event]) -> dict[tuple[int, int], str]:
    return {(e["partition"], e["offset"]): e["value"] for e in events if e["kind"] == "final-read"}


def missing_acks(events: Sequence[Event]) -> tuple[list[Ack], list[Ack]]:
    """(lost, unseen): acknowledged writes the final read does not hold.

    Lost: the final read went past the write's offset (later offsets were read) yet the value
    is nowhere. Unseen: the final read never reached that offset (Jepsen's distinction: an
    unseen write might still appear; a lost one cannot).
    """
    final = final_reads(events)
    values = set(final.values())
    read_end: dict[int, int] = defaultdict(lambda: -1)
    for partition, offset in final:
        read_end[partition] = max(read_end[partition], offset)
    lost: list[Ack] = []
    unseen: list[Ack] = []
    for ack in acks(events):
        if ack.value in values:
            continue
        (lost if read_end[ack.partition] > ack.offset else unseen).append(ack)
    return lost, unseen


def _ack_line(ack: Ack) -> str:
    return f"value {ack.value} acknowledged at {ack.partition}/{ack.offset} (t={ack.t:.3f} s)"


def check_lost(events: Sequence[Event], *, explained: frozenset[str] = frozenset()) -> CheckResult:
    """Acknowledged, never read, although later offsets of its partition were. Values in
    `explained` (dropped by an unclean election: chaos.checkers.unclean) are not counted here."""
    lost, _ = missing_acks(events)
    lost = [a for a in lost if a.value not in explained]
    return CheckResult("lost", len(lost), f"{len(lost)} acknowledged writes lost (not counting losses "
                       f"explained by unclean elections: {len(explained)})", examples([_ack_line(a) for a in lost]),
                       {"values": [a.value for a in lost]})


def check_unseen(events: Sequence[Event], *, explained: frozenset[str] = frozenset()) -> CheckResult:
    """Acknowledged, never read by the final read, which stopped before its offset (values in
    `explained` were dropped by an unclean election: no later write reached those offsets)."""
    _, unseen = missing_acks(events)
    unseen = [a for a in unseen if a.value not in explained]
    return CheckResult("unseen", len(unseen), f"{len(unseen)} acknowledged writes never read by the final "
                       "catch-up read", examples([_ack_line(a) for a in unseen]))


def check_inconsistent_offsets(events: Sequence[Event], *,
                               rewritten_from: dict[int, int] | None = None) -> CheckResult:
    """One (partition, offset) holding two values across acknowledgements and reads. Offsets at or
    above an unclean election's start (`rewritten_from`: partition -> lowest such offset) were
    legitimately rewritten by the new leader and are reported apart."""
    rewritten_from = rewritten_from or {}
    seen: dict[tuple[int, int], set[str]] = defaultdict(set)
    for e in events:
        if e["kind"] in ("ok", "read", "final-read"):
            seen[(e["partition"], e["offset"])].add(e["value"])
    bad = sorted((k, v) for k, v in seen.items() if len(v) > 1)
    explained = [(k, v) for k, v in bad if k[1] >= rewritten_from.get(k[0], 1 << 62)]
    bad = [(k, v) for k, v in bad if k[1] < rewritten_from.get(k[0], 1 << 62)]
    lines = [f"{p}/{o}: values {sorted(v, key=_numeric)}" for (p, o), v in bad]
    return CheckResult("inconsistent-offsets", len(bad), f"{len(bad)} offsets seen with more than one value "
                       f"({len(explained)} more rewritten after an unclean election)", examples(lines))


def check_duplicates(events: Sequence[Event]) -> CheckResult:
    """One value at two offsets (the idempotent producer's promise), in the final read."""
    where: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for (partition, offset), value in final_reads(events).items():
        where[value].add((partition, offset))
    dups = sorted((v, sorted(w)) for v, w in where.items() if len(w) > 1)
    return CheckResult("duplicates", len(dups), f"{len(dups)} values stored at more than one offset",
                       examples([f"value {v} at {w}" for v, w in dups]))


def check_g1a(events: Sequence[Event]) -> CheckResult:
    """Aborted read: a value some consumer read although its send definitely failed."""
    failed = {e["value"] for e in events if e["kind"] == "fail"}
    read = sorted({e["value"] for e in events if e["kind"] in ("read", "final-read")} & failed, key=_numeric)
    return CheckResult("G1a", len(read), f"{len(read)} values read whose send definitely failed",
                       examples([f"value {v}" for v in read]))


def _numeric(value: str) -> tuple[int, str]:
    return (int(value), "") if value.isdigit() else (-1, value)
