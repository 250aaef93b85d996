"""The shipped scenarios `make test` runs (a few minutes in all) meet their expectations on a
real cluster with real clients, and the harness leaves no iptables rule or qdisc behind.

The rest (slow follower, controller kills, disk faults, leader isolation with acks=1, the
randomized mix over many seeds) run under `make chaos`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.cli import find_scenario
from chaos.engine.runner import RunOptions, run_scenario
from chaos.nemeses.firewall import clean, leftovers

pytest.importorskip("confluent_kafka")
pytest.importorskip("matplotlib")

IN_MAKE_TEST = ("leader-kill-loop", "follower-pause", "quorum-partition", "leader-isolation",
                "isr-down-unclean-off", "isr-down-unclean-on", "isr-down-elr")


@pytest.fixture(autouse=True)
def no_leftovers() -> Iterator[None]:
    yield
    found = leftovers()
    clean()  # whatever happened, nothing stays cut
    assert found == [], f"the run left {found} behind"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", IN_MAKE_TEST)
def test_shipped_scenario_meets_its_expectations(name: str, tmp_path: Path) -> None:
    scenario = find_scenario(name)
    outcome = run_scenario(scenario, RunOptions(report_dir=tmp_path / "report", seed=1,
                                                cluster_dir=tmp_path / "cluster"))
    failed = [f"{v.expectation}: {v.detail}" for v in outcome.verdicts if not v.ok]
    assert failed == [], f"{name}: see {outcome.report_dir / 'report.html'}"
    assert (outcome.report_dir / "report.html").stat().st_size > 10_000
