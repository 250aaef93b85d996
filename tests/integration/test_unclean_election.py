"""Unclean leader election, off and on, on a real cluster with real clients.

Kafka's promises checked here:
- with unclean.leader.election.enable off (the default), a partition whose last in-sync
  replica dies goes offline (leader -1, KIP-841 keeps that replica as the ISR) and stays
  offline while out-of-sync replicas are alive: producers get errors, nothing acknowledged
  is lost, and the partition comes back, whole, with its last ISR member;
- with it on (topic config), or by an operator's unclean election (POST /v1/elections),
  an out-of-sync replica becomes leader, first RECOVERING then RECOVERED (KIP-704),
  losing the records only the old leader had; when the old leader comes back it truncates
  to the new leader's log by leader epoch (OffsetForLeaderEpoch, KIP-101/279) and every
  replica ends byte-identical;
- the divergence case (KIP-101 scenario 2): the old leader's high watermark covered the
  records the new leader never had (they were committed and readable), so truncating to
  the high watermark would keep them and the logs would fork; only truncation by leader
  epoch drops them.

Replicas leave the ISR by SIGKILL here: the controller fences a dead broker after its
session timeout and removes it from every ISR, so which replica is stale is certain.
"""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from chaos.checker import check_identical
from chaos.nemesis import Nemesis
from tests.integration.cluster_fixtures import http, wait_until
from tests.integration.replication_clients import (
    assert_delivered,
    leader_bootstrap,
    produce,
    values,
    wait_unfenced,
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
    wait_replicas_caught_up,
)
from localcluster.launcher import LocalCluster

pytest.importorskip("confluent_kafka")

TOPIC = "unclean"
CONTROLLER = 1
OFFLINE_HOLD_S = 3.0  # how long an offline partition must stay offline with stale replicas up
NO_LEADER = -1




def json_results(body: bytes) -> list[dict[str, Any]]:
    return json.loads(body)["results"]  # type: ignore[no-any-return]


def followers_of(state: dict[str, Any]) -> list[int]:
    return [r for r in state["replicas"] if r != state["leader"]]


def assert_holds(cluster: LocalCluster, what: str, predicate: Any, seconds: float) -> None:
    """Every admin-API sample of partition 0 satisfies `predicate` for `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:  # bounded by the deadline
        state = partition_state(cluster, TOPIC, 0)
        assert predicate(state), f"{what} stopped holding: {state}"
        time.sleep(0.2)


def isolate_leader(cluster: LocalCluster, nemesis: Nemesis) -> tuple[int, list[int], list[bytes]]:
    """Topic of one partition, 10 records on every replica, then every follower killed and
    fenced out of the ISR: (leader, dead followers, the fully replicated values)."""
    wait_full_isr(cluster, TOPIC, 1)
    state = partition_state(cluster, TOPIC, 0)
    leader, followers = state["leader"], followers_of(state)
    replicated = values("replicated", 10)
    assert_delivered(produce(leader_bootstrap(cluster, leader), TOPIC, replicated, acks="all"))
    wait_full_isr(cluster, TOPIC, 1)  # acks=all: every ISR member had them
    for follower in followers:
        nemesis.kill(follower)
    wait_for_state(cluster, TOPIC, 0, "ISR = the leader alone (followers fenced)",
                   lambda s: s["isr"] == [leader] and s["leader"] == leader)
    return leader, followers, replicated


def kill_last_isr_member(cluster: LocalCluster, nemesis: Nemesis, leader: int, stale: list[int]
                         ) -> dict[str, Any]:
    """SIGKILL the leader and bring the stale replicas back meanwhile (either may finish
    first: with unclean election off neither order elects them); the offline state."""
    nemesis.kill(leader)
    restart_and_wait(cluster, nemesis, *stale)
    # Fenced at session expiry. With ELR (KIP-966, a new cluster's default) the ISR empties and the
    # dead leader is its ELR (KIP-841 without ELR keeps it as the ISR of a leaderless partition).
    return wait_for_state(cluster, TOPIC, 0, "offline: leader -1, the dead leader in the ELR",
                          lambda s: s["leader"] == NO_LEADER and s["isr"] == [] and s["elr"] == [leader])


def restart_and_wait(cluster: LocalCluster, nemesis: Nemesis, *broker_ids: int) -> None:
    """Start the brokers again (all at once: each takes seconds to boot) until unfenced."""
    for broker_id in broker_ids:
        nemesis.restart(broker_id)
    for broker_id in broker_ids:
        wait_unfenced(cluster, broker_id)


def truncation_line(cluster: LocalCluster, broker_id: int) -> re.Match[str]:
    """The old leader's log line for dropping the records only it had."""
    pattern = (rf"Truncated follower {TOPIC}-0 to offset (\d+) \(log end offset was (\d+): "
               rf"offsets (\d+)\.\.(\d+) dropped\) by leader epoch")
    return wait_until(f"broker {broker_id} truncates {TOPIC}-0 by leader epoch",  # type: ignore[no-any-return]
                      lambda: re.search(pattern, broker_log(cluster, broker_id)))


