"""Expected loss: acknowledged writes an unclean leader election dropped, matched exactly.

With unclean.leader.election.enable, Kafka trades durability for availability: a replica
outside the ISR becomes leader (RECOVERING, KIP-704) and every record past its log end is
gone. The broker logs each such election ("Leader T-P with leader epoch E starting at offset
S ... elected uncleanly"), harvested into `election` events. A lost write (p, o) is explained
by an unclean election of p with start offset S <= o and acknowledged before it. The loss is
"as promised" only when every lost write is explained and nothing is lost elsewhere.
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
    result = CheckResult("expected-loss", len(matched),
                         f"{len(matched)} acknowledged writes dropped by {len(elections)} unclean elections "
                         f"(offsets per partition@epoch: {ranges or 'none'})", examples(lines),
                         {"unclean_elections": len(elections), "ranges": ranges,
                          "values": [a.value for a, _ in matched]})
    return result, frozenset(a.value for a, _ in matched)
