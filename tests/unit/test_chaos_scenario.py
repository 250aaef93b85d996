"""Scenario files: parsing, validation, the schedule, the seeded generator, the shipped files."""

from __future__ import annotations

import pytest

from chaos.cli import shipped
from chaos.scenarios.generator import generate
from chaos.scenarios.spec import (
    Acks,
    FaultAction,
    LossPolicy,
    ScenarioError,
    load_scenario,
    parse_scenario,
)

MINIMAL = """
name = "t"
duration_s = 10
[[topics]]
name = "chaos"
partitions = 2
[[faults]]
action = "kill"
target = "leader:chaos:0"
at_s = 2
every_s = 3
count = 3
duration_s = 1
[[faults]]
action = "partition"
target = "minority"
at_s = 4
duration_s = 5
[expect]
lost = "explained"
max_unavailable_s = 5
"""


def test_a_minimal_scenario_parses_with_defaults() -> None:
    scenario = parse_scenario(MINIMAL)
    assert scenario.cluster.controllers == 3 and scenario.cluster.brokers == 3
    assert scenario.workload.topic == "chaos" and scenario.workload.acks is Acks.ALL
    assert scenario.expect.lost is LossPolicy.EXPLAINED and scenario.expect.max_unavailable_s == 5


def test_the_schedule_expands_every_and_orders_by_start() -> None:
    schedule = parse_scenario(MINIMAL).schedule()
    assert [(f.id, f.start_s, f.end_s, f.fault.action) for f in schedule] == [
        ("f1", 2.0, 3.0, FaultAction.KILL), ("f2", 4.0, 9.0, FaultAction.PARTITION),
        ("f3", 5.0, 6.0, FaultAction.KILL), ("f4", 8.0, 9.0, FaultAction.KILL)]


@pytest.mark.parametrize("change, message", [
    (("action = \"kill\"", "action = \"explode\""), "faults[0].action"),
    (("target = \"minority\"", "target = \"everyone\""), "unknown target"),
    (("at_s = 2", "at_s = -1"), "at_s and duration_s"),
    (("every_s = 3\n", ""), "count > 1 needs every_s"),
    (("lost = \"explained\"", "lost = \"some\""), "expect.lost"),
    (("max_unavailable_s = 5", "max_unavailable = 5"), "expect: unknown keys"),
    (("duration_s = 10", "duration_s = \"ten\""), ".duration_s"),
    (("max_unavailable_s = 5", "max_unavailable_s = 5\n[workload]\ntopic = \"other\""), "workload.topic"),
    (("[expect]", "[expect"), "not valid TOML"),
])
def test_bad_scenarios_are_refused_naming_the_field(change: tuple[str, str], message: str) -> None:
    with pytest.raises(ScenarioError, match=message.replace("[", r"\[").replace(".", r"\.")):
        parse_scenario(MINIMAL.replace(*change, 1))


def test_group_consumers_default_to_none_and_parse() -> None:
    assert parse_scenario(MINIMAL).workload.group_consumers == 0
    scenario = parse_scenario(MINIMAL.replace('target = "minority"', 'target = "coordinator:chaos-group"') +
                              "\n[workload]\ngroup_consumers = 3\ngroup_bounce_every_s = 7\n")
    assert scenario.workload.group_consumers == 3 and scenario.workload.group_bounce_every_s == 7
    assert scenario.faults[1].target == "coordinator:chaos-group"


@pytest.mark.parametrize("line", ['group_consumers = "two"', "group_consumers = -1", "group_consumers = true",
                                  "group_bounce_every_s = 0", 'group_bounce_every_s = "often"'])
def test_bad_group_options_are_refused(line: str) -> None:
    with pytest.raises(ScenarioError, match=r"workload\." + line.split()[0]):
        parse_scenario(MINIMAL + f"\n[workload]\n{line}\n")


def test_acks_1_needs_idempotence_off() -> None:
    with pytest.raises(ScenarioError, match="idempotence"):
        parse_scenario(MINIMAL + "\n[workload]\nacks = \"1\"\n")


GENERATED = MINIMAL.split("[[faults]]")[0] + """
[generator]
seed = 3
faults = 5
actions = ["kill", "pause", "partition", "netem", "disk"]
"""


def test_the_same_seed_replays_the_same_schedule() -> None:
    scenario = parse_scenario(GENERATED)
    one, again, other = generate(scenario, 7), generate(scenario, 7), generate(scenario, 8)
    assert one.faults == again.faults and len(one.faults) == 5
    assert one.faults != other.faults
    assert generate(scenario).generator.seed == 3  # type: ignore[union-attr]
    starts = [f.at_s for f in one.faults]
    ends = [f.at_s + f.duration_s for f in one.faults]
    assert all(e < s for e, s in zip(ends, starts[1:])), "generated faults never overlap"
    assert one.duration_s >= ends[-1]


@pytest.mark.parametrize("name", sorted(shipped()))
def test_every_shipped_scenario_parses_and_says_what_it_proves(name: str) -> None:
    scenario = load_scenario(shipped()[name])
    assert scenario.name == name and len(scenario.summary) > 40
    assert scenario.faults or scenario.generator is not None
    generate(scenario, 1).schedule()
