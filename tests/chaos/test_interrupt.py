"""SIGTERM in the middle of a network partition: `tidelog chaos run` removes its iptables chain,
stops every node it started and exits non-zero, leaving nothing behind. A user's run starts each
node as a fresh process (the tests' runs fork theirs: tests/chaos/scenario_runs.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos.nemeses.firewall import chains, clean, iptables_missing, leftovers
from localcluster.launcher import LocalCluster
from tests.integration.cluster_fixtures import FORKED_START_MARK, node_starts

pytestmark = pytest.mark.skipif(iptables_missing() is not None, reason=str(iptables_missing()))
pytest.importorskip("confluent_kafka")

ROOT = Path(__file__).resolve().parents[2]
FAULT_WAIT_S = 120.0
EXIT_WAIT_S = 90.0


def fault_started(history: Path) -> bool:
    try:
        return any(json.loads(line)["kind"] == "fault-start" for line in history.read_text().splitlines()[:-1])
    except OSError:
        return False


@pytest.mark.timeout(300)
def test_sigterm_mid_partition_leaves_nothing_behind(tmp_path: Path) -> None:
    report, cluster_dir = tmp_path / "report", tmp_path / "cluster"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    run = subprocess.Popen([sys.executable, "-m", "tidelog", "chaos", "run", "quorum-partition", "--report-dir",
                            str(report), "--cluster-dir", str(cluster_dir)], cwd=ROOT, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + FAULT_WAIT_S
        while not fault_started(report / "history.jsonl"):  # bounded by the deadline
            assert run.poll() is None, run.stdout.read().decode() if run.stdout else ""
            assert time.monotonic() < deadline, "the partition never started"
            time.sleep(0.2)
        assert any(c.endswith(f"-{run.pid}") for c in chains())  # the partition is in place
        run.send_signal(signal.SIGTERM)
        output = run.communicate(timeout=EXIT_WAIT_S)[0].decode(errors="replace")
        assert run.returncode != 0, output
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(10)
        found = leftovers()
        clean()
        cluster = LocalCluster.attach(cluster_dir)
        alive = [] if cluster is None else [n.spec.label for n in cluster.nodes if n.running()]
        if cluster is not None:
            cluster.stop()
    assert found == [], f"left behind: {found}"
    assert alive == [], f"nodes still running: {alive}"
    starts = node_starts(cluster_dir)
    assert starts and not any(FORKED_START_MARK in line for line in starts), starts
