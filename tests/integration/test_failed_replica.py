"""One partition's storage failure fails that replica, not the broker (issue 36), on a real
cluster of 3 controllers and 3 brokers with real clients.

The failure is a real OSError that root cannot bypass: before the topic exists, a plain FILE
sits where broker 5 will create the log directory of partition 1 (`<data dir>/<topic>-1`), so
its mkdir fails with EEXIST. Then:
- broker 5 stays up, serves its other partitions (produce acks=all and consume with
  confluent-kafka; it follows them in their ISR), and the metadata follower keeps following;
- the failed replica is reported: one broker log line with the partition and errno, the
  controller takes it out of the ISR and elects another leader, `tidelog topics describe`
  shows it offline, the broker's gauge counts it;
- once the file is gone, a restart of broker 5 (a new registration clears its offline
  replicas) brings the replica back into the ISR, with every acknowledged record.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster_fixtures import spawn_node, wait_until
from tests.integration.replication_clients import (
    assert_delivered,
    broker_gauges,
    broker_registration,
    produce,
    values,
)
from chaos.workload import read_all
from tests.integration.replication_fixtures import FAST, create_topic, partition_state, wait_for_state
from localcluster.launcher import LocalCluster, free_ports

pytest.importorskip("confluent_kafka")

HOSTS = tuple(f"127.0.0.{n}" for n in range(1, 7))  # controllers 1-3, brokers 4-6
BROKERS = (4, 5, 6)
VICTIM = 5
TOPIC = "failing"
PARTITIONS = 3
FAILED = 1  # the partition whose log directory broker 5 cannot create
READY_S = 60.0
REPORTED_S = 20.0  # heartbeat (200 ms) + a controller decision + metadata fetch, on a loaded machine
CLI_TIMEOUT_S = 30.0
REPO = Path(__file__).resolve().parents[2]


@contextmanager
def three_by_three(root: Path) -> Iterator[tuple[LocalCluster, dict[str, Any]]]:
    """3 controllers + 3 brokers with fast timeouts; every process stopped on exit, failure or not.
    Also yields the start arguments, with which `LocalCluster.start` restarts a stopped broker."""
    raft_port, admin_port, kafka_port, metrics_port = free_ports(HOSTS, 4)
    options: dict[str, Any] = dict(controllers=3, brokers=3, raft_port=raft_port, admin_port=admin_port,
                                   kafka_port=kafka_port, metrics_port=metrics_port, ready_timeout=READY_S,
                                   extra_properties=FAST, spawn=spawn_node)
    with LocalCluster.start(root, **options) as cluster:
        try:
            yield cluster, options
        finally:
            # a restart made new processes: stop whatever cluster.json now records
            restarted = LocalCluster.attach(root)
            if restarted is not None:
                restarted.stop()


def describe(cluster: LocalCluster) -> str:
    done = subprocess.run([sys.executable, "-m", "tidelog", "topics", "describe", "--topic", TOPIC,
                           "--data-dir", str(cluster.root)], capture_output=True, text=True, cwd=REPO,
                          timeout=CLI_TIMEOUT_S, check=False)
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done.stdout


def broker_log(cluster: LocalCluster, broker_id: int) -> str:
    return cluster.node(broker_id).spec.log_path.read_text(errors="replace")


def test_a_replica_that_cannot_be_created_fails_alone_and_comes_back_after_a_restart(tmp_path: Path) -> None:
    root = tmp_path / "cluster"
    with three_by_three(root) as (cluster, options):
        victim = cluster.node(VICTIM)
        blocker = victim.spec.directory / "data" / f"{TOPIC}-{FAILED}"
        blocker.write_text("not a log directory: creating the log fails with EEXIST\n")
        create_topic(cluster, TOPIC, partitions=PARTITIONS)

        # Reported: out of the ISR, another leader, offline in the image.
        failed = wait_for_state(cluster, TOPIC, FAILED, f"broker {VICTIM}'s replica offline and out of the ISR",
                                lambda s: VICTIM in s["offline_replicas"] and VICTIM not in s["isr"]
                                and s["leader"] not in (VICTIM, -1), REPORTED_S)
        assert sorted(failed["isr"]) == sorted(b for b in BROKERS if b != VICTIM), failed
        line = wait_until(f"broker {VICTIM}'s log line for {TOPIC}-{FAILED}",
                          lambda: next((x for x in broker_log(cluster, VICTIM).splitlines()
                                        if f"Replica {TOPIC}-{FAILED} " in x and "failed on broker" in x), None))
        assert "errno 17 (EEXIST)" in line and str(blocker) in line, line
        described = describe(cluster).splitlines()
        assert described[1].split()[-1] == "OFFLINE", described
        rows = {int(r.split()[0]): r.split() for r in described[2:]}
        assert rows[FAILED][-1] == str(VICTIM) and rows[FAILED][1] != str(VICTIM), described
        assert all(rows[p][-1] == "-" for p in rows if p != FAILED), described
        assert broker_gauges(cluster, VICTIM)["tidelog_broker_failed_replicas"] == 1

        # Broker 5 is up, unfenced, and serves the rest: it follows the other partitions in
        # their ISR, and acks=all records reach every partition (the failed one through its new leader).
        assert victim.running() and broker_registration(cluster, VICTIM)["fenced"] is False
        for p in range(PARTITIONS):
            if p != FAILED:
                wait_for_state(cluster, TOPIC, p, f"broker {VICTIM} in the ISR",
                               lambda s: sorted(s["isr"]) == sorted(BROKERS) and s["leader"] >= 0)
        written = {p: values(f"before-{p}", 10) for p in range(PARTITIONS)}
        for p, batch in written.items():
            assert_delivered(produce(cluster.bootstrap_servers or "", TOPIC, batch, acks="all", partition=p))
        got = read_all(victim.spec.bootstrap_address, TOPIC, PARTITIONS)
        assert {p: [v for q, _, v in got if q == p] for p in range(PARTITIONS)} == written
        assert "can't handle event" not in broker_log(cluster, VICTIM)

        # The cause removed, a restart brings the replica back (a new broker epoch clears it).
        blocker.unlink()
        assert victim.stop().outcome == "stopped"
        restarted = LocalCluster.start(root, **options)
        back = wait_for_state(restarted, TOPIC, FAILED, f"broker {VICTIM}'s replica back in the ISR",
                              lambda s: VICTIM in s["isr"] and s["offline_replicas"] == [], 30.0)
        assert sorted(back["isr"]) == sorted(BROKERS), back
        assert broker_gauges(restarted, VICTIM)["tidelog_broker_failed_replicas"] == 0
        got = read_all(restarted.node(VICTIM).spec.bootstrap_address, TOPIC, PARTITIONS)
        assert [v for q, _, v in got if q == FAILED] == written[FAILED]
        for b in BROKERS:
            assert "Traceback" not in broker_log(restarted, b), broker_log(restarted, b)[-3000:]
