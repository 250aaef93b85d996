"""The local cluster as a user drives it: `tidelog up|down` through the real CLI, one data dir.

`CliCluster` runs each command as a subprocess, remembers every node pid it has seen in
cluster.json, and `cleanup()` SIGKILLs them all (the nodes lead their own process groups), so a
test that fails half-way leaves no process behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from localcluster.launcher import free_ports
from tests.integration.cluster_fixtures import alive

REPO = Path(__file__).resolve().parents[2]
CLI_TIMEOUT_S = 45.0  # one `up` waits at most 30 s for readiness, one `down` ~15 s
GONE_TIMEOUT_S = 5.0


class CliCluster:
    """One data dir driven through the CLI; remembers every node pid it has seen."""

    def __init__(self, data_dir: Path, hosts: tuple[str, ...]) -> None:
        self.data_dir = data_dir
        self.raft_port, self.admin_port, self.kafka_port, self.metrics_port = free_ports(hosts, 4)
        self.pids_seen: set[int] = set()
        self.foreground: subprocess.Popen[str] | None = None

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "tidelog", *args, "--data-dir", str(self.data_dir)]

    def up_args(self) -> list[str]:
        return ["up", "--raft-port", str(self.raft_port), "--admin-port", str(self.admin_port),
                "--kafka-port", str(self.kafka_port), "--metrics-port", str(self.metrics_port)]

    def run(self, *args: str, timeout_s: float = CLI_TIMEOUT_S,
            preexec_fn: Callable[[], None] | None = None) -> subprocess.CompletedProcess[str]:
        """One CLI command; `preexec_fn` runs in the child (limits every node it starts inherits)."""
        return subprocess.run(self.command(*args), capture_output=True, text=True, cwd=REPO,
                              timeout=timeout_s, stdin=subprocess.DEVNULL, preexec_fn=preexec_fn)

    def layout(self) -> dict[str, Any]:
        document = json.loads((self.data_dir / "cluster.json").read_text())
        self.pids_seen.update(n["pid"] for n in document["nodes"] if n["pid"] is not None)
        return document

    def cleanup(self) -> None:
        if self.foreground is not None and self.foreground.poll() is None:
            self.foreground.kill()
            self.foreground.wait(GONE_TIMEOUT_S)
        if (self.data_dir / "cluster.json").exists():
            self.layout()
        for pid in self.pids_seen:  # the nodes lead their own process groups
            if alive(pid):
                os.killpg(pid, signal.SIGKILL)
