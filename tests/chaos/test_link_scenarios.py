"""The link-fault scenarios `make test` runs (about a minute each) meet their expectations on a
real cluster with real clients, where the kernel has no netem, and leave no chain, qdisc or
proxy behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.cli import find_scenario
from chaos.engine.runner import RunOptions, run_scenario
from chaos.links import install
from chaos.nemeses import firewall

pytest.importorskip("confluent_kafka")
pytest.importorskip("matplotlib")
pytestmark = pytest.mark.skipif(install.missing() is not None, reason=str(install.missing()))

IN_MAKE_TEST = ("slow-follower", "lossy-follower-link", "slow-controller-link", "saturated-reassignment")


@pytest.fixture(autouse=True)
def no_leftovers() -> Iterator[None]:
    yield
    found = install.leftovers() + firewall.leftovers()
    install.clean()
    firewall.clean()  # whatever happened, nothing stays slow or cut
    assert found == [], f"the run left {found} behind"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", IN_MAKE_TEST)
def test_link_scenario_meets_its_expectations(name: str, tmp_path: Path) -> None:
    scenario = find_scenario(name)
    outcome = run_scenario(scenario, RunOptions(report_dir=tmp_path / "report", seed=1,
                                                cluster_dir=tmp_path / "cluster"))
    failed = [f"{v.expectation}: {v.detail}" for v in outcome.verdicts if not v.ok]
    assert failed == [], f"{name}: see {outcome.report_dir / 'report.html'}"  # incl. no fault skipped
