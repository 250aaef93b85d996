"""broker/replication/partition.py: a leader's view of its followers, its HW and the ISR changes it proposes."""

from __future__ import annotations

import pytest

from broker.replication.partition import Partition, PendingIsrChange
from common.topic_partition import TopicPartition
from metadata.image import PartitionRegistration
from metadata.records import LeaderRecoveryState
from tests.log_helpers import NOW, batch, open_log

ME = 1
LAG = 1000


@pytest.fixture
def partition(tmp_path):
    log = open_log(tmp_path)
    p = Partition(TopicPartition("t", 0), "T", log, ME, 3, 7, (1, 2, 3), (1, 2, 3))
    log.append(batch(4), now_ms=NOW, leader_epoch=3)
    p.become_leader(ME, NOW)
    yield p
    log.close()


def everyone(_replica: int) -> bool:
    return True


def test_becoming_leader_records_the_epoch_start_and_resets_followers(partition):
    assert partition.leader_epoch_start_offset == 4
    assert partition.log.leader_epoch_cache.entries[-1] == (3, 0)
    assert set(partition.follower_states) == {2, 3}
    assert all(s.log_end_offset == -1 for s in partition.follower_states.values())


def test_hw_is_the_smallest_leo_of_the_isr_and_never_goes_back(partition):
    partition.record_follower_fetch(2, 4, NOW)
    assert not partition.next_high_watermark(ME, NOW, LAG, everyone).advanced  # 3 unknown
    partition.record_follower_fetch(3, 2, NOW)
    hw = partition.next_high_watermark(ME, NOW, LAG, everyone)
    assert (hw.offset, hw.advanced, hw.epoch_start_reached) == (2, True, False)
    partition.log.update_high_watermark(hw.offset)
    partition.record_follower_fetch(3, 4, NOW)
    assert partition.next_high_watermark(ME, NOW, LAG, everyone).epoch_start_reached


def test_a_pending_expansion_counts_in_the_maximal_isr(partition):
    partition.isr = (1, 2)
    partition.pending_isr = PendingIsrChange((1, 2, 3), LeaderRecoveryState.RECOVERED)
    assert partition.maximal_isr == (1, 2, 3)
    partition.record_follower_fetch(2, 4, NOW)
    assert not partition.next_high_watermark(ME, NOW, LAG, everyone).advanced  # waits for 3 too


def test_the_pending_change_ends_when_the_metadata_reaches_its_epoch(partition):
    partition.pending_isr = PendingIsrChange((1, 2), LeaderRecoveryState.RECOVERED, committed_partition_epoch=8)
    registration = PartitionRegistration("T", 0, (1, 2, 3), (1, 2, 3), leader=ME, leader_epoch=3, partition_epoch=7)
    partition.update_registration(registration)
    assert partition.pending_isr is not None
    partition.update_registration(PartitionRegistration("T", 0, (1, 2, 3), (1, 2), leader=ME, leader_epoch=3,
                                                        partition_epoch=8))
    assert partition.pending_isr is None and partition.isr == (1, 2)


def test_shrink_drops_followers_that_have_not_caught_up_within_the_lag(partition):
    partition.record_follower_fetch(2, 4, NOW)  # caught up now
    partition.record_follower_fetch(3, 1, NOW)  # behind
    assert partition.isr_to_shrink(ME, NOW + LAG, LAG) is None  # still within the lag
    assert partition.isr_to_shrink(ME, NOW + LAG + 1, LAG) == (1, 2)
    partition.pending_isr = PendingIsrChange((1, 2), LeaderRecoveryState.RECOVERED)
    assert partition.isr_to_shrink(ME, NOW + LAG + 1, LAG) is None  # one change at a time


def test_expand_adds_a_follower_at_the_hw_and_past_the_epoch_start(partition):
    partition.isr = (1, 2)
    partition.log.update_high_watermark(4)
    partition.record_follower_fetch(3, 3, NOW)
    assert partition.isr_to_expand(everyone) is None  # below the HW
    partition.record_follower_fetch(3, 4, NOW)
    assert partition.isr_to_expand(lambda r: r != 3) is None  # fenced or shutting down
    assert partition.isr_to_expand(everyone) == (1, 2, 3)
    partition.leader_recovery_state = LeaderRecoveryState.RECOVERING
    assert partition.isr_to_expand(everyone) is None  # an unclean leader recovers first


def test_a_change_refused_for_a_stale_view_ends_with_the_next_partition_epoch(partition):
    partition.pending_isr = PendingIsrChange((1, 2), LeaderRecoveryState.RECOVERED, awaiting_metadata=True)
    same = PartitionRegistration("T", 0, (1, 2, 3), (1, 2, 3), leader=ME, leader_epoch=3, partition_epoch=7)
    partition.update_registration(same)
    assert partition.pending_isr is not None  # nothing new: still waits, proposes nothing
    assert partition.isr_to_shrink(ME, NOW + 10 * LAG, LAG) is None
    partition.update_registration(PartitionRegistration("T", 0, (1, 2, 3), (1, 2, 3), leader=ME, leader_epoch=3,
                                                        partition_epoch=8))
    assert partition.pending_isr is None
