"""Power-loss scenarios `make test` runs (about 45 s each) meet their expectations on a real
cluster whose controllers' metadata logs (and, for a broker scenario, brokers' log dirs) sit
on the power-loss layer (chaos.power), over two seeds where the seed picks the victim; and the
must-fail demonstration: with `controller.quorum.fsync=false` a power loss of a majority of the
controllers (the third paused until they are back, so it cannot lead them) loses what they had
acknowledged and the votes they had cast, and the checkers say so.

Every run must leave no FUSE mount behind. The rest (a majority of the controllers, the active
one among them, a majority of a partition's replicas, and all of them) run under `make chaos`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.cli import find_scenario
from chaos.power import fuse_missing
from tests.chaos.scenario_runs import assert_nodes_forked, ending_at_last_heal, run_forked

pytest.importorskip("confluent_kafka")
pytest.importorskip("matplotlib")
MISSING = fuse_missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")

# ~45 s each: make test keeps the active controller's power loss and the must-fail run below;
# make test-long (marked long) the other quorum cases, make chaos the rest (power-controllers-all,
# power-leader-minority, the majority and broker cases)
IN_MAKE_TEST = [("power-active-controller", 1)]
LONG = [("power-controller", 1), ("power-active-controller", 2), ("power-controller-majority-survivor-paused", 1)]
SCENARIOS = [*(pytest.param(n, s, id=f"{n}-seed{s}") for n, s in IN_MAKE_TEST),
             *(pytest.param(n, s, id=f"{n}-seed{s}", marks=pytest.mark.long) for n, s in LONG)]
FSYNC_OFF = ("controller.quorum.fsync", "false")
MUST_FAIL_SETTLE_S = 30.0  # a heal that cannot complete (the quorum forgot a topic) is not waited for 60 s


def power_mounts() -> list[str]:
    with open("/proc/mounts", encoding="utf-8") as mounts:
        return [line for line in mounts if "tidelog-powerloss" in line]


@pytest.fixture(autouse=True)
def no_mount_left() -> Iterator[None]:
    before = power_mounts()
    yield
    assert power_mounts() == before, "the run left a power-loss mount behind"


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("name", "seed"), SCENARIOS)
def test_power_scenario_meets_its_expectations(name: str, seed: int, tmp_path: Path) -> None:
    outcome = run_forked(find_scenario(name), tmp_path, seed=seed)
    failed = [f"{v.expectation}: {v.detail}" for v in outcome.verdicts if not v.ok]
    assert failed == [], f"{name}: see {outcome.report_dir / 'report.html'}"
    results = {r.name: r for r in outcome.results}
    assert results["faults"].summary.startswith(("1 faults applied", "2 faults applied"))
    # the layer was really under the nodes: the cluster's files are back where they were
    assert any((tmp_path / "cluster").glob("controller-*/__cluster_metadata-0/quorum.journal*"))
    assert_nodes_forked(tmp_path, restarts=True)  # forked nodes ran on the layer and came back on it


@pytest.mark.timeout(300)
def test_without_fsync_a_majority_power_loss_is_caught(tmp_path: Path) -> None:
    """The fault can bite: what controller.quorum.fsync=true keeps, false loses, and the checkers see it."""
    # ended when controller 3 wakes (its last fault's heal): the loss happened at the power cut, and
    # the final heal, its quiet seconds and the harvest of every node's log still follow
    scenario = ending_at_last_heal(find_scenario("power-controller-majority-survivor-paused"))
    cluster = dataclasses.replace(scenario.cluster, properties=(*scenario.cluster.properties, FSYNC_OFF))
    scenario = dataclasses.replace(scenario, name=f"{scenario.name}-fsync-off", cluster=cluster,
                                   settle_s=MUST_FAIL_SETTLE_S)
    outcome = run_forked(scenario, tmp_path)
    assert not outcome.passed
    results = {r.name: r for r in outcome.results}
    # the two voters forgot their log, term and vote: they begin epoch 1 again (unless their first
    # election splits) and the brokers hold topics the quorum's log no longer has
    caught = results["two-active-controllers"].count + results["metadata-lost"].count
    assert caught >= 1, f"{results['two-active-controllers'].summary}; {results['metadata-lost'].summary}"
