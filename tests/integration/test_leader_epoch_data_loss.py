"""Kafka's leader-epoch design, scenario 1 (KIP-101): data loss when truncating by the HW.

A follower's high watermark trails its log end offset by one fetch round: it learns the
leader's HW only in the next fetch response. If a follower truncated to its own HW when it
starts following a new leader, and then became leader itself before fetching again, it
would drop records every ISR member had and the producer had been told were committed.

Reproduced deterministically with real processes: an idempotent acks=all producer writes
continuously to an RF=3 partition led by A with followers N (next in line) and O. A is
SIGKILLed; before its session expires N is paused (SIGSTOP), so the controller elects N
(still unfenced) and O starts following a leader that never answers. When N's session
expires, O is elected. O must still hold every acknowledged record: it truncates only by
what the leader says of its epochs (OffsetForLeaderEpoch), never by its own HW. The test
asserts the scenario really happened (N led epoch 1 while paused; O leads epoch 2) and that
nothing acknowledged was lost or duplicated.
"""

from __future__ import annotations

import re
import time

import pytest

from chaos.checker import check_acked_read_once, check_identical, check_offsets_dense
from chaos.workload import ProducerWorkload, read_all
from tests.integration.cluster_fixtures import wait_until
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

pytest.importorskip("confluent_kafka")

TOPIC = "epochs"
SESSION_MS = 3000
# Pause N this long after killing A: well before A's session expires (then N, still
# unfenced, is elected) and long enough before N's own session expires for that election
# to happen first.
PAUSE_AFTER_KILL_S = SESSION_MS / 2000


def test_follower_with_a_stale_hw_keeps_acknowledged_records_when_it_becomes_leader(tmp_path):
    with replicated_cluster(tmp_path / "cluster", {"broker.session.timeout.ms": str(SESSION_MS),
                                                    "replica.lag.time.max.ms": "30000"}) as (cluster, nemesis):
        create_topic(cluster, TOPIC, partitions=1, configs={"min.insync.replicas": "2"})
        wait_full_isr(cluster, TOPIC, 1)
        state = partition_state(cluster, TOPIC, 0)
        a = state["leader"]
        n, o = [r for r in state["replicas"] if r != a]  # the election order: N before O
        with ProducerWorkload(cluster.bootstrap_servers, TOPIC, partitions=1) as writer:
            wait_until("300 acknowledged writes", lambda: len(writer.acked) >= 300)
            killed_at = nemesis.kill(a)
            acked_at_kill = max(x.offset for x in list(writer.acked))
            time.sleep(max(0.0, killed_at + PAUSE_AFTER_KILL_S - time.monotonic()))
            nemesis.pause(n)
            wait_for_state(cluster, TOPIC, 0, f"broker {n} elected while paused",
                           lambda s: s["leader"] == n, timeout_s=10)
            wait_for_state(cluster, TOPIC, 0, f"broker {o} elected after {n}'s session expired",
                           lambda s: s["leader"] == o, timeout_s=15)
            nemesis.resume(n)
            nemesis.restart(a)
            wait_full_isr(cluster, TOPIC, 1)
            more = len(writer.acked)
            wait_until("writes after the failovers", lambda: len(writer.acked) > more + 100)
            assert writer.stop() == 0
        assert writer.errors == [], writer.errors[:5]

        # The scenario happened as designed: O followed N in epoch 1, then led epoch 2.
        o_log = broker_log(cluster, o)
        assert re.search(rf"Follower {TOPIC}-0 of leader {n} with leader epoch 1\b", o_log), o_log[-3000:]
        started = re.search(rf"Leader {TOPIC}-0 with leader epoch 2 starting at offset (\d+)", o_log)
        assert started, o_log[-3000:]
        # Everything acknowledged before the kill is below the offset O's epoch starts at.
        assert int(started.group(1)) > acked_at_kill
        dropped = re.findall(rf"Truncated follower {TOPIC}-0 to offset (\d+)", o_log)
        assert all(int(x) > acked_at_kill for x in dropped), dropped

        acked = [(x.partition, x.offset, x.value) for x in writer.acked]
        read = read_all(cluster.bootstrap_servers, TOPIC, 1)
        problems = check_acked_read_once(acked, read) + check_offsets_dense(read)
        assert problems == [], problems[:10]
        wait_full_isr(cluster, TOPIC, 1)
        wait_replicas_caught_up(cluster, TOPIC, 1)
        cluster.stop()
        assert check_identical({b: replica_log_bytes(cluster, b, TOPIC, 0) for b in BROKERS}, TOPIC) == []
