"""The partition side of transactions against a real RF=3 cluster: transactional batches built by
hand and produced, markers written with WriteTxnMarkers (the coordinator's request, sent here by
a test client), then read by real read_committed and read_uncommitted confluent-kafka consumers.
The leader is SIGKILLed with a transaction still open: the new leader (a follower that replayed
the markers) answers the same last stable offset and aborted transactions, the killed broker
recovers its `.txnindex`, and committing the open transaction moves the LSO past it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from broker.log.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, decode_entries
from common.errors import ErrorCode
from common.broker_connection import BrokerUnavailable
from common.kafka_client import KafkaClient
from common.protocol import fetch, list_offsets, messages
from common.protocol import produce as produce_codec
from common.protocol.api_keys import ApiKey
from common.records import build_batch
from common.request_versions import FETCH_VERSION, LIST_OFFSETS_VERSION
from localcluster.launcher import LocalCluster
from localcluster.node_process import NodeProcess
from localcluster.replica_files import partition_dir
from tests.integration.cluster_fixtures import wait_until
from tests.integration.replication_fixtures import (
    create_topic,
    partition_state,
    replicated_cluster,
    wait_full_isr,
)
from tests.integration.txn_fixtures import read_partition

confluent_kafka = pytest.importorskip("confluent_kafka")

TOPIC = "txn-log"
COMMITTED, ABORTED, OPEN = 1001, 1002, 1003  # producer ids of the three transactions
WRITE_TXN_MARKERS_VERSION = 1
CLIENT_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with replicated_cluster(tmp_path_factory.mktemp("txn-log")) as (started, _):
        yield started


def client_of(cluster: LocalCluster) -> KafkaClient:
    servers = cluster.bootstrap_servers
    assert servers is not None
    hosts = [(h, int(p)) for h, p in (s.rsplit(":", 1) for s in servers.split(","))]
    return KafkaClient(hosts, client_id="txn-log-test")


def leader_of(cluster: LocalCluster) -> int:
    return int(partition_state(cluster, TOPIC, 0)["leader"])


def produce(client: KafkaClient, leader: int, values: list[bytes], *, producer_id: int = -1,
            sequence: int = -1) -> None:
    batch = build_batch([(None, v) for v in values], producer_id=producer_id, producer_epoch=0,
                        base_sequence=sequence, is_transactional=producer_id >= 0)
    answer = client.produce(leader, TOPIC, {0: batch}, acks=-1, timeout_ms=10_000)
    assert answer[0].error_code == 0, answer


def write_markers(client: KafkaClient, leader: int, markers: list[tuple[int, bool, int]],
                  partitions: tuple[int, ...] = (0,)) -> list[int]:
    """WriteTxnMarkers v1 for (producer id, commit, coordinator epoch): each partition's code."""
    m = messages.request_module(ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION)
    request = m.WriteTxnMarkersRequest(markers=tuple(
        m.WritableTxnMarker(producer_id=pid, producer_epoch=0, transaction_result=commit,
                            topics=(m.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=partitions),),
                            coordinator_epoch=coordinator_epoch)
        for pid, commit, coordinator_epoch in markers))
    response = client.call(leader, ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, request,
                           messages.encode_request, messages.response_decoder(ApiKey.WRITE_TXN_MARKERS))
    return [int(p.error_code) for r in response.markers for t in r.topics for p in t.partitions]


def fetch_committed(client: KafkaClient, leader: int) -> Any:
    """One read_committed Fetch of the partition from offset 0."""
    request = fetch.FetchRequest(fetch.CONSUMER_REPLICA_ID, 100, 1, 1 << 20, 1, (
        fetch.FetchTopic(TOPIC, (fetch.FetchPartition(0, 0, 1 << 20),)),))
    response = client.call(leader, ApiKey.FETCH, FETCH_VERSION, request, fetch.encode_fetch_request,
                           fetch.decode_fetch_response)
    (answer,) = [p for t in response.responses for p in t.partitions]
    assert answer.error_code == 0, answer
    return answer


def latest_offset(client: KafkaClient, leader: int, isolation_level: int) -> int:
    """ListOffsets LATEST (v5) under `isolation_level`."""
    request = list_offsets.request(LIST_OFFSETS_VERSION, fetch.CONSUMER_REPLICA_ID,
                                   [(TOPIC, 0, list_offsets.LATEST_TIMESTAMP, -1)], isolation_level=isolation_level)
    response = client.call(leader, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, request, list_offsets.encode_request,
                           list_offsets.decode_response)
    (partition,) = [p for t in response.topics for p in t.partitions]
    assert partition.error_code == 0, partition
    return int(partition.offset)


