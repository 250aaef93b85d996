"""The scenario format's link faults: `delay`, `bandwidth`, `loss`, `slow-close` parsed with
their params, a bad param refused naming the fault and the param, and the generator drawing
valid ones."""

from __future__ import annotations

import pytest

from chaos.scenarios.generator import generate
from chaos.scenarios.spec import FaultAction, ScenarioError, parse_scenario

HEAD = 'name = "t"\n[[faults]]\ntarget = "follower:chaos:0"\npeer = "leader:chaos:0"\nat_s = 1\nduration_s = 5\n'


@pytest.mark.parametrize("action, params, expected", [
    ("delay", "{ delay_ms = 200, jitter_ms = 20 }", FaultAction.DELAY),
    ("bandwidth", "{ rate_kbit = 8000 }", FaultAction.BANDWIDTH),
    ("loss", "{ loss_pct = 30 }", FaultAction.LOSS),
    ("slow-close", "{ delay_ms = 1000 }", FaultAction.SLOW_CLOSE),
])
def test_link_faults_parse(action: str, params: str, expected: FaultAction) -> None:
    fault = parse_scenario(HEAD + f'action = "{action}"\nparams = {params}\n').faults[0]
    assert fault.action is expected and fault.peer == "leader:chaos:0"


@pytest.mark.parametrize("action, params, named", [
    ("delay", "{}", "faults[0].params.delay_ms: required"),
    ("delay", "{ delay_ms = 10, jitter_ms = 11 }", "faults[0].params.jitter_ms: at most delay_ms"),
    ("bandwidth", "{ rate_kbit = 0 }", "faults[0].params.rate_kbit: expected 8.."),
    ("loss", "{ loss_pct = 120 }", "faults[0].params.loss_pct: expected 0..100"),
    ("slow-close", "{ delay_ms = \"1s\" }", "faults[0].params.delay_ms: expected a number"),
])
def test_bad_link_params_are_refused_naming_them(action: str, params: str, named: str) -> None:
    with pytest.raises(ScenarioError, match=named.replace("[", r"\[").replace("]", r"\]")):
        parse_scenario(HEAD + f'action = "{action}"\nparams = {params}\n')


def test_the_generator_draws_link_faults_that_parse() -> None:
    text = '[generator]\nseed = 3\nfaults = 12\nactions = ["delay", "bandwidth", "loss", "slow-close"]\n'
    scenario = generate(parse_scenario(text))
    assert {f.action for f in scenario.faults} == {FaultAction.DELAY, FaultAction.BANDWIDTH, FaultAction.LOSS,
                                                    FaultAction.SLOW_CLOSE}
    rendered = "\n".join(f'[[faults]]\naction = "{f.action.value}"\ntarget = "{f.target}"\nparams = {{ '
                         + ", ".join(f"{k} = {v}" for k, v in f.params) + " }" for f in scenario.faults)
    assert len(parse_scenario(rendered).faults) == 12  # every drawn param within its bounds
