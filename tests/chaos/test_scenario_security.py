"""A chaos scenario over SASL_SSL (issue 29): `[cluster] security` secures the cluster through the
launcher's own path and the workload's clients connect through the secured listener, the
transactional ones too; the spec refuses what the engine cannot run that way (held clients)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.cli import find_scenario
from chaos.scenarios.spec import ScenarioError, parse_scenario
from tests.chaos.scenario_runs import run_forked

BASE = '[[topics]]\nname = "t"\n'


@pytest.mark.parametrize(("text", "error"), [
    ('[cluster]\nsecurity = "KERBEROS"\n' + BASE, "cluster.security: expected one of"),
    ('[cluster]\nsecurity = 1\n' + BASE, "cluster.security: expected str"),
    ('[cluster]\nsecurity = "SASL_SSL"\n' + BASE + '[workload]\ntopic = "t"\ntxn_topics = ["t"]\ntxn_held = ["tp0"]\n',
     "held transactional clients"),
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
    outcome = run_forked(scenario, tmp_path)
    failed = [f"{v.expectation}: {v.detail}" for v in outcome.verdicts if not v.ok]
    assert failed == [], f"see {outcome.report_dir / 'report.html'}"
    # the cluster was the launcher's SASL_SSL one: followers fetched over it, clients had its settings
    client = (tmp_path / "cluster" / "client.properties").read_text()
    assert "security.protocol=SASL_SSL" in client
    properties = [p.read_text() for p in (tmp_path / "cluster").rglob("server.properties")]
    assert sum("inter.broker.listener.name=SASL_SSL" in p for p in properties) == 3


@pytest.mark.long  # about a minute: `make test-long` (the PLAINTEXT txn scenarios run in make test)
@pytest.mark.timeout(300)
def test_transactions_over_sasl_ssl(tmp_path: Path) -> None:
    """txn-coordinator-kill's workload on a SASL_SSL cluster: the transactional producers, the
    exactly-once transform and the final read_committed consumers log in over SASL_SSL; every
    transaction commits or aborts whole across two coordinator kills."""
    pytest.importorskip("confluent_kafka")
    pytest.importorskip("matplotlib")
    scenario = find_scenario("txn-sasl-ssl")
    assert scenario.cluster.security == "SASL_SSL" and scenario.workload.txn_topics
    outcome = run_forked(scenario, tmp_path)
    failed = [f"{v.expectation}: {v.detail}" for v in outcome.verdicts if not v.ok]
    assert failed == [], f"see {outcome.report_dir / 'report.html'}"
    # the killed coordinator's connections, as librdkafka logs them: the clients spoke SASL_SSL
    assert "sasl_ssl://" in (tmp_path / "report" / "client-tp0.log").read_text(errors="replace")
