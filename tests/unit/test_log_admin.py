"""broker/handlers/log_admin.py over a real ReplicaManager and log directory: the answers'
shapes and error codes (the wire format is the codecs' tests; the waits, replica_deletes')."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest

from broker.handlers.context import BrokerContext, ClientInfo
from broker.handlers.log_admin import (
    handle_alter_replica_log_dirs,
    handle_delete_records,
    handle_describe_log_dirs,
    handle_describe_producers,
)
from broker.log.log_manager import LogManager
from broker.replica_manager import ReplicaManager
from common.topic_partition import TopicPartition
from common.errors import ErrorCode
from common.protocol import delete_records as dr
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.log_config import LogConfig
from metadata.image import EMPTY_IMAGE
from metadata.local_changes import changes_for_broker
from tests.log_helpers import NOW, batch
from tests.unit.test_replica_deletes import ME, TOPICS

SOLO = TopicPartition("solo", 0)
TRIPLE = TopicPartition("triple", 0)


@pytest.fixture
def ctx(tmp_path):
    log_manager = LogManager([tmp_path / "a", tmp_path / "b"], LogConfig(), now_ms=NOW)
    replicas = ReplicaManager(ME, log_manager, now_ms=lambda: NOW)
    replicas.apply_changes(changes_for_broker(EMPTY_IMAGE, TOPICS, ME), TOPICS)
    # Only what these handlers use; the other collaborators play no part here.
    yield BrokerContext(ME, replicas, lambda: replicas._image, ("127.0.0.1", 9092), None, None, None, None,
                        None, None, None, None, None, None, None, None)  # type: ignore[arg-type]
    log_manager.shutdown()


DR_REQ = messages.request_module(ApiKey.DELETE_RECORDS, 1)
DR_RESP = messages.response_module(ApiKey.DELETE_RECORDS, 1)


def delete_request(*topics: tuple[str, tuple[tuple[int, int], ...]]) -> object:
    return DR_REQ.DeleteRecordsRequest(topics=tuple(
        DR_REQ.DeleteRecordsTopic(name=name, partitions=tuple(
            DR_REQ.DeleteRecordsPartition(partition_index=p, offset=o) for p, o in partitions))
        for name, partitions in topics), timeout=timedelta(seconds=1))


def delete_result(partition: int, low_watermark: int, error: ErrorCode) -> object:
    return DR_RESP.DeleteRecordsPartitionResult(partition_index=partition, low_watermark=low_watermark,
                                                error_code=error)


async def test_delete_records_answers_each_partition(ctx):
    ctx.replicas.append(SOLO, batch(5), acks=1)
    request = delete_request(("solo", ((0, 3), (9, 1))), ("followed", ((0, 1),)), ("nowhere", ((0, 1),)))
    response = await handle_delete_records(ctx, request, 1, None)
    assert response == DR_RESP.DeleteRecordsResponse(throttle_time=messages.NO_THROTTLE, topics=(
        DR_RESP.DeleteRecordsTopicResult(name="solo", partitions=(
            delete_result(0, 3, ErrorCode.NONE),
            delete_result(9, dr.INVALID_LOW_WATERMARK, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))),
        DR_RESP.DeleteRecordsTopicResult(name="followed", partitions=(
            delete_result(0, dr.INVALID_LOW_WATERMARK, ErrorCode.NOT_LEADER_OR_FOLLOWER),)),
        DR_RESP.DeleteRecordsTopicResult(name="nowhere", partitions=(
            delete_result(0, dr.INVALID_LOW_WATERMARK, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),)),
    ))


async def test_delete_records_beyond_the_high_watermark(ctx):
    ctx.replicas.append(SOLO, batch(2), acks=1)
    response = await handle_delete_records(ctx, delete_request(("solo", ((0, 3),))), 1, None)
    assert response.topics[0].partitions[0] == delete_result(0, -1, ErrorCode.OFFSET_OUT_OF_RANGE)
    assert ctx.replicas.partitions[SOLO].log.log_start_offset == 0


DLD_REQ = messages.request_module(ApiKey.DESCRIBE_LOG_DIRS, 4)
DLD_RESP = messages.response_module(ApiKey.DESCRIBE_LOG_DIRS, 4)
DP_REQ = messages.request_module(ApiKey.DESCRIBE_PRODUCERS, 0)
DP_RESP = messages.response_module(ApiKey.DESCRIBE_PRODUCERS, 0)


async def test_describe_log_dirs_sizes_dirs_and_kafka_topic_grouping(ctx, tmp_path):
    ctx.replicas.append(SOLO, batch(4), acks=1)
    request = DLD_REQ.DescribeLogDirsRequest(topics=(DLD_REQ.DescribableLogDirTopic(topic="solo", partitions=(0,)),))
    response = await handle_describe_log_dirs(ctx, request, 4, None)
    dirs = {d.log_dir: d for d in response.results}
    assert set(dirs) == {os.path.abspath(tmp_path / "a"), os.path.abspath(tmp_path / "b")}
    partitions = {(t.name, p.partition_index): (p, d.log_dir) for d in response.results for t in d.topics
                  for p in t.partitions}
    assert list(partitions) == [("solo", 0)]
    solo, where = partitions[("solo", 0)]
    files = sum(f.stat().st_size for f in (tmp_path / where / "solo-0").glob("*.log"))
    assert solo == DLD_RESP.DescribeLogDirsPartition(partition_index=0, partition_size=files, offset_lag=0,
                                                     is_future_key=False) and files > 0
    # As Kafka: the other topics of a directory appear, without partitions.
    names = {t.name: t.partitions for d in response.results for t in d.topics}
    assert names["triple"] == () and names["followed"] == ()
    for d in response.results:
        assert d.error_code == 0 and 0 < d.usable_bytes <= d.total_bytes


async def test_describe_log_dirs_null_means_every_partition(ctx):
    v1 = messages.request_module(ApiKey.DESCRIBE_LOG_DIRS, 1)
    response = await handle_describe_log_dirs(ctx, v1.DescribeLogDirsRequest(topics=None), 1, None)
    assert response.__version__ == 1  # no volume bytes before v4
    described = sorted((t.name, p.partition_index) for d in response.results for t in d.topics for p in t.partitions)
    assert described == sorted((tp.topic, tp.partition) for tp in ctx.replicas.partitions)


async def test_describe_producers_on_leader_and_follower(ctx):
    ctx.replicas.append(SOLO, batch(3, producer_id=42, producer_epoch=1, base_sequence=0), acks=1)
    request = DP_REQ.DescribeProducersRequest(topics=(DP_REQ.TopicRequest(name="solo", partition_indexes=(0, 4)),
                                                      DP_REQ.TopicRequest(name="followed", partition_indexes=(0,)),
                                                      DP_REQ.TopicRequest(name="nowhere", partition_indexes=(0,))))
    response = await handle_describe_producers(ctx, request, 0, None)
    m = DP_RESP
    assert response == m.DescribeProducersResponse(throttle_time=messages.NO_THROTTLE, topics=(
        m.TopicResponse(name="solo", partitions=(
            m.PartitionResponse(partition_index=0, error_code=ErrorCode.NONE, active_producers=(
                m.ProducerState(producer_id=42, producer_epoch=1, last_sequence=2, last_timestamp=NOW + 2,
                                coordinator_epoch=-1, current_txn_start_offset=-1),)),
            m.PartitionResponse(partition_index=4, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                active_producers=()))),
        m.TopicResponse(name="followed", partitions=(
            m.PartitionResponse(partition_index=0, error_code=ErrorCode.NONE, active_producers=()),)),
        m.TopicResponse(name="nowhere", partitions=(
            m.PartitionResponse(partition_index=0, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                active_producers=()),)),
    ))


async def test_alter_replica_log_dirs_answers_each_partition_grouped_by_topic(ctx, tmp_path):
    m = messages.request_module(ApiKey.ALTER_REPLICA_LOG_DIRS, 2)
    here = os.path.abspath(ctx.replicas.log_manager.log_dir_of(SOLO))
    other = next(os.path.abspath(d) for d in ctx.replicas.log_manager.log_dirs if os.path.abspath(d) != here)
    request = m.AlterReplicaLogDirsRequest(dirs=(
        m.AlterReplicaLogDir(path=here, topics=(m.AlterReplicaLogDirTopic(name="solo", partitions=(0, 9)),)),
        m.AlterReplicaLogDir(path=str(tmp_path / "c"), topics=(m.AlterReplicaLogDirTopic(name="triple", partitions=(0,)),)),
        m.AlterReplicaLogDir(path=other, topics=(m.AlterReplicaLogDirTopic(name="solo", partitions=(0,)),)),
    ))
    response = await handle_alter_replica_log_dirs(ctx, request, 2, ClientInfo("admin", "/127.0.0.1"))
    answers = {(t.topic_name, p.partition_index): p.error_code for t in response.results for p in t.partitions}
    # The last directory named for solo-0 wins (Kafka keys the request by partition).
    assert answers == {("solo", 0): ErrorCode.KAFKA_STORAGE_ERROR, ("solo", 9): ErrorCode.REPLICA_NOT_AVAILABLE,
                       ("triple", 0): ErrorCode.LOG_DIR_NOT_FOUND}
    assert [t.topic_name for t in response.results] == ["solo", "triple"]
    assert os.path.abspath(ctx.replicas.log_manager.log_dir_of(SOLO)) == here  # nothing moved
