"""Kafka 4's groups under faults, on a real cluster with real confluent-kafka members in processes
of their own (chaos.engine.member_client): a KIP-848 consumer group whose coordinator and one
member are SIGKILLed; a share group whose share coordinator and one member are SIGKILLed; a
share member paused past its acquisition lock. Each run must meet its expectations (the
checkers of chaos.checkers.consumer_protocol and chaos.checkers.share among them) and must have
exercised what it is about: revocations and polls on the consumer side, redeliveries after the
lock and archived poison messages on the share side.

Each takes about a minute (a cluster start, 20-24 s of workload, heal, catch-up, report), over
the default suite's budget: all are `long` (make test-long); `make chaos` runs them too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.cli import find_scenario
from chaos.nemeses.firewall import clean, leftovers
from tests.chaos.scenario_runs import run_forked

pytest.importorskip("confluent_kafka")
pytest.importorskip("matplotlib")

SCENARIOS = ("consumer-group-coordinator-kill", "share-coordinator-kill", "share-member-pause")


@pytest.fixture(autouse=True)
def no_leftovers() -> Iterator[None]:
    yield
    found = leftovers()
    clean()  # whatever happened, nothing stays cut or redirected
    assert found == [], f"the run left {found} behind"


@pytest.mark.long
@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", SCENARIOS)
def test_group_scenario_meets_its_expectations(name: str, tmp_path: Path) -> None:
    outcome = run_forked(find_scenario(name), tmp_path)
    results = {r.name: r for r in outcome.results}
    failed = [f"{v.expectation}: {v.detail}" for v in outcome.verdicts if not v.ok]
    assert failed == [], f"{name}: see {outcome.report_dir / 'report.html'}"
    if name.startswith("consumer-group"):
        assert results["cgroup-lost"].data["caught_up"], results["cgroup-lost"].summary
        # reconciliation was exercised: partitions moved between owners (the joins, the killed member's)
        assert results["cgroup-overlap"].data["handovers"] >= 2, results["cgroup-overlap"].summary
    else:
        deliveries = results["share-deliveries"].data
        assert results["share-lost"].data["caught_up"], results["share-lost"].summary
        assert deliveries["archived"] >= 1, results["share-deliveries"].summary  # the poison messages
        assert results["share-duplicates"].data["after_lock"] >= 1, results["share-duplicates"].summary
