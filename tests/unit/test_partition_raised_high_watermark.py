"""broker/replication/partition.py: the leader's HW answer with its fast paths (the follower that
held it last asked first, `hw_held_by`) against the rule itself, over seeded runs of appends,
follower fetches, ISR and pending-ISR changes, min.insync.replicas, eligibility and the clock.

The rule, with no shortcut: `high_watermark` over the maximal ISR and the caught-up eligible
followers outside it, standing still while the ISR is below min(min.insync.replicas, replicas).
Every event is followed by the leader's look, as the shell's after an append or a follower fetch;
a moved HW is taken into the log, as the ISR manager does."""

from __future__ import annotations

import random

import pytest

from broker.replication.high_watermark import high_watermark, is_caught_up
from broker.replication.partition import Partition, PendingIsrChange
from common.topic_partition import TopicPartition
from metadata.records import LeaderRecoveryState
from tests.log_helpers import NOW, batch, open_log

ME = 1
REPLICAS = (1, 2, 3, 4)
LAG = 1000
EVENTS = 400  # per seed; each appends at most 3 records: the log stays a few KiB


def expected_hw(p: Partition, now_ms: int, eligible: set[int]) -> int:
    """The HW the rule gives: above the log's HW when it moves, else the log's HW."""
    current = p.log.high_watermark
    if len(p.isr) < p.min_insync_replicas and len(p.isr) < len(p.replicas):
        return current
    maximal = p.maximal_isr
    leos = {r: s.log_end_offset for r, s in p.follower_states.items()}
    waiting = [r for r, s in p.follower_states.items()
               if r not in maximal and s.log_end_offset >= 0 and r in eligible
               and is_caught_up(s, leader_leo=p.log.log_end_offset, now_ms=now_ms, replica_lag_time_max_ms=LAG)]
    return high_watermark(leader=ME, leader_leo=p.log.log_end_offset, isr=maximal, follower_leos=leos,
                          current_hw=current, leader_epoch_start_offset=p.leader_epoch_start_offset,
                          waiting_for=waiting).offset


@pytest.mark.parametrize("seed", range(12))
def test_the_leaders_hw_is_the_rules_after_every_event(tmp_path, seed: int) -> None:
    rng = random.Random(seed)
    log = open_log(tmp_path)
    try:
        p = Partition(TopicPartition("t", 0), "T", log, ME, 3, 7, REPLICAS, REPLICAS)
        log.append(batch(2), now_ms=NOW, leader_epoch=3)
        p.become_leader(ME, NOW)
        now, eligible = NOW, set(REPLICAS)
        for step in range(EVENTS):  # bounded by EVENTS
            event = rng.choice(["append", "fetch", "fetch", "fetch", "isr", "pending", "min_isr", "eligible", "clock"])
            if event == "append":
                log.append(batch(rng.randint(1, 3)), now_ms=now, leader_epoch=3)
            elif event == "fetch":
                follower = rng.choice(REPLICAS[1:])
                offset = rng.choice([log.log_end_offset, log.high_watermark, rng.randint(0, log.log_end_offset)])
                p.record_follower_fetch(follower, offset, now)
            elif event == "isr":
                p.isr = (ME, *sorted(rng.sample(REPLICAS[1:], rng.randint(0, 3))))
            elif event == "pending":
                p.pending_isr = None if rng.random() < 0.5 else PendingIsrChange(
                    (ME, *sorted(rng.sample(REPLICAS[1:], rng.randint(0, 3)))), LeaderRecoveryState.RECOVERED)
            elif event == "min_isr":
                p.min_insync_replicas = rng.randint(1, 4)
            elif event == "eligible":
                eligible ^= {rng.choice(REPLICAS[1:])}
            else:
                now += rng.choice([1, LAG // 2, 2 * LAG])
            want = expected_hw(p, now, eligible)
            hw = p.next_high_watermark(ME, now, LAG, eligible.__contains__)
            assert (hw.offset, hw.advanced) == (want, want > log.high_watermark), f"seed {seed}, step {step}: {event}"
            raised = p.raised_high_watermark(ME, now, LAG, eligible.__contains__)
            assert raised == (want if want > log.high_watermark else -1), f"seed {seed}, step {step}: {event}"
            if raised >= 0:
                log.update_high_watermark(raised)
    finally:
        log.close()


def test_the_follower_that_held_it_no_longer_holds_it_once_out_of_the_isr(tmp_path) -> None:
    log = open_log(tmp_path)
    try:
        p = Partition(TopicPartition("t", 0), "T", log, ME, 3, 7, (1, 2, 3), (1, 2, 3), min_insync_replicas=2)
        log.append(batch(4), now_ms=NOW, leader_epoch=3)
        p.become_leader(ME, NOW)
        p.record_follower_fetch(2, 4, NOW)
        p.record_follower_fetch(3, 0, NOW)
        assert p.raised_high_watermark(ME, NOW, LAG, lambda r: True) == -1
        assert p.hw_held_by == 3  # 3 holds it at 0
        p.isr = (1, 2)  # 3 leaves the ISR (the metadata's shrink): 2 alone decides, at 4
        assert p.raised_high_watermark(ME, NOW + 2 * LAG, LAG, lambda r: True) == 4
    finally:
        log.close()
