"""`tidelog up --combined`: controller and broker in one process (process.roles=broker,controller).

Through the real CLI: one combined node comes READY, cluster.json names it role "combined"
with both its admin URL and its Kafka listener, a real client (confluent-kafka) produces and
consumes through it, and `tidelog down` stops it with a controlled shutdown, leaving no
process behind. Three combined nodes stopped together by `tidelog down` all shut down
cleanly: each keeps its controller up while the others' brokers still need the quorum.
Teardown SIGKILLs every node pid the test ever saw, whatever happened.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.log.log_manager import CLEAN_SHUTDOWN_FILE
from tests.integration.cluster_fixtures import processes_mentioning, wait_until
from localcluster.launcher import free_ports

confluent_kafka = pytest.importorskip("confluent_kafka")  # the reference client; make test installs it

REPO = Path(__file__).resolve().parents[2]
CLI_TIMEOUT_S = 90.0
GONE_TIMEOUT_S = 10.0


class Cli:
    def __init__(self, data_dir: Path, nodes: int) -> None:
        self.data_dir = data_dir
        hosts = [f"127.0.0.{n}" for n in range(1, nodes + 1)]
        self.ports = dict(zip(("--raft-port", "--admin-port", "--kafka-port", "--metrics-port"),
                              map(str, free_ports(hosts, 4))))
        self.pids: set[int] = set()

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tidelog", *args, "--data-dir", str(self.data_dir)],
                              capture_output=True, text=True, cwd=REPO, timeout=CLI_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)

    def up(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = self.run("up", "--combined", "--detach", *[x for kv in self.ports.items() for x in kv], *args)
        if (self.data_dir / "cluster.json").exists():
            self.layout()
        return done

    def layout(self) -> dict[str, Any]:
        document: dict[str, Any] = json.loads((self.data_dir / "cluster.json").read_text())
        self.pids.update(n["pid"] for n in document["nodes"] if n["pid"] is not None)
        return document

    def cleanup(self) -> None:
        for pid in self.pids:  # nodes lead their own process groups
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Callable[[int], Cli]]:
    made: list[Cli] = []

    def make(nodes: int) -> Cli:
        made.append(Cli(tmp_path / f"combined-{len(made)}", nodes))
        return made[-1]

    try:
        yield make
    finally:
        for one in made:
            one.cleanup()


def down_leaves_nothing(cli: Cli, count: int) -> dict[str, Any]:
    document = cli.layout()
    done = cli.run("down")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": stopped") == count, done.stdout
    wait_until("no process of the data dir left", lambda: not processes_mentioning(str(cli.data_dir)),
               GONE_TIMEOUT_S)
    assert all(n["pid"] is None for n in cli.layout()["nodes"])
    return document


def test_one_combined_node_serves_a_real_client(cli: Callable[[int], Cli]) -> None:
    node = cli(1)
    started = time.monotonic()
    done = node.up()
    assert done.returncode == 0, done.stdout + done.stderr
    print(f"`tidelog up --combined --detach`: READY after {time.monotonic() - started:.2f} s")
    document = node.layout()
    [entry] = document["nodes"]
    kafka_port, admin_port = node.ports["--kafka-port"], node.ports["--admin-port"]
    assert (entry["id"], entry["role"], entry["host"]) == (1, "combined", "127.0.0.1")
    assert entry["admin_url"] == f"http://127.0.0.1:{admin_port}" and entry["bootstrap"] == f"127.0.0.1:{kafka_port}"
    for key in ("raft_port", "admin_port", "kafka_port", "metrics_port", "pid", "data_dir", "log_file"):
        assert entry[key] is not None, key
    assert f"READY bootstrap=127.0.0.1:{kafka_port} admin=http://127.0.0.1:{admin_port}" in done.stdout.splitlines()
    assert len(processes_mentioning(str(node.data_dir))) == 1  # one process for both roles

    created = node.run("topics", "create", "--topic", "dev", "--partitions", "2")
    assert created.returncode == 0, created.stderr
    producer = confluent_kafka.Producer({"bootstrap.servers": document["bootstrap_servers"], "acks": "all"})
    for i in range(20):
        producer.produce("dev", key=f"k{i}", value=f"v{i}")
    assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer({"bootstrap.servers": document["bootstrap_servers"], "group.id": "dev",
                                         "enable.auto.commit": False})
    try:
        consumer.assign([confluent_kafka.TopicPartition("dev", p, confluent_kafka.OFFSET_BEGINNING) for p in (0, 1)])
        seen: set[str] = set()
        deadline = time.monotonic() + 30
        while len(seen) < 20 and time.monotonic() < deadline:  # bounded by the deadline
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.add(message.value().decode())
    finally:
        consumer.close()
    assert seen == {f"v{i}" for i in range(20)}

    down_leaves_nothing(node, 1)
    log = Path(entry["log_file"]).read_text(errors="replace")
    assert "Transitioning from PENDING_CONTROLLED_SHUTDOWN to SHUTTING_DOWN." in log, log[-3000:]
    assert "Combined node 1 stopped (broker: exit status 0, controller: exit status 0)" in log, log[-3000:]
    assert (Path(entry["data_dir"]) / "data" / CLEAN_SHUTDOWN_FILE).exists()


def test_three_combined_nodes_stop_together_cleanly(cli: Callable[[int], Cli]) -> None:
    nodes = cli(3)
    done = nodes.up("--controllers", "3")
    assert done.returncode == 0, done.stdout + done.stderr
    created = nodes.run("topics", "create", "--topic", "spread", "--partitions", "6")
    assert created.returncode == 0, created.stderr
    started = time.monotonic()
    document = down_leaves_nothing(nodes, 3)
    print(f"`tidelog down` of 3 combined nodes: {time.monotonic() - started:.2f} s")
    for entry in document["nodes"]:
        log = Path(entry["log_file"]).read_text(errors="replace")
        assert "controlled.shutdown.timeout.ms" not in log, log[-3000:]  # never stranded without a quorum
        assert f"Combined node {entry['id']} stopped (broker: exit status 0, controller: exit status 0)" in log
