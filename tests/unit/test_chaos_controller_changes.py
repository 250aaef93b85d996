"""The controller-change checker (issue 28's pause-bursts scenario): harvested epochs, verdicts."""

from __future__ import annotations

from chaos.checkers.suite import check_controller_changes, judge, run_all
from chaos.engine.harvest import parse_controller_log
from chaos.history import Event
from chaos.scenarios.spec import Expectations, parse_scenario
from chaos.cli import find_scenario


def test_became_active_lines_are_harvested_with_their_epoch() -> None:
    lines = ["2026-11-29 05:33:59,289 INFO [controller-2] quorum.active_controller: Became active controller "
             "with epoch 3 (BeginEpoch committed at offset 0)",
             "2026-11-29 05:33:59,300 INFO [controller-2] quorum.metadata_log: Pre-vote for term 4 won"]
    found = parse_controller_log(lines)
    assert [(e["kind"], e["epoch"]) for e in found] == [("controller-epoch", 3)]


def history(*epochs_at: tuple[float, int]) -> list[Event]:
    return [{"kind": "controller-epoch", "t": -0.5, "epoch": 1}, {"kind": "phase", "t": 0.0, "name": "workload"},
            *({"kind": "controller-epoch", "t": t, "epoch": e} for t, e in epochs_at)]


def test_only_changes_after_the_workload_began_count() -> None:
    assert check_controller_changes(history()).data["changes"] == 0
    changed = check_controller_changes(history((4.2, 2), (9.0, 3)))
    assert changed.data["changes"] == 2 and "epoch 3" in "".join(changed.examples)


def test_a_stable_controller_expectation_fails_on_a_change_and_on_a_fencing() -> None:
    expect = Expectations(stable_controller=True)

    def verdict(events: list[Event], name: str) -> bool:
        return next(v.ok for v in judge(run_all(events), expect) if v.expectation == name)

    assert verdict(history(), "the active controller never changes")
    assert not verdict(history((4.2, 2)), "the active controller never changes")
    fenced = [*history(), {"kind": "fencing", "t": 3.0, "broker": 4, "reason": "no heartbeat", "cause": "session",
                           "age_ms": 3100, "session_ms": 3000}]
    assert verdict(history(), "no broker fenced") and not verdict(fenced, "no broker fenced")


def test_the_shipped_scenario_expects_a_stable_controller() -> None:
    scenario = find_scenario("controller-pause-bursts")
    assert scenario.expect.stable_controller
    assert len(scenario.schedule()) == 5
    assert not parse_scenario("name = 'x'\nsummary = 'y'\nduration_s = 1\n").expect.stable_controller
