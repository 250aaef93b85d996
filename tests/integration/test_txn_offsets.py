"""The group coordinator's part of transactions on a real broker (issue 27, KIP-98/KIP-447).

A TxnOffsetCommit (kio's messages, a producer id of the test's own: this cluster runs with
`transaction.partition.verification.enable=false`, so the group coordinator does not ask the
transaction coordinator about it, as a Kafka broker with that setting) stores a consumer group's offset in the
producer's transaction: a confluent-kafka consumer still reads the offset committed before
it, through a broker restart in between (the coordinator reloads the pending offset from
`__consumer_offsets`); the transaction coordinator's WriteTxnMarkers to the group's
`__consumer_offsets` partition then commits it (the consumer reads the new offset) or aborts
another producer's (nothing changes).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from common.errors import ErrorCode as E
from common.kafka_client import BrokerUnavailable, KafkaClient
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from groups.partitioner import GROUP_METADATA_TOPIC_NAME, coordinator_partition
from localcluster.launcher import LocalCluster
from localcluster.node_process import NodeProcess
from tests.integration.cluster_fixtures import READY_S, running_cluster, wait_until
from tests.integration.replication_fixtures import create_topic

confluent_kafka = pytest.importorskip("confluent_kafka")

OFFSETS_PARTITIONS = 3
PROPERTIES = {"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS), "group.initial.rebalance.delay.ms": "0",
              "transaction.partition.verification.enable": "false"}
GROUP, TOPIC = "txn-offsets-group", "txn-offsets-in"
PID, OTHER_PID, EPOCH = 9_000, 9_001, 0
RETRIABLE = {E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR,
             E.NOT_LEADER_OR_FOLLOWER, E.UNKNOWN_TOPIC_OR_PARTITION}


@pytest.fixture
def cluster(tmp_path) -> Iterator[LocalCluster]:  # noqa: ANN001
    with running_cluster(tmp_path / "cluster", PROPERTIES) as started:
        yield started


def address(cluster: LocalCluster) -> tuple[str, int]:
    host, port = (cluster.bootstrap_servers or "").split(",")[0].rsplit(":", 1)
    return host, int(port)


def committed(cluster: LocalCluster) -> int:
    """The group's committed offset of TOPIC-0 as a confluent-kafka consumer reads it
    (read_uncommitted: librdkafka then sends no require_stable)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": GROUP,
                         "isolation.level": "read_uncommitted", "enable.auto.commit": False})
    try:
        (tp,) = consumer.committed([TopicPartition(TOPIC, 0)], timeout=10)
        assert tp.error is None, tp.error
        return int(tp.offset)
    finally:
        consumer.close()


def call(cluster: LocalCluster, api_key: ApiKey, version: int, request: Any) -> Any:
    with KafkaClient([address(cluster)], client_id="txn-offsets-test") as client:
        return client.call(None, api_key, version, request, messages.encode_request,
                           messages.response_decoder(api_key))


def txn_offset_commit(cluster: LocalCluster, producer_id: int, offset: int) -> int:
    """TxnOffsetCommit v3 (flexible, KIP-447's fields) of TOPIC-0: its partition's error code."""
    m = messages.request_module(ApiKey.TXN_OFFSET_COMMIT, 3)
    request = m.TxnOffsetCommitRequest(
        transactional_id="txn-offsets", group_id=GROUP, producer_id=producer_id, producer_epoch=EPOCH,
        generation_id=-1, member_id="", group_instance_id=None, topics=(m.TxnOffsetCommitRequestTopic(
            name=TOPIC, partitions=(m.TxnOffsetCommitRequestPartition(
                partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata=""),)),))
    response = call(cluster, ApiKey.TXN_OFFSET_COMMIT, 3, request)
    (topic,) = response.topics
    (partition,) = topic.partitions
    return int(partition.error_code)


def offset_fetch(cluster: LocalCluster, *, require_stable: bool) -> tuple[int, int]:
    """OffsetFetch v8 of TOPIC-0 for GROUP: (offset, error code)."""
    m = messages.request_module(ApiKey.OFFSET_FETCH, 8)
    request = m.OffsetFetchRequest(groups=(m.OffsetFetchRequestGroup(group_id=GROUP, topics=(
        m.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=(0,)),)),), require_stable=require_stable)
    response = call(cluster, ApiKey.OFFSET_FETCH, 8, request)
    (group,) = response.groups
    (topic,) = group.topics
    (partition,) = topic.partitions
    return int(partition.committed_offset), int(partition.error_code)


