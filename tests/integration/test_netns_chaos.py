"""The chaos engine against a cluster of namespaced hosts, as a user runs it (issue 30):
`tidelog up --hosts netns --racks 3 --detach` with the scenarios' short timeouts, then
`tidelog chaos run SCENARIO --cluster-dir D` from the root namespace's shell (the command enters
the client namespace itself; its partitions are iptables rules inside the hosts' namespaces,
its restarts spawn nodes back in their own), then `tidelog down`.

leader-isolation cuts partition 0's leader from every other host; rack-partition cuts rack-1's
host from the other racks and the controllers while its consumers (client.rack=rack-1) keep
reading. Both must pass every checker; the topic both write is deleted between them (`tidelog
topics delete --data-dir D`, which enters the client namespace too). About 2 minutes:
`make test-long`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tidelog.hosts import netns
from tidelog.hosts.cluster import remove_recorded

_unavailable = netns.available()
pytestmark = [pytest.mark.long,
              pytest.mark.skipif(_unavailable is not None, reason=f"needs network namespaces: {_unavailable}")]

REPO = Path(__file__).resolve().parents[2]
UP_TIMEOUT_S = 120.0
RUN_TIMEOUT_S = 300.0
SCENARIO_CONFIG = {  # the [cluster.properties] both scenarios set (an attached cluster keeps its own)
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.backoff.ms": "200",
    "replica.socket.timeout.ms": "3000",
    "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
}


def _tidelog(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "tidelog", *args], capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=timeout)


def test_partition_scenarios_pass_against_namespaced_hosts(tmp_path: Path) -> None:
    root = tmp_path / "data"
    config = [word for key, value in SCENARIO_CONFIG.items() for word in ("--broker-config", f"{key}={value}")]
    try:
        up = _tidelog("up", "--hosts", "netns", "--racks", "3", "--detach", "--data-dir", str(root), *config,
                      timeout=UP_TIMEOUT_S)
        assert up.returncode == 0, up.stderr[-3000:]
        for scenario in ("leader-isolation", "rack-partition"):
            run = _tidelog("chaos", "run", scenario, "--cluster-dir", str(root), "--report-dir",
                           str(tmp_path / scenario), timeout=RUN_TIMEOUT_S)
            assert run.returncode == 0 and "AS PROMISED" in run.stdout, (scenario, run.stdout[-4000:],
                                                                         run.stderr[-2000:])
            assert "1 faults applied, 0 skipped" in run.stdout, run.stdout[-4000:]
            deleted = _tidelog("topics", "delete", "--topic", "chaos", "--data-dir", str(root), timeout=UP_TIMEOUT_S)
            assert deleted.returncode == 0, deleted.stderr[-2000:]  # both scenarios write to "chaos"
        down = _tidelog("down", "--data-dir", str(root), timeout=UP_TIMEOUT_S)
        assert down.returncode == 0, down.stderr[-2000:]
    finally:
        if (root / "cluster.json").exists():
            remove_recorded(root)  # SIGKILLs what is left and removes the namespaces (a no-op after `down`)
