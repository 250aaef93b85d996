"""How the chaos tests run a scenario: `run_forked(scenario, tmp_path)` is `tidelog chaos run`
with its report and cluster under tmp_path, except that the nodes (and the restarts faults ask
for) are forked from the test zygote (cluster_fixtures.spawn_node) instead of each paying a
fresh Python's imports: ~2 s per cluster start instead of ~12 s on a loaded box. A forked node is
a real node process; the faults kill, pause and restart it as a spawned one (chaos.engine.runner).

`assert_nodes_forked` checks that the run really forked every start and restart (so the saving
is not silently lost); the CLI's own spawned nodes are tested by test_interrupt and
test_link_scenarios, which run `tidelog chaos run` itself.
"""

from __future__ import annotations

from pathlib import Path

from chaos.engine.runner import RunOptions, RunOutcome, run_scenario
from chaos.scenarios.spec import Scenario
from tests.integration import cluster_fixtures


def run_forked(scenario: Scenario, tmp_path: Path, *, seed: int = 1) -> RunOutcome:
    """Run `scenario` with `seed`: report in tmp_path/report, nodes' files in tmp_path/cluster."""
    return run_scenario(scenario, RunOptions(report_dir=tmp_path / "report", seed=seed,
                                             cluster_dir=tmp_path / "cluster"),
                        spawn=cluster_fixtures.spawn_node)


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