def describe_producers(client: KafkaClient, leader: int) -> dict[int, tuple[int, int]]:
    """producer id -> (coordinator epoch, current transaction start offset) on the leader."""
    m = messages.request_module(ApiKey.DESCRIBE_PRODUCERS, 0)
    request = m.DescribeProducersRequest(topics=(m.TopicRequest(name=TOPIC, partition_indexes=(0,)),))
    response = client.call(leader, ApiKey.DESCRIBE_PRODUCERS, 0, request, messages.encode_request,
                           messages.response_decoder(ApiKey.DESCRIBE_PRODUCERS))
    (partition,) = [p for t in response.topics for p in t.partitions]
    return {p.producer_id: (p.coordinator_epoch, p.current_txn_start_offset) for p in partition.active_producers}


def consume(cluster: LocalCluster, isolation: str, count: int) -> list[bytes | None]:
    """The values a consumer of `isolation` reads: `count` of them, ending at the partition end."""
    return [value for _, value in read_partition(cluster, TOPIC, isolation, count, group_id=f"txn-log-{isolation}")]


def txnindex_entries(cluster: LocalCluster, broker_id: int) -> list[AbortedTxn]:
    directory = partition_dir(cluster.node(broker_id), TOPIC, 0)
    return [e for path in sorted(directory.glob(f"*{TXN_INDEX_SUFFIX}")) for e in decode_entries(path.read_bytes())]


def test_markers_read_committed_and_a_leader_killed_mid_transaction(cluster: LocalCluster) -> None:
    create_topic(cluster, TOPIC, partitions=1, configs={"min.insync.replicas": "2"})
    wait_full_isr(cluster, TOPIC, 1)
    leader = leader_of(cluster)
    with client_of(cluster) as client:
        client.metadata([TOPIC])
        produce(client, leader, [b"a0", b"a1", b"a2"], producer_id=COMMITTED, sequence=0)  # 0-2
        produce(client, leader, [b"b0", b"b1", b"b2"], producer_id=ABORTED, sequence=0)    # 3-5
        produce(client, leader, [b"n0"])                                                    # 6
        assert write_markers(client, leader, [(COMMITTED, True, 0), (ABORTED, False, 0)]) == [0, 0]  # 7, 8
        produce(client, leader, [b"c0"], producer_id=OPEN, sequence=0)                      # 9
        # markers Kafka refuses: an older coordinator epoch, a partition that does not exist
        assert write_markers(client, leader, [(ABORTED, False, -1)]) == [ErrorCode.TRANSACTION_COORDINATOR_FENCED]
        assert write_markers(client, leader, [(OPEN, False, 0)], (7,)) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]

        answer = fetch_committed(client, leader)
        assert (answer.high_watermark, answer.last_stable_offset) == (10, 9)
        assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [(ABORTED, 3)]
        assert consume(cluster, "read_committed", 4) == [b"a0", b"a1", b"a2", b"n0"]
        assert (latest_offset(client, leader, 1), latest_offset(client, leader, 0)) == (9, 10)
        assert consume(cluster, "read_uncommitted", 8) == [b"a0", b"a1", b"a2", b"b0", b"b1", b"b2", b"n0", b"c0"]

        # the leader dies with OPEN's transaction open; a follower that replayed the markers leads
        killed = cluster.node(leader)
        assert killed.kill().outcome == "killed"
        wait_until("another broker leads the partition", lambda: leader_of(cluster) not in (leader, -1), 60.0)
        new_leader = leader_of(cluster)
        client.metadata([TOPIC])
        answer = wait_until("the new leader answers read_committed fetches up to the LSO",
                            lambda: _stable_at(client, new_leader, 9), 30.0)
        assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [(ABORTED, 3)]
        assert consume(cluster, "read_committed", 4) == [b"a0", b"a1", b"a2", b"n0"]

        # the killed broker never flushed its active segment's .txnindex (written on flush, as the
        # other indexes): recovery of the unflushed tail rebuilds it, and writes it at once
        assert txnindex_entries(cluster, leader) == []
        index = cluster.nodes.index(killed)
        cluster.nodes[index] = NodeProcess.spawn(killed.spec)
        cluster.write_cluster_file()
        wait_full_isr(cluster, TOPIC, 1)
        assert txnindex_entries(cluster, leader) == [AbortedTxn(ABORTED, 3, 8, 9)]

        # DescribeProducers shows the open transaction and the coordinator epoch of the markers,
        # on the leader and on the restarted broker, whose producer state recovery rebuilt
        expected = {COMMITTED: (0, -1), ABORTED: (0, -1), OPEN: (-1, 9)}
        assert describe_producers(client, new_leader) == expected
        wait_until("the restarted broker is in the metadata", lambda: leader in client.metadata([TOPIC]).brokers)
        # the client's connection to the killed process is dead: the first call may drop it
        assert wait_until("the restarted broker describes its producers",
                          lambda: _or_none(lambda: describe_producers(client, leader))) == expected

        # committing the open transaction moves the LSO past it
        assert write_markers(client, new_leader, [(OPEN, True, 0)]) == [0]
        answer = fetch_committed(client, new_leader)
        assert (answer.high_watermark, answer.last_stable_offset) == (11, 11)
        assert latest_offset(client, new_leader, 1) == 11
        assert consume(cluster, "read_committed", 5) == [b"a0", b"a1", b"a2", b"n0", b"c0"]


