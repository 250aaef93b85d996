"""Transaction scenarios `make test` runs (about 40-60 s each) meet their expectations on a real
cluster with real transactional clients: the coordinator SIGKILLed twice, a producer paused past
its transaction timeout (its open transaction must not commit), a Produce held back and
delivered into the producer's next transaction (KIP-890's case), and the leader of a partition
SIGKILLed three times while markers are written to it. Every run must have committed
transactions and read every partition to its end under read_committed, and no client may be
left stuck in a call when asked to stop (the leader kills once left librdkafka's
send_offsets_to_transaction hanging on a decommissioned group coordinator, librdkafka #5511;
chaos.engine.txn_client bounds that call and gives the transaction up as unknown).

The rest run under `make chaos`: the coordinator cut off from the other brokers, and the late
EndTxn demonstration.
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

# make test keeps the leader kill during markers (the one that found librdkafka's coordinator hang);
# make test-long the others
IN_MAKE_TEST = ("txn-leader-kill-markers",)
LONG = ("txn-coordinator-kill", "txn-producer-pause", "txn-late-produce")
SCENARIOS = [*IN_MAKE_TEST, *(pytest.param(name, marks=pytest.mark.long) for name in LONG)]


@pytest.fixture(autouse=True)
def no_leftovers() -> Iterator[None]:
    yield
    found = leftovers()
    clean()  # whatever happened, nothing stays cut or redirected
    assert found == [], f"the run left {found} behind"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", SCENARIOS)
def test_transaction_scenario_meets_its_expectations(name: str, tmp_path: Path) -> None:
    scenario = find_scenario(name)
    outcome = run_forked(scenario, tmp_path)
    failed = [f"{v.expectation}: {v.detail}" for v in outcome.verdicts if not v.ok]
    assert failed == [], f"{name}: see {outcome.report_dir / 'report.html'}"
    results = {r.name: r for r in outcome.results}
    assert results["txn-workload"].data["committed"] >= 20
    assert results["txn-workload"].data["stuck_clients"] == 0
    if name == "txn-producer-pause":  # the pause outlasted the transaction timeout: fencing was exercised
        assert results["txn-zombie-commit"].data["long_pauses"] == 1
    if name == "txn-late-produce":  # the held Produce reached the broker during a later transaction
        assert results["txn-held-requests"].data == {"held": 1, "released": 1}
