"""The share-group checkers over hand-written histories: a clean group passes, with a poison
record archived at the delivery limit and a record redelivered after its holder's lock ran
out; a record accepted twice, one delivered again after its acceptance, one delivered twice
with the same count, one past the limit and one never finished are found; the same count
again across a broker fault is counted, not failed."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.checkers.share import (
    check_share,
    check_share_double_delivery,
    check_share_duplicates,
    check_share_lost,
    records,
    share_deliveries,
)
from chaos.checkers.suite import judge, run_all
from chaos.scenarios.spec import Expectations

Event = dict[str, Any]
LIMIT = 3


def acked(t: float, value: str, offset: int) -> list[Event]:
    return [{"t": t, "kind": "invoke", "value": value, "partition": 0},
            {"t": t + 0.01, "kind": "ok", "value": value, "partition": 0, "offset": offset}]


def read(t: float, member: str, offset: int, value: str, count: int, incarnation: int = 0) -> Event:
    return {"t": t, "kind": "share-read", "member": member, "incarnation": incarnation, "partition": 0,
            "offset": offset, "value": value, "delivery_count": count}


def ack(t: float, member: str, offset: int, kind: str = "accept", ok: bool | None = True,
        incarnation: int = 0) -> Event:
    return {"t": t, "kind": "share-ack", "member": member, "incarnation": incarnation, "partition": 0,
            "offset": offset, "type": kind, "ok": ok, "error": None if ok else "INVALID_RECORD_STATE"}


CONFIG: Event = {"t": 0.1, "kind": "note", "what": "share-group-config", "delivery_limit": LIMIT}
CAUGHT_UP: Event = {"t": 51.0, "kind": "note", "what": "share-group-catch-up", "ok": True}
WRITES = acked(1, "1", 0) + acked(1.1, "50", 1) + acked(1.2, "2", 2)
FINAL = [{"t": 50.0, "kind": "final-read", "partition": 0, "offset": o, "value": v}
         for o, v in ((0, "1"), (1, "50"), (2, "2"))]
# "1" accepted at once; "50" (poison) released by each member it reaches until archived at the
# limit; "2" held by s0 past its lock (s0 paused): redelivered to s1 and accepted, s0's late
# acknowledgement refused
CLEAN = [CONFIG, *WRITES,
         read(1.5, "s0", 0, "1", 1), ack(1.6, "s0", 0),
         read(1.5, "s0", 1, "50", 1), ack(1.6, "s0", 1, "release"),
         read(2.0, "s1", 1, "50", 2), ack(2.1, "s1", 1, "release"),
         read(2.5, "s0", 1, "50", 3), ack(2.6, "s0", 1, "release"),
         read(1.7, "s0", 2, "2", 1), read(6.0, "s1", 2, "2", 2), ack(6.1, "s1", 2), ack(9.0, "s0", 2, ok=False),
         *FINAL, CAUGHT_UP]


def shuffled(events: list[Event]) -> list[Event]:
    return events[::-1]  # relayed: out of time order


def test_a_clean_group_passes_and_counts_archived_and_redelivered() -> None:
    results = {r.name: r for r in check_share(shuffled(CLEAN))}
    assert {n: r.count for n, r in results.items()} == {"share-lost": 0, "share-duplicates": 0,
                                                         "share-double-delivery": 0, "share-deliveries": 0}
    assert results["share-deliveries"].data == {"records": 3, "accepted": 2, "confirmed": 2, "archived": 1,
                                                "redeliveries": 3}
    assert results["share-duplicates"].data == {"after_release": 2, "after_lock": 1}
    assert all(v.ok for v in judge(run_all(shuffled(CLEAN)), Expectations()))


def test_a_late_acknowledgement_belongs_to_the_members_own_delivery() -> None:
    s0_first, s1_second = records(CLEAN)[(0, 2)].deliveries
    assert s0_first.accepted() is False and s1_second.accepted() is True


def test_a_history_without_a_share_group_passes() -> None:
    assert [r.count for r in check_share(WRITES + FINAL)] == [0, 0, 0, 0]


@pytest.mark.parametrize("drop, lost", [
    (lambda e: e["kind"] == "share-read" and e["value"] == "1", 1),  # never delivered
    # s1's accept of "2" is gone: s0's was refused, nothing else finished it
    (lambda e: e["kind"] == "share-ack" and e["member"] == "s1" and e["offset"] == 2, 1),
    # the poison value's last delivery is missing: released twice, below the limit, not archived
    (lambda e: e["kind"] == "share-read" and e["value"] == "50" and e["delivery_count"] == 3, 1),
])
def test_a_record_neither_accepted_nor_archived_is_lost(drop: Any, lost: int) -> None:
    events = [e for e in CLEAN if not drop(e)]
    assert check_share_lost(shuffled(events)).count == lost
    assert "no share-lost" in [v.expectation for v in judge(run_all(events), Expectations()) if not v.ok]


def test_share_lost_counts_the_last_answer_of_each_lost_record() -> None:
    refused = [{**e, "ok": False, "error": "COORDINATOR_NOT_AVAILABLE"} if e["kind"] == "share-ack" and e["offset"] == 0
               else e for e in CLEAN]
    result = check_share_lost(shuffled(refused))
    assert result.count == 1 and result.data["last_answers"] == {"COORDINATOR_NOT_AVAILABLE": 1}
    assert "its accept answered ok=False (COORDINATOR_NOT_AVAILABLE)" in result.examples[0]
    unread = [e for e in CLEAN if not (e["kind"] == "share-read" and e["offset"] == 0)]
    assert check_share_lost(unread).data["last_answers"] == {"never delivered": 1}


def test_an_accept_with_an_unknown_answer_finishes_a_record() -> None:
    events = [e for e in CLEAN if not (e["kind"] == "share-ack" and e["offset"] == 0)] + [ack(1.6, "s0", 0, ok=None)]
    assert check_share_lost(events).count == 0
    assert share_deliveries(events).data["confirmed"] == 1


@pytest.mark.parametrize("extra, message", [
    # s0's late accept of "2" was taken too: accepted twice
    ([ack(9.5, "s0", 2, ok=True)], "accepted 2 times"),
    # "1", accepted by s0, delivered again to s1
    ([read(3.0, "s1", 0, "1", 2)], "accepted by s0#0 at delivery 1, delivered again to s1#0"),
])
def test_a_record_accepted_twice_or_delivered_after_its_acceptance_fails(extra: list[Event], message: str) -> None:
    result = check_share_duplicates(shuffled(CLEAN + extra))
    assert result.count == 1 and message in result.examples[0]


@pytest.mark.parametrize("extra, bad, after_fault", [
    # s1 got "2" with count 1 while s0 held that same delivery: one acquisition, two holders
    ([read(1.8, "s1", 2, "2", 1)], 1, 0),
    # the same, but a broker was killed between: a new leader hands out what was not persisted
    ([{"t": 1.75, "kind": "fault-start", "action": "kill", "targets": [4]}, read(1.8, "s1", 2, "2", 1)], 0, 1),
    # a member fault (no node targets) explains nothing
    ([{"t": 1.75, "kind": "fault-start", "action": "kill", "targets": [], "client": "s0"},
      read(1.8, "s1", 2, "2", 1)], 1, 0),
    # the poison value delivered a fourth time, past the limit of 3
    ([read(3.0, "s1", 1, "50", 4)], 1, 0),
])
def test_delivery_counts_grow_and_stop_at_the_limit(extra: list[Event], bad: int, after_fault: int) -> None:
    result = check_share_double_delivery(shuffled(CLEAN + extra))
    assert (result.count, result.data["after_fault"]) == (bad, after_fault)


@pytest.mark.parametrize("fault_t, over_after_fault", [(2.8, 1), (None, 0)])
def test_a_count_past_the_limit_says_whether_a_broker_fault_came_between(fault_t: float | None,
                                                                         over_after_fault: int) -> None:
    fault = [] if fault_t is None else [{"t": fault_t, "kind": "fault-start", "action": "kill", "targets": [4]}]
    result = check_share_double_delivery(shuffled(CLEAN + fault + [read(3.0, "s1", 1, "50", 4)]))
    assert result.count == 1 and result.data["over_limit_after_fault"] == over_after_fault


def test_a_delivery_seen_late_after_a_pause_is_not_a_repeat() -> None:
    # s0 was paused inside poll(): it returns its delivery 1 of "2" only after s1 got delivery 2
    late = [read(7.0, "s0", 2, "2", 1) if e["kind"] == "share-read" and e["member"] == "s0" and e["offset"] == 2
            else e for e in CLEAN]
    assert check_share_double_delivery(shuffled(late)).count == 0
    assert [d.count for d in records(late)[(0, 2)].deliveries] == [1, 2]


def test_an_acknowledgement_sent_by_a_member_killed_before_its_answer_is_unknown() -> None:
    # s1 sent its accept of "2" (pending) and was killed before commit_sync answered: the leader
    # may have taken it, and nothing delivered it again, so it is not lost
    pending = {**ack(6.1, "s1", 2, ok=None), "pending": True}
    killed = [pending if e["kind"] == "share-ack" and e["member"] == "s1" and e["offset"] == 2 else e for e in CLEAN]
    assert check_share_lost(shuffled(killed)).count == 0
    assert records(killed)[(0, 2)].deliveries[-1].accepted() is None
    # its answer, once recorded, replaces it: refused, and nothing else finished "2"
    refused = [*killed, ack(6.2, "s1", 2, ok=False)]
    assert records(refused)[(0, 2)].deliveries[-1].accepted() is False
    assert check_share_lost(shuffled(refused)).count == 1
