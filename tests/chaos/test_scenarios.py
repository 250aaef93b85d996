"""The shipped scenarios `make test` and `make test-long` run meet their expectations on a
real cluster with real clients, and the harness leaves no iptables rule or qdisc behind.

The rest (slow follower, controller kills, disk faults, leader isolation with acks=1, the
randomized mix over many seeds) run under `make chaos`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.cli import find_scenario
from chaos.nemeses.firewall import clean, leftovers
from tests.chaos.scenario_runs import assert_nodes_forked, ending_at_last_heal, run_forked

pytest.importorskip("confluent_kafka")
pytest.importorskip("matplotlib")

# ~1 min each: make test keeps the leader kill loop and the ELR election; make test-long (marked
# long) the rest, which make test ran until it passed its 30-minute budget
IN_MAKE_TEST = ("leader-kill-loop", "isr-down-elr")
LONG = ("follower-pause", "quorum-partition", "leader-isolation", "isr-down-unclean-off", "isr-down-unclean-on")
SCENARIOS = [*IN_MAKE_TEST, *(pytest.param(name, marks=pytest.mark.long) for name in LONG)]
RESTARTING = ("leader-kill-loop", "isr-down-elr", "isr-down-unclean-off", "isr-down-unclean-on")  # they kill nodes


@pytest.fixture(autouse=True)
def no_leftovers() -> Iterator[None]:
    yield
    found = leftovers()
    clean()  # whatever happened, nothing stays cut
    assert found == [], f"the run left {found} behind"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", SCENARIOS)
def test_shipped_scenario_meets_its_expectations(name: str, tmp_path: Path) -> None:
    scenario = find_scenario(name)
    outcome = run_forked(scenario, tmp_path)
    failed = [f"{v.expectation}: {v.detail}" for v in outcome.verdicts if not v.ok]
    assert failed == [], f"{name}: see {outcome.report_dir / 'report.html'}"
    assert (outcome.report_dir / "report.html").stat().st_size > 10_000
    assert_nodes_forked(tmp_path, restarts=name in RESTARTING)  # the faults' restarts forked too


def test_ending_at_last_heal_cuts_only_the_quiet_tail() -> None:
    slow = ending_at_last_heal(find_scenario("slow-follower"))
    assert slow.duration_s == max(f.end_s for f in slow.schedule()) == 18  # delay 3 s + 15 s, of 30
    assert slow.schedule() == find_scenario("slow-follower").schedule()  # every fault as shipped
    with pytest.raises(ValueError, match="max_unavailable_s"):  # its tail measures the outage
        ending_at_last_heal(find_scenario("leader-kill-loop"))
