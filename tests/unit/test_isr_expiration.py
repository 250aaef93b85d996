"""broker/replication/isr_expiration.py and isr_policy.next_shrink_check: the isr-expiration
pass looks only at the ISRs that can shrink, and shrinks exactly those Kafka's walk over every
led partition would (Partition.getOutOfSyncReplicas: lastCaughtUpTimeMs older than
replica.lag.time.max.ms, unless at the leader's LEO)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log.log_manager import LogManager
from broker.replica_manager import ReplicaManager
from broker.replication.high_watermark import FollowerState
from broker.replication.isr_expiration import DEFAULT_RESOLUTION_MS, IsrExpirationSchedule
from broker.replication.isr_manager import IsrManager
from broker.replication.isr_policy import next_shrink_check, out_of_sync_replicas
from broker.replication.partition import Partition
from common.log_config import LogConfig
from common.topic_partition import TopicPartition
from metadata.image import EMPTY_IMAGE, BrokerRegistration
from metadata.local_changes import changes_for_broker
from tests.log_helpers import NOW, batch
from tests.unit.test_replica_manager import ME, TOPICS, TRIPLE_0

LAG = 1000
A, B, C = (TopicPartition("t", p) for p in range(3))


# ---- the schedule --------------------------------------------------------------------------

def test_due_partitions_come_out_once_in_time_order_and_leave_until_put_back():
    schedule: IsrExpirationSchedule[TopicPartition] = IsrExpirationSchedule(resolution_ms=1)
    schedule.check_at(B, 200)
    schedule.check_at(A, 100)
    schedule.check_at(A, 150)  # A once more: it comes out once, at its earliest time
    schedule.check_at(C, 300)
    assert schedule.take_due(99) == []
    assert schedule.take_due(200) == [A, B]
    assert schedule.take_due(200) == []  # taken: gone until checked again
    schedule.checked(A, 250, held=False)
    assert schedule.take_due(1000) == [A, C]
    assert len(schedule) == 0


def test_a_coarse_resolution_brings_a_partition_early_never_late():
    schedule: IsrExpirationSchedule[TopicPartition] = IsrExpirationSchedule(resolution_ms=1000)
    schedule.check_at(A, 31_001)
    schedule.check_at(B, 32_000)
    assert schedule.take_due(30_999) == []
    assert schedule.take_due(31_000) == [A]  # up to a second early: the pass finds it not due
    schedule.checked(A, 31_001, held=False)
    assert schedule.take_due(31_500) == [A]
    assert schedule.take_due(32_000) == [B]


def test_a_held_partition_waits_for_a_move_not_for_a_time():
    schedule: IsrExpirationSchedule[TopicPartition] = IsrExpirationSchedule(resolution_ms=1)
    schedule.checked(A, None, held=True)
    schedule.moved(B, 10)  # not held: nothing
    assert schedule.take_due(10**12) == []
    assert len(schedule) == 1
    schedule.moved(A, 50)
    schedule.moved(A, 60)  # no longer held: the second move adds nothing
    assert schedule.take_due(49) == []
    assert schedule.take_due(50) == [A]
    assert schedule.take_due(10**12) == []
    schedule.checked(A, 900, held=True)  # both: a time and a move
    schedule.moved(A, 70)
    assert schedule.take_due(70) == [A]
    assert schedule.take_due(900) == [A]  # its time too (the pass looks again, finds it not due)
    schedule.checked(A, None, held=True)
    schedule.forget(A)  # no longer led: no move brings it back
    schedule.moved(A, 80)
    assert schedule.take_due(10**12) == []
    assert len(schedule) == 0


# ---- the rule: never later than Kafka's walk -------------------------------------------------

follower_states = st.builds(
    lambda leo, fetch_ms, caught_up_ms: FollowerState(log_end_offset=leo, last_fetch_ms=fetch_ms,
                                                      last_caught_up_ms=caught_up_ms),
    st.integers(-1, 12), st.integers(0, 5 * LAG), st.integers(0, 5 * LAG))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.integers(2, 4), follower_states), st.lists(st.integers(2, 4), unique=True),
       st.integers(0, 12), st.integers(0, 5 * LAG), st.lists(st.integers(0, 4 * LAG), max_size=8))
def test_no_member_is_out_of_sync_before_the_next_check(states, followers, leader_leo, now, later):
    isr = (1, *followers)
    at, held = next_shrink_check(isr, 1, states, now, leader_leo=leader_leo, replica_lag_time_max_ms=LAG)
    out_now = out_of_sync_replicas(isr, 1, states, now, leader_leo=leader_leo, replica_lag_time_max_ms=LAG)
    assert (at == now) == bool(out_now)  # due now exactly when the walk finds one now
    assert at is None or at >= now
    for t in (now + d for d in later):  # the LEOs unchanged, no walk before `at` finds anything
        if at is None or t < at:
            assert out_of_sync_replicas(isr, 1, states, t, leader_leo=leader_leo,
                                        replica_lag_time_max_ms=LAG) == ()
    if not out_now:  # (when due now, the next pass looks again whatever `held` says)
        assert held == any(states[r].log_end_offset == leader_leo for r in followers if r in states)
        # an append can make only a member that was at the leader's LEO lag at once
        appended = out_of_sync_replicas(isr, 1, states, now, leader_leo=leader_leo + 1,
                                        replica_lag_time_max_ms=LAG)
        assert not appended or held


# ---- the pass against Kafka's walk, over random fetches, appends and passes --------------------

class FakeLog:
    def __init__(self) -> None:
        self.log_end_offset = 0
        self.high_watermark = 0


class Brokers:
    def broker(self, broker_id: int) -> BrokerRegistration:
        return BrokerRegistration(broker_id, 5, "incarnation", (), fenced=False)


class RecordingAlterPartition:
    """Records every proposal and refuses to send it, so no ISR or pending state ever changes and
    each pass must propose again what is still lagging (as Kafka's walk would)."""

    pending = 0

    def __init__(self) -> None:
        self.proposed: list[TopicPartition] = []

    def submit(self, item: Any, _callback: Any) -> bool:
        self.proposed.append(item.tp)
        return False

    def discard(self, tp: TopicPartition) -> None:
        pass


@pytest.mark.parametrize("resolution_ms", [1, DEFAULT_RESOLUTION_MS])
def test_the_pass_proposes_exactly_what_a_walk_over_every_led_partition_would(resolution_ms):
    rng = random.Random(35)
    clock = [NOW]
    alter = RecordingAlterPartition()
    isr = IsrManager(ME, now_ms=lambda: clock[0], replica_lag_time_max_ms=LAG,
                     alter_partition=alter, image=lambda: Brokers(),  # type: ignore[arg-type,return-value]
                     is_current=lambda p: True, on_change=lambda tp: None)
    isr.expiration = IsrExpirationSchedule(resolution_ms)
    partitions: dict[TopicPartition, Partition] = {}
    for i in range(60):
        tp = TopicPartition("t", i)
        partition = Partition(tp, "T" * 22, FakeLog(), ME, 1, 1, (1, 2, 3), (1, 2, 3))  # type: ignore[arg-type]
        partition.follower_states = {2: FollowerState(last_caught_up_ms=clock[0]),
                                     3: FollowerState(last_caught_up_ms=clock[0])}
        partitions[tp] = partition
        isr.expiration.check_at(partition, clock[0])  # new leaderships: the replica manager's apply_changes
    proposals = 0
    for _ in range(3000):  # bounded: random steps
        clock[0] += rng.choice((0, 0, 1, 2))  # fine steps: passes land on the lag's exact edges too
        step = rng.random()
        tp = TopicPartition("t", rng.randrange(60))
        partition = partitions[tp]
        if step < 0.5:  # a follower fetch, sometimes from behind
            leo = partition.log.log_end_offset
            offset = leo if rng.random() < 0.7 else rng.randint(0, leo)
            partition.record_follower_fetch(rng.choice((2, 3)), offset, clock[0])
            isr.expiration.moved(partition, clock[0])
        elif step < 0.8:  # a leader append
            partition.log.log_end_offset += rng.randint(1, 3)
            isr.expiration.moved(partition, clock[0])
        else:  # an isr-expiration pass (Kafka's every lag / 2; any time here)
            clock[0] += rng.choice((0, 1, LAG // 2 - 2, LAG // 2, LAG // 2 + 1, LAG))
            expected = sorted((tp for tp, p in partitions.items()
                               if p.isr_to_shrink(ME, clock[0], LAG) is not None), key=str)
            alter.proposed.clear()
            isr.maybe_shrink_due()
            assert sorted(alter.proposed, key=str) == expected
            proposals += len(expected)
    assert proposals > 0  # the steps made some ISRs lag: the comparison was not of empty sets


class CountingSchedule(IsrExpirationSchedule[Partition]):
    """The schedule, recording what each pass took."""

    def __init__(self) -> None:
        super().__init__()
        self.looked: list[list[TopicPartition]] = []

    def take_due(self, now_ms: int) -> list[Partition]:
        due = super().take_due(now_ms)
        self.looked.append([p.tp for p in due])
        return due


def test_an_idle_partition_past_the_lag_is_not_looked_at_until_an_append(tmp_path):
    """The replica manager: an idle partition (its followers' sessions leave it out, their
    caught-up times go stale) costs no pass; an append brings it back, and it shrinks as in Kafka."""
    clock = [NOW]
    alter = RecordingAlterPartition()
    log_manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    try:
        replicas = ReplicaManager(ME, log_manager, now_ms=lambda: clock[0], replica_lag_time_max_ms=LAG,
                                  alter_partition=alter)  # type: ignore[arg-type]
        schedule = replicas.isr.expiration = CountingSchedule()
        replicas.apply_changes(changes_for_broker(EMPTY_IMAGE, TOPICS, ME), TOPICS)
        replicas.append(TRIPLE_0, batch(2), acks=1)
        for follower in (2, 3):
            replicas.read(TRIPLE_0, 2, 1 << 20, replica_id=follower)  # both at the LEO
        looked = schedule.looked
        for _ in range(6):  # three lag times of passes: the followers never fetch again
            clock[0] += LAG // 2
            assert replicas.maybe_shrink_isr() == 0
        assert alter.proposed == []
        # One look when the followers' first lag ran out (at the leader's LEO: held), none after.
        assert [tp for due in looked for tp in due] == [TRIPLE_0]
        replicas.append(TRIPLE_0, batch(1), acks=1)  # the leader's LEO moves past both followers
        clock[0] += LAG // 2
        replicas.maybe_shrink_isr()
        assert looked[-1] == [TRIPLE_0] and alter.proposed == [TRIPLE_0]  # Kafka shrinks here too
        alter.proposed.clear()
        replicas.read(TRIPLE_0, 3, 1 << 20, replica_id=2)
        replicas.read(TRIPLE_0, 3, 1 << 20, replica_id=3)  # caught up again
        clock[0] += LAG // 2
        replicas.maybe_shrink_isr()
        assert alter.proposed == []
    finally:
        log_manager.shutdown()
