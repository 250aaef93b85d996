"""RF=3, min.insync.replicas=2: an idempotent acks=all producer (confluent-kafka) writes while
the partition leader is SIGKILLed and restarted, then a follower, twice over.

Kafka's promise, checked on the recorded history: every acknowledged record is read back
exactly once at the offset it was acknowledged with, offsets stay dense, no client ever sees
a high watermark go backwards, and once every replica is back in the ISR the three replicas
hold byte-identical logs. Restarted brokers re-register with a new incarnation, truncate by
leader epoch, catch up and rejoin the ISR.
"""

from __future__ import annotations

import pytest

from chaos.checker import (
    check_acked_read_once,
    check_identical,
    check_monotonic,
    check_offsets_dense,
)
from chaos.workload import HighWatermarkSampler, ProducerWorkload, read_all
from tests.integration.cluster_fixtures import wait_until
from tests.integration.replication_fixtures import (
    BROKERS,
    broker_log,
    create_topic,
    partition_state,
    replica_log_bytes,
    replicated_cluster,
    wait_full_isr,
    wait_replicas_caught_up,
)

pytest.importorskip("confluent_kafka")

TOPIC = "ledger"
PARTITIONS = 2
ROUNDS = 2


def first_ack_after(writer: ProducerWorkload, partition: int, since: float, timeout_s: float = 30.0) -> float:
    """Seconds from `since` to the first acknowledgement of `partition` reported after it."""
    def found() -> float | None:
        times = [a.at for a in list(writer.acked) if a.partition == partition and a.at > since]
        return min(times) - since if times else None

    return wait_until(f"an acknowledged write to partition {partition}", found, timeout_s)  # type: ignore[no-any-return]


def test_acked_writes_survive_leader_and_follower_crashes(tmp_path):
    with replicated_cluster(tmp_path / "cluster") as (cluster, nemesis):
        create_topic(cluster, TOPIC, partitions=PARTITIONS, configs={"min.insync.replicas": "2"})
        wait_full_isr(cluster, TOPIC, PARTITIONS)
        bootstrap = cluster.bootstrap_servers
        recoveries = []
        with ProducerWorkload(bootstrap, TOPIC, partitions=PARTITIONS) as writer, \
                HighWatermarkSampler(bootstrap, TOPIC, partitions=PARTITIONS) as sampler:
            wait_until("200 acknowledged writes", lambda: len(writer.acked) >= 200)
            for _ in range(ROUNDS):
                leader = partition_state(cluster, TOPIC, 0)["leader"]
                killed_at = nemesis.kill(leader)
                recoveries.append(first_ack_after(writer, 0, killed_at))
                nemesis.restart(leader)
                wait_full_isr(cluster, TOPIC, PARTITIONS)
                state = partition_state(cluster, TOPIC, 0)
                follower = next(r for r in state["replicas"] if r != state["leader"])
                killed_at = nemesis.kill(follower)
                first_ack_after(writer, 0, killed_at)
                nemesis.restart(follower)
                wait_full_isr(cluster, TOPIC, PARTITIONS)
            acked_before_stop = len(writer.acked)
            wait_until("more writes after the last restart", lambda: len(writer.acked) > acked_before_stop + 100)
            assert writer.stop() == 0, "records still unacknowledged after the flush"
        assert writer.errors == [], writer.errors[:10]
        acked = [(a.partition, a.offset, a.value) for a in writer.acked]
        read = read_all(bootstrap, TOPIC, PARTITIONS)
        problems = check_acked_read_once(acked, read) + check_offsets_dense(read) \
            + check_monotonic(sampler.samples)
        assert problems == [], problems[:10]
        assert len(acked) == writer.sent and len(read) == len(acked)

        # Every replica back in the ISR and caught up: after a clean stop, identical bytes.
        wait_full_isr(cluster, TOPIC, PARTITIONS)
        wait_replicas_caught_up(cluster, TOPIC, PARTITIONS)
        cluster.stop()
        for p in range(PARTITIONS):
            logs = {b: replica_log_bytes(cluster, b, TOPIC, p) for b in BROKERS}
            assert check_identical(logs, f"{TOPIC}-{p}") == []
        for b in BROKERS:
            text = broker_log(cluster, b)
            assert "Traceback" not in text, text[-3000:]
        print(f"\nleader SIGKILL -> first acks=all write on its partition: "
              f"{', '.join(f'{r:.2f} s' for r in recoveries)}; {len(acked)} records acknowledged")
