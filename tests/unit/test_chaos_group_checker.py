"""The consumer-group checkers over hand-written histories: a clean group passes; a record no
member polled, a duplicate without a rebalance and a poll going back within a generation are
found; a duplicate after a rebalance is counted, not failed."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.checkers.group import (
    check_group,
    check_group_duplicates,
    check_group_lost,
    check_group_order,
    check_group_resume,
)
from chaos.checkers.suite import judge, run_all
from chaos.scenarios.spec import Expectations

Event = dict[str, Any]


def acked(t: float, value: str, partition: int, offset: int) -> list[Event]:
    return [{"t": t, "kind": "invoke", "value": value, "partition": partition},
            {"t": t + 0.01, "kind": "ok", "value": value, "partition": partition, "offset": offset}]


def assign(t: float, member: str, generation: int, *partitions: int) -> Event:
    return {"t": t, "kind": "group-assign", "member": member, "generation": generation,
            "partitions": list(partitions)}


def polled(t: float, member: str, generation: int, partition: int, offset: int, value: str) -> Event:
    return {"t": t, "kind": "group-read", "member": member, "generation": generation, "partition": partition,
            "offset": offset, "value": value}


def final(partition: int, *values: str) -> list[Event]:
    return [{"t": 50.0, "kind": "final-read", "partition": partition, "offset": o, "value": v}
            for o, v in enumerate(values)]


CAUGHT_UP: Event = {"t": 51.0, "kind": "note", "what": "group-catch-up", "ok": True, "ends": {"0": 3, "1": 1}}
WRITES = acked(1, "0", 0, 0) + acked(1.1, "1", 1, 0) + acked(2, "2", 0, 1) + acked(3, "3", 0, 2)
FINAL = final(0, "0", "2", "3") + final(1, "1")
# m0 owns partition 0, m1 partition 1; each record polled once
CLEAN = [assign(0.5, "m0", 1, 0), assign(0.5, "m1", 1, 1), *WRITES, polled(1.5, "m0", 1, 0, 0, "0"),
         polled(1.6, "m1", 1, 1, 0, "1"), polled(2.5, "m0", 1, 0, 1, "2"), polled(3.5, "m0", 1, 0, 2, "3"),
         *FINAL, CAUGHT_UP]


def ordered(events: list[Event]) -> list[Event]:
    return sorted(events, key=lambda e: e["t"])


def counts(events: list[Event]) -> dict[str, int]:
    return {r.name: r.count for r in check_group(ordered(events))}


def test_a_clean_group_passes() -> None:
    assert counts(CLEAN) == {"group-lost": 0, "group-duplicates": 0, "group-non-monotonic": 0,
                             "group-commit-lost": 0}
    assert all(v.ok for v in judge(run_all(ordered(CLEAN)), Expectations()))


def test_a_history_without_a_group_passes_all_three() -> None:
    results = check_group(ordered(WRITES + FINAL))
    assert [r.count for r in results] == [0, 0, 0, 0]
    assert all("no consumer group" in r.summary for r in results)


def test_an_acknowledged_write_no_member_polled_is_lost_and_fails_the_scenario() -> None:
    events = [e for e in CLEAN if not (e["kind"] == "group-read" and e["value"] == "2")]
    result = check_group_lost(ordered(events))
    assert result.count == 1 and "value 2 acknowledged at 0/1" in result.examples[0]
    failed = [v.expectation for v in judge(run_all(ordered(events)), Expectations()) if not v.ok]
    assert failed == ["no group-lost"]


def test_a_write_the_cluster_lost_is_not_blamed_on_the_group() -> None:
    # value 3 was acknowledged but the final read does not hold it: the queue checkers count it
    events = [e for e in CLEAN if not (e["kind"] in ("group-read", "final-read") and e["value"] == "3")]
    assert check_group_lost(ordered(events)).count == 0


def test_the_summary_says_when_the_group_did_not_catch_up() -> None:
    events = [e for e in CLEAN if e is not CAUGHT_UP] + [{**CAUGHT_UP, "ok": False}]
    result = check_group_lost(ordered(events))
    assert "did NOT catch up" in result.summary and result.data["caught_up"] is False


@pytest.mark.parametrize("extra, unexplained, after_rebalance, failed", [
    # m1 takes partition 0 after a rebalance and resumes at the committed offset 1: at-least-once
    ([assign(3.0, "m0", 2, 1), assign(3.0, "m1", 2, 0), polled(3.2, "m1", 2, 0, 1, "2")], 0, 1, []),
    # m1 polls m0's record while no rebalance happened: two owners of one partition
    ([polled(3.2, "m1", 1, 0, 1, "2")], 1, 0, ["no group-duplicates"]),
    # the same member polls it again in the same generation: a duplicate and a poll going back
    ([polled(3.8, "m0", 1, 0, 1, "2")], 1, 0, ["no group-duplicates", "no group-non-monotonic"]),
])
def test_duplicates_count_after_a_rebalance_and_fail_without(extra: list[Event], unexplained: int,
                                                             after_rebalance: int, failed: list[str]) -> None:
    result = check_group_duplicates(ordered(CLEAN + extra))
    assert result.count == unexplained
    assert result.data["after_rebalance"] == after_rebalance
    verdicts = judge(run_all(ordered(CLEAN + extra)), Expectations())
    assert [v.expectation for v in verdicts if not v.ok] == failed


@pytest.mark.parametrize("extra, back", [
    ([polled(3.8, "m0", 1, 0, 1, "2")], 1),             # back within generation 1
    ([assign(3.7, "m0", 2, 0), polled(3.8, "m0", 2, 0, 1, "2")], 0),  # a new generation may start lower
    ([polled(3.8, "m1", 1, 0, 1, "2")], 0),             # another member: its own order
])
def test_member_order_within_a_generation(extra: list[Event], back: int) -> None:
    result = check_group_order(ordered(CLEAN + extra))
    assert result.count == back
    if back:
        assert "member m0 generation 1 partition 0: offset 2 then 1" in result.examples[0]


def commit(t: float, member: str, partition: int, offset: int) -> Event:
    return {"t": t, "kind": "group-commit", "member": member, "partition": partition, "offset": offset}


@pytest.mark.parametrize("extra, lost", [
    # m0 committed 2 (next to read), the rebalance gives partition 0 to m1, which resumes at 2
    ([commit(2.7, "m0", 0, 2), assign(3.0, "m1", 2, 0), polled(3.6, "m1", 2, 0, 2, "3")], 0),
    # ... resuming at 1 re-reads a committed record: the coordinator lost the commit
    ([commit(2.7, "m0", 0, 2), assign(3.0, "m1", 2, 0), polled(3.6, "m1", 2, 0, 1, "2")], 1),
    # the commit acknowledged only after the assignment may not be seen by it: not a loss
    ([assign(3.0, "m1", 2, 0), commit(3.1, "m0", 0, 2), polled(3.6, "m1", 2, 0, 1, "2")], 0),
])
def test_a_member_resumes_at_or_after_the_commits_acknowledged_before_its_assignment(extra: list[Event],
                                                                                     lost: int) -> None:
    result = check_group_resume(ordered(CLEAN + extra))
    assert result.count == lost
    if lost:
        assert "member m1 generation 2 resumed partition 0 at 1, below the commit of 2" in result.examples[0]
