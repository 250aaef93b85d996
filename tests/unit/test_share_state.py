"""broker/share/state.py: the broker's share state on a fake clock (timers run by hand)."""

from __future__ import annotations

import asyncio

from broker.share.state import MAX_SHARE_SESSIONS, ShareBroker, ShareSettings, share_settings
from broker.timers import TimerService
from common.errors import ErrorCode
from common.topic_partition import TopicPartition
from groups import share_group as sg
from groups import share_partition as sp

TP = TopicPartition("jobs", 0)
LIMITS = sp.ShareLimits(record_lock_duration_ms=1_000, delivery_count_limit=2)


def broker(reset: str = "latest") -> tuple[ShareBroker, list[int]]:
    clock = [0]
    timers = TimerService(clock=lambda: clock[0], driven=False)
    return ShareBroker(ShareSettings(LIMITS, sg.ShareGroupConfig(), reset), timers), clock


def acquire(share: ShareBroker, member: str, first: int, last: int) -> None:
    state = share.partitions[("g", TP)].state
    out = sp.acquire(state, member_id=member, batches=[(first, last)], max_records=100, now_ms=share.now_ms(),
                     limits=LIMITS)
    share.apply_partition("g", TP, out.records, "acquired", quiet=True)


def test_a_share_partition_starts_at_the_reset_offset_and_again_in_a_new_leader_epoch() -> None:
    latest, _ = broker("latest")
    assert latest.partition("g", TP, leader_epoch=3, log_start_offset=5, high_watermark=40).start_offset == 40
    earliest, _ = broker("earliest")
    assert earliest.partition("g", TP, leader_epoch=3, log_start_offset=5, high_watermark=40).start_offset == 5
    acquire(earliest, "m", 5, 9)
    again = earliest.partition("g", TP, leader_epoch=4, log_start_offset=5, high_watermark=40)
    assert (again.start_offset, dict(again.in_flight)) == (5, {})  # in-flight state is the old leader's


def test_the_lock_timer_returns_records_at_their_deadline() -> None:
    share, clock = broker("earliest")
    share.partition("g", TP, leader_epoch=0, log_start_offset=0, high_watermark=10)
    acquire(share, "m", 0, 4)
    clock[0] = 999
    share.timers.run_due()
    assert sp.counts(share.partitions[("g", TP)].state)["ACQUIRED"] == 5
    clock[0] = 1_000
    share.timers.run_due()
    state = share.partitions[("g", TP)].state
    assert sp.counts(state)["ACQUIRED"] == 0 and sp.next_lock_deadline(state) is None


def test_closing_or_reopening_a_session_releases_what_the_member_holds() -> None:
    share, _ = broker("earliest")
    share.partition("g", TP, leader_epoch=0, log_start_offset=0, high_watermark=10)
    share.open_session("g", "m").partitions[TP] = None
    acquire(share, "m", 0, 1)
    share.open_session("g", "m").partitions[TP] = None  # epoch 0 again: the old session's records go back
    assert sp.counts(share.partitions[("g", TP)].state)["ACQUIRED"] == 0
    acquire(share, "m", 0, 1)
    share.close_session("g", "m")
    assert sp.counts(share.partitions[("g", TP)].state)["ACQUIRED"] == 0
    assert share.session("g", "m") is None


def test_sessions_are_bounded_least_recently_used_first() -> None:
    share, _ = broker()
    for i in range(MAX_SHARE_SESSIONS + 1):
        share.open_session("g", f"m{i}")
    assert len(share.sessions) == MAX_SHARE_SESSIONS and share.session("g", "m0") is None


def test_sweep_forgets_partitions_and_member_sessions_that_moved_away() -> None:
    share, _ = broker()
    share.partition("g", TP, leader_epoch=0, log_start_offset=0, high_watermark=0)
    share.arm_session("g", "m", 45_000, lambda now_ms: None)
    share.sweep(leads=lambda tp: True, coordinates=lambda g: True)
    assert share.partitions and share.has_session("g", "m")
    share.sweep(leads=lambda tp: False, coordinates=lambda g: False)
    assert not share.partitions and not share.has_session("g", "m") and not share.timers.deadline(("share-session", "g", "m"))


def test_a_member_session_expires_once_unless_a_heartbeat_moves_it() -> None:
    share, clock = broker()
    expired: list[int] = []

    def expire(now_ms: int) -> None:
        share.forget_session("g", "m")
        expired.append(now_ms)
    share.arm_session("g", "m", 1_000, expire)
    clock[0] = 900
    share.arm_session("g", "m", 1_000, expire)  # a heartbeat
    clock[0] = 1_800
    share.timers.run_due()
    assert not expired
    clock[0] = 1_900
    share.timers.run_due()
    assert expired == [1_900] and not share.has_session("g", "m")


