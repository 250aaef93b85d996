"""Controlled shutdown under load: an idempotent acks=all producer (retries on) writes to an
RF=3 topic while the broker leading the most partitions is stopped with SIGTERM.

Kafka's promise: zero failed deliveries; every leader moves off the broker before it exits
(the controller answers should_shut_down only then, not the timeout); the broker is fenced
afterwards; started again from the same directory it recovers cleanly (no log recovery),
re-registers, catches up and rejoins every ISR; and (a second test) the controller then moves
leadership back to the preferred replicas (auto.leader.rebalance.enable).
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from chaos.checker import check_acked_read_once, check_offsets_dense
from chaos.workload import ProducerWorkload, read_all
from tests.integration.cluster_fixtures import http, wait_until
from tests.integration.replication_fixtures import (
    broker_log,
    create_topic,
    replicated_cluster,
    wait_full_isr,
)

pytest.importorskip("confluent_kafka")

TOPIC = "orders"
PARTITIONS = 12
EXIT_BOUND_S = 10.0


def leaders(cluster) -> dict[int, int]:
    status, body = http(f"{cluster.admin_url}/v1/topics/{TOPIC}")
    assert status == 200, body
    return {p["partition"]: p["leader"] for p in json.loads(body)["partitions"]}


def test_controlled_shutdown_while_producing_loses_nothing(tmp_path):
    with replicated_cluster(tmp_path / "cluster", {"controlled.shutdown.timeout.ms": "20000"}) as (cluster, nemesis):
        create_topic(cluster, TOPIC, partitions=PARTITIONS, configs={"min.insync.replicas": "2"})
        wait_full_isr(cluster, TOPIC, PARTITIONS)
        victim, led = Counter(leaders(cluster).values()).most_common(1)[0]
        with ProducerWorkload(cluster.bootstrap_servers, TOPIC, partitions=PARTITIONS) as writer:
            wait_until("300 acknowledged writes", lambda: len(writer.acked) >= 300)
            started = time.monotonic()
            report = cluster.node(victim).stop()
            took = time.monotonic() - started
            assert (report.outcome, report.exit_status) == ("stopped", 0), broker_log(cluster, victim)[-3000:]
            assert took < EXIT_BOUND_S
            assert victim not in leaders(cluster).values()
            status, body = http(f"{cluster.admin_url}/v1/brokers/{victim}")
            assert status == 200 and json.loads(body)["fenced"] is True, body
            acked_during = len(writer.acked)
            wait_until("writes while the broker is down", lambda: len(writer.acked) > acked_during + 200)
            nemesis.restart(victim)
            wait_full_isr(cluster, TOPIC, PARTITIONS)
            acked_after = len(writer.acked)
            wait_until("writes after it rejoined", lambda: len(writer.acked) > acked_after + 200)
            assert writer.stop() == 0
        assert writer.errors == [], writer.errors[:10]
        text = broker_log(cluster, victim)
        assert "Transitioning from PENDING_CONTROLLED_SHUTDOWN to SHUTTING_DOWN" in text, text[-3000:]
        assert "did not complete within controlled.shutdown.timeout.ms" not in text
        restarted = text.rsplit("tidelog launcher: starting", 1)[1]
        assert "bytes truncated by recovery" not in restarted and "Traceback" not in text
        acked = [(a.partition, a.offset, a.value) for a in writer.acked]
        read = read_all(cluster.bootstrap_servers, TOPIC, PARTITIONS)
        assert check_acked_read_once(acked, read) + check_offsets_dense(read) == []
        print(f"\nbroker {victim} led {led} of {PARTITIONS} partitions; SIGTERM -> exit {took:.2f} s "
              f"with {len(acked)} records acknowledged and none failed")


def test_leadership_returns_to_preferred_replicas_after_a_restart(tmp_path):
    """auto.leader.rebalance.enable: once a restarted broker is back in the ISRs, the controller
    hands it back the partitions it is the preferred (first) replica of."""
    with replicated_cluster(tmp_path / "cluster", {"leader.imbalance.check.interval.seconds": "1"}) \
            as (cluster, nemesis):
        create_topic(cluster, TOPIC, partitions=6, configs={"min.insync.replicas": "2"})
        wait_full_isr(cluster, TOPIC, 6)
        victim = Counter(leaders(cluster).values()).most_common(1)[0][0]
        assert cluster.node(victim).stop().exit_status == 0
        assert victim not in leaders(cluster).values()
        nemesis.restart(victim)
        wait_full_isr(cluster, TOPIC, 6)

        def preferred() -> bool:
            status, body = http(f"{cluster.admin_url}/v1/topics/{TOPIC}")
            return status == 200 and all(p["leader"] == p["replicas"][0] for p in json.loads(body)["partitions"])

        wait_until("every partition led by its preferred replica again", preferred)
        assert victim in leaders(cluster).values()

