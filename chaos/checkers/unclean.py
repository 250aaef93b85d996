"""Expected loss: acknowledged writes an unclean leader election dropped, matched exactly.

With unclean.leader.election.enable, Kafka trades durability for availability: a replica
outside the ISR becomes leader (RECOVERING, KIP-704) and every record past its log end is
gone. The broker logs each such election ("Leader T-P with leader epoch E starting at offset
S ... elected uncleanly"), harvested into `election` events. A lost write (p, o) is explained
by an unclean election of p with start offset S <= o and acknowledged before it. The loss is
"as promised" only when every lost write is explained and nothing is lost elsewhere.

Every election of the run is also told apart, and why (`classify_elections`): clean from the
ISR (the ordinary case), clean from the ELR (KIP-966: the whole ISR was gone and an eligible
leader replica, which has every committed record, was elected; the controller says so in its
log, harvested as a `leader-election` note) or unclean (from outside both, RECOVERING).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from chaos.checkers.queue import Ack, missing_acks
from chaos.checkers.result import CheckResult, examples
from chaos.history import Event
from common.limits import CLOCK_SLACK_S



@dataclass(frozen=True, slots=True)
class UncleanElection:
    partition: int
    leader: int
    leader_epoch: int
    start_offset: int
    t: float


def unclean_elections(events: Sequence[Event]) -> list[UncleanElection]:
    return [UncleanElection(e["partition"], e["leader"], e["leader_epoch"], e["start_offset"], e["t"])
            for e in events if e["kind"] == "election" and e.get("unclean")]


@dataclass(frozen=True, slots=True)
class ElectionKind:
    """One leadership a broker took, with how the controller chose it and why."""

    partition: int
    leader: int
    leader_epoch: int
    how: str  # "isr", "elr" or "unclean"
    why: str
    t: float


HOW_WORDS = {"isr": "clean from the ISR", "elr": "clean from the ELR", "unclean": "unclean"}


def classify_elections(events: Sequence[Event]) -> list[ElectionKind]:
    """Each broker election event, told apart by the controller's account of it (by partition,
    leader and leader epoch): none means the new leader came from the ISR."""
    notes = {(e["partition"], e["leader"], e["leader_epoch"]): e for e in events
             if e["kind"] == "note" and e.get("what") == "leader-election"}
    out = []
    for e in sorted((e for e in events if e["kind"] == "election"), key=lambda e: e["t"]):
        note = notes.get((e["partition"], e["leader"], e["leader_epoch"]))
        if e.get("unclean") or (note is not None and note.get("how") == "unclean"):
            how, why = "unclean", (note or {}).get("why") or "elected from outside the ISR (RECOVERING)"
        elif note is not None and note.get("how") == "elr":
            how, why = "elr", str(note.get("why", ""))
        else:
            how, why = "isr", "a live ISR member"
        out.append(ElectionKind(e["partition"], e["leader"], e["leader_epoch"], how, why, e["t"]))
    return out


def election_lines(kinds: Sequence[ElectionKind]) -> list[str]:
    return [f"t={k.t:.1f}s partition {k.partition}: broker {k.leader} at leader epoch {k.leader_epoch}, "
            f"{HOW_WORDS[k.how]}: {k.why}" for k in kinds]


def explain(lost: Sequence[Ack], elections: Sequence[UncleanElection]
            ) -> tuple[list[tuple[Ack, UncleanElection]], list[Ack]]:
    """(explained with the election that dropped each, unexplained)."""
    matched: list[tuple[Ack, UncleanElection]] = []
    unexplained: list[Ack] = []
    for ack in lost:
        election = next((u for u in sorted(elections, key=lambda u: u.t)
                         if u.partition == ack.partition and u.start_offset <= ack.offset
                         and ack.t <= u.t + CLOCK_SLACK_S), None)
        if election is None:
            unexplained.append(ack)
        else:
            matched.append((ack, election))
    return matched, unexplained


def check_expected_loss(events: Sequence[Event]) -> tuple[CheckResult, frozenset[str]]:
    """The explained losses (a measurement) and their values, for `check_lost` to leave out."""
    lost, unseen = missing_acks(events)  # after an unclean election the final read may end below them
    lost = lost + unseen
    elections = unclean_elections(events)
    matched, _ = explain(lost, elections)
    lines = [f"value {a.value} at {a.partition}/{a.offset}: dropped by the unclean election of broker "
             f"{u.leader} (leader epoch {u.leader_epoch}, starting at offset {u.start_offset})" for a, u in matched]
    by_election: dict[str, list[int]] = {}
    for a, u in matched:
        by_election.setdefault(f"{u.partition}@{u.leader_epoch}", []).append(a.offset)
    ranges = {k: [min(v), max(v)] for k, v in by_election.items()}
    kinds = classify_elections(events)
    counts = {how: sum(1 for k in kinds if k.how == how) for how in HOW_WORDS}
    told = ", ".join(f"{n} {HOW_WORDS[how]}" for how, n in counts.items())
    result = CheckResult("expected-loss", len(matched),
                         f"{len(matched)} acknowledged writes dropped by {len(elections)} unclean elections "
                         f"(offsets per partition@epoch: {ranges or 'none'}); elections: {told}",
                         examples(election_lines([k for k in kinds if k.how != "isr"]) + lines),
                         {"unclean_elections": len(elections), "ranges": ranges,
                          "values": [a.value for a, _ in matched], "elections": counts,
                          "election_details": election_lines(kinds)})
    return result, frozenset(a.value for a, _ in matched)
