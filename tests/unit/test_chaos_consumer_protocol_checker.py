"""The KIP-848 group checkers over hand-written histories: a clean group with a handover passes;
a partition assigned before its owner revoked it, a record polled twice with no revocation
between and a record no member polled are found; a re-poll after a revocation, after a member's
end, and an overlap with an owner the coordinator fenced are counted, not failed. The events are
given out of time order, as the relays deliver them."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.checkers.consumer_protocol import (
    check_cgroup_duplicates,
    check_cgroup_lost,
    check_cgroup_overlap,
    check_consumer_protocol,
)
from chaos.checkers.suite import judge, run_all
from chaos.scenarios.spec import Expectations

Event = dict[str, Any]


def acked(t: float, value: str, partition: int, offset: int) -> list[Event]:
    return [{"t": t, "kind": "invoke", "value": value, "partition": partition},
            {"t": t + 0.01, "kind": "ok", "value": value, "partition": partition, "offset": offset}]


def assign(t: float, member: str, *partitions: int, incarnation: int = 0) -> Event:
    return {"t": t, "kind": "cgroup-assign", "member": member, "incarnation": incarnation, "epoch": 1,
            "partitions": list(partitions)}


def revoke(t: float, member: str, *partitions: int, lost: bool = False, incarnation: int = 0) -> Event:
    return {"t": t, "kind": "cgroup-revoke", "member": member, "incarnation": incarnation, "epoch": 2,
            "partitions": list(partitions), "lost": lost}


def polled(t: float, member: str, partition: int, offset: int, value: str, incarnation: int = 0) -> Event:
    return {"t": t, "kind": "cgroup-read", "member": member, "incarnation": incarnation, "epoch": 1,
            "partition": partition, "offset": offset, "value": value}


def ended(t: float, member: str, incarnation: int = 0) -> Event:
    return {"t": t, "kind": "member-end", "member": member, "incarnation": incarnation, "how": "killed"}


FINAL = [{"t": 50.0, "kind": "final-read", "partition": p, "offset": o, "value": v}
         for p, o, v in ((0, 0, "0"), (0, 1, "2"), (1, 0, "1"))]
CAUGHT_UP: Event = {"t": 51.0, "kind": "note", "what": "consumer-group-catch-up", "ok": True}
WRITES = acked(1, "0", 0, 0) + acked(1.1, "1", 1, 0) + acked(2, "2", 0, 1)
# c0 holds both partitions, gives partition 1 to c1 (revoked first), and each record is polled once
CLEAN = [assign(0.5, "c0", 0, 1), *WRITES, polled(1.5, "c0", 0, 0, "0"), revoke(1.6, "c0", 1),
         assign(1.7, "c1", 1), polled(1.8, "c1", 1, 0, "1"), polled(2.5, "c0", 0, 1, "2"), *FINAL, CAUGHT_UP]


def shuffled(events: list[Event]) -> list[Event]:
    """Relayed events reach the history out of order: the checkers sort them by time."""
    return events[::-1]


def test_a_clean_group_with_a_handover_passes() -> None:
    results = {r.name: r for r in check_consumer_protocol(shuffled(CLEAN))}
    assert {n: r.count for n, r in results.items()} == {"cgroup-lost": 0, "cgroup-duplicates": 0,
                                                         "cgroup-overlap": 0}
    assert results["cgroup-overlap"].data["handovers"] == 1
    assert all(v.ok for v in judge(run_all(shuffled(CLEAN)), Expectations()))


def test_a_history_without_a_consumer_protocol_group_passes() -> None:
    results = check_consumer_protocol(WRITES + FINAL)
    assert [r.count for r in results] == [0, 0, 0]
    assert all("no consumer-protocol group" in r.summary for r in results)


def test_an_acknowledged_write_no_member_polled_is_lost_and_fails_the_scenario() -> None:
    events = [e for e in CLEAN if not (e["kind"] == "cgroup-read" and e["value"] == "2")]
    result = check_cgroup_lost(events)
    assert result.count == 1 and "value 2 acknowledged at 0/1" in result.examples[0]
    assert [v.expectation for v in judge(run_all(events), Expectations()) if not v.ok] == ["no cgroup-lost"]


@pytest.mark.parametrize("extra, unexplained, again", [
    # c1 polls c0's record of partition 0 while c0 still holds it: two members, one generation
    ([polled(3.0, "c1", 0, 1, "2")], 1, 0),
    # c0 polls its own record again without a revocation between
    ([polled(3.0, "c0", 0, 1, "2")], 1, 0),
    # c0 revoked partition 0, c1 got it and resumed at the last commit: at-least-once, counted
    ([revoke(2.8, "c0", 0), assign(2.9, "c1", 0), polled(3.0, "c1", 0, 1, "2")], 0, 1),
    # c0 was killed (its end recorded by the harness): its partitions' records may come again
    ([ended(2.8, "c0"), assign(9.0, "c1", 0), polled(9.1, "c1", 0, 1, "2")], 0, 1),
    # the revocation came after the second poll: it explains nothing
    ([polled(3.0, "c1", 0, 1, "2"), revoke(3.1, "c0", 0)], 1, 0),
])
def test_a_record_polled_twice_needs_a_revocation_between(extra: list[Event], unexplained: int, again: int) -> None:
    result = check_cgroup_duplicates(shuffled(CLEAN + extra))
    assert (result.count, result.data["after_revocation"]) == (unexplained, again)
    if unexplained:
        assert "with no revocation from c0#0 between" in result.examples[0]


@pytest.mark.parametrize("extra, overlaps, fenced", [
    # partition 0 assigned to c1 while c0 still held it (no revocation, no end)
    ([assign(3.0, "c1", 0)], 1, 0),
    # c0 ended (SIGKILL) before: a clean handover
    ([ended(2.9, "c0"), assign(9.0, "c1", 0)], 0, 0),
    # c0 had been fenced by the coordinator and learned it later (on_lost): a zombie, counted
    ([assign(3.0, "c1", 0), revoke(3.5, "c0", 0, 1, lost=True)], 0, 1),
    # c0's next end of partition 0 is a plain revocation: it was not fenced, the overlap fails
    ([assign(3.0, "c1", 0), revoke(3.5, "c0", 0)], 1, 0),
])
def test_a_partition_is_revoked_before_it_is_assigned_elsewhere(extra: list[Event], overlaps: int,
                                                                 fenced: int) -> None:
    result = check_cgroup_overlap(shuffled(CLEAN + extra))
    assert (result.count, result.data["fenced"]) == (overlaps, fenced)
    if overlaps:
        assert "partition 0 assigned to c1#0 at t=3.000 s while c0#0 still held it" in result.examples[0]
