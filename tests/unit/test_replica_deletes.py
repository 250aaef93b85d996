"""broker/replica_deletes.py through the ReplicaManager: DeleteRecords on the leader (Kafka's
deleteRecordsOnLeader rules), the wait for every live replica's log start offset
(DelayedDeleteRecords), followers following the leader's start, and what the new start means
for reads, ListOffsets, retention and a restart."""

from __future__ import annotations

import asyncio
import os
import threading
from dataclasses import replace

import pytest

from broker.log.log_manager import (
    LOG_START_OFFSET_CHECKPOINT,
    LogManager,
    offset_checkpoint,
)
from broker.replica_deletes import DeleteRecordsResult, delete_records_on_leader
from broker.replica_manager import ReplicaManager
from common.protocol.list_offsets import EARLIEST_TIMESTAMP
from common.topic_partition import TopicPartition
from common.errors import ErrorCode, KafkaError
from common.log_config import LogConfig
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from metadata.local_changes import changes_for_broker
from metadata.records import (
    BeginEpoch,
    BrokerRegistrationChange,
    Config,
    ConfigResourceType,
    Listener,
    Partition,
    RegisterBroker,
    Topic,
)
from tests.log_helpers import NOW, batch

ME = 1
SOLO = TopicPartition("solo", 0)  # RF=1, led here
PAIR = (TopicPartition("pair", 0), TopicPartition("pair", 1))  # RF=1, led here
TRIPLE = TopicPartition("triple", 0)  # RF=3, led here
FOLLOWED = TopicPartition("followed", 0)  # led by broker 2
COMPACTED = TopicPartition("compacted", 0)
OFFSETS = TopicPartition("__consumer_offsets", 0)


def replay(image, *records):
    return apply(image, enumerate(records, start=image.offset + 1))


CLUSTER = replay(EMPTY_IMAGE, BeginEpoch(1),
                 *(RegisterBroker(b, f"inc-{b}", (Listener("PLAINTEXT", f"127.0.0.{b}", 9092),)) for b in (1, 2, 3)),
                 *(BrokerRegistrationChange(b, b, fenced=False) for b in (1, 2, 3)))
TOPICS = replay(
    CLUSTER,
    Topic("solo", "SOLO"), Partition("SOLO", 0, (1,), (1,), leader=1),
    Topic("pair", "PAIR"), *(Partition("PAIR", p, (1,), (1,), leader=1) for p in (0, 1)),
    Topic("triple", "TRIPLE"), Partition("TRIPLE", 0, (1, 2, 3), (1, 2, 3), leader=1),
    Topic("followed", "FOLLOWED"), Partition("FOLLOWED", 0, (2, 1), (2, 1), leader=2),
    Config(ConfigResourceType.TOPIC, "compacted", "cleanup.policy", "compact"),
    Topic("compacted", "COMPACTED"), Partition("COMPACTED", 0, (1,), (1,), leader=1),
    Topic("__consumer_offsets", "OFFSETS"), Partition("OFFSETS", 0, (1,), (1,), leader=1),
)


def open_manager(tmp_path, config: LogConfig | None = None) -> ReplicaManager:
    log_manager = LogManager([tmp_path / "logs"], config or LogConfig(), now_ms=NOW)
    manager = ReplicaManager(ME, log_manager, now_ms=lambda: NOW)
    manager.apply_changes(changes_for_broker(EMPTY_IMAGE, TOPICS, ME), TOPICS)
    return manager


@pytest.fixture
def replicas(tmp_path):
    manager = open_manager(tmp_path)
    yield manager
    manager.log_manager.shutdown()


def code_of(fn, *args):
    with pytest.raises(KafkaError) as info:
        fn(*args)
    return int(info.value.code)


def follower_fetch(replicas: ReplicaManager, replica: int, offset: int, start: int) -> None:
    replicas.read(TRIPLE, offset, 1 << 20, replica_id=replica, replica_log_start_offset=start)


