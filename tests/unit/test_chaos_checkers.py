"""Checkers over hand-written histories: each anomaly found, a clean history passes, an
unclean election's loss passes only when every lost write is explained by it."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.checkers.availability import check_availability, fault_windows
from chaos.checkers.queue import (
    check_duplicates,
    check_g1a,
    check_inconsistent_offsets,
    check_lost,
    check_unseen,
)
from chaos.checkers.reads import check_read_order
from chaos.checkers.suite import judge, run_all
from chaos.checkers.unclean import check_expected_loss
from chaos.scenarios.spec import Expectations, LossPolicy

Event = dict[str, Any]


def send(t: float, value: str, partition: int, offset: int | None, outcome: str = "ok") -> list[Event]:
    """An invoke at t and its outcome at t + 0.01."""
    done: Event = {"t": t + 0.01, "kind": outcome, "value": value, "partition": partition}
    if offset is not None:
        done["offset"] = offset
    return [{"t": t, "kind": "invoke", "value": value, "partition": partition}, done]


def final(partition: int, *values: str) -> list[Event]:
    return [{"t": 50.0, "kind": "final-read", "partition": partition, "offset": o, "value": v}
            for o, v in enumerate(values)]


def read(t: float, consumer: str, partition: int, offset: int, value: str) -> Event:
    return {"t": t, "kind": "read", "consumer": consumer, "partition": partition, "offset": offset, "value": value}


PHASES = [{"t": 0.0, "kind": "phase", "name": "workload"}, {"t": 49.0, "kind": "phase", "name": "catch-up"}]
CLEAN = PHASES + send(1, "0", 0, 0) + send(2, "1", 0, 1) + send(3, "2", 0, 2) + [
    read(1.5, "c0", 0, 0, "0"), read(2.5, "c0", 0, 1, "1"), read(3.5, "c0", 0, 2, "2")] + final(0, "0", "1", "2")
UNCLEAN = {"t": 5.0, "kind": "election", "partition": 0, "leader": 5, "leader_epoch": 3, "start_offset": 1,
           "unclean": True}


def names(results: list[Any]) -> dict[str, int]:
    return {r.name: r.count for r in results}


def test_a_clean_history_has_no_anomaly() -> None:
    counts = names(run_all(CLEAN))
    assert {k: v for k, v in counts.items() if v and k not in ("workload", "availability", "isr-changes")} == {}
    assert all(v.ok for v in judge(run_all(CLEAN), Expectations()))


@pytest.mark.parametrize("events, checker, count", [
    # "1" acknowledged at offset 1, offsets up to 2 read back, "1" nowhere: lost
    (send(1, "0", 0, 0) + send(2, "1", 0, 1) + send(3, "2", 0, 2) + final(0, "0", "x", "2"), check_lost, 1),
    # acknowledged at offset 2, the final read ended at offset 1: unseen, not lost
    (send(1, "0", 0, 0) + send(2, "1", 0, 1) + send(3, "2", 0, 2) + final(0, "0", "1"), check_unseen, 1),
    (send(1, "0", 0, 0) + send(2, "1", 0, 1) + final(0, "0", "1"), check_unseen, 0),
    # acknowledged "1" at 0/1, a consumer read "9" there
    (send(1, "0", 0, 0) + send(2, "1", 0, 1) + [read(3, "c0", 0, 1, "9")] + final(0, "0", "1"),
     check_inconsistent_offsets, 1),
    (final(0, "0", "1", "0"), check_duplicates, 1),
    (final(0, "0", "1"), check_duplicates, 0),
    # "1" definitely failed, yet it was read: G1a
    (send(1, "0", 0, 0) + send(2, "1", 0, None, "fail") + final(0, "0", "1"), check_g1a, 1),
    # an unknown outcome read back is fine (Jepsen's info)
    (send(1, "0", 0, 0) + send(2, "1", 0, None, "info") + final(0, "0", "1"), check_g1a, 0),
])
def test_each_anomaly_is_found(events: list[Event], checker: Any, count: int) -> None:
    result = checker(events)
    assert result.count == count, result
    assert len(result.examples) == min(count, 8)


@pytest.mark.parametrize("offsets, back, skipped", [
    ((0, 1, 2, 3), 0, 0),
    ((0, 1, 1, 2), 1, 0),
    ((0, 1, 0, 1), 1, 0),
    ((0, 1, 3, 4), 0, 1),
])
def test_read_order_per_consumer(offsets: tuple[int, ...], back: int, skipped: int) -> None:
    events = [read(i, "c0", 0, o, str(o)) for i, o in enumerate(offsets)]
    non_monotonic, skip = check_read_order(events)
    assert (non_monotonic.count, skip.count) == (back, skipped)


def test_a_rewind_after_an_unclean_election_is_explained() -> None:
    events = [read(1, "c0", 0, 0, "a"), read(2, "c0", 0, 1, "b"), read(6, "c0", 0, 1, "c")]
    assert check_read_order(events, unclean_at={0: 5.0})[0].count == 0
    assert check_read_order(events, unclean_at={0: 7.0})[0].count == 1


def test_consumers_are_checked_apart() -> None:
    events = [read(1, "c0", 0, 0, "a"), read(1, "c1", 0, 0, "a"), read(2, "c0", 0, 1, "b"), read(2, "c1", 0, 1, "b")]
    assert check_read_order(events)[0].count == 0


# Two writes acknowledged at offsets 1 and 2 by the old leader alone; the unclean leader starts
# at offset 1 and writes "9" there: both writes are lost, both by that election.
UNCLEAN_LOSS = PHASES + send(1, "0", 0, 0) + send(2, "1", 0, 1) + send(3, "2", 0, 2) + [UNCLEAN] + \
    send(6, "9", 0, 1) + send(7, "10", 0, 2) + send(8, "11", 0, 3) + final(0, "0", "9", "10", "11")


def test_an_explained_unclean_loss_is_as_promised() -> None:
    expected, explained = check_expected_loss(UNCLEAN_LOSS)
    assert expected.count == 2 and explained == {"1", "2"}
    assert expected.data["ranges"] == {"0@3": [1, 2]}
    assert check_lost(UNCLEAN_LOSS, explained=explained).count == 0
    verdicts = judge(run_all(UNCLEAN_LOSS), Expectations(lost=LossPolicy.EXPLAINED, unclean_elections=True,
                                                         min_lost=1, allow=("inconsistent-offsets",)))
    assert [v.expectation for v in verdicts if not v.ok] == []


def test_the_rewritten_offsets_are_not_inconsistent_after_an_unclean_election() -> None:
    assert check_inconsistent_offsets(UNCLEAN_LOSS, rewritten_from={0: 1}).count == 0
    assert check_inconsistent_offsets(UNCLEAN_LOSS).count == 2


def test_a_loss_no_unclean_election_explains_fails() -> None:
    # the election started at offset 2: the write at offset 1 is not explained by it
    election = dict(UNCLEAN, start_offset=2)
    events = [e if e is not UNCLEAN else election for e in UNCLEAN_LOSS]
    _, explained = check_expected_loss(events)
    assert explained == {"2"}
    assert check_lost(events, explained=explained).count == 1
    verdicts = judge(run_all(events), Expectations(lost=LossPolicy.EXPLAINED, allow=("inconsistent-offsets",)))
    assert [v.expectation for v in verdicts if not v.ok] == ["no lost"]


def test_a_write_acknowledged_after_the_election_is_not_explained_by_it() -> None:
    events = PHASES + [UNCLEAN] + send(9, "5", 0, 1) + send(9.5, "6", 0, 2) + final(0, "0", "x", "6")
    _, explained = check_expected_loss(events)
    assert explained == frozenset()


def test_unclean_loss_fails_a_scenario_that_promised_none() -> None:
    verdicts = judge(run_all(UNCLEAN_LOSS), Expectations(allow=("inconsistent-offsets",)))
    failed = [v.expectation for v in verdicts if not v.ok]
    assert failed == ["no loss, not even by unclean election"]


def test_availability_windows_and_fault_windows() -> None:
    events = PHASES[:1] + send(1, "0", 0, 0) + send(6, "1", 0, 1) + [
        {"t": 2.0, "kind": "fault-start", "id": "f1", "description": "kill leader:chaos:0"},
        {"t": 4.0, "kind": "fault-end", "id": "f1"}, {"t": 10.0, "kind": "phase", "name": "catch-up"}] + \
        final(0, "0", "1")
    result = check_availability(events)
    assert result.data["worst_s"] == pytest.approx(4.99, abs=0.01)
    assert result.data["windows"]["0"] == [(0.0, 1.01), (1.01, 6.01), (6.01, 10.0)]
    assert fault_windows(events) == [(2.0, 4.0, "kill leader:chaos:0")]
    assert result.data["per_fault_s"] == {"f1": 4.01}  # the outage that began in f1 ended at t=6.01
    failed = [v.expectation for v in judge(run_all(events), Expectations(max_unavailable_s=3.0)) if not v.ok]
    assert failed == ["every partition writable again within 3 s"]


def test_divergence_is_an_anomaly() -> None:
    events = CLEAN + [{"t": 51.0, "kind": "divergence", "partition": 0, "detail": "replicas differ"},
                      {"t": 51.0, "kind": "note", "what": "replicas-compared"}]
    failed = [v.expectation for v in judge(run_all(events), Expectations()) if not v.ok]
    assert failed == ["no divergence"]


def test_isr_shrink_then_expand() -> None:
    samples = [{"t": float(t), "kind": "sample", "partition": 0, "isr": isr}
               for t, isr in enumerate([[1, 2, 3], [1, 2], [1, 2], [1, 2, 3]])]
    assert all(v.ok for v in judge(run_all(CLEAN + samples), Expectations(isr_shrink_expand=True)))
    failed = [v.expectation for v in judge(run_all(CLEAN + samples[:3]), Expectations(isr_shrink_expand=True))
              if not v.ok]
    assert failed == ["an ISR shrinks, then expands again"]


def created(topic: str, outcome: str, **final: Any) -> list[Event]:
    events: list[Event] = [{"t": 1.0, "kind": "admin-invoke", "topic": topic},
                           {"t": 1.1, "kind": outcome, "topic": topic, "detail": ""}]
    if final:
        events.append({"t": 9.0, "kind": "admin-final", "topic": topic, **final})
    return events


@pytest.mark.parametrize("outcome, final, wrong", [
    ("admin-ok", {"exists": True, "partitions": 1, "whole": 1}, 0),
    ("admin-ok", {"exists": False}, 1),                               # acknowledged, missing
    ("admin-info", {"exists": False}, 0),                             # unknown: absent is fine
    ("admin-info", {"exists": True, "partitions": 1, "whole": 1}, 0),  # unknown: whole is fine
    ("admin-info", {"exists": True, "partitions": 1, "whole": 0}, 1),  # half-made: never fine
    ("admin-fail", {"exists": True, "partitions": 1, "whole": 1}, 1),  # refused, yet there
    ("admin-fail", {}, 0),                                            # never checked
])
def test_topic_creations(outcome: str, final: dict[str, Any], wrong: int) -> None:
    from chaos.checkers.topics import check_topic_creations

    assert check_topic_creations(created("t-0", outcome, **final), partitions=1).count == wrong


def test_a_skipped_fault_fails_the_scenario_with_its_reason() -> None:
    skip = {"t": 3.0, "kind": "skip", "id": "f1", "description": "netem follower:chaos:0",
            "why": "slow links need root (tc netem); skipped"}
    verdicts = judge(run_all(CLEAN + [skip]), Expectations())
    failed = [(v.expectation, v.detail) for v in verdicts if not v.ok]
    assert failed == [("every scheduled fault applied", "0 faults applied, 1 skipped")]
    assert "need root" in run_all(CLEAN + [skip])[-1].examples[0]
