"""Log compaction with real clients: confluent-kafka writes 100k records over 1k keys to a
compacted RF=3 topic with one idempotent producer across cleanings; every replica then
holds exactly the last value per key, a consumer reads it across the cleaned gaps, and a
keyless record is refused with INVALID_RECORD."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker.log.cleaner_manager import FAIL_POINT_ENV
from common.prometheus import samples
from common.record_batch import iter_batches
from common.records import decode_records
from tests.integration.cluster_fixtures import http, wait_until
from tests.integration.replication_clients import broker_gauges
from tests.integration.replication_fixtures import (
    BROKERS,
    create_topic,
    partition_state,
    replicated_cluster,
    wait_full_isr,
    wait_replicas_caught_up,
)
from localcluster.launcher import LocalCluster
from localcluster.node_process import NodeProcess

TOPIC = "changelog"
KEYS = 1_000
RECORDS = 100_000
CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(256 * 1024),
           "min.cleanable.dirty.ratio": "0.01", "min.insync.replicas": "2"}


def replica_records(cluster: LocalCluster, broker_id: int) -> list[tuple[int, bytes, bytes, bool]] | None:
    """(offset, key, value, in the active segment) of every record of one replica, read from
    its segment files; None while a swap renames them under us."""
    directory = cluster.node(broker_id).spec.directory / "data" / f"{TOPIC}-0"
    paths = sorted(directory.glob("*.log"))
    out = []
    try:
        for path in paths:
            data = path.read_bytes()
            for pos, header in iter_batches(data, allow_partial_tail=True):
                for r in decode_records(data, pos, header):
                    out.append((r.offset, r.key, r.value, path == paths[-1]))
    except (FileNotFoundError, Exception):  # noqa: BLE001 - a file swapped mid-read: read again
        return None
    return out


def compacted(records: list[tuple[int, bytes, bytes, bool]], expected: dict[bytes, bytes]) -> bool:
    latest = {key: value for _, key, value, _ in records}
    cleaned_keys = [key for _, key, _, active in records if not active]
    offsets = [offset for offset, _, _, _ in records]
    return (latest == expected and len(cleaned_keys) == len(set(cleaned_keys))
            and offsets == sorted(set(offsets)) and len(records) < RECORDS)


def consume_all(bootstrap: str) -> list[tuple[int, bytes, bytes]]:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compaction-reader",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    out = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])

        def read() -> bool:
            for message in consumer.consume(5000, 0.5):
                error = message.error()
                if error is not None:
                    assert error.code() == KafkaError._PARTITION_EOF, error
                    return True
                out.append((message.offset(), message.key(), message.value()))
            return False

        wait_until("the consumer reaches the end of the partition", read, 60.0)
    finally:
        consumer.close()
    return out


def produce_keyed(bootstrap: str, numbers: range, keys: int, expected: dict[bytes, bytes], *, acks: str) -> None:
    """Record i is key-(i % keys) = value-i, for each i of `numbers`; `expected` keeps each key's last value."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "batch.size": 4000})
    for i in numbers:
        key, value = b"key-%d" % (i % keys), b"value-%d" % i
        expected[key] = value
        while True:  # bounded: flushing the local queue makes room
            try:
                producer.produce(TOPIC, key=key, value=value)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(30) == 0