def _or_none(call: Any) -> Any:
    try:
        return call()
    except BrokerUnavailable:
        return None


def _stable_at(client: KafkaClient, leader: int, lso: int) -> Any:
    """The read_committed answer once the leader's LSO is `lso` (its HW may lag after a failover)."""
    try:
        answer = fetch_committed(client, leader)
    except Exception:  # noqa: BLE001 - not leading yet, connection refused: asked again
        return None
    return answer if answer.last_stable_offset == lso else None


def test_a_transactional_confluent_producer_commits_and_aborts(cluster: LocalCluster) -> None:
    """End to end with the transaction coordinator: a confluent-kafka transactional producer
    commits one transaction and aborts the next over 3 partitions; a read_committed consumer
    reads exactly the committed records, a read_uncommitted one both."""
    topic = "txn-log-e2e"
    create_topic(cluster, topic, partitions=3, configs={"min.insync.replicas": "2"})
    wait_full_isr(cluster, topic, 3)
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                         "transactional.id": "txn-log-e2e", "linger.ms": "5"})
    producer.init_transactions(CLIENT_TIMEOUT_S)
    for outcome in ("committed", "aborted"):
        producer.begin_transaction()
        for i in range(30):
            producer.produce(topic, value=f"{outcome}-{i}".encode(), partition=i % 3)
        producer.flush(CLIENT_TIMEOUT_S)
        if outcome == "committed":
            producer.commit_transaction(CLIENT_TIMEOUT_S)
        else:
            producer.abort_transaction(CLIENT_TIMEOUT_S)

    def read(isolation: str, count: int) -> list[bytes]:
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": cluster.bootstrap_servers, "group.id": f"e2e-{isolation}",
            "enable.auto.commit": "false", "isolation.level": isolation, "fetch.wait.max.ms": "100"})
        try:
            consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(3)])
            got: list[bytes] = []
            deadline = time.monotonic() + CLIENT_TIMEOUT_S
            while time.monotonic() < deadline and len(got) < count:  # bounded by the deadline
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got.append(msg.value())
            extra = consumer.poll(1.0)  # nothing more may come
            assert extra is None or extra.error() is not None, extra.value()
            return got
        finally:
            consumer.close()

    committed = sorted(f"committed-{i}".encode() for i in range(30))
    assert sorted(read("read_committed", 30)) == committed
    assert sorted(read("read_uncommitted", 60)) == sorted([*committed, *(f"aborted-{i}".encode() for i in range(30))])


