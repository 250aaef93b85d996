"""A chaos scenario over SASL_SSL (issue 29): `[cluster] security` secures the cluster through the
launcher's own path and the workload's clients connect through the secured listener; the spec
refuses what the engine cannot run that way."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.cli import find_scenario
from chaos.engine.runner import RunOptions, run_scenario
from chaos.scenarios.spec import ScenarioError, parse_scenario

BASE = '[[topics]]\nname = "t"\n'


@pytest.mark.parametrize(("text", "error"), [
    ('[cluster]\nsecurity = "KERBEROS"\n' + BASE, "cluster.security: expected one of"),
    ('[cluster]\nsecurity = 1\n' + BASE, "cluster.security: expected str"),
    ('[cluster]\nsecurity = "SASL_SSL"\n' + BASE + '[workload]\ntxn_topics = ["t"]\n',
     "transactional workload's clients run PLAINTEXT only"),
])
def test_spec_refuses(text: str, error: str) -> None:
    with pytest.raises(ScenarioError, match=error):
        parse_scenario(text)


def test_spec_reads_security() -> None:
    assert parse_scenario('[cluster]\nsecurity = "SSL"\n' + BASE).cluster.security == "SSL"
    assert parse_scenario(BASE).cluster.security is None


@pytest.mark.timeout(240)
def test_leader_kill_over_sasl_ssl(tmp_path: Path) -> None:
    pytest.importorskip("confluent_kafka")
    pytest.importorskip("matplotlib")
    scenario = find_scenario("leader-kill-sasl-ssl")
    assert scenario.cluster.security == "SASL_SSL"
    outcome = run_scenario(scenario, RunOptions(report_dir=tmp_path / "report", seed=1,
                                                cluster_dir=tmp_path / "cluster"))
    failed = [f"{v.expectation}: {v.detail}" for v in outcome.verdicts if not v.ok]
    assert failed == [], f"see {outcome.report_dir / 'report.html'}"
    # the cluster was the launcher's SASL_SSL one: followers fetched over it, clients had its settings
    client = (tmp_path / "cluster" / "client.properties").read_text()
    assert "security.protocol=SASL_SSL" in client
    properties = [p.read_text() for p in (tmp_path / "cluster").rglob("server.properties")]
    assert sum("inter.broker.listener.name=SASL_SSL" in p for p in properties) == 3
