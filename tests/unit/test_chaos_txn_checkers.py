"""The transactional checkers (Jepsen's Bufstream anomalies) over hand-written histories: a clean
history passes every one; each anomaly planted alone is found by its checker and by no other."""

from __future__ import annotations

from typing import Any

import pytest

from chaos.checkers.suite import judge, run_all
from chaos.checkers.transactions import NAMES, check_transactions
from chaos.scenarios.spec import Expectations

Event = dict[str, Any]
RC, RU = "read_committed", "read_uncommitted"


def txn(t: float, name: str, writes: list[tuple[str, int, int, str]], outcome: str = "ok",
        consumed: list[tuple[str, int, int, str]] = (), process: str = "p0") -> list[Event]:  # type: ignore[assignment]
    """A transaction of `process` at t..t+1: its writes (topic, partition, offset, value) acknowledged,
    commit called at t+0.5 (unless it aborts), then its outcome."""
    events: list[Event] = [{"t": t, "kind": "txn-invoke", "process": process, "txn": name,
                            "writes": [{"topic": w[0], "partition": w[1], "value": w[3]} for w in writes],
                            "consumed": [{"topic": c[0], "partition": c[1], "offset": c[2], "value": c[3]}
                                         for c in consumed]}]
    events += [{"t": t + 0.1, "kind": "txn-write", "process": process, "txn": name, "topic": w[0],
                "partition": w[1], "offset": w[2], "value": w[3]} for w in writes]
    if outcome != "fail":
        events.append({"t": t + 0.5, "kind": "txn-commit-invoke", "process": process, "txn": name})
    events.append({"t": t + 1, "kind": f"txn-{outcome}", "process": process, "txn": name})
    return events


def read(t: float, reader: str, topic: str, partition: int, offset: int, value: str, isolation: str = RC,
         final: bool = False) -> Event:
    return {"t": t, "kind": "txn-read", "reader": reader, "isolation": isolation, "topic": topic,
            "partition": partition, "offset": offset, "value": value, "final": final}


FINAL_OK: Event = {"t": 90.0, "kind": "note", "what": "txn-final-read", "isolation": RC, "ok": True}
PROBE_CLEAN: Event = {"t": 95.0, "kind": "txn-probe", "ongoing": [], "waited_s": 1.0, "bound_s": 20.0,
                      "error": None}
CONFIG: Event = {"t": 0.0, "kind": "note", "what": "txn-config", "transaction_timeout_ms": 5000}

# T1 commits a:0@0, b:0@0; T2 aborts a:0@2 (the marker of T1 at a:0@1); T3, a transform, reads a:0@0
# into out:0@0 and commits; the final read_committed reader sees every committed value once
T1 = txn(1, "p0-1", [("a", 0, 0, "1"), ("b", 0, 0, "2")])
T2 = txn(3, "p0-2", [("a", 0, 2, "3")], outcome="fail")
T3 = txn(5, "t0-1", [("out", 0, 0, "1")], consumed=[("a", 0, 0, "1")], process="t0")
CLEAN_READS = [read(2.0, "rc0", "a", 0, 0, "1"), read(2.1, "rc0", "b", 0, 0, "2"),
               read(3.2, "ru0", "a", 0, 2, "3", RU), read(7.0, "rc0", "out", 0, 0, "1"),
               read(80, "final", "a", 0, 0, "1", final=True), read(80, "final", "b", 0, 0, "2", final=True),
               read(80, "final", "out", 0, 0, "1", final=True)]
CLEAN = [CONFIG, *T1, *T2, *T3, *CLEAN_READS, FINAL_OK, PROBE_CLEAN]


def ordered(events: list[Event]) -> list[Event]:
    return sorted(events, key=lambda e: e["t"])


def counts(events: list[Event]) -> dict[str, int]:
    return {r.name: r.count for r in check_transactions(ordered(events))}


def test_a_clean_history_passes_every_checker() -> None:
    found = counts(CLEAN)
    assert {n: found[n] for n in NAMES} == dict.fromkeys(NAMES, 0)
    assert next(r for r in check_transactions(CLEAN) if r.name == "txn-workload").data["committed"] == 2