OVERRIDES = {"share.session.timeout.ms": "9000", "share.heartbeat.interval.ms": "1000",
             "share.record.lock.duration.ms": "2000", "share.delivery.count.limit": "3",
             "share.partition.max.record.locks": "150", "share.auto.offset.reset": "earliest"}


def test_a_groups_share_configs_override_the_brokers() -> None:
    base = ShareSettings(LIMITS, sg.ShareGroupConfig(), "latest")
    assert share_settings(base, {}) is base
    got = share_settings(base, OVERRIDES)
    assert got == ShareSettings(sp.ShareLimits(record_lock_duration_ms=2_000, delivery_count_limit=3,
                                               max_in_flight_records=150),
                                sg.ShareGroupConfig(session_timeout_ms=9_000, heartbeat_interval_ms=1_000), "earliest")
    # a heartbeat interval not below the session timeout keeps the broker's pair
    pair = share_settings(base, {"share.session.timeout.ms": "1000", "share.heartbeat.interval.ms": "1000"}).group
    assert pair == base.group


def test_the_groups_auto_offset_reset_and_lock_duration_are_the_partition_rules() -> None:
    share, clock = broker("latest")
    share.settings_for = lambda group_id: share_settings(share.settings, OVERRIDES if group_id == "g" else {})
    assert share.partition("g", TP, leader_epoch=0, log_start_offset=5, high_watermark=40).start_offset == 5
    assert share.partition("other", TP, leader_epoch=0, log_start_offset=5, high_watermark=40).start_offset == 40


class FakeStore:
    """The share coordinator's answer to every WriteShareGroupState: `code`; what was written."""

    def __init__(self, code: ErrorCode) -> None:
        self.code = code
        self.writes: list[tuple[int, tuple[tuple[int, int, int, int], ...]]] = []

    async def write(self, group_id: str, tp: TopicPartition, *, leader_epoch: int, state_epoch: int,
                    start_offset: int, batches: tuple[tuple[int, int, int, int], ...]) -> ErrorCode:
        self.writes.append((start_offset, batches))
        return self.code


def durable_broker(code: ErrorCode) -> tuple[ShareBroker, list[int], FakeStore]:
    share, clock = broker("earliest")
    store = FakeStore(code)
    share.store = store  # type: ignore[assignment]  # the persister's write, answered by hand
    share.partition("g", TP, leader_epoch=0, log_start_offset=0, high_watermark=10)
    acquire(share, "m", 0, 4)
    return share, clock, store


def accept(share: ShareBroker, first: int, last: int) -> ErrorCode:
    state = share.partitions[("g", TP)].state
    started = sp.acknowledge(state, member_id="m", first=first, last=last, types=(1,), limits=LIMITS)
    share.apply_partition("g", TP, started, "acknowledging", quiet=True)
    return asyncio.run(share.acknowledge("g", TP, started, "m"))


def test_an_acknowledgement_is_written_done_then_committed() -> None:
    share, _, store = durable_broker(ErrorCode.NONE)
    assert accept(share, 0, 2) is ErrorCode.NONE
    assert store.writes == [(3, ((3, 4, 0, 1),))]  # the snapshot holds 0-2 done: SPSO past them
    assert share.partitions[("g", TP)].state.start_offset == 3


def test_a_failed_write_rolls_the_acknowledgement_back_and_the_lock_expiry_redelivers() -> None:
    """issue 31's share-coordinator-kill bug: the ACCEPT the member was told failed stayed done
    in memory, so those records were never delivered again."""
    share, clock, store = durable_broker(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    assert accept(share, 0, 2) is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert store.writes == [(3, ((3, 4, 0, 1),))]
    state = share.partitions[("g", TP)].state
    assert state.start_offset == 0 and {o: (f.state, f.member_id, f.pending) for o, f in state.in_flight.items()} == {
        o: (sp.RecordState.ACQUIRED, "m", None) for o in range(5)}
    clock[0] = 1_000  # the acquisition lock (1 s) runs out: the records are delivered again
    share.timers.run_due()
    state = share.partitions[("g", TP)].state
    out = sp.acquire(state, member_id="m2", batches=[(0, 4)], max_records=100, now_ms=clock[0], limits=LIMITS)
    assert out.acquired == ((0, 4, 2),)  # the delivery count kept
