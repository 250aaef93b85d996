"""Helpers shared by the client integration tests: a real 3-controller + 1-broker cluster.

`running_cluster` starts every node as its own process on 127.0.0.1-4 with small heartbeat
and session timeouts and, on exit, stops them all and checks the broker shut down cleanly.
`spawn_node` is how every integration cluster starts a node (`LocalCluster.start(spawn=...)`):
forked from the test process's zygote (tidelog.testing.zygote), which imported the node modules
once, so a cluster start does not pay each node's imports (most of its time on a loaded box);
the node is still its own process, in its own session, logging to its node.log, signalled and
stopped as a spawned one. ini `tidelog_fast_start = false` spawns each node instead. The chaos
tests' scenario runs start (and restart) their nodes with it too (tests/chaos/scenario_runs.py);
`configure` and `start_zygote_early` are both test directories' conftest hooks.
`wait_until` is the one bounded poll of the integration tests; `http` talks to the admin API
without raising on 4xx.
"""

from __future__ import annotations

import contextlib
import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from common import waiting
from localcluster.cluster_layout import NodeSpec
from localcluster.launcher import LocalCluster, free_ports
from localcluster.node_process import NodeProcess
from tidelog.testing.zygote import Zygote, fork_or_spawn

HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4")
BROKER_ID = 4
READY_S = 30.0
WAIT_S = 20.0
POLL_S = 0.1
HTTP_TIMEOUT_S = 5.0
# set from ini tidelog_fast_start (the plugin's clusters' option) by `configure`
FORK_NODES = True
FORKED_START_MARK = "forked by the tidelog test zygote"  # in a forked node's launcher line (node.log)


def spawn_node(spec: NodeSpec) -> NodeProcess:
    """One node of an integration cluster: forked from the zygote, or spawned (see the module doc)."""
    return fork_or_spawn(spec) if FORK_NODES else NodeProcess.spawn(spec)


def configure(config: pytest.Config) -> None:
    """pytest_configure: whether `spawn_node` forks, from ini tidelog_fast_start."""
    global FORK_NODES
    FORK_NODES = bool(config.getini("tidelog_fast_start"))


def start_zygote_early(session: pytest.Session, directory: Path) -> None:
    """pytest_collection_finish: a run with tests under `directory` starts the zygote now, so its
    imports (a few seconds of CPU) overlap the collection's end and the first test's setup instead
    of delaying the first cluster."""
    if FORK_NODES and any(directory in Path(item.path).parents for item in session.items):
        Zygote.shared()


def node_starts(root: Path) -> list[str]:
    """Every launcher line ("tidelog launcher: starting ...") in the node.logs under `root`: one per
    start of a node, first starts and restarts alike; forked ones carry FORKED_START_MARK."""
    return [line for path in sorted(root.rglob("node.log"))
            for line in path.read_text(errors="replace").splitlines() if "tidelog launcher: starting" in line]


@contextlib.contextmanager
def running_cluster(root: Path, properties: Mapping[str, str] | None = None) -> Iterator[LocalCluster]:
    """3 controllers + broker 4, small timeouts (plus `properties` on every node); every process
    stopped on exit, even on failure."""
    raft_port, admin_port, kafka_port, metrics_port = free_ports(HOSTS, 4)
    with LocalCluster.start(root, controllers=3, raft_port=raft_port, admin_port=admin_port, brokers=1,
                            kafka_port=kafka_port, metrics_port=metrics_port, ready_timeout=READY_S,
                            spawn=spawn_node, extra_properties={"broker.heartbeat.interval.ms": "200",
                                              "broker.session.timeout.ms": "3000",
                                              **(properties or {})}) as started:
        yield started
        broker = started.brokers[0]
        reports = {r.node.node_id: r for r in started.stop()}
        log = broker.spec.log_path.read_text(errors="replace")
        assert (reports[BROKER_ID].outcome, reports[BROKER_ID].exit_status) == ("stopped", 0), log[-3000:]
        assert "Shut down" in log and "Traceback" not in log, log[-3000:]


def broker_log_dir(cluster: LocalCluster) -> Path:
    return cluster.brokers[0].spec.directory / "data"


def wait_until(what: str, condition: Callable[[], Any], timeout_s: float = WAIT_S, *,
               poll_s: float = POLL_S) -> Any:
    """`common.waiting.wait_until` with the integration tests' default timeout and interval."""
    return waiting.wait_until(what, condition, timeout_s, poll_s=poll_s)


def http(url: str, method: str = "GET", body: Any = None) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _process_state(proc: Path) -> str | None:
    """The state letter of /proc/<pid>/stat (after "(comm)", which may hold spaces); None if gone."""
    try:
        return (proc / "stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie left for init to reap counts as gone)."""
    return _process_state(Path(f"/proc/{pid}")) not in (None, "Z")


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line mentions `text` (a data dir: nothing may outlive `down`)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if alive(int(entry.name)) and text.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found
