"""The chaos action `request-fault` (chaos.nemeses.requests): its params are checked by the broker's
own rules when the scenario file is read, and the shipped request-faults scenario parses."""

from __future__ import annotations

import pytest

from chaos.cli import find_scenario
from chaos.scenarios.spec import FaultAction, ScenarioError, parse_scenario

SCENARIO = """
name = "t"
summary = "t"
duration_s = 5
[cluster]
controllers = 1
combined = true
[[topics]]
name = "chaos"
[workload]
topic = "chaos"
[[faults]]
action = "request-fault"
target = "brokers"
at_s = 1
duration_s = 1
params = {params}
"""


def test_a_request_fault_carries_its_params() -> None:
    scenario = parse_scenario(SCENARIO.replace("{params}", '{ kind = "error", api = "Produce", '
                                                          'error = "NOT_LEADER_OR_FOLLOWER", times = 2 }'))
    fault = scenario.faults[0]
    assert fault.action is FaultAction.REQUEST_FAULT
    assert dict(fault.params) == {"kind": "error", "api": "Produce", "error": "NOT_LEADER_OR_FOLLOWER", "times": 2}


@pytest.mark.parametrize(("params", "field"), [
    ('{ kind = "error", api = "Produsce", error = "NOT_LEADER_OR_FOLLOWER" }', "api:"),
    ('{ kind = "error", api = "Produce", error = "NOPE" }', "error:"),
    ('{ kind = "delay", api = "Fetch" }', "ms:"),
    ('{ kind = "drop_after", api = "Produce", times = 0 }', "times:"),
    ('{ kind = "melt", api = "Produce" }', "kind:"),
])
def test_bad_params_are_refused_when_the_file_is_read(params: str, field: str) -> None:
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(SCENARIO.replace("{params}", params))
    assert f"params.{field}" in str(refused.value)


def test_the_shipped_scenario_parses() -> None:
    scenario = find_scenario("request-faults")
    assert [f.action for f in scenario.faults] == [FaultAction.REQUEST_FAULT] * 3
