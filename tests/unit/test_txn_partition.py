"""The partition side of transactions: transactional appends, markers from the coordinator, the
last stable offset, read_committed reads with their aborted transactions, the `.txnindex` per
segment through recovery and truncation, and a follower replaying the leader's markers
(broker/replica_appends.py, broker/replica_reads.py, broker/log/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log.partition_log import PartitionLog
from broker.log.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, decode_entries
from broker.replica_appends import (
    append_as_follower,
    append_as_leader,
    append_marker_as_leader,
    rebuild_producer_state,
    truncate_follower,
)
from broker.replica_reads import ReplicaError, read_committed, read_log
from broker.replication.partition import Partition
from common.errors import ErrorCode
from common.record_batch import iter_batches
from common.log_config import LogConfig
from common.topic_partition import TopicPartition
from tests.log_helpers import NOW, batch, open_log

P1, P2 = 1000, 2000


def make_partition(log: PartitionLog) -> Partition:
    partition = Partition(TopicPartition("topic", 0), "id", log, 1, 0, 0, (1,), (1,))
    partition.min_insync_replicas = 1
    partition.become_leader(1, NOW)
    return partition


def txn_batch(pid: int, seq: int, count: int = 2, *, epoch: int = 0) -> bytes:
    return batch(count, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)


def produce(partition: Partition, data: bytes) -> int:
    info = append_as_leader(partition, data, acks=1, now_ms=NOW)
    partition.log.update_high_watermark(partition.log.log_end_offset)  # the ISR is the leader alone
    return info.first_offset


def marker(partition: Partition, pid: int, *, committed: bool, epoch: int = 0, coordinator_epoch: int = 0) -> int:
    info = append_marker_as_leader(partition, producer_id=pid, producer_epoch=epoch,
                                   coordinator_epoch=coordinator_epoch, committed=committed, now_ms=NOW)
    return info.first_offset


@pytest.fixture
def partition(tmp_path: Path) -> Partition:
    p = make_partition(open_log(tmp_path))
    yield p
    p.log.close()


def test_lso_follows_open_transactions_and_markers(partition: Partition) -> None:
    assert produce(partition, txn_batch(P1, 0)) == 0           # P1 opens at 0: offsets 0-1
    assert produce(partition, batch(1)) == 2                   # plain record at 2
    assert produce(partition, txn_batch(P2, 0)) == 3           # P2 opens at 3: offsets 3-4
    assert partition.last_stable_offset == 0
    assert marker(partition, P1, committed=True) == 5
    partition.log.update_high_watermark(5)                     # the marker not yet replicated
    assert partition.last_stable_offset == 0
    partition.log.update_high_watermark(6)
    assert partition.last_stable_offset == 3                   # P2 still open
    assert marker(partition, P2, committed=False) == 6
    partition.log.update_high_watermark(7)
    assert partition.last_stable_offset == 7
    assert partition.log.active_segment.txn_index.entries == [AbortedTxn(P2, 3, 6, 7)]


def test_read_committed_stops_at_the_lso_and_lists_overlapping_aborts(partition: Partition) -> None:
    produce(partition, txn_batch(P1, 0))                       # 0-1, aborted below
    marker(partition, P1, committed=False)                     # 2
    produce(partition, txn_batch(P2, 0))                       # 3-4, open
    partition.log.update_high_watermark(partition.log.log_end_offset)
    read = read_committed(partition, 0, 1 << 20, min_one_batch=True)
    assert read.last_stable_offset == 3
    offsets = [h.base_offset for _, h in iter_batches(read.records.read_bytes())]
    assert offsets == [0, 2]                                   # nothing of P2's open transaction
    assert read.aborted_transactions == (AbortedTxn(P1, 0, 2, 3),)
    assert read_committed(partition, 3, 1 << 20, min_one_batch=True).records.length == 0
    uncommitted = read_log(partition, 0, 1 << 20, up_to=partition.log.high_watermark, min_one_batch=True)
    assert uncommitted.aborted_transactions is None and uncommitted.last_stable_offset == 3
    assert [h.base_offset for _, h in iter_batches(uncommitted.records.read_bytes())] == [0, 2, 3]


@pytest.mark.parametrize("epoch, coordinator_epoch, code", [
    (0, 5, ErrorCode.INVALID_PRODUCER_EPOCH),
    (1, 4, ErrorCode.TRANSACTION_COORDINATOR_FENCED),
])
def test_fenced_markers_write_nothing(partition: Partition, epoch: int, coordinator_epoch: int,
                                      code: ErrorCode) -> None:
    produce(partition, txn_batch(P1, 0, epoch=1))
    marker(partition, P1, committed=True, epoch=1, coordinator_epoch=5)
    produce(partition, txn_batch(P1, 2, epoch=1))
    end = partition.log.log_end_offset
    with pytest.raises(ReplicaError) as refused:
        marker(partition, P1, committed=False, epoch=epoch, coordinator_epoch=coordinator_epoch)
    assert refused.value.code == code
    assert partition.log.log_end_offset == end
    assert dict(partition.producer_state.ongoing) == {P1: 3}


def test_clients_cannot_write_markers_nor_leave_a_transaction_untransactional(partition: Partition) -> None:
    produce(partition, txn_batch(P1, 0))
    with pytest.raises(ReplicaError) as refused:
        produce(partition, batch(1, producer_id=P1, producer_epoch=0, base_sequence=2))
    assert refused.value.code == ErrorCode.INVALID_TXN_STATE
    control = batch(1, producer_id=P2, producer_epoch=0, base_sequence=0, is_transactional=True, is_control=True)
    with pytest.raises(ReplicaError) as refused:
        produce(partition, control)
    assert refused.value.code == ErrorCode.INVALID_RECORD


def test_recovery_rebuilds_the_txnindex_and_the_open_transactions(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=400)                      # a few batches per segment
    partition = make_partition(open_log(tmp_path, config))
    produce(partition, txn_batch(P1, 0))
    produce(partition, txn_batch(P2, 0))
    marker(partition, P1, committed=False)
    for seq in range(2, 12, 2):
        produce(partition, txn_batch(P2, seq))
    produce(partition, txn_batch(P1, 2, epoch=0))              # P1's next transaction
    marker(partition, P2, committed=False)
    partition.log.update_high_watermark(partition.log.log_end_offset)
    expected_lso = partition.last_stable_offset
    expected = {s.base_offset: list(s.txn_index.entries) for s in partition.log.segments}
    assert sum(map(len, expected.values())) == 2
    assert len(partition.log.segments) > 2
    hw = partition.log.high_watermark
    directory = partition.log.directory
    for segment in partition.log.segments:                     # a crash: nothing flushed
        segment.close()
    for path in directory.glob(f"*{TXN_INDEX_SUFFIX}"):
        path.unlink()
    reopened = make_partition(PartitionLog(directory, config, now_ms=NOW, high_watermark=hw))
    rebuild_producer_state(reopened)
    assert {s.base_offset: list(s.txn_index.entries) for s in reopened.log.segments} == expected
    assert reopened.last_stable_offset == expected_lso
    assert dict(reopened.producer_state.ongoing) == dict(partition.producer_state.ongoing)
    for segment in reopened.log.segments:                      # written at once, Kafka's format
        path = segment.txn_index.path
        assert (decode_entries(path.read_bytes()) if path.exists() else []) == expected[segment.base_offset]
    reopened.log.close()


def test_a_follower_replays_markers_and_truncation_reopens_a_transaction(tmp_path: Path) -> None:
    leader = make_partition(open_log(tmp_path / "leader"))
    follower = make_partition(open_log(tmp_path / "follower"))
    produce(leader, txn_batch(P1, 0))
    marker(leader, P1, committed=False)
    produce(leader, txn_batch(P2, 0))
    marker(leader, P2, committed=True)
    leader.log.update_high_watermark(leader.log.log_end_offset)
    data = leader.log.read(0, 1 << 20).read_bytes()
    append_as_follower(follower, memoryview(data), leader.log.log_end_offset, now_ms=NOW)
    assert follower.log.segments[0].txn_index.entries == leader.log.segments[0].txn_index.entries
    assert follower.last_stable_offset == leader.last_stable_offset == 6
    truncate_follower(follower, 5, "test", now_ms=NOW)         # the COMMIT marker goes
    assert dict(follower.producer_state.ongoing) == {P2: 3}
    assert follower.last_stable_offset == 3
    truncate_follower(follower, 2, "test", now_ms=NOW)         # the ABORT marker goes
    assert follower.log.segments[0].txn_index.entries == []
    assert dict(follower.producer_state.ongoing) == {P1: 0}
    leader.log.close()
    follower.log.close()


def test_a_follower_forgets_ended_transactions_as_its_high_watermark_moves(tmp_path: Path) -> None:
    leader = make_partition(open_log(tmp_path / "leader"))
    follower = make_partition(open_log(tmp_path / "follower"))
    for seq in range(0, 20, 2):
        produce(leader, txn_batch(P1, seq))
        marker(leader, P1, committed=True)
    data = leader.log.read(0, 1 << 20).read_bytes()
    append_as_follower(follower, memoryview(data), 0, now_ms=NOW)
    assert follower.producer_state.first_unstable_offset(0) == 0   # ten ended, none replicated
    append_as_follower(follower, memoryview(b""), leader.log.log_end_offset, now_ms=NOW)
    assert follower.producer_state._unreplicated == []              # noqa: SLF001 - bounded
    leader.log.close()
    follower.log.close()
