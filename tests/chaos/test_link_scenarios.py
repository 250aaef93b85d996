"""The link-fault scenarios `make test` runs (about a minute each) meet their expectations on a
real cluster with real clients, where the kernel has no netem, and leave no chain, qdisc or
proxy behind; a run stopped by SIGTERM in the middle of a delay and a bandwidth limit removes
them too."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.cli import find_scenario
from chaos.links import install
from chaos.nemeses import firewall
from localcluster.launcher import LocalCluster
from tests.chaos.scenario_runs import ending_at_last_heal, run_forked

pytest.importorskip("confluent_kafka")
pytest.importorskip("matplotlib")
pytestmark = pytest.mark.skipif(install.missing() is not None, reason=str(install.missing()))

# ~50 s each: make test runs slow-follower; make chaos the lossy, slow-controller and
# saturated-reassignment links
IN_MAKE_TEST = ("slow-follower",)


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
    # the ISR's return is sampled during the final heal: the quiet tail (12 s of slow-follower) adds nothing
    scenario = ending_at_last_heal(find_scenario(name))
    outcome = run_forked(scenario, tmp_path)
    failed = [f"{v.expectation}: {v.detail}" for v in outcome.verdicts if not v.ok]
    assert failed == [], f"{name}: see {outcome.report_dir / 'report.html'}"  # incl. no fault skipped


INTERRUPTED = """
name = "links-interrupted"
duration_s = 60
[cluster]
controllers = 1
brokers = 2
[[topics]]
name = "chaos"
partitions = 1
replication_factor = 2
[workload]
rate = 50
[[faults]]
action = "delay"
target = "broker:2"
peer = "broker:3"
at_s = 1
duration_s = 50
params = { delay_ms = 100 }
[[faults]]
action = "bandwidth"
target = "broker:2"
peer = "broker:3"
at_s = 1
duration_s = 50
params = { rate_kbit = 800 }
"""
ROOT = Path(__file__).resolve().parents[2]
START_WAIT_S = 120.0
EXIT_WAIT_S = 90.0


def faults_started(history: Path) -> int:
    try:
        lines = history.read_text().splitlines()[:-1]  # the last line may be half written
    except OSError:
        return 0
    return sum(json.loads(line)["kind"] == "fault-start" for line in lines)


@pytest.mark.timeout(300)
def test_sigterm_mid_link_faults_leaves_nothing_behind(tmp_path: Path) -> None:
    scenario, report, cluster_dir = tmp_path / "links.toml", tmp_path / "report", tmp_path / "cluster"
    scenario.write_text(INTERRUPTED)
    run = subprocess.Popen([sys.executable, "-m", "tidelog", "chaos", "run", str(scenario), "--report-dir",
                            str(report), "--cluster-dir", str(cluster_dir)], cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_WAIT_S
        while faults_started(report / "history.jsonl") < 2:  # bounded by the deadline
            assert run.poll() is None, run.stdout.read().decode() if run.stdout else ""
            assert time.monotonic() < deadline, "the link faults never started"
            time.sleep(0.2)
        ours = [line for line in install.state()[1].splitlines() if f"TIDELOG-LINKNAT-{run.pid}" in line]
        assert ours and install.rules.qdisc_handle() in install.state()[2]  # the delay and the shaping in place
        run.send_signal(signal.SIGTERM)
        output = run.communicate(timeout=EXIT_WAIT_S)[0].decode(errors="replace")
        assert run.returncode != 0, output
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(10)
        cluster = LocalCluster.attach(cluster_dir)
        alive = [] if cluster is None else [n.spec.label for n in cluster.nodes if n.running()]
        if cluster is not None:
            cluster.stop()
    state = install.state()
    assert f"-{run.pid}" not in state[0] + state[1] and install.rules.qdisc_handle() not in state[2]
    assert alive == []