def assert_unclean_leader_recovers(cluster: LocalCluster, new_leader: int, old: dict[str, Any]
                                   ) -> dict[str, Any]:
    """The stale replica leads in a new epoch with ISR [itself], RECOVERING then RECOVERED."""
    state = wait_for_state(cluster, TOPIC, 0, f"broker {new_leader} elected uncleanly and RECOVERED",
                           lambda s: s["leader"] == new_leader and s["leader_recovery_state"] == "RECOVERED")
    assert state["leader_epoch"] > old["leader_epoch"] and state["isr"][0] == new_leader, state
    # The admin API may show RECOVERING only for milliseconds; the new leader logs that it
    # started RECOVERING, and that it asked the controller for RECOVERED.
    text = broker_log(cluster, new_leader)
    assert re.search(rf"Leader {TOPIC}-0 with leader epoch {state['leader_epoch']} .*elected uncleanly: "
                     "RECOVERING", text), text[-3000:]
    assert f"Proposing {TOPIC}-0 ISR [{new_leader}]" in text and "leader recovery RECOVERED" in text
    return state


def finish_identical(cluster: LocalCluster, replicas: list[int]) -> None:
    """Clean stop, then every replica's segments hold the same bytes."""
    wait_replicas_caught_up(cluster, TOPIC, 1, replicas)
    cluster.stop()
    logs = {b: replica_log_bytes(cluster, b, TOPIC, 0) for b in replicas}
    assert check_identical(logs, f"{TOPIC}-0") == []
    for b in BROKERS:
        assert "Traceback" not in broker_log(cluster, b), broker_log(cluster, b)[-3000:]


def test_without_unclean_election_partition_stays_offline_until_last_isr_member_returns(
        tmp_path: Path) -> None:
    with replicated_cluster(tmp_path / "cluster") as (cluster, nemesis):
        create_topic(cluster, TOPIC, partitions=1, replication_factor=3)
        leader, followers, replicated = isolate_leader(cluster, nemesis)
        # min.insync.replicas=1: acks=all is committed by the leader alone, HW included.
        leader_only = values("leader-only", 10)
        assert_delivered(produce(leader_bootstrap(cluster, leader), TOPIC, leader_only, acks="all"))
        offline = kill_last_isr_member(cluster, nemesis, leader, followers)
        # Both stale replicas alive and unfenced: no leader among them, and a producer fails.
        alive = ",".join(leader_bootstrap(cluster, f) for f in followers)
        with ThreadPoolExecutor(1) as pool:
            refused = pool.submit(produce, alive, TOPIC, [b"while-offline"], acks="1",
                                  message_timeout_ms=int(OFFLINE_HOLD_S * 1000))
            assert_holds(cluster, "leader -1 with the stale replicas alive",
                         lambda s: s["leader"] == NO_LEADER and s["isr"] == [] and s["elr"] == [leader]
                         and s["leader_epoch"] == offline["leader_epoch"], OFFLINE_HOLD_S)
            [delivery] = refused.result(timeout=30)
        # librdkafka holds a record for a leaderless partition until message.timeout.ms.
        assert delivery.error == "_MSG_TIMED_OUT", delivery
        for follower in followers:
            assert f"Follower {TOPIC}-0 has no leader" in broker_log(cluster, follower)

        nemesis.restart(leader)
        back = wait_for_state(cluster, TOPIC, 0, f"broker {leader} leads again",
                              lambda s: s["leader"] == leader)
        assert back["leader_recovery_state"] == "RECOVERED" and back["leader_epoch"] > offline["leader_epoch"]
        wait_full_isr(cluster, TOPIC, 1)
        read = read_all(cluster.bootstrap_servers, TOPIC, 1)
        assert [(o, v) for _, o, v in read] == list(enumerate(replicated + leader_only))
        finish_identical(cluster, [leader, *followers])