def write_marker(cluster: LocalCluster, producer_id: int, committed: bool) -> int:
    """WriteTxnMarkers v1 for the group's `__consumer_offsets` partition, as the transaction
    coordinator sends it: that partition's error code."""
    m = messages.request_module(ApiKey.WRITE_TXN_MARKERS, 1)
    partition = coordinator_partition(GROUP, OFFSETS_PARTITIONS)
    request = m.WriteTxnMarkersRequest(markers=(m.WritableTxnMarker(
        producer_id=producer_id, producer_epoch=EPOCH, transaction_result=committed, coordinator_epoch=0,
        topics=(m.WritableTxnMarkerTopic(name=GROUP_METADATA_TOPIC_NAME, partition_indexes=(partition,)),)),))
    response = call(cluster, ApiKey.WRITE_TXN_MARKERS, 1, request)
    (result,) = response.markers
    (topic,) = result.topics
    (answer,) = topic.partitions
    return int(answer.error_code)


def until_answered(what: str, send: Any) -> int:
    """`send()` until its error code is not a retriable coordinator error (a broker starting,
    a partition loading); that code."""
    answers: list[int] = []

    def answered() -> bool:
        try:
            answers.append(send())
        except BrokerUnavailable:
            return False
        return answers[-1] not in RETRIABLE

    wait_until(what, answered, timeout_s=READY_S)
    return answers[-1]


def restart_broker(cluster: LocalCluster) -> None:
    broker = cluster.brokers[0]
    report = broker.stop()
    assert report.exit_status == 0, broker.spec.log_path.read_text(errors="replace")[-3000:]
    cluster.nodes[cluster.nodes.index(broker)] = NodeProcess.spawn(broker.spec)  # same config and data
    cluster.write_cluster_file()


def test_txn_offsets_stay_pending_through_a_restart_until_the_marker(cluster: LocalCluster) -> None:
    from confluent_kafka import Consumer, TopicPartition

    create_topic(cluster, TOPIC, partitions=1, replication_factor=1)
    plain = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": GROUP,
                      "enable.auto.commit": False})
    try:  # a plain commit first: the offsets topic exists and the group has offset 3
        wait_until("a plain commit", lambda: plain.commit(offsets=[TopicPartition(TOPIC, 0, 3)],
                                                          asynchronous=False) is not None, timeout_s=READY_S)
    finally:
        plain.close()
    assert committed(cluster) == 3

    assert until_answered("TxnOffsetCommit", lambda: txn_offset_commit(cluster, PID, 10)) == E.NONE
    assert committed(cluster) == 3  # pending in the transaction: not the committed offset
    assert offset_fetch(cluster, require_stable=True) == (-1, E.UNSTABLE_OFFSET_COMMIT)
    assert offset_fetch(cluster, require_stable=False) == (3, E.NONE)

    restart_broker(cluster)
    wait_until("the broker serves the group again", lambda: committed(cluster) == 3, timeout_s=READY_S)

    assert offset_fetch(cluster, require_stable=True) == (-1, E.UNSTABLE_OFFSET_COMMIT)  # reloaded as pending
    assert until_answered("the commit marker", lambda: write_marker(cluster, PID, True)) == E.NONE
    assert committed(cluster) == 10  # committed by the marker
    assert offset_fetch(cluster, require_stable=True) == (10, E.NONE)

    assert txn_offset_commit(cluster, OTHER_PID, 20) == E.NONE
    assert write_marker(cluster, OTHER_PID, False) == E.NONE
    assert committed(cluster) == 10  # aborted: dropped

    restart_broker(cluster)  # and the same after loading the markers back
    wait_until("the broker serves the group again", lambda: committed(cluster) == 10, timeout_s=READY_S)


def test_send_offsets_to_transaction_commits_with_the_transaction(cluster: LocalCluster) -> None:
    """confluent-kafka's consume-transform-produce step: the offsets sent in a transaction are
    the group's committed offsets once it commits, and untouched when it aborts; a read_committed
    consumer (librdkafka then asks require_stable) reads them as a read_uncommitted one does."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    create_topic(cluster, TOPIC, partitions=1, replication_factor=1)
    create_topic(cluster, "txn-offsets-out", partitions=1, replication_factor=1)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": GROUP,
                         "enable.auto.commit": False})
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": "txn-offsets-app"})
    try:
        producer.init_transactions(READY_S)
        for offset, commit in ((42, True), (50, False), (57, True)):
            producer.begin_transaction()
            producer.produce("txn-offsets-out", value=str(offset).encode())
            producer.send_offsets_to_transaction([TopicPartition(TOPIC, 0, offset)],
                                                 consumer.consumer_group_metadata(), READY_S)
            if commit:
                producer.commit_transaction(READY_S)
            else:
                producer.abort_transaction(READY_S)
            expected = offset if commit else 42
            # EndTxn answers once the outcome is decided; the markers follow (Kafka's too)
            wait_until(f"offset {expected} committed", lambda: committed(cluster) == expected)
            (stable,) = consumer.committed([TopicPartition(TOPIC, 0)], timeout=10)  # read_committed
            assert (stable.error, stable.offset) == (None, expected)
    finally:
        consumer.close()
