"""broker/txn_verification.py: KIP-890 part 1's rule (which transactional batches a leader must
verify with the coordinator), its guard (a marker while waiting spends the verification) and
Kafka's mapping of the coordinator's errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.replica_appends import append_as_leader, append_marker_as_leader
from broker.replication.partition import Partition
from broker.txn_verification import (
    append_error,
    finish_verification,
    needs_verification,
    start_verification,
    transactional_producer,
)
from common.errors import ErrorCode
from common.topic_partition import TopicPartition
from tests.log_helpers import NOW, batch, open_log

PID = 7


@pytest.fixture
def partition(tmp_path: Path) -> Partition:
    p = Partition(TopicPartition("topic", 0), "id", open_log(tmp_path), 1, 0, 0, (1,), (1,))
    p.min_insync_replicas = 1
    p.become_leader(1, NOW)
    yield p
    p.log.close()


def txn(seq: int = 0, epoch: int = 0) -> bytes:
    return batch(1, producer_id=PID, producer_epoch=epoch, base_sequence=seq, is_transactional=True)


def test_which_batches_name_a_transactional_producer() -> None:
    assert transactional_producer(txn(epoch=3)) == (PID, 3)
    assert transactional_producer(batch(1, producer_id=PID, producer_epoch=0, base_sequence=0)) is None
    assert transactional_producer(batch(1)) is None
    assert transactional_producer(b"short") is None
    assert transactional_producer(None) is None


def test_a_verified_producer_starts_its_transaction_and_a_marker_spends_it(partition: Partition) -> None:
    assert needs_verification(partition, PID, 0)
    guard = start_verification(partition, PID, 0)
    assert start_verification(partition, PID, 0) is guard  # concurrent requests share it
    assert needs_verification(partition, PID, 0)  # asked, not answered yet
    assert finish_verification(partition, PID, guard, ErrorCode.NONE) is ErrorCode.NONE
    assert not needs_verification(partition, PID, 0)
    assert needs_verification(partition, PID, 1)  # another epoch is another question
    append_as_leader(partition, txn(), acks=1, now_ms=NOW)
    assert not needs_verification(partition, PID, 0)  # its transaction is open here
    append_marker_as_leader(partition, producer_id=PID, producer_epoch=0, coordinator_epoch=0,
                            committed=True, now_ms=NOW)
    assert needs_verification(partition, PID, 0)  # the next transaction is asked about again


def test_a_marker_while_waiting_refuses_the_write(partition: Partition) -> None:
    guard = start_verification(partition, PID, 0)
    append_marker_as_leader(partition, producer_id=PID, producer_epoch=0, coordinator_epoch=0,
                            committed=False, now_ms=NOW)
    assert finish_verification(partition, PID, guard, ErrorCode.NONE) is ErrorCode.INVALID_TXN_STATE
    assert needs_verification(partition, PID, 0)


def test_a_refusal_forgets_the_guard(partition: Partition) -> None:
    guard = start_verification(partition, PID, 0)
    assert finish_verification(partition, PID, guard, ErrorCode.INVALID_TXN_STATE) is ErrorCode.INVALID_TXN_STATE
    assert PID not in partition.verified_txns


def test_leadership_change_forgets_verifications(partition: Partition) -> None:
    finish_verification(partition, PID, start_verification(partition, PID, 0), ErrorCode.NONE)
    partition.become_follower()
    assert needs_verification(partition, PID, 0)


@pytest.mark.parametrize("coordinator, produce", [
    (ErrorCode.NONE, ErrorCode.NONE),
    (ErrorCode.INVALID_TXN_STATE, ErrorCode.INVALID_TXN_STATE),
    (ErrorCode.NOT_COORDINATOR, ErrorCode.NOT_ENOUGH_REPLICAS),
    (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_ENOUGH_REPLICAS),
    (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_ENOUGH_REPLICAS),
    (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NOT_ENOUGH_REPLICAS),
    (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH),
    (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.INVALID_PRODUCER_EPOCH),
])
def test_coordinator_errors_map_as_kafkas(coordinator: ErrorCode, produce: ErrorCode) -> None:
    assert append_error(int(coordinator)) is produce
