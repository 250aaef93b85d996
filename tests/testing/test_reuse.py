"""--tidelog-reuse (issue 33): a session cluster kept between pytest runs, keyed by its shape.

Two runs of one small suite: the second finds the first's cluster (the same node processes and
bootstrap), cleaned as recover() leaves it (the topic the first run left is deleted, no request
fault left), and its start costs a fraction of a fresh one. Another session that finds the slot
leased starts a private cluster. The idle watchdog stops a slot's cluster and removes the slot
once nobody leased it for the idle bound, and not while a session holds it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from tests.integration.cluster_fixtures import processes_mentioning, wait_until
from tidelog.testing import reuse

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]
INI = "[pytest]\ntidelog_brokers = 1\ntidelog_combined = true\ntidelog_reuse_idle_minutes = 10\n"
SUITE = """
import json, os

def test_run(tidelog_cluster):
    out = os.environ["REUSE_OUT"]
    leftover = [t for t in tidelog_cluster.topic_names() if not t.startswith("__")]
    with open(out, "a") as f:
        f.write(json.dumps({"pids": [n.pid for n in tidelog_cluster.local.nodes],
                            "bootstrap": tidelog_cluster.bootstrap_servers, "leftover": leftover,
                            "faults": len(tidelog_cluster.request_faults()),
                            "startup_s": tidelog_cluster.startup_seconds}) + "\\n")
    tidelog_cluster.create_topic("left-by-the-last-run")  # not a tidelog_topic: nothing deletes it
"""


@pytest.fixture
def reuse_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "reuse"
    monkeypatch.setenv(reuse.REUSE_DIR_ENV, str(directory))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return directory


def run(pytester: pytest.Pytester, out: Path) -> list[dict[str, object]]:
    os.environ["REUSE_OUT"] = str(out)
    try:
        result = pytester.runpytest_subprocess("-p", "tidelog.testing.plugin", "-p", "no:cacheprovider",
                                               "--tidelog-reuse", timeout=240)
    finally:
        del os.environ["REUSE_OUT"]
    result.assert_outcomes(passed=1)
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_the_next_run_reuses_the_cluster_cleaned(pytester: pytest.Pytester, reuse_dir: Path, tmp_path: Path) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(test_inner=SUITE)
    out = tmp_path / "runs.jsonl"
    try:
        first = run(pytester, out)[0]
        [slot] = list(reuse_dir.iterdir())
        assert all(processes_mentioning(str(slot)) for _ in [0]), "the cluster outlives the run"
        second = run(pytester, out)[1]
        assert (second["pids"], second["bootstrap"]) == (first["pids"], first["bootstrap"])
        assert first["leftover"] == [] and second["leftover"] == [] and second["faults"] == 0
        assert float(second["startup_s"]) < float(first["startup_s"])  # type: ignore[arg-type]
    finally:
        reuse.clear_all(reuse_dir)
    wait_until("the kept cluster's processes to be gone", lambda: processes_mentioning(str(reuse_dir)) == [], 30)
    assert list(reuse_dir.iterdir()) == []


def test_a_leased_slot_is_not_shared(tmp_path: Path) -> None:
    held = reuse.Slot.claim("k", tmp_path)
    assert held is not None
    try:
        assert reuse.Slot.claim("k", tmp_path) is None  # the next session starts a cluster of its own
    finally:
        held.release()
    again = reuse.Slot.claim("k", tmp_path)
    assert again is not None
    again.release()


def test_the_idle_watchdog_waits_for_the_lease_and_the_idle_bound(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reuse, "IDLE_CHECK_INTERVAL", 0.05)
    slot = reuse.Slot.claim("k", tmp_path)
    assert slot is not None
    slot.cluster_root.mkdir()  # no cluster.json: nothing to kill, only the directory to remove
    outcome: list[str] = []
    watcher = threading.Thread(target=lambda: outcome.append(reuse.watch(slot.directory, 1 / 60)))
    watcher.start()
    try:
        time.sleep(0.3)  # several looks while the lease is held: nothing happens
        assert slot.directory.exists() and outcome == []
        slot.release()
        os.utime(slot.directory / reuse.LAST_USED, (time.time() - 30, time.time() - 30))  # idle 30 s > 1 s
        watcher.join(5)
        assert outcome == ["idle for 0.016666666666666666 minutes: stopped"]
        assert not slot.directory.exists()
    finally:
        watcher.join(5)