def test_a_history_without_transactions_gets_no_transactional_result() -> None:
    assert counts([{"t": 1.0, "kind": "invoke", "value": "0", "partition": 0}]) == {}


LATE_ZOMBIE = txn(10, "p0-9", [("a", 1, 0, "9")])  # invoked at 10, committed at 11
PAUSE = [{"t": 10.2, "kind": "fault-start", "id": "f1", "action": "pause", "client": "p0", "targets": []},
         {"t": 10.9, "kind": "fault-end", "id": "f1", "action": "pause"}]
LONG_PAUSE = [{**PAUSE[0], "t": 10.2}, {**PAUSE[1], "t": 10.95}]


@pytest.mark.parametrize("name, extra, drop", [
    # a read_committed reader sees T2's aborted value
    ("txn-aborted-read", [read(4.0, "rc0", "a", 0, 2, "3")], []),
    # a reader sees T1's a-write, reads past b:0@0 (b:0@1 from T4) without seeing T1's b-write
    ("txn-torn", [*txn(20, "p0-4", [("b", 0, 1, "4")]), read(21.5, "rc1", "a", 0, 0, "1"),
                  read(21.6, "rc1", "b", 0, 1, "4"), read(80, "final", "b", 0, 1, "4", final=True)], []),
    # at the end only one of T5's two writes is visible: the other was refused (no offset), as when a late
    # EndTxn from the previous transaction committed T5 before its second write arrived
    ("txn-torn", [*[e for e in txn(30, "p0-5", [("a", 1, 0, "5"), ("b", 1, 0, "6")], outcome="info")
                    if not (e["kind"] == "txn-write" and e["value"] == "6")],
                  read(80, "final", "a", 1, 0, "5", final=True)], []),
    # T1's b-write never read under read_committed although the final read completed
    ("txn-lost", [], [read(2.1, "rc0", "b", 0, 0, "2"), read(80, "final", "b", 0, 0, "2", final=True)]),
    # the transform's output appears twice in out (at 0 and again at 3)
    ("txn-duplicates", [read(8.0, "rc0", "out", 0, 3, "1")], []),
    # T1's value read at t=1.2, before its commit was called at t=1.5
    ("txn-beyond-lso", [read(1.2, "rc1", "a", 0, 0, "1")], []),
    # hanging: the probe after the wait still lists an open transaction
    ("txn-hanging", [{**PROBE_CLEAN, "t": 96.0, "ongoing": [
        {"topic": "a", "partition": 1, "producer_id": 7, "producer_epoch": 0, "txn_start_offset": 4}]}], []),
])
def test_each_anomaly_is_found_by_its_checker_alone(name: str, extra: list[Event], drop: list[Event]) -> None:
    history = [e for e in CLEAN if e not in drop] + extra
    found = counts(history)
    assert found[name] >= 1
    assert {n: c for n, c in found.items() if n != name and n in NAMES} == dict.fromkeys(set(NAMES) - {name}, 0)


def test_a_commit_across_a_pause_longer_than_the_timeout_is_a_zombie_commit() -> None:
    config = {**CONFIG, "transaction_timeout_ms": 500}
    base = [e for e in CLEAN if e is not CONFIG] + LATE_ZOMBIE + [read(12, "final", "a", 1, 0, "9", final=True)]
    assert counts([config, *base, *PAUSE])["txn-zombie-commit"] == 1   # paused 0.7 s > 0.5 s, committed
    assert counts([config, *base, *[{**PAUSE[0]}, {**PAUSE[1], "t": 10.6}]])["txn-zombie-commit"] == 0  # 0.4 s
    aborted = [e for e in base if e.get("txn") != "p0-9"] + txn(10, "p0-9", [("a", 1, 0, "9")], outcome="info")
    assert counts([config, *aborted, *PAUSE])["txn-zombie-commit"] == 0  # fenced: not committed