def test_compacted_rf3_topic_with_real_clients(tmp_path: Path) -> None:
    from confluent_kafka import Producer

    with replicated_cluster(tmp_path, {"log.cleaner.backoff.ms": "200"}) as (cluster, _):
        create_topic(cluster, TOPIC, partitions=1, configs=CONFIGS)
        wait_full_isr(cluster, TOPIC, 1)
        bootstrap = cluster.bootstrap_servers
        assert bootstrap is not None
        errors: list[Any] = []
        expected: dict[bytes, bytes] = {}

        def on_delivery(error: Any, _message: Any) -> None:
            if error is not None:
                errors.append(error)

        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                             "acks": "all", "linger.ms": 5, "compression.type": "lz4"})

        def send(start: int, end: int) -> None:
            for i in range(start, end):
                key, value = b"key-%d" % (i % KEYS), b"value-%d" % i
                expected[key] = value
                while True:  # bounded: flushing the local queue makes room
                    try:
                        producer.produce(TOPIC, key=key, value=value, on_delivery=on_delivery)
                        break
                    except BufferError:
                        producer.poll(0.1)
                producer.poll(0)
            assert producer.flush(60) == 0

        send(0, RECORDS // 2)
        leader = partition_state(cluster, TOPIC, 0)["leader"]
        wait_until("the leader cleaned the log",
                   lambda: broker_gauges(cluster, leader)["tidelog_broker_log_cleaner_runs_total"] >= 1,
                   60.0)
        send(RECORDS // 2, RECORDS)  # the same idempotent producer, across the cleaning
        assert errors == []  # no OUT_OF_ORDER_SEQUENCE, no UNKNOWN_PRODUCER_ID
        wait_replicas_caught_up(cluster, TOPIC, 1)
        for broker in BROKERS:  # replicas compact independently, each to the same result
            wait_until(f"broker {broker}: the last value of every key, each key once below "
                       "the active segment",
                       lambda b=broker: (r := replica_records(cluster, b)) is not None
                       and compacted(r, expected), 90.0)
        read = consume_all(bootstrap)
        assert {key: value for _, key, value in read} == expected
        assert [o for o, _, _ in read] == sorted({o for o, _, _ in read}) and len(read) < RECORDS
        gauges = broker_gauges(cluster, leader)
        assert gauges["tidelog_broker_log_cleaner_bytes_cleaned_total"] > 0
        # a record without a key is refused, and nothing is stored
        keyless = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0,
                            "enable.idempotence": False})
        refused: list[Any] = []
        keyless.produce(TOPIC, value=b"no key", on_delivery=lambda e, m: refused.append(e))
        assert keyless.flush(30) == 0
        assert [e.name() for e in refused] == ["INVALID_RECORD"]
        assert "Cleaned log changelog-0" in cluster.node(leader).spec.log_path.read_text(errors="replace")


# ~40 s each: make test kills at one step, make test-long at the other three
@pytest.mark.parametrize("step", [pytest.param("after_cleaned", marks=pytest.mark.long), "after_swap",
                                  pytest.param("mid_delete", marks=pytest.mark.long),
                                  pytest.param("after_live", marks=pytest.mark.long)])
