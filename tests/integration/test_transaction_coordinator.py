"""The transaction coordinator against a real RF=3 cluster with real transactional producers:
confluent-kafka (librdkafka), kafka-python and aiokafka each commit a transaction over 3
partitions and abort one; a read_committed consumer sees exactly the committed values, in
order per partition, and a read_uncommitted one sees both. A second producer with the same
transactional.id fences the first; a producer that stops mid-transaction is aborted by the
coordinator after its transaction.timeout.ms (epoch bumped). `__transaction_state` is created on
first use with Kafka's configs, and DescribeTransactions shows each transaction's state."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from common.errors import ErrorCode
from common.broker_connection import BrokerUnavailable
from common.kafka_client import KafkaClient
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.transaction_admin import decode_describe_transactions_response
from localcluster.launcher import LocalCluster
from tests.integration.cluster_fixtures import http, wait_until
from tests.integration.txn_fixtures import bootstrap, hosts, new_topic, read_values, txn_cluster

confluent_kafka = pytest.importorskip("confluent_kafka")

PARTITIONS = 3
TIMEOUT_S = 60.0
# Fast enough for a test: the timeout abort runs every 500 ms (Kafka's default is 10 s).
PROPERTIES = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
              "transaction.state.log.num.partitions": "6"}


cluster = txn_cluster("txn-coord", PROPERTIES)


def describe(cluster: LocalCluster, tid: str) -> Any:
    """DescribeTransactions at the transactional id's coordinator, asked through the first broker
    that answers (one may be down)."""
    def attempt() -> Any:
        for host in hosts(cluster):
            try:
                with KafkaClient([host], client_id="txn-coord-test") as client:
                    request = messages.build(messages.request_type(ApiKey.FIND_COORDINATOR, 3), key=tid,
                                             key_type=messages.KEY_TYPE_TRANSACTION)
                    found = client.call(None, ApiKey.FIND_COORDINATOR, 3, request, messages.encode_request,
                                        messages.response_decoder(ApiKey.FIND_COORDINATOR))
                    if found.error_code != 0:  # COORDINATOR_NOT_AVAILABLE while __transaction_state is made
                        return None
                    client.metadata(None)  # the client learns the brokers' addresses
                    request = messages.build(messages.request_type(ApiKey.DESCRIBE_TRANSACTIONS, 0),
                                             transactional_ids=(tid,))
                    (state,) = client.call(found.node_id, ApiKey.DESCRIBE_TRANSACTIONS, 0, request,
                                           messages.encode_request, decode_describe_transactions_response)
                    return state if state.error_code == 0 or state.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND \
                        else None
            except BrokerUnavailable:
                continue
        return None

    return wait_until(f"DescribeTransactions of {tid}", attempt, TIMEOUT_S)


def wait_state(cluster: LocalCluster, tid: str, want: str) -> Any:
    def reached() -> Any:
        state = describe(cluster, tid)
        return state if state.state == want else None
    return wait_until(f"{tid} reaches {want}", reached, TIMEOUT_S)


def consume(cluster: LocalCluster, topic: str, isolation: str, expected: int) -> list[tuple[int, bytes]]:
    return read_values(cluster, topic, isolation, expected, partitions=PARTITIONS, timeout_s=TIMEOUT_S)


def values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


# ---- the three clients: commit one transaction, abort one ----------------------------------


def confluent_transactions(cluster: LocalCluster, topic: str, tid: str) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap(cluster), "transactional.id": tid})
    p.init_transactions(TIMEOUT_S)
    for outcome in ("commit", "abort"):
        p.begin_transaction()
        for i, v in enumerate(values(outcome, 30)):
            p.produce(topic, v, partition=i % PARTITIONS)
        p.flush(TIMEOUT_S)
        if outcome == "commit":
            p.commit_transaction(TIMEOUT_S)
        else:
            p.abort_transaction(TIMEOUT_S)


def kafka_python_transactions(cluster: LocalCluster, topic: str, tid: str) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap(cluster).split(","), transactional_id=tid)
    try:
        p.init_transactions()
        for outcome in ("commit", "abort"):
            p.begin_transaction()
            for i, v in enumerate(values(outcome, 30)):
                p.send(topic, v, partition=i % PARTITIONS)
            p.flush()
            if outcome == "commit":
                p.commit_transaction()
            else:
                p.abort_transaction()
    finally:
        p.close()


def aiokafka_transactions(cluster: LocalCluster, topic: str, tid: str) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap(cluster), transactional_id=tid)
        await p.start()
        try:
            for outcome in ("commit", "abort"):
                await p.begin_transaction()
                for i, v in enumerate(values(outcome, 30)):
                    await p.send(topic, v, partition=i % PARTITIONS)
                if outcome == "commit":
                    await p.commit_transaction()
                else:
                    await p.abort_transaction()
        finally:
            await p.stop()

    asyncio.run(asyncio.wait_for(run(), TIMEOUT_S))


CLIENTS = {"confluent": confluent_transactions, "kafka-python": kafka_python_transactions,
           "aiokafka": aiokafka_transactions}


@pytest.mark.parametrize("client", list(CLIENTS))
def test_commit_and_abort_across_three_partitions(cluster: LocalCluster, client: str) -> None:
    topic, tid = new_topic(cluster, f"txn-{client}", PARTITIONS), f"tx-{client}"
    CLIENTS[client](cluster, topic, tid)
    done = wait_state(cluster, tid, "CompleteAbort")  # the last transaction: markers acknowledged
    assert done.producer_epoch >= 0 and done.timeout_ms > 0
    committed = consume(cluster, topic, "read_committed", 30)
    assert sorted(v for _, v in committed) == sorted(values("commit", 30))
    for partition in range(PARTITIONS):  # in order per partition
        assert [v for p, v in committed if p == partition] == [
            v for i, v in enumerate(values("commit", 30)) if i % PARTITIONS == partition]
    everything = consume(cluster, topic, "read_uncommitted", 60)
    assert sorted(v for _, v in everything) == sorted(values("commit", 30) + values("abort", 30))


def test_transaction_state_topic_has_kafkas_configs(cluster: LocalCluster) -> None:
    describe(cluster, "tx-configs")  # FindCoordinator created it (earlier tests, or now: retried)
    status, body = http(cluster.admin_url + "/v1/topics/__transaction_state")
    assert status == 200, body
    topic = json.loads(body)
    assert len(topic["partitions"]) == 6, topic
    assert all(len(p["replicas"]) == 3 for p in topic["partitions"]), topic
    status, body = http(cluster.admin_url + "/v1/topics/__transaction_state/configs")
    assert status == 200, body
    configs = json.loads(body)
    configs = configs.get("configs", configs)
    assert {k: configs.get(k) for k in ("cleanup.policy", "min.insync.replicas", "compression.type",
                                         "unclean.leader.election.enable")} == {
        "cleanup.policy": "compact", "min.insync.replicas": "2", "compression.type": "uncompressed",
        "unclean.leader.election.enable": "false"}, configs


def test_a_second_producer_fences_the_first(cluster: LocalCluster) -> None:
    topic, tid = new_topic(cluster, "txn-fence", PARTITIONS), "tx-fence"
    first = confluent_kafka.Producer({"bootstrap.servers": bootstrap(cluster), "transactional.id": tid})
    first.init_transactions(TIMEOUT_S)
    first.begin_transaction()
    first.produce(topic, b"zombie", partition=0)
    first.flush(TIMEOUT_S)
    second = confluent_kafka.Producer({"bootstrap.servers": bootstrap(cluster), "transactional.id": tid})
    second.init_transactions(TIMEOUT_S)  # aborts the first's transaction and bumps the epoch
    with pytest.raises(confluent_kafka.KafkaException) as fenced:
        first.commit_transaction(TIMEOUT_S)
    error = fenced.value.args[0]
    assert error.code() in (confluent_kafka.KafkaError._FENCED, confluent_kafka.KafkaError.PRODUCER_FENCED,
                            confluent_kafka.KafkaError.INVALID_PRODUCER_EPOCH), error
    second.begin_transaction()
    second.produce(topic, b"live", partition=0)
    second.commit_transaction(TIMEOUT_S)
    wait_state(cluster, tid, "CompleteCommit")
    assert [v for _, v in consume(cluster, topic, "read_committed", 1)] == [b"live"]


def test_kafka_python_is_fenced_by_a_second_producer(cluster: LocalCluster) -> None:
    from kafka import KafkaProducer
    from kafka.errors import InvalidProducerEpochError, ProducerFencedError

    topic, tid = new_topic(cluster, "txn-fence-kp", PARTITIONS), "tx-fence-kp"
    first = KafkaProducer(bootstrap_servers=bootstrap(cluster).split(","), transactional_id=tid)
    second = KafkaProducer(bootstrap_servers=bootstrap(cluster).split(","), transactional_id=tid)
    try:
        first.init_transactions()
        first.begin_transaction()
        first.send(topic, b"zombie", partition=0)
        first.flush()
        second.init_transactions()
        with pytest.raises((ProducerFencedError, InvalidProducerEpochError)):
            first.commit_transaction()
        second.begin_transaction()
        second.send(topic, b"live", partition=0)
        second.commit_transaction()
    finally:
        first.close(timeout=5)
        second.close(timeout=5)
    wait_state(cluster, tid, "CompleteCommit")
    assert [v for _, v in consume(cluster, topic, "read_committed", 1)] == [b"live"]


def test_aiokafka_is_fenced_by_a_second_producer(cluster: LocalCluster) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import InvalidProducerEpoch, ProducerFenced

    topic, tid = new_topic(cluster, "txn-fence-aio", PARTITIONS), "tx-fence-aio"

    async def run() -> None:
        first = AIOKafkaProducer(bootstrap_servers=bootstrap(cluster), transactional_id=tid)
        second = AIOKafkaProducer(bootstrap_servers=bootstrap(cluster), transactional_id=tid)
        await first.start()
        try:
            await first.begin_transaction()
            await first.send_and_wait(topic, b"zombie", partition=0)
            await second.start()  # its InitProducerId aborts the first's transaction
            with pytest.raises((ProducerFenced, InvalidProducerEpoch)):
                await first.commit_transaction()
            async with second.transaction():
                await second.send_and_wait(topic, b"live", partition=0)
        finally:
            await first.stop()
            await second.stop()

    asyncio.run(asyncio.wait_for(run(), TIMEOUT_S))
    wait_state(cluster, tid, "CompleteCommit")
    assert [v for _, v in consume(cluster, topic, "read_committed", 1)] == [b"live"]


def test_a_stopped_producer_is_aborted_after_its_timeout(cluster: LocalCluster) -> None:
    topic, tid = new_topic(cluster, "txn-timeout", PARTITIONS), "tx-timeout"
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap(cluster), "transactional.id": tid,
                                  "transaction.timeout.ms": 3000})
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    p.produce(topic, b"never", partition=1)
    p.flush(TIMEOUT_S)
    ongoing = describe(cluster, tid)
    assert ongoing.state == "Ongoing"
    aborted = wait_state(cluster, tid, "CompleteAbort")  # the coordinator's timeout abort
    assert aborted.producer_epoch == ongoing.producer_epoch + 1  # fenced: the zombie cannot commit
    with pytest.raises(confluent_kafka.KafkaException):
        p.commit_transaction(10)
    assert consume(cluster, topic, "read_committed", 0) == []


def test_an_oversized_timeout_is_refused(cluster: LocalCluster) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap(cluster), "transactional.id": "tx-huge",
                                  "transaction.timeout.ms": 3_600_000})
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        p.init_transactions(TIMEOUT_S)
    assert refused.value.args[0].code() == confluent_kafka.KafkaError.INVALID_TRANSACTION_TIMEOUT
    assert ErrorCode.INVALID_TRANSACTION_TIMEOUT == 50


def test_consume_transform_produce_with_offsets_in_the_transaction(cluster: LocalCluster) -> None:
    """send_offsets_to_transaction (AddOffsetsToTxn, then the group's TxnOffsetCommit): an aborted
    round leaves neither output nor offsets; the committed round leaves both, exactly once."""
    source, sink = (new_topic(cluster, name, PARTITIONS) for name in ("ctp-in", "ctp-out"))
    group = "ctp-group"
    feed = confluent_kafka.Producer({"bootstrap.servers": bootstrap(cluster)})
    for i, v in enumerate(values("in", 30)):
        feed.produce(source, v, partition=i % PARTITIONS)
    assert feed.flush(TIMEOUT_S) == 0
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": group,
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                         "isolation.level": "read_committed"})
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap(cluster), "transactional.id": "tx-ctp"})
    try:
        producer.init_transactions(TIMEOUT_S)
        consumer.subscribe([source])
        for outcome in ("abort", "commit"):
            got: list[Any] = []
            deadline = time.monotonic() + TIMEOUT_S
            while len(got) < 30 and time.monotonic() < deadline:  # bounded
                got += [m for m in consumer.consume(30, 0.5) if m.error() is None]
            assert len(got) == 30
            producer.begin_transaction()
            for m in got:
                producer.produce(sink, m.value().replace(b"in", b"out"), partition=m.partition())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), TIMEOUT_S)
            if outcome == "abort":
                producer.abort_transaction(TIMEOUT_S)
                wait_state(cluster, "tx-ctp", "CompleteAbort")
                committed = consumer.committed([confluent_kafka.TopicPartition(source, p) for p in range(PARTITIONS)],
                                               TIMEOUT_S)
                assert all(tp.offset < 0 for tp in committed), committed  # nothing committed
                for tp in consumer.assignment():  # consume the same records again
                    consumer.seek(confluent_kafka.TopicPartition(source, tp.partition, 0))
            else:
                producer.commit_transaction(TIMEOUT_S)
        wait_state(cluster, "tx-ctp", "CompleteCommit")
        committed = consumer.committed([confluent_kafka.TopicPartition(source, p) for p in range(PARTITIONS)],
                                       TIMEOUT_S)
        assert sum(tp.offset for tp in committed) == 30, committed
    finally:
        consumer.close()
    out = consume(cluster, sink, "read_committed", 30)
    assert sorted(v for _, v in out) == sorted(values("out", 30))


def transaction_metrics(cluster: LocalCluster) -> dict[str, float]:
    """Every tidelog_broker_transaction* sample (name with its labels), summed over the
    coordinators, each of which shows its own on /metrics."""
    totals: dict[str, float] = {}
    for broker in cluster.brokers:
        status, body = http(broker.spec.metrics_url)
        assert status == 200
        for line in body.decode().splitlines():
            name, _, value = line.rpartition(" ")
            if name.startswith("tidelog_broker_transaction"):
                totals[name] = totals.get(name, 0.0) + float(value)
    return totals


def test_metrics_show_an_ongoing_transaction(cluster: LocalCluster) -> None:
    topic, tid = new_topic(cluster, "txn-ongoing", PARTITIONS), "tx-ongoing"
    ongoing = "tidelog_broker_transactions_ongoing"
    before = transaction_metrics(cluster)[ongoing]
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap(cluster), "transactional.id": tid})
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    p.produce(topic, b"open", partition=0)
    p.flush(TIMEOUT_S)
    wait_state(cluster, tid, "Ongoing")
    during = transaction_metrics(cluster)
    assert during[ongoing] == before + 1, during
    assert during['tidelog_broker_transactions{state="Ongoing"}'] == before + 1, during
    p.commit_transaction(TIMEOUT_S)
    wait_state(cluster, tid, "CompleteCommit")
    assert transaction_metrics(cluster)[ongoing] == before


def test_metrics_count_the_transactions(cluster: LocalCluster) -> None:
    """Run after the tests above: commits, aborts and a timeout abort were counted by the
    coordinators."""
    totals = transaction_metrics(cluster)
    assert totals.get("tidelog_broker_transactions_committed_total", 0) >= 4, totals  # 3 clients + fence test
    assert totals.get("tidelog_broker_transactions_aborted_total", 0) >= 4, totals
    assert totals.get("tidelog_broker_transactions_timed_out_total", 0) >= 1, totals


def kafka_python_offsets_round(cluster: LocalCluster, tid: str, sink: str, outputs: list[bytes],
                               offsets: dict[int, int], source: str, group: str, rounds: tuple[str, ...]) -> None:
    from kafka import KafkaProducer
    from kafka.structs import OffsetAndMetadata, TopicPartition

    p = KafkaProducer(bootstrap_servers=bootstrap(cluster).split(","), transactional_id=tid)
    try:
        p.init_transactions()
        for outcome in rounds:
            p.begin_transaction()
            for i, v in enumerate(outputs):
                p.send(sink, v, partition=i % PARTITIONS)
            p.send_offsets_to_transaction({TopicPartition(source, part): OffsetAndMetadata(o, "", -1)
                                           for part, o in offsets.items()}, group)
            if outcome == "commit":
                p.commit_transaction()
            else:
                p.abort_transaction()
    finally:
        p.close()


def aiokafka_offsets_round(cluster: LocalCluster, tid: str, sink: str, outputs: list[bytes],
                           offsets: dict[int, int], source: str, group: str, rounds: tuple[str, ...]) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap(cluster), transactional_id=tid)
        await p.start()
        try:
            for outcome in rounds:
                await p.begin_transaction()
                for i, v in enumerate(outputs):
                    await p.send(sink, v, partition=i % PARTITIONS)
                await p.send_offsets_to_transaction({TopicPartition(source, part): o for part, o in offsets.items()},
                                                    group)
                if outcome == "commit":
                    await p.commit_transaction()
                else:
                    await p.abort_transaction()
        finally:
            await p.stop()

    asyncio.run(asyncio.wait_for(run(), TIMEOUT_S))


OFFSETS_CLIENTS = {"kafka-python": kafka_python_offsets_round, "aiokafka": aiokafka_offsets_round}


@pytest.mark.parametrize("client", list(OFFSETS_CLIENTS))
def test_send_offsets_to_transaction_of_the_python_clients(cluster: LocalCluster, client: str) -> None:
    """kafka-python's and aiokafka's send_offsets_to_transaction (AddOffsetsToTxn, then
    TxnOffsetCommit for a group given by id): an aborted round commits neither its output nor
    its offsets, a committed round both."""
    source, sink = (new_topic(cluster, f"offsets-{side}-{client}", PARTITIONS) for side in ("in", "out"))
    group, tid = f"offsets-{client}", f"tx-offsets-{client}"
    wanted = {p: 10 + p for p in range(PARTITIONS)}
    reader = confluent_kafka.Consumer({"bootstrap.servers": bootstrap(cluster), "group.id": group,
                                       "enable.auto.commit": False})
    try:
        def committed() -> dict[int, int]:
            found = reader.committed([confluent_kafka.TopicPartition(source, p) for p in range(PARTITIONS)],
                                     TIMEOUT_S)
            return {tp.partition: tp.offset for tp in found}

        OFFSETS_CLIENTS[client](cluster, f"{tid}-a", sink, values("aborted", 30), wanted, source, group, ("abort",))
        wait_state(cluster, f"{tid}-a", "CompleteAbort")
        assert all(o < 0 for o in committed().values()), committed()
        OFFSETS_CLIENTS[client](cluster, f"{tid}-c", sink, values("kept", 30), wanted, source, group, ("commit",))
        wait_state(cluster, f"{tid}-c", "CompleteCommit")
        assert committed() == wanted
    finally:
        reader.close()
    assert sorted(v for _, v in consume(cluster, sink, "read_committed", 30)) == sorted(values("kept", 30))