def test_an_unfinished_final_read_or_a_missing_probe_fails_rather_than_passes() -> None:
    assert counts([{**e, "ok": False} if e is FINAL_OK else e for e in CLEAN])["txn-lost"] == 1
    assert counts([e for e in CLEAN if e is not PROBE_CLEAN])["txn-hanging"] == 1


def test_read_uncommitted_readers_may_see_open_and_aborted_data() -> None:
    early = [read(1.2, "ru0", "a", 0, 0, "1", RU), read(3.3, "ru1", "a", 0, 2, "3", RU),
             read(3.4, "ru1", "b", 0, 5, "x", RU)]
    assert {n: c for n, c in counts(CLEAN + early).items() if n in NAMES} == dict.fromkeys(NAMES, 0)


def test_judge_fails_a_run_with_an_anomaly_and_one_that_committed_nothing() -> None:
    plain = [{"t": 0.5, "kind": "invoke", "value": "0", "partition": 0},
             {"t": 0.6, "kind": "ok", "value": "0", "partition": 0, "offset": 0},
             {"t": 80.0, "kind": "final-read", "partition": 0, "offset": 0, "value": "0"}]
    ok = judge(run_all(ordered(plain + CLEAN)), Expectations())
    assert [v.expectation for v in ok if not v.ok] == []
    bad = judge(run_all(ordered(plain + CLEAN + [read(4.0, "rc0", "a", 0, 2, "3")])), Expectations())
    assert [v.expectation for v in bad if not v.ok] == ["no txn-aborted-read"]
    aborted_only = [e for e in CLEAN if e.get("kind") not in ("txn-ok",)]
    none = judge(run_all(ordered(plain + aborted_only)), Expectations())
    assert "at least 1 transactions committed" in [v.expectation for v in none if not v.ok]


def test_held_requests_are_reported_with_their_late_answer() -> None:
    held = [{"t": 10.5, "kind": "note", "what": "hold-start", "api_key": 26, "version": 1, "broker": "x"},
            {"t": 15.9, "kind": "note", "what": "hold-released", "api_key": 26, "version": 1, "error_code": 0,
             "why": ""},
            {"t": 23.4, "kind": "note", "what": "hold-start", "api_key": 0, "version": 10, "broker": "x"},
            {"t": 29.4, "kind": "note", "what": "hold-released", "api_key": 0, "version": 10, "error_code": 48,
             "why": ""}]
    result = next(r for r in check_transactions(ordered(CLEAN + held)) if r.name == "txn-held-requests")
    assert result.count == 0 and result.data == {"held": 2, "released": 2}
    assert result.examples == ("EndTxn v1 held at t=10.50 s, delivered at t=15.90 s: NONE",
                               "Produce v10 held at t=23.40 s, delivered at t=29.40 s: INVALID_TXN_STATE")


def test_a_stuck_client_is_named_in_the_workload_result() -> None:
    stuck = [{"t": 40.0, "kind": "note", "what": "txn-client-stuck", "process": "tp0", "txn": "tp0-0-7",
              "call": "send_offsets_to_transaction", "after_s": 20.0},
             {"t": 70.0, "kind": "note", "what": "txn-client-killed", "client": "tp0", "why": "did not stop"}]
    result = next(r for r in check_transactions(ordered(CLEAN + stuck)) if r.name == "txn-workload")
    assert result.data["stuck_clients"] == 1 and result.count == 0  # measured, not judged
    assert result.examples[0] == "client tp0 stuck 20 s in send_offsets_to_transaction() of tp0-0-7 (t=40.00 s)"


def test_a_transaction_a_coordinator_still_holds_open_is_hanging_too() -> None:
    probe = {**PROBE_CLEAN, "t": 96.0, "ongoing": [
        {"coordinator": 5, "transactional_id": "chaos-txn-tp0", "producer_id": 7, "state": "PrepareCommit"}]}
    result = next(r for r in check_transactions(ordered(CLEAN + [probe])) if r.name == "txn-hanging")
    assert result.count == 1
    assert result.examples == ("coordinator 5: chaos-txn-tp0 (producer 7) still PrepareCommit",)
