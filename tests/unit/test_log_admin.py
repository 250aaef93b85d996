"""broker/handlers/log_admin.py over a real ReplicaManager and log directory: the answers'
shapes and error codes (the wire format is the codecs' tests; the waits, replica_deletes')."""

from __future__ import annotations

import os

import pytest

from broker.handlers.context import BrokerContext
from broker.handlers.log_admin import (
    handle_delete_records,
    handle_describe_log_dirs,
    handle_describe_producers,
)
from broker.log.log_manager import LogManager
from broker.replica_manager import ReplicaManager
from broker.topic_partition import TopicPartition
from common.errors import ErrorCode
from common.protocol import delete_records as dr
from common.protocol import describe_log_dirs as dld
from common.protocol import describe_producers as dp
from common.topic_config import LogConfig
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
                        None, None, None, None, None, None)  # type: ignore[arg-type]
    log_manager.shutdown()


async def test_delete_records_answers_each_partition(ctx):
    ctx.replicas.append(SOLO, batch(5), acks=1)
    request = dr.DeleteRecordsRequest((
        dr.DeleteRecordsTopic("solo", (dr.DeleteRecordsPartition(0, 3), dr.DeleteRecordsPartition(9, 1))),
        dr.DeleteRecordsTopic("followed", (dr.DeleteRecordsPartition(0, 1),)),
        dr.DeleteRecordsTopic("nowhere", (dr.DeleteRecordsPartition(0, 1),)),
    ), 1000)
    response = await handle_delete_records(ctx, request, 1, None)
    assert response == dr.DeleteRecordsResponse(0, (
        dr.DeleteRecordsTopicResult("solo", (dr.DeleteRecordsPartitionResult(0, 3, 0),
                                             dr.DeleteRecordsPartitionResult(9, -1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))),
        dr.DeleteRecordsTopicResult("followed", (dr.DeleteRecordsPartitionResult(0, -1, ErrorCode.NOT_LEADER_OR_FOLLOWER),)),
        dr.DeleteRecordsTopicResult("nowhere", (dr.DeleteRecordsPartitionResult(0, -1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),)),
    ))


async def test_delete_records_beyond_the_high_watermark(ctx):
    ctx.replicas.append(SOLO, batch(2), acks=1)
    request = dr.DeleteRecordsRequest((dr.DeleteRecordsTopic("solo", (dr.DeleteRecordsPartition(0, 3),)),), 1000)
    response = await handle_delete_records(ctx, request, 0, None)
    assert response.topics[0].partitions[0] == dr.DeleteRecordsPartitionResult(0, -1, ErrorCode.OFFSET_OUT_OF_RANGE)
    assert ctx.replicas.partitions[SOLO].log.log_start_offset == 0


async def test_describe_log_dirs_sizes_dirs_and_kafka_topic_grouping(ctx, tmp_path):
    ctx.replicas.append(SOLO, batch(4), acks=1)
    request = dld.DescribeLogDirsRequest((dld.DescribableLogDirTopic("solo", (0,)),))
    response = await handle_describe_log_dirs(ctx, request, 4, None)
    dirs = {d.log_dir: d for d in response.results}
    assert set(dirs) == {os.path.abspath(tmp_path / "a"), os.path.abspath(tmp_path / "b")}
    partitions = {(t.name, p.partition_index): (p, d.log_dir) for d in response.results for t in d.topics
                  for p in t.partitions}
    assert list(partitions) == [("solo", 0)]
    solo, where = partitions[("solo", 0)]
    files = sum(f.stat().st_size for f in (tmp_path / where / "solo-0").glob("*.log"))
    assert solo == dld.DescribeLogDirsPartition(0, files, 0, False) and files > 0
    # As Kafka: the other topics of a directory appear, without partitions.
    names = {t.name: t.partitions for d in response.results for t in d.topics}
    assert names["triple"] == () and names["followed"] == ()
    for d in response.results:
        assert d.error_code == 0 and 0 < d.usable_bytes <= d.total_bytes


async def test_describe_log_dirs_null_means_every_partition(ctx):
    response = await handle_describe_log_dirs(ctx, dld.DescribeLogDirsRequest(None), 1, None)
    described = sorted((t.name, p.partition_index) for d in response.results for t in d.topics for p in t.partitions)
    assert described == sorted((tp.topic, tp.partition) for tp in ctx.replicas.partitions)


async def test_describe_producers_on_leader_and_follower(ctx):
    ctx.replicas.append(SOLO, batch(3, producer_id=42, producer_epoch=1, base_sequence=0), acks=1)
    request = dp.DescribeProducersRequest((dp.DescribeProducersTopic("solo", (0, 4)),
                                           dp.DescribeProducersTopic("followed", (0,)),
                                           dp.DescribeProducersTopic("nowhere", (0,))))
    response = await handle_describe_producers(ctx, request, 0, None)
    assert response == dp.DescribeProducersResponse(0, (
        dp.DescribeProducersTopicResponse("solo", (
            dp.DescribeProducersPartition(0, 0, None, (dp.ProducerState(42, 1, 2, NOW + 2, -1, -1),)),
            dp.DescribeProducersPartition(4, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))),
        dp.DescribeProducersTopicResponse("followed", (dp.DescribeProducersPartition(0, 0, None, ()),)),
        dp.DescribeProducersTopicResponse("nowhere", (dp.DescribeProducersPartition(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),)),
    ))
