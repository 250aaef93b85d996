"""How the chaos tests run a scenario: `run_forked(scenario, tmp_path)` is `tidelog chaos run`
with its report and cluster under tmp_path, except that the nodes (and the restarts faults ask
for) are forked from the test zygote (cluster_fixtures.spawn_node) instead of each paying a
fresh Python's imports: ~2 s per cluster start instead of ~12 s on a loaded box. A forked node is
a real node process; the faults kill, pause and restart it as a spawned one (chaos.engine.runner).

`assert_nodes_forked` checks that the run really forked every start and restart (so the saving
is not silently lost); the CLI's own spawned nodes are tested by test_interrupt and
test_link_scenarios, which run `tidelog chaos run` itself.

`ending_at_last_heal` drops a scenario's quiet tail (workload after its last fault healed) for a
test whose expectations the final heal already covers: the runner keeps the producer, consumers
and sampler going through the final heal and QUIESCE_S after it, so what the tail would show
(the ISR full again, writes acknowledged again) is still sampled. Not for a scenario with
`max_unavailable_s`: there the tail is how long an outage can be measured (the workload's span).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from chaos.engine.runner import RunOptions, RunOutcome, run_scenario
from chaos.scenarios.spec import Scenario
from tests.integration import cluster_fixtures


def run_forked(scenario: Scenario, tmp_path: Path, *, seed: int = 1) -> RunOutcome:
    """Run `scenario` with `seed`: report in tmp_path/report, nodes' files in tmp_path/cluster."""
    return run_scenario(scenario, RunOptions(report_dir=tmp_path / "report", seed=seed,
                                             cluster_dir=tmp_path / "cluster"),
                        spawn=cluster_fixtures.spawn_node)


def ending_at_last_heal(scenario: Scenario) -> Scenario:
    """`scenario` with its duration cut to the end of its last fault (never lengthened)."""
    if scenario.expect.max_unavailable_s is not None:
        raise ValueError(f"{scenario.name}: its tail bounds the outage it measures (max_unavailable_s)")
    last_heal = max((f.end_s for f in scenario.schedule()), default=0.0)
    return dataclasses.replace(scenario, duration_s=min(scenario.duration_s, last_heal))


def assert_nodes_forked(tmp_path: Path, *, restarts: bool) -> None:
    """Every node start of the run in tmp_path was a fork (ini tidelog_fast_start: else none
    was); with `restarts`, faults restarted at least one node, forked as well."""
    starts = cluster_fixtures.node_starts(tmp_path / "cluster")
    nodes = len(list((tmp_path / "cluster").rglob("node.log")))
    assert nodes > 0 and len(starts) >= nodes, starts
    if restarts:
        assert len(starts) > nodes, f"no node was restarted: {starts}"
    forked = [cluster_fixtures.FORKED_START_MARK in line for line in starts]
    assert forked == [cluster_fixtures.FORK_NODES] * len(starts), starts
