"""The shipped request-faults scenario (issue 33) on a real cluster: Kafka-request faults inside the
brokers (NOT_LEADER_OR_FOLLOWER on the leader's Produce, delayed Fetch, lost Produce answers) meet
its expectations (nothing lost, no duplicate), and every fault fired and had its firings noted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.cli import find_scenario
from tests.chaos.scenario_runs import run_forked

pytest.importorskip("confluent_kafka")
pytest.importorskip("matplotlib")


@pytest.mark.timeout(240)
def test_request_faults_scenario_meets_its_expectations(tmp_path: Path) -> None:
    outcome = run_forked(find_scenario("request-faults"), tmp_path)
    failed = [f"{v.expectation}: {v.detail}" for v in outcome.verdicts if not v.ok]
    assert failed == [], f"see {outcome.report_dir / 'report.html'}"
    history = [json.loads(line) for line in (outcome.report_dir / "history.jsonl").read_text().splitlines()]
    fired = {e["id"]: e["fired"] for e in history if e.get("what") == "request-fault-fired"}
    assert sorted(fired) == ["f1", "f2", "f3"]
    assert sum(fired["f1"].values()) > 0 and sum(fired["f2"].values()) > 0  # the leader's Produce, every Fetch
    assert all(count == 3 for count in fired["f3"].values()), fired["f3"]  # times=3 on each broker
