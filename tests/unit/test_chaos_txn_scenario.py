"""Scenario files with a transactional workload: the txn_* fields, their validation, the hold
action and the client / txn-coordinator selectors; every shipped txn-* scenario names them."""

from __future__ import annotations

import pytest

from chaos.cli import shipped
from chaos.scenarios.spec import FaultAction, ScenarioError, load_scenario, parse_scenario

BASE = """
name = "t"
[[topics]]
name = "a"
[[topics]]
name = "out"
[workload]
topic = "a"
txn_topics = ["a"]
txn_output = "out"
txn_producers = 2
txn_timeout_ms = 4000
txn_held = ["tp0"]
[[faults]]
action = "hold"
target = "client:tp0"
at_s = 3
duration_s = 5
params = { api = "end_txn" }
[[faults]]
action = "kill"
target = "txn-coordinator:chaos-txn-tp0"
at_s = 4
duration_s = 2
"""


def test_the_transactional_fields_parse() -> None:
    scenario = parse_scenario(BASE)
    w = scenario.workload
    assert (w.txn_topics, w.txn_output, w.txn_producers, w.txn_timeout_ms, w.txn_held) == (
        ("a",), "out", 2, 4000, ("tp0",))
    assert [f.action for f in scenario.faults] == [FaultAction.HOLD, FaultAction.KILL]
    assert scenario.faults[0].param("api") == "end_txn"


def test_a_workload_without_transactions_keeps_them_off() -> None:
    assert parse_scenario('[workload]\ntopic = "chaos"\n').workload.txn_topics == ()


@pytest.mark.parametrize("change, message", [
    (('txn_topics = ["a"]', 'txn_topics = ["nope"]'), "transactional topic 'nope'"),
    (('txn_output = "out"', 'txn_output = "gone"'), "transactional topic 'gone'"),
    (('txn_topics = ["a"]', 'txn_topics = []'), "a transform needs txn_topics"),
    (("txn_timeout_ms = 4000", "txn_timeout_ms = 0"), "must be positive"),
    (('target = "client:tp0"', 'target = "clients:tp0"'), "unknown target"),
])
def test_bad_transactional_fields_are_refused_naming_the_field(change: tuple[str, str], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(BASE.replace(*change))


TXN_SCENARIOS = sorted(n for n in shipped() if n.startswith("txn-"))


def test_the_transactional_scenarios_ship() -> None:
    assert TXN_SCENARIOS == ["txn-coordinator-isolation", "txn-coordinator-kill", "txn-late-end-txn",
                             "txn-late-produce", "txn-leader-kill-markers", "txn-producer-pause", "txn-sasl-ssl"]


@pytest.mark.parametrize("name", TXN_SCENARIOS)
def test_each_transactional_scenario_runs_transactions_and_a_transform(name: str) -> None:
    scenario = load_scenario(shipped()[name])
    assert scenario.workload.txn_topics and scenario.workload.txn_output
    assert scenario.faults and all(f.at_s + f.duration_s <= scenario.duration_s for f in scenario.faults)