async def test_delete_records_moves_the_start_for_reads_list_offsets_and_the_checkpoint(replicas, tmp_path):
    replicas.append(SOLO, batch(10), acks=1)
    assert replicas.deletes.delete_records(SOLO, 4) == (4, 4)  # RF=1: the low watermark is the leader's
    log = replicas.partitions[SOLO].log
    assert log.log_start_offset == 4
    assert code_of(replicas.read, SOLO, 3, 100) == ErrorCode.OFFSET_OUT_OF_RANGE
    assert replicas.read(SOLO, 4, 1 << 20).records.length > 0
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP).offset == 4
    assert await replicas.deletes.wait({SOLO: 4}, {SOLO: 4}, 5.0) == {SOLO: DeleteRecordsResult(0, 4)}
    saved = dict(offset_checkpoint(tmp_path / "logs" / LOG_START_OFFSET_CHECKPOINT).read())
    assert saved[SOLO] == 4  # written before the answer, not at the next periodic checkpoint
    assert replicas.deletes.delete_records(SOLO, 2) == (2, 4)  # lower than the start: nothing moves


async def test_a_request_writes_the_log_start_checkpoint_once_and_answers_after_it(replicas, tmp_path,
                                                                                   monkeypatch):
    """k partitions of one log dir: one write of its log-start file (not k, each with its
    fsyncs), off the event loop, and the answer only once it is on disk."""
    for tp in (SOLO, *PAIR):
        replicas.append(tp, batch(10), acks=1)
    gate, renamed = threading.Event(), []
    real_replace = os.replace

    def held_replace(src, dst):  # the writer's rename of the log-start file waits for the gate
        if str(dst).endswith(LOG_START_OFFSET_CHECKPOINT):
            renamed.append(dst)
            gate.wait(5.0)  # bounded: a tree writing on the loop blocks here, then fails below
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", held_replace)
    required, low = {}, {}
    for tp, offset in ((SOLO, 4), (PAIR[0], 2), (PAIR[1], 7)):
        required[tp], low[tp] = replicas.deletes.delete_records(tp, offset)
    waiter = asyncio.create_task(replicas.deletes.wait(required, low, 5.0))
    await asyncio.sleep(0.05)
    assert not waiter.done()  # every replica has the start (RF=1); the file does not yet
    gate.set()
    assert await asyncio.wait_for(waiter, 5.0) == {
        SOLO: DeleteRecordsResult(0, 4), PAIR[0]: DeleteRecordsResult(0, 2), PAIR[1]: DeleteRecordsResult(0, 7)}
    assert len(renamed) == 1
    saved = dict(offset_checkpoint(tmp_path / "logs" / LOG_START_OFFSET_CHECKPOINT).read())
    assert (saved[SOLO], saved[PAIR[0]], saved[PAIR[1]], saved[TRIPLE]) == (4, 2, 7, 0)


def test_minus_one_means_the_high_watermark(replicas):
    replicas.append(SOLO, batch(6), acks=1)
    assert replicas.deletes.delete_records(SOLO, -1) == (6, 6)
    assert replicas.partitions[SOLO].log.log_start_offset == 6


