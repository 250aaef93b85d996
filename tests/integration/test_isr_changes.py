"""ISR shrink and expand on a real RF=3 cluster, seen by the admin API, real clients and /metrics.

Kafka's promises checked here:
- a leader removes a follower that has not caught up within replica.lag.time.max.ms from
  the ISR by itself (AlterPartition), long before the controller would fence the silent
  broker, and takes it back once it has caught up again; nothing written meanwhile is lost;
- acks=all needs min.insync.replicas in-sync replicas: with the ISR down to the leader the
  broker answers NOT_ENOUGH_REPLICAS (before appending), while acks=1 still succeeds, and
  acks=all works again once the ISR has grown back;
- the leader reports under-replicated and under-min-ISR partitions while they are, and
  stops once the ISR is whole again.

Followers are hung with SIGSTOP (Nemesis.pause): the process keeps its sockets and its
registration but answers nothing, the way a GC pause or a stuck disk looks to its peers.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from chaos.checker import check_identical
from tests.integration.cluster_fixtures import wait_until
from tests.integration.replication_clients import (
    assert_delivered,
    broker_gauges,
    broker_registration,
    leader_bootstrap,
    produce,
    values,
)
from chaos.workload import read_all
from tests.integration.replication_fixtures import (
    BROKERS,
    broker_log,
    create_topic,
    partition_state,
    replica_log_bytes,
    replicated_cluster,
    wait_for_state,
    wait_full_isr,
)
from localcluster.launcher import LocalCluster

pytest.importorskip("confluent_kafka")

LAG_MS = 1500
SESSION_MS = 10_000
# The leader's lag rule must act well before the controller's session expiry would fence the
# paused broker (which also removes it from the ISR): 1.5 s against 10 s tells the two apart.
EXTRA = {"replica.lag.time.max.ms": str(LAG_MS), "broker.session.timeout.ms": str(SESSION_MS)}
# Lag plus one isr-expiration period (lag / 2) plus an AlterPartition round trip, with slack
# for a loaded 2-core machine; still well inside the session timeout.
SHRINK_WITHIN_S = 7.0
TOPIC = "isr"
GAUGE = "tidelog_broker_"




def gauges_become(cluster: LocalCluster, broker_id: int, wanted: dict[str, float], timeout_s: float = 10.0) -> None:
    """Wait (bounded) until the broker's gauges show `wanted`: they follow the committed
    metadata, which reaches the leader a moment after the admin API shows it."""
    def check() -> bool:
        got = broker_gauges(cluster, broker_id)
        return all(got.get(GAUGE + name) == value for name, value in wanted.items())

    try:
        wait_until(f"broker {broker_id} gauges {wanted}", check, timeout_s)
    except AssertionError:
        got = {k: v for k, v in broker_gauges(cluster, broker_id).items() if "partitions" in k}
        raise AssertionError(f"broker {broker_id} gauges never showed {wanted}: {got}") from None


def assert_no_tracebacks(cluster: LocalCluster) -> None:
    for b in BROKERS:
        text = broker_log(cluster, b)
        assert "Traceback" not in text, text[-3000:]


def followers_of(state: dict[str, Any]) -> list[int]:
    return [r for r in state["replicas"] if r != state["leader"]]


def test_paused_follower_leaves_isr_by_leader_lag_rule_and_rejoins_after_resume(tmp_path: Path) -> None:
    with replicated_cluster(tmp_path / "cluster", EXTRA) as (cluster, nemesis):
        create_topic(cluster, TOPIC, partitions=1, configs={"min.insync.replicas": "2"})
        wait_full_isr(cluster, TOPIC, 1)
        before = partition_state(cluster, TOPIC, 0)
        leader, follower = before["leader"], followers_of(before)[-1]
        bootstrap = leader_bootstrap(cluster, leader)  # never the paused broker
        written = values("before", 20)
        assert_delivered(produce(bootstrap, TOPIC, written, acks="all"))
        gauges_become(cluster, leader, {"under_replicated_partitions": 0, "under_min_isr_partitions": 0})

        paused_at = nemesis.pause(follower)
        # An idle follower at the leader's log end stays in sync however long it sleeps
        # (Kafka's isCaughtUp): new data is what makes it lag. acks=1 so these do not wait.
        during = values("during-pause", 20)
        assert_delivered(produce(bootstrap, TOPIC, during, acks="1"))
        shrunk = wait_for_state(cluster, TOPIC, 0, f"ISR without paused broker {follower}",
                                lambda s: follower not in s["isr"], SHRINK_WITHIN_S)
        shrink_s = time.monotonic() - paused_at
        # The controller has not fenced the paused broker: the leader's lag rule removed it.
        registration = broker_registration(cluster, follower)
        assert registration["fenced"] is False and registration["state"] == "UNFENCED", registration
        assert (shrunk["leader"], shrunk["leader_epoch"]) == (leader, before["leader_epoch"]), shrunk
        assert sorted(shrunk["isr"]) == sorted(r for r in before["replicas"] if r != follower), shrunk
        assert shrunk["partition_epoch"] > before["partition_epoch"], shrunk
        # ISR 2 of 3 with min.insync.replicas=2: under-replicated, at (not under) min ISR.
        gauges_become(cluster, leader, {"under_replicated_partitions": 1, "under_min_isr_partitions": 0,
                                        "at_min_isr_partitions": 1})
        # acks=all no longer waits for the replica outside the ISR.
        at_min_isr = values("at-min-isr", 5)
        assert_delivered(produce(bootstrap, TOPIC, at_min_isr, acks="all"))
        assert broker_registration(cluster, follower)["fenced"] is False  # still, after all that

        nemesis.resume(follower)
        grown = wait_for_state(cluster, TOPIC, 0, f"broker {follower} back in the ISR",
                               lambda s: sorted(s["isr"]) == sorted(s["replicas"]), 20.0)
        assert (grown["leader"], grown["leader_epoch"]) == (leader, before["leader_epoch"]), grown
        gauges_become(cluster, leader, {"under_replicated_partitions": 0, "under_min_isr_partitions": 0})

        # The leader proposed both changes itself; the controller fenced nobody.
        leader_log = broker_log(cluster, leader)
        without = [r for r in before["isr"] if r != follower]
        assert f"Proposing {TOPIC}-0 ISR {without}" in leader_log, leader_log[-3000:]
        assert f"Proposing {TOPIC}-0 ISR {[*without, follower]}" in leader_log, leader_log[-3000:]
        assert f"Fencing broker {follower}" not in broker_log(cluster, 1)

        everything = written + during + at_min_isr
        read = read_all(cluster.bootstrap_servers, TOPIC, 1)
        assert [(o, v) for _, o, v in read] == list(enumerate(everything))
        cluster.stop()  # clean: every replica flushed what it has
        logs = {b: replica_log_bytes(cluster, b, TOPIC, 0) for b in BROKERS}
        assert check_identical(logs, f"{TOPIC}-0") == []
        assert all(logs.values())
        assert_no_tracebacks(cluster)
        print(f"\npaused follower {follower} left the ISR {shrink_s:.2f} s after SIGSTOP "
              f"(replica.lag.time.max.ms {LAG_MS}, session timeout {SESSION_MS} ms)")


def test_acks_all_gets_not_enough_replicas_when_isr_is_leader_alone(tmp_path: Path) -> None:
    with replicated_cluster(tmp_path / "cluster", EXTRA) as (cluster, nemesis):
        create_topic(cluster, TOPIC, partitions=1, configs={"min.insync.replicas": "2"})
        wait_full_isr(cluster, TOPIC, 1)
        before = partition_state(cluster, TOPIC, 0)
        leader, followers = before["leader"], followers_of(before)
        bootstrap = leader_bootstrap(cluster, leader)
        acked = values("first", 10)
        assert_delivered(produce(bootstrap, TOPIC, acked, acks="all"))

        for follower in followers:
            nemesis.pause(follower)
        lagging = values("lagging", 10)  # acks=1: only the leader has these
        assert_delivered(produce(bootstrap, TOPIC, lagging, acks="1"))
        wait_for_state(cluster, TOPIC, 0, "ISR = the leader alone", lambda s: s["isr"] == [leader],
                       SHRINK_WITHIN_S)
        assert [broker_registration(cluster, f)["fenced"] for f in followers] == [False, False]
        gauges_become(cluster, leader, {"under_replicated_partitions": 1, "under_min_isr_partitions": 1,
                                        "at_min_isr_partitions": 0})

        refused = produce(bootstrap, TOPIC, values("refused", 3), acks="all")
        assert [d.error for d in refused] == ["NOT_ENOUGH_REPLICAS"] * 3, refused
        # acks=1 does not ask for replicas: the leader alone takes it, at the next offsets.
        alone = values("acks-1-alone", 5)
        offsets = assert_delivered(produce(bootstrap, TOPIC, alone, acks="1"))
        start = len(acked) + len(lagging)
        assert offsets == list(range(start, start + len(alone))), offsets

        for follower in followers:
            nemesis.resume(follower)
        wait_full_isr(cluster, TOPIC, 1, timeout_s=20.0)
        gauges_become(cluster, leader, {"under_replicated_partitions": 0, "under_min_isr_partitions": 0})
        again = values("acks-all-again", 5)
        assert_delivered(produce(bootstrap, TOPIC, again, acks="all"))

        # Refused records were never appended (NOT_ENOUGH_REPLICAS is checked before the
        # append, unlike NOT_ENOUGH_REPLICAS_AFTER_APPEND); everything acknowledged is there.
        read = read_all(cluster.bootstrap_servers, TOPIC, 1)
        assert [(o, v) for _, o, v in read] == list(enumerate(acked + lagging + alone + again))
        assert_no_tracebacks(cluster)
