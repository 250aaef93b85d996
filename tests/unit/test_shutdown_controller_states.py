"""shutdown/controller_states.py: Kafka's calculateNextBrokerState and the records intent, as tables."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from common.errors import ErrorCode
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE, NO_LEADER, PartitionRegistration
from metadata.partition_change import remove_from_isr
from metadata.records import (
    BeginEpoch,
    BrokerRegistrationChange,
    Listener,
    RegisterBroker,
)
from quorum.broker_control import check_broker_epoch
from quorum.controller_result import ControllerApiError
from shutdown.controller_states import (
    CONTROLLED_SHUTDOWN,
    FENCED,
    NO_RECORDS,
    SHUTDOWN_NOW,
    UNFENCED,
    BrokerControlStates,
    RecordsPlan,
    RegistrationChangeOrder,
    ShutdownRequestOutcome,
    calculate_next_broker_state,
    controller_may_stop,
    current_broker_state,
    every_active_broker_caught_up,
    records_plan,
    shutdown_request_outcome,
)

_ = None  # "not consulted"; calculate() fails the test if such an input is read


def calculate(fenced, ics, want_fence, want_shutdown, caught_up, leads, active_caught_up):
    def lazy(value, name):
        def read():
            assert value is not None, f"{name} must not be consulted on this path"
            return value
        return read
    return calculate_next_broker_state(
        fenced=fenced, in_controlled_shutdown=ics, want_fence=want_fence, want_shutdown=want_shutdown,
        is_caught_up=caught_up, leads_partitions=lazy(leads, "leads_partitions"),
        active_brokers_caught_up=lazy(active_caught_up, "active_brokers_caught_up"))


# (fenced, in_controlled_shutdown, want_fence, want_shutdown, is_caught_up, leads_partitions,
#  active_brokers_caught_up) -> (current, next)
EDGES = [
    # FENCED
    pytest.param(True, False, False, True, False, _, _, FENCED, SHUTDOWN_NOW, id="fenced-want-shutdown-now"),
    pytest.param(True, False, True, True, True, _, _, FENCED, SHUTDOWN_NOW, id="fenced-want-fence-and-shutdown"),
    pytest.param(True, False, False, False, True, _, _, FENCED, UNFENCED, id="fenced-caught-up-unfenced"),
    pytest.param(True, False, False, False, False, _, _, FENCED, FENCED, id="fenced-never-caught-up-stays"),
    pytest.param(True, False, True, False, True, _, _, FENCED, FENCED, id="fenced-wants-fence-stays"),
    pytest.param(True, True, False, True, True, _, _, FENCED, SHUTDOWN_NOW,
                 id="fenced-mid-controlled-shutdown-fencing-wins"),
    # UNFENCED
    pytest.param(False, False, True, True, True, _, _, UNFENCED, SHUTDOWN_NOW, id="unfenced-want-fence-and-shutdown"),
    pytest.param(False, False, True, False, True, _, _, UNFENCED, FENCED, id="unfenced-want-fence"),
    pytest.param(False, False, False, True, True, True, _, UNFENCED, CONTROLLED_SHUTDOWN,
                 id="unfenced-leader-want-shutdown-controlled"),
    pytest.param(False, False, False, True, True, False, _, UNFENCED, SHUTDOWN_NOW,
                 id="unfenced-leads-nothing-want-shutdown-now"),
    pytest.param(False, False, False, False, True, _, _, UNFENCED, UNFENCED, id="unfenced-plain-heartbeat"),
    pytest.param(False, False, False, False, False, _, _, UNFENCED, UNFENCED,
                 id="unfenced-falling-behind-stays-unfenced"),
    # CONTROLLED_SHUTDOWN
    pytest.param(False, True, False, True, True, True, _, CONTROLLED_SHUTDOWN, CONTROLLED_SHUTDOWN,
                 id="cs-still-leads"),
    pytest.param(False, True, False, True, True, False, False, CONTROLLED_SHUTDOWN, CONTROLLED_SHUTDOWN,
                 id="cs-active-brokers-behind"),
    pytest.param(False, True, False, True, True, False, True, CONTROLLED_SHUTDOWN, SHUTDOWN_NOW,
                 id="cs-leads-nothing-and-offset-reached"),
    pytest.param(False, True, True, False, False, False, True, CONTROLLED_SHUTDOWN, SHUTDOWN_NOW,
                 id="cs-request-flags-not-consulted"),
    pytest.param(False, True, True, True, True, True, _, CONTROLLED_SHUTDOWN, CONTROLLED_SHUTDOWN,
                 id="cs-want-fence-does-not-skip-leader-moves"),
]


@pytest.mark.parametrize("fenced, ics, want_fence, want_shutdown, caught_up, leads, active, current, nxt", EDGES)
def test_calculate_next_broker_state(fenced, ics, want_fence, want_shutdown, caught_up, leads, active,
                                     current, nxt):
    assert calculate(fenced, ics, want_fence, want_shutdown, caught_up, leads, active) == \
        BrokerControlStates(current, nxt)


@pytest.mark.parametrize("state, fenced, ics, should_shut_down", [
    (FENCED, True, False, False),
    (UNFENCED, False, False, False),
    (CONTROLLED_SHUTDOWN, False, True, False),
    (SHUTDOWN_NOW, True, False, True),
])
def test_reply_flags_per_state(state, fenced, ics, should_shut_down):
    assert (state.fenced, state.in_controlled_shutdown, state.should_shut_down) == (fenced, ics, should_shut_down)


def test_shutdown_now_is_never_current():
    with pytest.raises(ValueError, match="SHUTDOWN_NOW"):
        BrokerControlStates(SHUTDOWN_NOW, SHUTDOWN_NOW)


LEAVE_AND_FENCE = RecordsPlan(set_fenced=True, registration_change=RegistrationChangeOrder.LAST,
                              leave_partitions=True, keeps_last_isr_member=True)
ENTER_CS = RecordsPlan(set_in_controlled_shutdown=True, registration_change=RegistrationChangeOrder.FIRST,
                       leave_partitions=True, keeps_last_isr_member=True, remember_controlled_shutdown_offset=True)

# (current, next, registration's in_controlled_shutdown) -> plan
PLANS = [
    pytest.param(FENCED, FENCED, False, NO_RECORDS, id="stays-fenced-nothing"),
    pytest.param(UNFENCED, UNFENCED, False, NO_RECORDS, id="stays-unfenced-nothing"),
    pytest.param(FENCED, UNFENCED, False,
                 RecordsPlan(set_fenced=False, registration_change=RegistrationChangeOrder.FIRST,
                             elect_leaderless=True), id="unfence-and-elect"),
    pytest.param(FENCED, UNFENCED, True,
                 RecordsPlan(set_fenced=False, set_in_controlled_shutdown=False,
                             registration_change=RegistrationChangeOrder.FIRST, elect_leaderless=True),
                 id="unfence-clears-leftover-controlled-shutdown"),
    pytest.param(UNFENCED, FENCED, False, LEAVE_AND_FENCE, id="fence"),
    pytest.param(UNFENCED, SHUTDOWN_NOW, False, LEAVE_AND_FENCE, id="shutdown-now-fences"),
    pytest.param(FENCED, SHUTDOWN_NOW, False, LEAVE_AND_FENCE, id="fenced-shutdown-now-same-records"),
    pytest.param(CONTROLLED_SHUTDOWN, SHUTDOWN_NOW, True, LEAVE_AND_FENCE, id="controlled-shutdown-done"),
    pytest.param(UNFENCED, CONTROLLED_SHUTDOWN, False, ENTER_CS, id="enter-controlled-shutdown-one-batch"),
    pytest.param(CONTROLLED_SHUTDOWN, CONTROLLED_SHUTDOWN, True,
                 RecordsPlan(remember_controlled_shutdown_offset=True), id="cs-continues-no-records"),
]


@pytest.mark.parametrize("current, nxt, ics, plan", PLANS)
def test_records_plan(current, nxt, ics, plan):
    assert records_plan(BrokerControlStates(current, nxt), in_controlled_shutdown=ics) == plan
    assert plan.writes_nothing == (plan.registration_change is None and not plan.leave_partitions
                                   and not plan.elect_leaderless)


@pytest.mark.parametrize("offsets, cs_offset, expected", [
    pytest.param([], 10, True, id="no-active-broker-lowest-is-max"),
    pytest.param([10, 12], 10, True, id="all-at-or-past"),
    pytest.param([10, 9], 10, False, id="one-behind"),
    pytest.param([12, None], 10, False, id="one-not-heard-from"),
    pytest.param([12, -1], 10, False, id="one-just-activated"),
    pytest.param([12], None, False, id="offset-unknown-after-failover"),
])
def test_every_active_broker_caught_up(offsets, cs_offset, expected):
    assert every_active_broker_caught_up(offsets, cs_offset) is expected


# -- scenarios against a real image --------------------------------------------------------

def replay(image, *records):
    return apply(image, enumerate(records, start=image.offset + 1))


def cluster():
    image = replay(EMPTY_IMAGE, BeginEpoch(1),
                   *(RegisterBroker(b, f"inc-{b}", (Listener("PLAINTEXT", "127.0.0.1", 9000 + b),)) for b in (1, 2)))
    return replay(image, *(BrokerRegistrationChange(b, image.broker(b).broker_epoch, fenced=False) for b in (1, 2)))


def test_controller_failover_mid_controlled_shutdown_continues_from_the_image():
    image = cluster()
    epoch = image.broker(1).broker_epoch
    # The old controller granted the controlled shutdown, then died before SHUTDOWN_NOW.
    image = replay(image, BrokerRegistrationChange(1, epoch, in_controlled_shutdown=True))
    cs_record_offset = image.offset
    image = replay(image, BeginEpoch(2))  # the new active controller's first record
    registration = image.broker(1)
    assert current_broker_state(fenced=registration.fenced,
                                in_controlled_shutdown=registration.in_controlled_shutdown) is CONTROLLED_SHUTDOWN
    # First heartbeat to the new controller: it knows no controlled-shutdown offset yet.
    states = calculate(registration.fenced, registration.in_controlled_shutdown, False, True, True,
                       False, every_active_broker_caught_up([cs_record_offset], None))
    assert states == BrokerControlStates(CONTROLLED_SHUTDOWN, CONTROLLED_SHUTDOWN)
    plan = records_plan(states, in_controlled_shutdown=True)
    assert plan.writes_nothing and plan.remember_controlled_shutdown_offset  # nothing re-written
    remembered = image.offset  # no records: the last committed offset, >= the original one
    states = calculate(False, True, False, True, True, False, every_active_broker_caught_up([remembered], remembered))
    assert states.next is SHUTDOWN_NOW and states.next.should_shut_down


@pytest.mark.parametrize("broker_epoch, code", [
    pytest.param(-5, ErrorCode.STALE_BROKER_EPOCH, id="stale-epoch"),
    pytest.param(None, ErrorCode.BROKER_ID_NOT_REGISTERED, id="unknown-broker"),
])
def test_stale_broker_epoch_is_rejected_before_the_state_machine(broker_epoch, code):
    """The caller runs check_broker_epoch first; an old incarnation never reaches calculate_next_broker_state."""
    image = cluster()
    broker_id = 1 if broker_epoch is not None else 99
    with pytest.raises(ControllerApiError) as info:
        check_broker_epoch(image, broker_id, broker_epoch if broker_epoch is not None else 0)
    assert info.value.code is code


def test_last_isr_member_stays_in_the_isr_and_the_partition_goes_offline():
    only_me = PartitionRegistration("t-id", 0, replicas=(1, 2), isr=(1,), leader=1, leader_epoch=3)
    shared = PartitionRegistration("t-id", 1, replicas=(1, 2), isr=(1, 2), leader=1, leader_epoch=3)
    states = calculate(False, False, False, True, True, True, _)
    plan = records_plan(states, in_controlled_shutdown=False)
    assert states.next is CONTROLLED_SHUTDOWN
    assert plan.leave_partitions and plan.keeps_last_isr_member
    # What the plan's leave_partitions means, with the real rule (broker 2 active, not in sync):
    change = remove_from_isr(only_me, 1, is_acceptable=lambda r: r == 2)
    assert change is not None and change.leader == NO_LEADER and change.isr is None  # ISR stays (1,)
    change = remove_from_isr(shared, 1, is_acceptable=lambda r: r == 2)
    assert change is not None and change.leader == 2 and change.isr == (2,)
    # Leaderless everywhere now, so once the others caught up it may shut down.
    assert calculate(False, True, False, True, True, False, True).next is SHUTDOWN_NOW


# --- operator shutdown requests (POST /v1/brokers/{id}/shutdown) and combined nodes ------------


@pytest.mark.parametrize(("requested_epoch", "broker_epoch", "want_shutdown", "outcome", "flag"), [
    pytest.param(7, 7, False, ShutdownRequestOutcome.ASK, True, id="same-incarnation-not-yet-obeyed"),
    pytest.param(7, 7, True, ShutdownRequestOutcome.OBEYED, False, id="obeyed-forget-it"),
    pytest.param(7, 9, False, ShutdownRequestOutcome.STALE, False, id="restarted-never-shut-down-again"),
    pytest.param(7, 9, True, ShutdownRequestOutcome.STALE, False, id="restarted-and-shutting-down-anyway"),
])
def test_shutdown_request_outcome(requested_epoch, broker_epoch, want_shutdown, outcome, flag):
    got = shutdown_request_outcome(requested_epoch=requested_epoch, broker_epoch=broker_epoch,
                                   want_shutdown=want_shutdown)
    assert got is outcome
    assert got.shutdown_requested is flag


@dataclass(frozen=True)
class Flags:
    broker_id: int
    fenced: bool = False
    in_controlled_shutdown: bool = False


@pytest.mark.parametrize(("brokers", "may_stop"), [
    pytest.param([], True, id="no-brokers"),
    pytest.param([Flags(1, in_controlled_shutdown=True)], True, id="only-itself"),
    pytest.param([Flags(1), Flags(2), Flags(3)], True, id="rolling-restart-others-running"),
    pytest.param([Flags(1), Flags(2, in_controlled_shutdown=True)], False, id="another-mid-shutdown"),
    pytest.param([Flags(1), Flags(2, fenced=True, in_controlled_shutdown=True)], True, id="another-done-fenced"),
    pytest.param([Flags(2, fenced=True), Flags(3, in_controlled_shutdown=True)], False, id="one-of-two-pending"),
])
def test_combined_controller_may_stop(brokers, may_stop):
    assert controller_may_stop(brokers, own_broker_id=1) is may_stop
