"""Transactions v2 (KIP-890 part 2) against a real RF=3 cluster, with raw requests acting as a
Java 4.x client with `transaction.version` 2: no AddPartitionsToTxn (the leader's Produce v12
verification adds the partition), EndTxn v5 bumps the epoch on every end. Jepsen's late-EndTxn
case: the first transaction's EndTxn(commit), replayed after the next transaction started, is
fenced and the next transaction stays open and whole (a read_committed consumer sees it only once
it commits), where transactions v1 would have committed it half-written."""

from __future__ import annotations

import datetime
from typing import Any

from common.broker_connection import BrokerUnavailable
from common.errors import ErrorCode
from common.kafka_client import KafkaClient
from common.protocol import messages
from common.protocol import produce as produce_codec
from common.protocol.api_keys import ApiKey
from common.records import build_batch
from localcluster.launcher import LocalCluster
from tests.integration.cluster_fixtures import wait_until
from tests.integration.replication_fixtures import create_topic, partition_state, wait_full_isr
from tests.integration.txn_fixtures import client_of, read_values, txn_cluster

TIMEOUT_S = 60.0
TOPIC = "txn-v2"
TID = "txn-v2-client"
END_TXN_V2 = 5
PRODUCE_V2 = 12
PROPERTIES = {"transaction.state.log.num.partitions": "6"}
RETRIABLE = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
             ErrorCode.NOT_COORDINATOR, ErrorCode.CONCURRENT_TRANSACTIONS}


cluster = txn_cluster("txn-v2", PROPERTIES)


def call(client: KafkaClient, broker: int | None, api: ApiKey, version: int, **fields: Any) -> Any:
    request = messages.build(messages.request_type(api, version), **fields)
    return client.call(broker, api, version, request, messages.encode_request, messages.response_decoder(api))


def coordinator(client: KafkaClient) -> int:
    def found() -> int | None:
        try:
            answer = call(client, None, ApiKey.FIND_COORDINATOR, 3, key=TID, key_type=messages.KEY_TYPE_TRANSACTION)
        except BrokerUnavailable:
            return None
        return int(answer.node_id) if answer.error_code == 0 else None
    node = wait_until("the transaction coordinator is found", found, TIMEOUT_S)
    client.metadata([TOPIC])  # the client learns the brokers' addresses
    return node


def until_done(what: str, attempt: Any) -> Any:
    """`attempt()` until it answers other than a retriable coordinator error (as a client retries)."""
    def answered() -> Any:
        answer = attempt()
        return None if answer.error_code in RETRIABLE else answer
    return wait_until(what, answered, TIMEOUT_S)


def end_txn(client: KafkaClient, node: int, producer_id: int, epoch: int, commit: bool = True) -> Any:
    return call(client, node, ApiKey.END_TXN, END_TXN_V2, transactional_id=TID, producer_id=producer_id,
                producer_epoch=epoch, committed=commit)


def produce(cluster: LocalCluster, client: KafkaClient, producer_id: int, epoch: int, sequence: int,
            values: list[bytes]) -> ErrorCode:
    """A transactional batch to partition 0 at Produce v12 (a TV2 client's: no AddPartitionsToTxn before)."""
    leader = int(partition_state(cluster, TOPIC, 0)["leader"])
    batch = build_batch([(None, v) for v in values], producer_id=producer_id, producer_epoch=epoch,
                        base_sequence=sequence, is_transactional=True)
    request = produce_codec.ProduceRequest(TID, -1, 10_000, (produce_codec.TopicProduceData(
        TOPIC, (produce_codec.PartitionProduceData(0, batch),)),))
    answer = client.call(leader, ApiKey.PRODUCE, PRODUCE_V2, request, produce_codec.encode_produce_request,
                         produce_codec.decode_produce_response)
    (partition,) = [p for t in answer.responses for p in t.partitions]
    return ErrorCode(partition.error_code)


def read_committed(cluster: LocalCluster, expected: int) -> list[bytes]:
    """Every value a read_committed consumer reads from partition 0, in order."""
    return [value for _, value in read_values(cluster, TOPIC, "read_committed", expected, partitions=1)]


def finalized_transaction_version(client: KafkaClient) -> int | None:
    answer = call(client, None, ApiKey.API_VERSIONS, 3, client_software_name="tidelog-test",
                  client_software_version="1")
    levels = {f.name: f.max_version_level for f in answer.finalized_features}
    return levels.get("transaction.version")


