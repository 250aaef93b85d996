"""broker/replication/partition.py: a leader's view of its followers, its HW and the ISR changes it proposes."""

from __future__ import annotations

import itertools

import pytest

from broker.replication.high_watermark import FollowerState
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


# ---- the HW after an append: every fast return against Kafka's rule ---------------------
# The log of the fixture ends at 4. A follower is (LEO, caught up within the lag), or None when it
# has no state (a replica the registration added without a new leader epoch: unknown LEO).
LEO = 4
FOLLOWER_CASES = [None, (-1, True), (0, False), (2, True), (2, False), (LEO, True)]


def kafka_high_watermark(partition: Partition, now_ms: int, eligible: bool) -> tuple[int, bool, bool]:
    """Partition.maybeIncrementLeaderHW, written out: below min ISR it stands; otherwise the min
    LEO over the maximal ISR (unknown = -1) and the caught-up eligible followers outside it that
    fetched in this epoch, never backwards."""
    current = partition.log.high_watermark
    candidate = LEO
    if len(partition.isr) < min(partition.min_insync_replicas, len(partition.replicas)):
        candidate = current
    else:
        for r in partition.replicas:
            state = partition.follower_states.get(r)
            if r == ME:
                continue
            if r in partition.maximal_isr:
                candidate = min(candidate, -1 if state is None else state.log_end_offset)
            elif (state is not None and state.log_end_offset >= 0 and eligible
                  and (state.log_end_offset == LEO or now_ms - state.last_caught_up_ms <= LAG)):
                candidate = min(candidate, state.log_end_offset)
    offset = max(candidate, current)
    return offset, offset > current, offset >= partition.leader_epoch_start_offset


@pytest.mark.parametrize(("replicas", "isr", "followers", "current_hw", "expected"), [
    # (offset, advanced) after the append that took the log end to 4
    ((1,), (1,), {}, 2, (LEO, True)),                              # RF=1: the HW is the log end
    ((1, 2, 3), (1,), {2: (2, False), 3: (0, False)}, 2, (LEO, True)),  # ISR of the leader alone
    ((1, 2, 3), (1,), {2: (3, True), 3: (0, False)}, 2, (3, True)),   # ... waits for a caught-up follower
    ((1, 2, 3), (1, 2, 3), {2: (LEO, True), 3: (3, True)}, 2, (3, True)),  # followers past the old HW
    ((1, 2, 3), (1, 2, 3), {2: (LEO, True), 3: (2, True)}, 2, (2, False)),  # one at the HW holds it
    ((1, 2, 3), (1, 2, 3), {2: (LEO, True)}, 2, (2, False)),       # one with no state holds it
    ((1, 2), (1, 2), {2: (-1, True)}, 0, (0, False)),               # one not fetched in this epoch
])
def test_the_hw_after_an_append(partition, replicas, isr, followers, current_hw, expected):
    partition.replicas, partition.isr, partition.min_insync_replicas = replicas, isr, 1
    partition.follower_states = {r: FollowerState(leo, NOW, NOW if caught_up else 0)
                                 for r, (leo, caught_up) in followers.items()}
    partition.log.update_high_watermark(current_hw)
    hw = partition.next_high_watermark(ME, NOW + LAG // 2, LAG, everyone)
    assert (hw.offset, hw.advanced) == expected


def test_the_hw_follows_kafkas_rule_in_every_state_of_three_replicas(partition):
    """Every ISR (maximal or committed), follower state, HW, min ISR and eligibility at RF=3 and
    RF=1: no fast return may answer other than the rule written out."""
    now = NOW + LAG // 2
    cases = 0
    for replicas in ((1,), (1, 2, 3)):
        followers = [r for r in replicas if r != ME]
        isrs = [(1,)] if len(replicas) == 1 else [(1,), (1, 2), (1, 3), (1, 2, 3)]
        for isr, pending, state_2, state_3, current_hw, min_isr, eligible, epoch_start in itertools.product(
                isrs, (None, (1, 2, 3)), FOLLOWER_CASES, FOLLOWER_CASES, (0, 2, LEO), (1, 2),
                (True, False), (0, LEO)):
            if len(replicas) == 1 and (state_2, state_3, pending) != (None, None, None):
                continue
            partition.replicas, partition.isr, partition.min_insync_replicas = replicas, isr, min_isr
            partition.pending_isr = None if pending is None else PendingIsrChange(
                pending, LeaderRecoveryState.RECOVERED)
            partition.leader_epoch_start_offset = epoch_start
            partition.follower_states = {
                r: FollowerState(case[0], NOW, NOW if case[1] else 0)
                for r, case in zip(followers, (state_2, state_3)) if case is not None}
            partition.log.update_high_watermark(current_hw)
            hw = partition.next_high_watermark(ME, now, LAG, lambda _r: eligible)
            assert tuple(hw) == kafka_high_watermark(partition, now, eligible), (
                isr, pending, partition.follower_states, current_hw, min_isr, eligible)
            cases += 1
    assert cases > 5_000