def test_kill_9_at_a_swap_step_recovers_a_whole_log(tmp_path: Path, step: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker SIGKILLs itself at one step of its first swap (the fail point); restarted
    without it, its log holds every key's latest value, CRC-valid, in offset order, and the
    loader says how it finished or dropped the interrupted swap."""
    from confluent_kafka import Producer

    monkeypatch.setenv(FAIL_POINT_ENV, step)  # every broker inherits it; only one hosts a
    with replicated_cluster(tmp_path, {"log.cleaner.backoff.ms": "200"}) as (cluster, _):  # compacted log
        create_topic(cluster, TOPIC, partitions=1, replication_factor=1,
                     configs={**CONFIGS, "segment.bytes": str(64 * 1024), "min.insync.replicas": "1"})
        broker = partition_state(cluster, TOPIC, 0)["leader"]
        node = cluster.node(broker)
        bootstrap = node.spec.bootstrap_address
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                             "message.timeout.ms": 10_000})
        expected: dict[bytes, bytes] = {}
        sent = 0
        while node.running() and sent < 50_000:  # bounded: at most 50k records
            key, value = b"key-%d" % (sent % 100), b"value-%d" % sent
            try:
                producer.produce(TOPIC, key=key, value=value)
            except BufferError:
                producer.poll(0.1)
                continue
            expected[key] = value
            sent += 1
            if sent % 1000 == 0:
                producer.flush(10)
        wait_until(f"broker {broker} killed at fail point {step}", lambda: not node.running(), 60.0)
        delivered = expected  # what was acknowledged before the kill is a prefix of `expected`
        monkeypatch.delenv(FAIL_POINT_ENV)
        index = cluster.nodes.index(node)
        cluster.nodes[index] = NodeProcess.spawn(node.spec)
        cluster.write_cluster_file()
        def restarted_log() -> str | None:
            # whole once the partition's log is loaded: the recovery lines come before that
            text = cluster.node(broker).spec.log_path.read_text(errors="replace")
            restarted = text.split("tidelog launcher: starting")[-1]
            return text if any(f"partition={TOPIC}-0" in line and "Loaded log with" in line
                               for line in restarted.splitlines()) else None

        log_text = wait_until("the restarted broker loaded its logs", restarted_log, 60.0)
        wait_until("the restarted broker leads the partition again",
                   lambda: partition_state(cluster, TOPIC, 0)["leader"] == broker, 60.0)
        assert f"cleaner fail point {step}" in log_text
        recovery = log_text.split("tidelog launcher: starting")[-1]
        if step == "after_cleaned":
            assert ".log.cleaned" in recovery and "Completed the interrupted swap" not in recovery
        elif step != "after_live":
            assert "Completed the interrupted swap" in recovery
        read = consume_all(bootstrap)
        offsets = [o for o, _, _ in read]
        assert offsets == sorted(set(offsets))
        latest = {key: value for _, key, value in read}
        # every key's value is one that was written for it, and no key went missing
        assert set(latest) <= set(delivered)
        for key, value in latest.items():
            assert int(value.split(b"-")[1]) % 100 == int(key.split(b"-")[1])
        producer.flush(5)


def test_cleanup_policy_change_on_a_live_topic(tmp_path: Path) -> None:
    """delete -> compact through the admin API compacts the live topic, no restart."""
    with replicated_cluster(tmp_path, {"log.cleaner.backoff.ms": "200"}) as (cluster, _):
        create_topic(cluster, TOPIC, partitions=1, replication_factor=1,
                     configs={"segment.bytes": str(16 * 1024), "min.cleanable.dirty.ratio": "0.01"})
        broker = partition_state(cluster, TOPIC, 0)["leader"]
        bootstrap = cluster.node(broker).spec.bootstrap_address
        expected: dict[bytes, bytes] = {}
        produce_keyed(bootstrap, range(20_000), 100, expected, acks="1")
        runs = "tidelog_broker_log_cleaner_runs_total"
        assert broker_gauges(cluster, broker)[runs] == 0  # cleanup.policy=delete: never cleaned
        status, body = http(f"{cluster.admin_url}/v1/topics/{TOPIC}/configs", "PATCH",
                            {"configs": {"cleanup.policy": "compact"}})
        assert status == 200, body
        wait_until("the broker compacts the topic", lambda: broker_gauges(cluster, broker)[runs] >= 1, 60.0)
        read = consume_all(bootstrap)
        assert {key: value for _, key, value in read} == expected and len(read) < 20_000


def test_a_cleaned_log_survives_kill_9_and_sigterm(tmp_path: Path) -> None:
    """The only replica of a compacted log is cleaned, then (1) SIGKILLed, its cleaned segments
    above the recovery point (checkpointed once a minute): restarted, it still holds every
    record the consumer read before, gaps included, since the logs load with the topic's
    checkpointed config; (2) cleaned again and SIGTERMed: it stops cleanly (its cleaner
    processes, sharing the process group's SIGTERM, do not hold the broker up)."""
    with replicated_cluster(tmp_path, {"log.cleaner.backoff.ms": "200"}) as (cluster, _):
        create_topic(cluster, TOPIC, partitions=1, replication_factor=1,
                     configs={**CONFIGS, "segment.bytes": str(16 * 1024), "min.insync.replicas": "1"})
        broker = partition_state(cluster, TOPIC, 0)["leader"]
        bootstrap = cluster.node(broker).spec.bootstrap_address
        runs = "tidelog_broker_log_cleaner_runs_total"
        expected: dict[bytes, bytes] = {}

        def produce_and_clean(start: int) -> list[tuple[int, bytes, bytes]]:
            before = broker_gauges(cluster, broker)[runs]
            produce_keyed(bootstrap, range(start, start + 10_000), 50, expected, acks="all")
            # A run that began while the records went in cleans only part of them and the next
            # run the rest: wait until one has run and none is owed (no dirty bytes left).
            dirty = f'tidelog_broker_log_cleaner_dirty_ratio{{partition="0",topic="{TOPIC}"}}'
            url = cluster.node(broker).spec.metrics_url
            wait_until("the broker cleans the whole log",
                       lambda: broker_gauges(cluster, broker)[runs] > before
                       and samples(http(url)[1].decode()).get(dirty) == 0.0, 60.0)
            read = consume_all(bootstrap)
            assert {key: value for _, key, value in read} == expected and len(read) < start + 10_000
            return read

        def restart() -> None:
            index = cluster.nodes.index(cluster.node(broker))
            cluster.nodes[index] = NodeProcess.spawn(cluster.node(broker).spec)
            cluster.write_cluster_file()
            wait_until("the restarted broker leads the partition again",
                       lambda: partition_state(cluster, TOPIC, 0)["leader"] == broker, 60.0)

        read = produce_and_clean(0)
        assert cluster.node(broker).kill().outcome == "killed"
        restart()
        assert consume_all(bootstrap) == read
        log_text = cluster.node(broker).spec.log_path.read_text(errors="replace")
        assert "Truncated" not in log_text.split("tidelog launcher: starting")[-1]

        read = produce_and_clean(10_000)
        report = cluster.node(broker).stop(30.0)
        assert (report.outcome, report.exit_status) == ("stopped", 0), report.describe()
        restart()
        assert consume_all(bootstrap) == read