def test_a_late_end_txn_cannot_commit_the_next_transaction(cluster: LocalCluster) -> None:
    create_topic(cluster, TOPIC, partitions=1, configs={"min.insync.replicas": "2"})
    wait_full_isr(cluster, TOPIC, 1)
    first = [f"first-{i}".encode() for i in range(3)]
    second = [f"second-{i}".encode() for i in range(6)]
    with client_of(cluster, "txn-v2-test") as client:
        assert finalized_transaction_version(client) == 2  # what makes a Java client speak v2
        node = coordinator(client)
        init = until_done("InitProducerId", lambda: call(
            client, node, ApiKey.INIT_PRODUCER_ID, 5, transactional_id=TID,
            transaction_timeout=datetime.timedelta(milliseconds=60_000), producer_id=-1, producer_epoch=-1))
        assert init.error_code == 0, init
        pid, epoch = int(init.producer_id), int(init.producer_epoch)

        # the first transaction: the leader's verification (AddPartitionsToTxn v5) starts it
        assert until_done("the first transaction's write", lambda: _Code(produce(cluster, client, pid, epoch, 0, first))
                          ).code is ErrorCode.NONE
        ended = until_done("EndTxn(commit) v5", lambda: end_txn(client, node, pid, epoch))
        assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (0, pid, epoch + 1)
        # the client's retry of that EndTxn (its answer lost): done, the same id and epoch
        retried = until_done("EndTxn retried", lambda: end_txn(client, node, pid, epoch))
        assert (retried.error_code, retried.producer_id, retried.producer_epoch) == (0, pid, epoch + 1)

        # the second transaction at the bumped epoch, sequence 0: half written
        assert until_done("the second transaction's write", lambda: _Code(
            produce(cluster, client, pid, epoch + 1, 0, second[:3]))).code is ErrorCode.NONE
        # the first transaction's EndTxn(commit), delayed in the network, arrives now: fenced
        late = end_txn(client, node, pid, epoch)
        assert late.error_code == ErrorCode.PRODUCER_FENCED, late
        assert sorted(read_committed(cluster, len(first))) == sorted(first)  # the second stays open

        assert produce(cluster, client, pid, epoch + 1, 3, second[3:]) is ErrorCode.NONE
        ended = until_done("the second EndTxn(commit)", lambda: end_txn(client, node, pid, epoch + 1))
        assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (0, pid, epoch + 2)
    assert read_committed(cluster, len(first) + len(second)) == first + second


def test_offsets_join_a_v2_transaction_without_add_offsets_to_txn(cluster: LocalCluster) -> None:
    """A TV2 client sends TxnOffsetCommit v5 with no AddOffsetsToTxn before it: the group's
    coordinator has the transaction coordinator add `__consumer_offsets` to the transaction, so
    EndTxn's markers reach it and the offset becomes committed (pending until then)."""
    tid, group = "txn-v2-offsets", "txn-v2-group"
    create_topic(cluster, TOPIC + "-in", partitions=1)
    with client_of(cluster, "txn-v2-test") as client:
        node = until_done("the transaction coordinator", lambda: _Found(call(
            client, None, ApiKey.FIND_COORDINATOR, 3, key=tid, key_type=messages.KEY_TYPE_TRANSACTION))).answer
        group_node = until_done("the group coordinator", lambda: _Found(call(
            client, None, ApiKey.FIND_COORDINATOR, 3, key=group, key_type=0))).answer
        client.metadata([TOPIC + "-in"])
        init = until_done("InitProducerId", lambda: call(
            client, node, ApiKey.INIT_PRODUCER_ID, 5, transactional_id=tid,
            transaction_timeout=datetime.timedelta(milliseconds=60_000), producer_id=-1, producer_epoch=-1))
        pid, epoch = int(init.producer_id), int(init.producer_epoch)

        def commit_offset() -> Any:
            m = messages.request_module(ApiKey.TXN_OFFSET_COMMIT, 5)
            answer = call(client, group_node, ApiKey.TXN_OFFSET_COMMIT, 5, transactional_id=tid, group_id=group,
                          producer_id=pid, producer_epoch=epoch, generation_id=-1, member_id="",
                          group_instance_id=None, topics=(m.TxnOffsetCommitRequestTopic(
                              name=TOPIC + "-in", partitions=(m.TxnOffsetCommitRequestPartition(
                                  partition_index=0, committed_offset=42, committed_leader_epoch=-1,
                                  committed_metadata=""),)),))
            return _Found.error_of(answer.topics[0].partitions[0].error_code)
        assert until_done("TxnOffsetCommit v5", commit_offset).error_code == 0

        def committed(require_stable: bool) -> Any:
            m = messages.request_module(ApiKey.OFFSET_FETCH, 8)
            answer = call(client, group_node, ApiKey.OFFSET_FETCH, 8, require_stable=require_stable, groups=(
                m.OffsetFetchRequestGroup(group_id=group, topics=(m.OffsetFetchRequestTopics(
                    name=TOPIC + "-in", partition_indexes=(0,)),)),))
            return answer.groups[0].topics[0].partitions[0]
        assert committed(True).error_code == ErrorCode.UNSTABLE_OFFSET_COMMIT  # pending in the transaction
        ended = until_done("EndTxn(commit) v5", lambda: end_txn_of(client, node, tid, pid, epoch))
        assert ended.error_code == 0, ended
        done = wait_until("the offset is committed by the marker",
                          lambda: (lambda p: p if p.error_code == 0 and p.committed_offset == 42 else None)(
                              committed(True)), TIMEOUT_S)
        assert done.committed_offset == 42


def end_txn_of(client: KafkaClient, node: int, tid: str, producer_id: int, epoch: int) -> Any:
    return call(client, node, ApiKey.END_TXN, END_TXN_V2, transactional_id=tid, producer_id=producer_id,
                producer_epoch=epoch, committed=True)


class _Found:
    """An answer shaped as `until_done` expects, carrying what it found."""

    def __init__(self, answer: Any) -> None:
        self.error_code = getattr(answer, "error_code", 0)
        self.answer = int(answer.node_id) if hasattr(answer, "node_id") else answer

    @staticmethod
    def error_of(code: int) -> "_Found":
        found = _Found(None)
        found.error_code = code
        return found


class _Code:
    """A Produce answer shaped as `until_done` expects (retriable coordinator errors map to
    NOT_ENOUGH_REPLICAS at the leader, which the test retries like a producer)."""

    def __init__(self, code: ErrorCode) -> None:
        self.code = code
        self.error_code = ErrorCode.CONCURRENT_TRANSACTIONS if code is ErrorCode.NOT_ENOUGH_REPLICAS else code