def test_divergence_unclean_leader_lacks_committed_records_old_leader_truncates_by_epoch_not_hw(
        tmp_path: Path) -> None:
    """KIP-101 scenario 2 through unclean.leader.election.enable=true (a topic config)."""
    with replicated_cluster(tmp_path / "cluster") as (cluster, nemesis):
        create_topic(cluster, TOPIC, partitions=1, replication_factor=2,
                     configs={"unclean.leader.election.enable": "true"})
        leader, [stale], replicated = isolate_leader(cluster, nemesis)
        before = partition_state(cluster, TOPIC, 0)
        # ISR = [leader], min.insync.replicas=1: these acks=all writes are committed, the
        # leader's high watermark moves over them and consumers can read them.
        diverging = values("diverging", 5)
        assert_delivered(produce(leader_bootstrap(cluster, leader), TOPIC, diverging, acks="all"))
        seen = read_all(leader_bootstrap(cluster, leader), TOPIC, 1)
        old_high_watermark = len(replicated) + len(diverging)
        assert [v for _, _, v in seen] == replicated + diverging  # read_all stops at the HW

        nemesis.kill(leader)
        restart_and_wait(cluster, nemesis, stale)
        # Allowed by the topic: once the dead leader is fenced the live stale replica leads.
        elected = assert_unclean_leader_recovers(cluster, stale, before)
        # The controller's account of it: the fencing that triggered the election.
        # (read_all's consumer has a group.id: librdkafka looks up its coordinator, which creates
        # __consumer_offsets, whose partitions change too when a broker is fenced)
        # (its death is seen at once by the listener watch, or else its session expires)
        assert re.search(rf"Fencing broker {leader} \((no heartbeat|its listener) .*\): \d+ partition change",
                         broker_log(cluster, CONTROLLER))
        after = values("after-election", 7)
        offsets = assert_delivered(produce(leader_bootstrap(cluster, stale), TOPIC, after, acks="all"))
        assert offsets == list(range(len(replicated), len(replicated) + len(after))), offsets

        restart_and_wait(cluster, nemesis, leader)
        wait_for_state(cluster, TOPIC, 0, "the old leader back in the ISR, following",
                       lambda s: sorted(s["isr"]) == sorted(s["replicas"]) and s["leader"] == stale)
        match = truncation_line(cluster, leader)
        # By epoch: back to where the new leader's epoch began (offset 10), dropping 10..14,
        # all of which were below the old leader's high watermark of 15. Truncating to the
        # high watermark would have kept them and appended the new leader's 10.. after them.
        assert tuple(map(int, match.groups())) == (len(replicated), old_high_watermark,
                                                   len(replicated), old_high_watermark - 1), match.group(0)
        assert len(replicated) < old_high_watermark
        read = read_all(cluster.bootstrap_servers, TOPIC, 1)
        assert [(o, v) for _, o, v in read] == list(enumerate(replicated + after))
        assert elected["leader"] == stale
        finish_identical(cluster, [leader, stale])


def test_operator_unclean_election_on_an_offline_partition(tmp_path: Path) -> None:
    """POST /v1/elections type=unclean on a topic whose config leaves unclean election off."""
    with replicated_cluster(tmp_path / "cluster") as (cluster, nemesis):
        create_topic(cluster, TOPIC, partitions=1, replication_factor=2)
        leader, [stale], replicated = isolate_leader(cluster, nemesis)
        lost = values("acks-1-lost", 5)  # acknowledged by the leader alone
        assert_delivered(produce(leader_bootstrap(cluster, leader), TOPIC, lost, acks="1"))
        offline = kill_last_isr_member(cluster, nemesis, leader, [stale])
        assert_holds(cluster, "offline with the stale replica alive (config off)",
                     lambda s: s["leader"] == NO_LEADER, 1.5)

        request = {"type": "unclean", "partitions": [{"topic": TOPIC, "partition": 0}]}
        status, body = http(cluster.admin_url + "/v1/elections", "POST", request)
        assert status == 200, body
        assert json_results(body) == [{"topic": TOPIC, "partition": 0, "error": "NONE"}], body
        assert_unclean_leader_recovers(cluster, stale, offline)
        status, body = http(cluster.admin_url + "/v1/elections", "POST", request)
        assert (status, json_results(body)) == (200, [{"topic": TOPIC, "partition": 0,
                                                       "error": "ELECTION_NOT_NEEDED"}]), body
        after = values("after-election", 7)
        assert_delivered(produce(leader_bootstrap(cluster, stale), TOPIC, after, acks="all"))

        restart_and_wait(cluster, nemesis, leader)
        wait_full_isr(cluster, TOPIC, 1)
        match = truncation_line(cluster, leader)
        end = len(replicated) + len(lost)
        assert tuple(map(int, match.groups())) == (len(replicated), end, len(replicated), end - 1), \
            match.group(0)
        read = read_all(cluster.bootstrap_servers, TOPIC, 1)
        assert [(o, v) for _, o, v in read] == list(enumerate(replicated + after))
        finish_identical(cluster, [leader, stale])