def test_a_late_transactional_write_is_refused_by_verification(cluster: LocalCluster) -> None:
    """KIP-890 part 1: a transactional batch of a producer whose transaction ended (a retried or
    delayed Produce) would open a hanging transaction; the leader asks the coordinator, which does
    not list the partition, and the batch is refused with INVALID_TXN_STATE, nothing appended."""
    topic = "txn-log-late"
    create_topic(cluster, topic, partitions=1, configs={"min.insync.replicas": "2"})
    wait_full_isr(cluster, topic, 1)
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                         "transactional.id": "txn-log-late"})
    producer.init_transactions(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, value=b"committed", partition=0)
    producer.commit_transaction(CLIENT_TIMEOUT_S)
    leader = int(partition_state(cluster, topic, 0)["leader"])
    with client_of(cluster) as client:
        client.metadata([topic])
        m = messages.request_module(ApiKey.DESCRIBE_PRODUCERS, 0)
        response = client.call(leader, ApiKey.DESCRIBE_PRODUCERS, 0, m.DescribeProducersRequest(
            topics=(m.TopicRequest(name=topic, partition_indexes=(0,)),)), messages.encode_request,
            messages.response_decoder(ApiKey.DESCRIBE_PRODUCERS))
        (state,) = [s for t in response.topics for p in t.partitions for s in p.active_producers]
        # the record at 0 and the COMMIT marker the coordinator writes after EndTxn at 1
        wait_until("the commit marker is replicated", lambda: client.list_offsets(leader, topic, {0: -1})[0].offset == 2)
        late = build_batch([(None, b"late")], producer_id=state.producer_id, producer_epoch=state.producer_epoch,
                           base_sequence=state.last_sequence + 1, is_transactional=True)
        request = produce_codec.ProduceRequest("txn-log-late", -1, 10_000, (produce_codec.TopicProduceData(
            topic, (produce_codec.PartitionProduceData(0, late),)),))
        answer = client.call(leader, ApiKey.PRODUCE, 8, request, produce_codec.encode_produce_request,
                             produce_codec.decode_produce_response)
        (partition,) = [p for t in answer.responses for p in t.partitions]
        assert partition.error_code == ErrorCode.INVALID_TXN_STATE, partition
        assert client.list_offsets(leader, topic, {0: -1})[0].offset == 2


def test_the_only_replica_restarted_mid_transaction_keeps_lso_and_aborted_list(cluster: LocalCluster) -> None:
    """RF=1: the leader is the only copy. After a SIGKILL (recovery rebuilds the producer state and
    the `.txnindex` of the unflushed tail) and after a clean stop (the index is loaded as written),
    it answers the same LSO and aborted transactions, and the open transaction still holds the LSO
    until its marker."""
    topic = "txn-log-solo"
    create_topic(cluster, topic, partitions=1, replication_factor=1, configs={"min.insync.replicas": "1"})
    wait_until("the partition has a leader", lambda: partition_state(cluster, topic, 0)["leader"] >= 0)
    leader = int(partition_state(cluster, topic, 0)["leader"])

    def committed_view(client: KafkaClient) -> tuple[int, int, list[tuple[int, int]]] | None:
        try:
            request = fetch.FetchRequest(fetch.CONSUMER_REPLICA_ID, 100, 1, 1 << 20, 1, (
                fetch.FetchTopic(topic, (fetch.FetchPartition(0, 0, 1 << 20),)),))
            response = client.call(leader, ApiKey.FETCH, FETCH_VERSION, request, fetch.encode_fetch_request,
                                   fetch.decode_fetch_response)
        except BrokerUnavailable:
            return None
        (p,) = [p for t in response.responses for p in t.partitions]
        if p.error_code:
            return None
        return p.high_watermark, p.last_stable_offset, [(a.producer_id, a.first_offset) for a in p.aborted_transactions]

    def restart(node: Any) -> None:
        index = cluster.nodes.index(node)
        cluster.nodes[index] = NodeProcess.spawn(node.spec)
        cluster.write_cluster_file()

    with client_of(cluster) as client:
        client.metadata([topic])
        for pid, values in ((ABORTED, [b"x0", b"x1"]), (OPEN, [b"o0"])):          # 0-1, 2
            batch = build_batch([(None, v) for v in values], producer_id=pid, producer_epoch=0, base_sequence=0,
                                is_transactional=True)
            assert client.produce(leader, topic, {0: batch}, acks=-1, timeout_ms=10_000)[0].error_code == 0
        m = messages.request_module(ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION)
        markers = m.WriteTxnMarkersRequest(markers=(m.WritableTxnMarker(
            producer_id=ABORTED, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
            topics=(m.WritableTxnMarkerTopic(name=topic, partition_indexes=(0,)),)),))
        client.call(leader, ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, markers, messages.encode_request,
                    messages.response_decoder(ApiKey.WRITE_TXN_MARKERS))                 # 3
        expected = (4, 2, [(ABORTED, 0)])
        assert committed_view(client) == expected
        for how in ("killed", "stopped"):
            node = cluster.node(leader)
            report = node.kill() if how == "killed" else node.stop(30.0)
            assert report.outcome == how, report.describe()
            restart(node)
            assert wait_until(f"the {how} broker serves the partition again",
                              lambda: committed_view(client), 60.0) == expected, how