@pytest.mark.parametrize("tp, offset, code", [
    (SOLO, 7, ErrorCode.OFFSET_OUT_OF_RANGE),  # beyond the high watermark 6
    (SOLO, -2, ErrorCode.OFFSET_OUT_OF_RANGE),  # negative, not -1
    (FOLLOWED, 1, ErrorCode.NOT_LEADER_OR_FOLLOWER),
    (TopicPartition("nowhere", 0), 1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    (COMPACTED, 1, ErrorCode.POLICY_VIOLATION),  # cleanup.policy=compact
    (OFFSETS, 1, ErrorCode.INVALID_TOPIC_EXCEPTION),  # internal topic
], ids=["beyond-hw", "negative", "follower", "unknown", "compacted", "internal"])
def test_refusals_apply_nothing(replicas, tp, offset, code):
    for led in (SOLO, COMPACTED, OFFSETS):
        replicas.append(led, batch(6), acks=1)
    assert code_of(replicas.deletes.delete_records, tp, offset) == code
    for led in (SOLO, COMPACTED, OFFSETS):
        assert replicas.partitions[led].log.log_start_offset == 0


async def test_the_answer_waits_for_every_live_follower(replicas):
    replicas.append(TRIPLE, batch(10), acks=1)
    for replica in (2, 3):
        follower_fetch(replicas, replica, 10, 0)
    assert replicas.partitions[TRIPLE].log.high_watermark == 10
    required, low = replicas.deletes.delete_records(TRIPLE, 5)
    assert (required, low) == (5, 0)  # the followers still start at 0
    waiter = asyncio.create_task(replicas.deletes.wait({TRIPLE: 5}, {TRIPLE: low}, 5.0))
    await asyncio.sleep(0)
    follower_fetch(replicas, 2, 10, 5)
    await asyncio.sleep(0)
    assert not waiter.done()  # broker 3 has not followed yet
    follower_fetch(replicas, 3, 10, 7)
    assert await asyncio.wait_for(waiter, 1.0) == {TRIPLE: DeleteRecordsResult(0, 5)}


async def test_the_wait_times_out_with_the_low_watermark_it_started_from(replicas):
    replicas.append(TRIPLE, batch(4), acks=1)
    for replica in (2, 3):
        follower_fetch(replicas, replica, 4, 0)
    required, low = replicas.deletes.delete_records(TRIPLE, 3)
    result = await replicas.deletes.wait({TRIPLE: required}, {TRIPLE: low}, 0.01)
    assert result == {TRIPLE: DeleteRecordsResult(ErrorCode.REQUEST_TIMED_OUT, 0)}


def test_a_fenced_follower_does_not_hold_the_low_watermark(replicas):
    replicas.append(TRIPLE, batch(4), acks=1)
    for replica in (2, 3):
        follower_fetch(replicas, replica, 4, 0)
    fenced = replay(TOPICS, BrokerRegistrationChange(3, 3, fenced=True))
    replicas.apply_changes(changes_for_broker(TOPICS, fenced, ME), fenced)
    replicas.deletes.delete_records(TRIPLE, 2)
    follower_fetch(replicas, 2, 4, 2)
    assert replicas.partitions[TRIPLE].low_watermark(replicas.is_alive) == 2


def test_a_follower_that_has_not_fetched_counts_as_unknown(replicas):
    replicas.append(TRIPLE, batch(4), acks=1)
    follower_fetch(replicas, 2, 4, 0)
    assert replicas.partitions[TRIPLE].low_watermark(replicas.is_alive) == -1


def test_a_follower_follows_the_leader_start_up_to_its_high_watermark(replicas):
    partition = replicas.partitions[FOLLOWED]
    data = bytearray(batch(8))
    replicas.append_as_follower(partition, memoryview(bytes(data)), 5, leader_log_start_offset=3)
    assert (partition.log.high_watermark, partition.log.log_start_offset) == (5, 3)
    replicas.append_as_follower(partition, memoryview(b""), 5, leader_log_start_offset=7)
    assert partition.log.log_start_offset == 5  # never past its own high watermark
    replicas.append_as_follower(partition, memoryview(b""), 8, leader_log_start_offset=7)
    assert partition.log.log_start_offset == 7
    replicas.append_as_follower(partition, memoryview(b""), 8)  # no start sent: unchanged
    assert partition.log.log_start_offset == 7


async def test_the_start_survives_a_crash_and_retention_deletes_the_segments_below(tmp_path):
    config = replace(LogConfig(), segment_bytes=400, file_delete_delay_ms=0)
    manager = open_manager(tmp_path, config)
    for _ in range(12):
        manager.append(SOLO, batch(1, tag="x" * 40), acks=1)
    log = manager.partitions[SOLO].log
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 3
    required, low = manager.deletes.delete_records(SOLO, bases[2] + 1)
    await manager.deletes.wait({SOLO: required}, {SOLO: low}, 5.0)  # answered: on disk
    # no clean shutdown: only the files written so far count
    for partition_log in manager.log_manager.logs.values():
        partition_log.close()
    manager.log_manager._release_locks()
    reopened = open_manager(tmp_path, config)
    log = reopened.partitions[SOLO].log
    assert log.log_start_offset == bases[2] + 1
    assert log.delete_old_segments(NOW) == 2  # the two whole segments below the start
    assert log.segments[0].base_offset == bases[2]
    reopened.log_manager.shutdown()


def test_delete_records_on_leader_never_moves_the_start_backwards(replicas):
    replicas.append(SOLO, batch(5), acks=1)
    partition = replicas.partitions[SOLO]
    assert delete_records_on_leader(partition, 3) == 3
    assert delete_records_on_leader(partition, 1) == 1
    assert partition.log.log_start_offset == 3


def test_a_follower_restarting_at_the_leader_start_writes_it_at_once(replicas, tmp_path):
    partition = replicas.partitions[FOLLOWED]
    replicas.append_as_follower(partition, memoryview(batch(3)), 3)
    replicas.truncate_follower_fully(partition, 50, "(test)")
    saved = dict(offset_checkpoint(tmp_path / "logs" / LOG_START_OFFSET_CHECKPOINT).read())
    assert saved[FOLLOWED] == 50 and partition.log.log_start_offset == 50
