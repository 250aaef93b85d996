"""groups/share_partition.py: KIP-932's share-partition rules, tables plus a hypothesis run."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import ErrorCode
from groups.share_partition import (
    EMPTY,
    AcknowledgeError,
    Acquired,
    Acquisition,
    AcknowledgeType as T,
    InFlight,
    Initialized,
    RecordState as S,
    Restored,
    ShareLimits,
    SharePartitionState,
    StartMoved,
    Transitioned,
    TransitionCompleted,
    TransitionStarted,
    acknowledge,
    acquire,
    complete,
    counts,
    expire_locks,
    move_start,
    next_lock_deadline,
    release_member,
    replay_all,
    snapshot_batches,
)

LIMITS = ShareLimits(record_lock_duration_ms=1_000, delivery_count_limit=2, max_in_flight_records=100)
AT_10 = replay_all(EMPTY, [Initialized(10)])


def take(state: SharePartitionState, member: str = "m1", batches: tuple[tuple[int, int], ...] = ((10, 19),),
         max_records: int = 500, now_ms: int = 0, limits: ShareLimits = LIMITS) -> tuple[SharePartitionState, Acquisition]:
    out = acquire(state, member_id=member, batches=batches, max_records=max_records, now_ms=now_ms, limits=limits)
    return replay_all(state, out.records), out


def ack(state: SharePartitionState, first: int, last: int, types: tuple[int, ...], member: str = "m1",
        commit: bool = True) -> SharePartitionState:
    """An acknowledgement, pending, then committed (its write succeeded) or rolled back."""
    started = acknowledge(state, member_id=member, first=first, last=last, types=types, limits=LIMITS)
    return replay_all(replay_all(state, started), complete(started, commit=commit))


def test_acquire_new_offsets_counts_one_delivery_and_moves_the_end() -> None:
    state, out = take(AT_10)
    assert out.records == (Acquired(10, 19, "m1", 1_000),)
    assert out.acquired == ((10, 19, 1),)
    assert (state.start_offset, state.end_offset) == (10, 20)
    held = state.state_of(15)
    assert held is not None and held.member_id == "m1"


def test_acquire_skips_offsets_below_spso_and_acquired_by_others() -> None:
    state, _ = take(AT_10, batches=((10, 14),))
    state, out = take(state, member="m2", batches=((0, 19),))
    assert out.acquired == ((15, 19, 1),)


def test_max_records_and_max_in_flight_bound_an_acquisition() -> None:
    assert take(AT_10, max_records=3)[1].acquired == ((10, 12, 1),)
    small = ShareLimits(max_in_flight_records=4)
    assert take(AT_10, limits=small)[1].acquired == ((10, 13, 1),)


def test_offsets_the_read_passed_over_are_archived_and_spso_passes_them() -> None:
    state, out = take(AT_10, batches=((12, 13),))  # 10-11: a compacted batch, a control batch
    assert (state.start_offset, state.state_of(10)) == (12, None)  # archived, and SPSO passed them
    state = ack(state, 12, 13, (T.ACCEPT,))
    assert (state.start_offset, state.end_offset, dict(state.in_flight)) == (14, 14, {})


@pytest.mark.parametrize("kind, expected", [
    (T.ACCEPT, S.ACKNOWLEDGED), (T.REJECT, S.ARCHIVED), (T.GAP, S.ARCHIVED), (T.RELEASE, S.AVAILABLE)])
def test_acknowledge_types(kind: T, expected: S) -> None:
    state, _ = take(AT_10)
    records = acknowledge(state, member_id="m1", first=12, last=13, types=(kind,), limits=LIMITS)
    assert records == (TransitionStarted(12, 13, expected),)
    pending = replay_all(state, records)
    assert [(f.state, f.member_id, f.pending) for f in (pending.in_flight[12], pending.in_flight[13])] == [
        (S.ACQUIRED, "m1", expected)] * 2  # still the member's until the write completes
    assert replay_all(pending, complete(records, commit=True)).state_of(13) == InFlight(expected, 1)
    assert replay_all(pending, complete(records, commit=False)) == state


def test_per_offset_types_make_one_record_per_run() -> None:
    state, _ = take(AT_10)
    records = acknowledge(state, member_id="m1", first=10, last=13, types=(1, 1, 3, 2), limits=LIMITS)
    assert records == (TransitionStarted(10, 11, S.ACKNOWLEDGED), TransitionStarted(12, 12, S.ARCHIVED),
                       TransitionStarted(13, 13, S.AVAILABLE))
    assert complete(records, commit=False) == (TransitionCompleted(10, 11, False), TransitionCompleted(12, 12, False),
                                               TransitionCompleted(13, 13, False))
    state = ack(state, 10, 13, (1, 1, 3, 2))
    assert state.start_offset == 13  # 10-12 done: SPSO passes them
    assert take(state, member="m2")[1].acquired == ((13, 13, 2),)  # released: redelivered, count 2


def test_release_at_the_delivery_limit_archives() -> None:
    state, _ = take(AT_10, batches=((10, 10),))
    state = replay_all(state, release_member(state, member_id="m1", limits=LIMITS))
    state, out = take(state, member="m2", batches=((10, 10),))
    assert out.acquired == ((10, 10, 2),)
    records = acknowledge(state, member_id="m2", first=10, last=10, types=(T.RELEASE,), limits=LIMITS)
    assert records == (TransitionStarted(10, 10, S.ARCHIVED),)
    assert ack(state, 10, 10, (T.RELEASE,), member="m2").start_offset == 11


@pytest.mark.parametrize("member, first, last, types, code", [
    ("m2", 10, 10, (1,), ErrorCode.INVALID_RECORD_STATE),  # acquired by another member
    ("m1", 25, 25, (1,), ErrorCode.INVALID_RECORD_STATE),  # never acquired
    ("m1", 12, 10, (1,), ErrorCode.INVALID_REQUEST),
    ("m1", 10, 12, (1, 1), ErrorCode.INVALID_REQUEST),  # neither one type nor one per offset
    ("m1", 10, 10, (9,), ErrorCode.INVALID_REQUEST),
])
def test_bad_acknowledgements_change_nothing(member: str, first: int, last: int, types: tuple[int, ...],
                                             code: ErrorCode) -> None:
    state, _ = take(AT_10)
    with pytest.raises(AcknowledgeError) as e:
        acknowledge(state, member_id=member, first=first, last=last, types=types, limits=LIMITS)
    assert e.value.code is code


def test_acknowledged_twice_is_invalid_record_state() -> None:
    state, _ = take(AT_10)
    state = ack(state, 15, 15, (1,))
    with pytest.raises(AcknowledgeError) as e:
        acknowledge(state, member_id="m1", first=15, last=15, types=(1,), limits=LIMITS)
    assert e.value.code is ErrorCode.INVALID_RECORD_STATE


def test_an_acknowledgement_in_flight_is_not_acknowledged_released_or_timed_out_meanwhile() -> None:
    state, _ = take(AT_10, batches=((10, 11),), now_ms=0)
    pending = replay_all(state, acknowledge(state, member_id="m1", first=10, last=10, types=(1,), limits=LIMITS))
    with pytest.raises(AcknowledgeError) as e:  # Kafka: a record in a state transition is not updated
        acknowledge(pending, member_id="m1", first=10, last=10, types=(2,), limits=LIMITS)
    assert e.value.code is ErrorCode.INVALID_RECORD_STATE
    assert release_member(pending, member_id="m1", limits=LIMITS) == (Transitioned(11, 11, S.AVAILABLE),)
    assert expire_locks(pending, now_ms=5_000, limits=LIMITS) == (Transitioned(11, 11, S.AVAILABLE),)
    assert take(pending, member="m2", batches=((10, 11),))[1].acquired == ()
    assert next_lock_deadline(replay_all(pending, expire_locks(pending, now_ms=5_000, limits=LIMITS))) is None


def test_a_failed_write_rolls_back_the_acknowledgement_and_the_lock_expiry_redelivers() -> None:
    """The share-coordinator-kill bug: an ACCEPT whose write failed stayed done in memory and its
    records were never delivered again. Rolled back, they are the member's under the same lock;
    its expiry makes them available, and the next member gets them with delivery count 2."""
    state, _ = take(AT_10, batches=((10, 14),), now_ms=0)
    before = dict(state.in_flight)
    rolled = ack(state, 10, 14, (T.ACCEPT,), commit=False)
    assert dict(rolled.in_flight) == before and rolled.start_offset == 10  # acquired by m1, lock at 1_000
    assert next_lock_deadline(rolled) == 1_000
    expired = replay_all(rolled, expire_locks(rolled, now_ms=1_000, limits=LIMITS))
    assert take(expired, member="m2", batches=((10, 14),), now_ms=1_000)[1].acquired == ((10, 14, 2),)
    # the member may acknowledge again while its lock holds: the retry commits
    assert ack(rolled, 10, 14, (T.ACCEPT,)).start_offset == 15


def test_a_rollback_at_the_delivery_limit_archives_on_the_lock_expiry() -> None:
    state, _ = take(AT_10, batches=((10, 10),), now_ms=0)
    state = replay_all(state, expire_locks(state, now_ms=1_000, limits=LIMITS))
    state, _ = take(state, member="m2", batches=((10, 10),), now_ms=1_000)  # count 2: the limit
    rolled = ack(state, 10, 10, (T.ACCEPT,), member="m2", commit=False)
    assert expire_locks(rolled, now_ms=2_000, limits=LIMITS) == (Transitioned(10, 10, S.ARCHIVED),)


def test_a_completion_of_offsets_no_longer_pending_changes_nothing() -> None:
    state, _ = take(AT_10, batches=((10, 14),))
    pending = replay_all(state, acknowledge(state, member_id="m1", first=12, last=12, types=(1,), limits=LIMITS))
    moved = replay_all(pending, [StartMoved(13)])  # the log start passed it meanwhile
    assert replay_all(moved, [TransitionCompleted(10, 14, True)]) == moved
    assert replay_all(state, [TransitionCompleted(10, 14, True)]) == state  # nothing was pending


def test_lock_timeout_returns_records_at_their_deadline_not_before() -> None:
    state, _ = take(AT_10, now_ms=5_000)
    assert next_lock_deadline(state) == 6_000
    assert expire_locks(state, now_ms=5_999, limits=LIMITS) == ()
    state = replay_all(state, expire_locks(state, now_ms=6_000, limits=LIMITS))
    assert next_lock_deadline(state) is None
    assert counts(state)["AVAILABLE"] == 10


def test_log_start_passing_spso_moves_it() -> None:
    state, _ = take(AT_10, batches=((10, 14),))
    assert move_start(state, log_start_offset=9) == ()
    state = replay_all(state, move_start(state, log_start_offset=12))
    assert (state.start_offset, state.end_offset, min(state.in_flight)) == (12, 15, 12)
    assert replay_all(state, [StartMoved(30)]).end_offset == 30


def test_acquire_before_initialization_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        acquire(EMPTY, member_id="m", batches=((0, 1),), max_records=1, now_ms=0, limits=LIMITS)


# ---- a random run: members acquire, acknowledge, leave and time out in any order ---------------

MEMBERS = ("a", "b", "c")
step = st.one_of(
    st.tuples(st.just("acquire"), st.sampled_from(MEMBERS), st.integers(1, 7)),
    st.tuples(st.just("ack"), st.sampled_from(MEMBERS), st.sampled_from([1, 2, 3])),
    st.tuples(st.just("failed-ack"), st.sampled_from(MEMBERS), st.sampled_from([1, 2, 3])),
    st.tuples(st.just("leave"), st.sampled_from(MEMBERS), st.just(0)),
    st.tuples(st.just("tick"), st.just(""), st.integers(0, 1_500)),
)
LOG_END = 40
DONE_STATES = (S.ACKNOWLEDGED, S.ARCHIVED)


@settings(max_examples=300, deadline=None)
@given(st.lists(step, max_size=60))
def test_every_record_is_done_exactly_once_or_still_in_flight(steps: list[tuple[str, str, int]]) -> None:
    """Invariants after every step: no offset acquired by two members; delivery counts never pass
    the limit; an offset becomes ACKNOWLEDGED at most once and, once done, never again AVAILABLE;
    SPSO <= SPEO and everything below SPSO is done."""
    limits = ShareLimits(record_lock_duration_ms=1_000, delivery_count_limit=3, max_in_flight_records=20)
    state = replay_all(EMPTY, [Initialized(0)])
    now = 0
    done: dict[int, S] = {}
    for kind, member, arg in steps:
        if kind == "acquire":
            records = acquire(state, member_id=member, batches=((0, LOG_END - 1),), max_records=arg, now_ms=now,
                              limits=limits).records
        elif kind in ("ack", "failed-ack"):
            mine = sorted(o for o, f in state.in_flight.items() if f.state is S.ACQUIRED and f.member_id == member)
            started = acknowledge(state, member_id=member, first=mine[0], last=mine[0], types=(arg,),
                                  limits=limits) if mine else ()
            records = (*started, *complete(started, commit=kind == "ack"))
        elif kind == "leave":
            records = release_member(state, member_id=member, limits=limits)
        else:
            now += arg
            records = expire_locks(state, now_ms=now, limits=limits)
        before, state = state, replay_all(state, records)
        for o in range(before.start_offset, before.end_offset):  # newly done: below SPSO now, or in a done state
            was, now_f = before.state_of(o), state.state_of(o)
            if (was is None or was.state not in DONE_STATES) and (now_f is None or now_f.state in DONE_STATES):
                assert o not in done, f"offset {o} done twice"
                done[o] = now_f.state if now_f else S.ACKNOWLEDGED
        assert kind != "failed-ack" or state == before, "a rolled back acknowledgement changed the state"
        assert 0 <= state.start_offset <= state.end_offset <= LOG_END
        assert all(state.start_offset <= o < state.end_offset for o in state.in_flight)
        assert all(o in done for o in range(state.start_offset))
        for o, f in state.in_flight.items():
            assert f.delivery_count <= limits.delivery_count_limit
            assert o not in done or f.state in (S.ACKNOWLEDGED, S.ARCHIVED)


def test_a_snapshot_restores_the_state_with_acquired_records_available_again() -> None:
    state, _ = take(AT_10)  # 10-19 acquired by m1, count 1
    state = ack(state, 12, 13, (T.ACCEPT,))
    state = ack(state, 14, 14, (T.REJECT,))
    batches = snapshot_batches(state)
    assert batches == ((10, 11, 0, 1), (12, 13, 2, 1), (14, 14, 4, 1), (15, 19, 0, 1))
    restored = replay_all(EMPTY, [Restored(state.start_offset, batches)])
    assert (restored.start_offset, restored.end_offset, next_lock_deadline(restored)) == (10, 20, None)
    assert take(restored, member="m2")[1].acquired == ((10, 11, 2), (15, 19, 2))  # not the done ones
    done = replay_all(EMPTY, [Restored(10, ((10, 14, 2, 1), (15, 15, 0, 1)))])
    assert (done.start_offset, done.end_offset) == (15, 16)  # SPSO passes what the batches say is done


def test_a_record_restored_at_the_delivery_limit_is_archived_not_delivered_again() -> None:
    # m1 holds 10-11 at count 2, the limit, when its leader dies: the snapshot the new leader
    # restores has them AVAILABLE at count 2, and a third delivery would pass the limit
    state, _ = take(AT_10, batches=((10, 11),))
    state = replay_all(state, release_member(state, member_id="m1", limits=LIMITS))
    state, out = take(state, batches=((10, 12),))
    assert out.acquired == ((10, 11, 2), (12, 12, 1))
    restored = replay_all(EMPTY, [Restored(state.start_offset, snapshot_batches(state))])
    restored, out = take(restored, member="m2", batches=((10, 12),))
    assert out.acquired == ((12, 12, 2),)  # 12 was below the limit: delivered again
    assert Transitioned(10, 11, S.ARCHIVED) in out.records
    assert restored.start_offset == 12  # SPSO passed the archived records
