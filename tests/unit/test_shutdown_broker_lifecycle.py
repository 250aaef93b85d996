"""shutdown/broker_lifecycle.py: every edge of the table, every forbidden pair, timers on a fake clock."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest

from shutdown.broker_lifecycle import (
    DEFAULT_CONTROLLED_SHUTDOWN_TIMEOUT_MS,
    PENDING_SHUTDOWN_HEARTBEAT_MS,
    STARTING_HEARTBEAT_MS,
    TRANSITIONS,
    BrokerLifecycle,
    BrokerState,
    HeartbeatFlags,
    LifecycleError,
    LifecycleEvent,
    Transition,
    heartbeat_early_for_shutdown,
    heartbeat_early_when_caught_up,
    next_state,
    stopped_uncleanly,
    transition_message,
)

S, E = BrokerState, LifecycleEvent

# Every allowed (state, event) -> state, written out once more so a table edit shows up here.
EDGES = [
    (S.NOT_RUNNING, E.START, S.STARTING),
    (S.NOT_RUNNING, E.SHUTDOWN_REQUESTED, S.SHUTTING_DOWN),
    (S.STARTING, E.REGISTERED, S.STARTING),
    (S.STARTING, E.CAUGHT_UP, S.RECOVERY),
    (S.STARTING, E.CONTROLLER_UNREACHABLE, S.STARTING),
    (S.STARTING, E.REGISTRATION_LOST, S.STARTING),
    (S.STARTING, E.SHUTDOWN_REQUESTED, S.PENDING_CONTROLLED_SHUTDOWN),  # registered: see UNREGISTERED_TRANSITIONS
    (S.RECOVERY, E.UNFENCED, S.RUNNING),
    (S.RECOVERY, E.FENCED, S.RECOVERY),
    (S.RECOVERY, E.CONTROLLER_UNREACHABLE, S.RECOVERY),
    (S.RECOVERY, E.REGISTRATION_LOST, S.STARTING),
    (S.RECOVERY, E.SHUTDOWN_REQUESTED, S.PENDING_CONTROLLED_SHUTDOWN),
    (S.RUNNING, E.FENCED, S.RECOVERY),
    (S.RUNNING, E.UNFENCED, S.RUNNING),
    (S.RUNNING, E.CONTROLLER_UNREACHABLE, S.RUNNING),
    (S.RUNNING, E.REGISTRATION_LOST, S.STARTING),
    (S.RUNNING, E.SHUTDOWN_REQUESTED, S.PENDING_CONTROLLED_SHUTDOWN),
    (S.PENDING_CONTROLLED_SHUTDOWN, E.SHUTDOWN_REQUESTED, S.PENDING_CONTROLLED_SHUTDOWN),
    (S.PENDING_CONTROLLED_SHUTDOWN, E.FENCED, S.PENDING_CONTROLLED_SHUTDOWN),
    (S.PENDING_CONTROLLED_SHUTDOWN, E.UNFENCED, S.PENDING_CONTROLLED_SHUTDOWN),
    (S.PENDING_CONTROLLED_SHUTDOWN, E.CONTROLLER_UNREACHABLE, S.PENDING_CONTROLLED_SHUTDOWN),
    (S.PENDING_CONTROLLED_SHUTDOWN, E.SHOULD_SHUT_DOWN, S.SHUTTING_DOWN),
    (S.PENDING_CONTROLLED_SHUTDOWN, E.CONTROLLED_SHUTDOWN_TIMED_OUT, S.SHUTTING_DOWN),
    (S.PENDING_CONTROLLED_SHUTDOWN, E.REGISTRATION_LOST, S.SHUTTING_DOWN),
    (S.SHUTTING_DOWN, E.SHUTDOWN_REQUESTED, S.SHUTTING_DOWN),
    (S.SHUTTING_DOWN, E.STOPPED, S.SHUTDOWN),
    # issue 36: the follower may end in any state (a fatal error): a defined, unclean stop
    (S.NOT_RUNNING, E.STOPPED, S.SHUTDOWN),
    (S.STARTING, E.STOPPED, S.SHUTDOWN),
    (S.RECOVERY, E.STOPPED, S.SHUTDOWN),
    (S.RUNNING, E.STOPPED, S.SHUTDOWN),
    (S.PENDING_CONTROLLED_SHUTDOWN, E.STOPPED, S.SHUTDOWN),
]
ALLOWED = {(state, event) for state, event, _ in EDGES}
FORBIDDEN = sorted(((s, e) for s, e in itertools.product(S, E) if (s, e) not in ALLOWED),
                   key=lambda pair: (pair[0].name, pair[1].name))


def test_the_table_is_exactly_the_edges():
    assert {(s, e, n) for s in TRANSITIONS for e, n in TRANSITIONS[s].items()} == set(EDGES)
    assert set(TRANSITIONS) == set(S)


@pytest.mark.parametrize("state, event, expected", EDGES, ids=lambda v: v.name)
def test_every_edge(state, event, expected):
    assert next_state(state, event) is expected


@pytest.mark.parametrize("state, event", FORBIDDEN, ids=lambda v: v.name)
def test_every_missing_pair_is_a_typed_error_naming_both(state, event):
    with pytest.raises(LifecycleError) as info:
        next_state(state, event)
    assert (info.value.state, info.value.event) == (state, event)
    assert state.name in str(info.value) and event.name in str(info.value)


def test_a_refused_event_leaves_the_state_alone():
    lifecycle = BrokerLifecycle()
    with pytest.raises(LifecycleError, match="SHOULD_SHUT_DOWN in state NOT_RUNNING"):
        lifecycle.handle(E.SHOULD_SHUT_DOWN, 0)
    assert lifecycle.state is S.NOT_RUNNING


@pytest.mark.parametrize("old, new, words", [
    (S.RECOVERY, S.RUNNING, "Transitioning from RECOVERY to RUNNING."),
    (S.STARTING, S.RECOVERY, "Transitioning from STARTING to RECOVERY."),
    (S.RUNNING, S.PENDING_CONTROLLED_SHUTDOWN, "Transitioning from RUNNING to PENDING_CONTROLLED_SHUTDOWN."),
])
def test_transition_message(old, new, words):
    assert transition_message(old, new) == words
    assert Transition(old, new, E.UNFENCED).message == words


# -- the object on a fake clock ------------------------------------------------------------

INTERVAL = 2000


def running(now=0):
    lifecycle = BrokerLifecycle(heartbeat_interval_ms=INTERVAL, session_timeout_ms=9000)
    lifecycle.start(now)
    lifecycle.handle(E.REGISTERED, now)
    lifecycle.on_heartbeat_reply(is_caught_up=True, is_fenced=True, should_shut_down=False, now_ms=now)
    lifecycle.set_ready_to_unfence()
    lifecycle.on_heartbeat_reply(is_caught_up=True, is_fenced=False, should_shut_down=False, now_ms=now)
    assert lifecycle.state is S.RUNNING
    return lifecycle


def test_startup_to_running_heartbeat_flags_and_delays():
    lifecycle = BrokerLifecycle(heartbeat_interval_ms=INTERVAL)
    assert lifecycle.next_heartbeat_delay_ms(0) is None  # not running: no heartbeats
    assert lifecycle.start(0) == Transition(S.NOT_RUNNING, S.STARTING, E.START)
    assert lifecycle.next_heartbeat_delay_ms(0) is None  # register first
    lifecycle.handle(E.REGISTERED, 5)
    assert lifecycle.next_heartbeat_delay_ms(5) == 0
    assert lifecycle.heartbeat_flags() == HeartbeatFlags(want_fence=True, want_shutdown=False)
    assert lifecycle.on_heartbeat_reply(is_caught_up=False, is_fenced=True, should_shut_down=False, now_ms=10) is None
    assert lifecycle.next_heartbeat_delay_ms(10) == STARTING_HEARTBEAT_MS  # fast while STARTING
    step = lifecycle.on_heartbeat_reply(is_caught_up=True, is_fenced=True, should_shut_down=False, now_ms=20)
    assert step.message == "Transitioning from STARTING to RECOVERY."
    assert lifecycle.next_heartbeat_delay_ms(20) == INTERVAL
    lifecycle.set_ready_to_unfence()
    assert lifecycle.heartbeat_flags() == HeartbeatFlags(want_fence=False, want_shutdown=False)
    step = lifecycle.on_heartbeat_reply(is_caught_up=True, is_fenced=False, should_shut_down=False, now_ms=2020)
    assert step.message == "Transitioning from RECOVERY to RUNNING."
    assert lifecycle.next_heartbeat_delay_ms(2020 + 500) == INTERVAL - 500


def test_never_catching_up_stays_starting_and_never_unfenced_stays_recovery():
    lifecycle = BrokerLifecycle()
    lifecycle.start(0)
    lifecycle.handle(E.REGISTERED, 0)
    for now in range(0, 1000, 10):
        assert lifecycle.on_heartbeat_reply(is_caught_up=False, is_fenced=True, should_shut_down=False,
                                            now_ms=now) is None
    assert lifecycle.state is S.STARTING
    lifecycle.on_heartbeat_reply(is_caught_up=True, is_fenced=True, should_shut_down=False, now_ms=1000)
    for now in range(1000, 20000, 2000):  # the controller keeps it fenced (it asks to stay fenced)
        assert lifecycle.on_heartbeat_reply(is_caught_up=True, is_fenced=True, should_shut_down=False,
                                            now_ms=now) is None
    assert lifecycle.state is S.RECOVERY and lifecycle.heartbeat_flags().want_fence


def test_fenced_while_running_goes_back_to_recovery():
    lifecycle = running()
    step = lifecycle.on_heartbeat_reply(is_caught_up=True, is_fenced=True, should_shut_down=False, now_ms=100)
    assert step == Transition(S.RUNNING, S.RECOVERY, E.FENCED)


def test_registration_lost_registers_again():
    lifecycle = running()
    lifecycle.handle(E.REGISTRATION_LOST, 100)
    assert lifecycle.state is S.STARTING and lifecycle.next_heartbeat_delay_ms(100) is None
    lifecycle.handle(E.REGISTERED, 150)
    assert lifecycle.next_heartbeat_delay_ms(150) == 0


def test_controlled_shutdown_completes_cleanly():
    lifecycle = running()
    step = lifecycle.handle(E.SHUTDOWN_REQUESTED, 1000)
    assert step.message == "Transitioning from RUNNING to PENDING_CONTROLLED_SHUTDOWN."
    assert lifecycle.next_heartbeat_delay_ms(1000) == 0  # at once
    assert lifecycle.heartbeat_flags() == HeartbeatFlags(want_fence=False, want_shutdown=True)
    assert lifecycle.controlled_shutdown_remaining_ms(1000) == DEFAULT_CONTROLLED_SHUTDOWN_TIMEOUT_MS
    lifecycle.handle(E.SHUTDOWN_REQUESTED, 1001)  # a second SIGTERM changes nothing
    assert lifecycle.on_heartbeat_reply(is_caught_up=True, is_fenced=False, should_shut_down=False,
                                        now_ms=1010) is None
    assert lifecycle.next_heartbeat_delay_ms(1010) == PENDING_SHUTDOWN_HEARTBEAT_MS  # then often
    step = lifecycle.on_heartbeat_reply(is_caught_up=True, is_fenced=True, should_shut_down=True, now_ms=1060)
    assert step == Transition(S.PENDING_CONTROLLED_SHUTDOWN, S.SHUTTING_DOWN, E.SHOULD_SHUT_DOWN)
    assert lifecycle.next_heartbeat_delay_ms(1060) is None  # heartbeats are over
    assert lifecycle.controlled_shutdown_remaining_ms(1060) is None
    assert lifecycle.expire(10**9) is None
    assert not lifecycle.controlled_shutdown_timed_out
    assert lifecycle.handle(E.STOPPED, 1100).new is S.SHUTDOWN


def test_controlled_shutdown_timeout_exits_dirty():
    lifecycle = BrokerLifecycle(controlled_shutdown_timeout_ms=5000)
    lifecycle.start(0)
    lifecycle.handle(E.REGISTERED, 0)
    lifecycle.on_heartbeat_reply(is_caught_up=True, is_fenced=True, should_shut_down=False, now_ms=0)
    lifecycle.set_ready_to_unfence()
    lifecycle.on_heartbeat_reply(is_caught_up=True, is_fenced=False, should_shut_down=False, now_ms=0)
    lifecycle.handle(E.SHUTDOWN_REQUESTED, 1000)
    for now in range(1000, 6000, 50):  # the controller never says should_shut_down
        lifecycle.on_heartbeat_reply(is_caught_up=True, is_fenced=False, should_shut_down=False, now_ms=now)
        assert lifecycle.expire(now) is None
    assert lifecycle.controlled_shutdown_remaining_ms(5999) == 1
    assert not lifecycle.controlled_shutdown_expired(5999)
    assert lifecycle.controlled_shutdown_expired(6000)
    step = lifecycle.expire(6000)
    assert step == Transition(S.PENDING_CONTROLLED_SHUTDOWN, S.SHUTTING_DOWN, E.CONTROLLED_SHUTDOWN_TIMED_OUT)
    assert lifecycle.controlled_shutdown_timed_out


@pytest.mark.parametrize("setup", ["not-started", "starting-unregistered", "registration-lost"])
def test_shutdown_before_registering_skips_controlled_shutdown(setup):
    """A broker the controller holds no registration of has nothing to ask: straight to SHUTTING_DOWN."""
    lifecycle = BrokerLifecycle()
    if setup != "not-started":
        lifecycle.start(0)
    if setup == "registration-lost":
        lifecycle.handle(E.REGISTERED, 0)
        lifecycle.handle(E.REGISTRATION_LOST, 5)
    assert not lifecycle.registered
    assert lifecycle.handle(E.SHUTDOWN_REQUESTED, 10).new is S.SHUTTING_DOWN
    assert lifecycle.shutdown_cause is E.SHUTDOWN_REQUESTED and not lifecycle.controlled_shutdown_timed_out
    assert lifecycle.next_heartbeat_delay_ms(10) is None  # nothing sent


def registered_in(setup):
    """A registered broker in each state before RUNNING, `ready` when it asked to be unfenced."""
    lifecycle = BrokerLifecycle(heartbeat_interval_ms=INTERVAL, session_timeout_ms=9000)
    lifecycle.start(0)
    lifecycle.handle(E.REGISTERED, 0)
    if setup in ("starting-ready", "recovery-ready"):
        lifecycle.set_ready_to_unfence()
    if setup.startswith("recovery"):
        lifecycle.on_heartbeat_reply(is_caught_up=True, is_fenced=True, should_shut_down=False, now_ms=0)
    if setup == "fenced-again":
        lifecycle = running()
        lifecycle.on_heartbeat_reply(is_caught_up=True, is_fenced=True, should_shut_down=False, now_ms=0)
    return lifecycle


# The controller may have unfenced a broker before it sees so: in the reply still on its way
# (STARTING, RECOVERY), or in the reply that caught it up (the lifecycle takes one step per
# reply). Skipping its controlled shutdown left it active at the controller for a whole session.
@pytest.mark.parametrize(("setup", "state", "want_fence"), [
    ("starting", S.STARTING, True), ("starting-ready", S.STARTING, False),
    ("recovery", S.RECOVERY, True), ("recovery-ready", S.RECOVERY, False),
    ("fenced-again", S.RECOVERY, False),
])
def test_every_registered_broker_asks_for_a_controlled_shutdown(setup, state, want_fence):
    lifecycle = registered_in(setup)
    assert lifecycle.state is state and lifecycle.registered
    step = lifecycle.handle(E.SHUTDOWN_REQUESTED, 1000)
    assert step.message == f"Transitioning from {state.name} to PENDING_CONTROLLED_SHUTDOWN."
    assert lifecycle.heartbeat_flags() == HeartbeatFlags(want_fence=want_fence, want_shutdown=True)
    assert lifecycle.next_heartbeat_delay_ms(1000) == 0  # at once
    assert lifecycle.controlled_shutdown_remaining_ms(1000) == DEFAULT_CONTROLLED_SHUTDOWN_TIMEOUT_MS
    # the reply to a heartbeat sent before the stop (the unfence) changes nothing now
    assert lifecycle.on_heartbeat_reply(is_caught_up=True, is_fenced=False, should_shut_down=False,
                                        now_ms=1005) is None
    assert lifecycle.heartbeat_flags().want_shutdown
    step = lifecycle.on_heartbeat_reply(is_caught_up=True, is_fenced=True, should_shut_down=True, now_ms=1010)
    assert step == Transition(S.PENDING_CONTROLLED_SHUTDOWN, S.SHUTTING_DOWN, E.SHOULD_SHUT_DOWN)
    assert not lifecycle.controlled_shutdown_timed_out


def test_unregistered_transitions_apply_only_when_not_registered():
    assert next_state(S.STARTING, E.SHUTDOWN_REQUESTED, registered=False) is S.SHUTTING_DOWN
    assert next_state(S.STARTING, E.SHUTDOWN_REQUESTED) is S.PENDING_CONTROLLED_SHUTDOWN
    assert next_state(S.RUNNING, E.SHUTDOWN_REQUESTED, registered=False) is S.PENDING_CONTROLLED_SHUTDOWN
    with pytest.raises(LifecycleError):
        next_state(S.STARTING, E.UNFENCED, registered=False)


def test_controller_unreachable_backs_off_exponentially_and_success_resets():
    lifecycle = running()
    delays = []
    for _ in range(8):
        lifecycle.on_heartbeat_failed(0)
        delays.append(lifecycle.next_heartbeat_delay_ms(0))
    assert delays == [100, 200, 400, 800, 1600, 3200, 4500, 4500]  # capped at session/2
    lifecycle.on_heartbeat_reply(is_caught_up=True, is_fenced=False, should_shut_down=False, now_ms=0)
    assert lifecycle.next_heartbeat_delay_ms(0) == INTERVAL
    lifecycle.on_heartbeat_failed(0)
    assert lifecycle.next_heartbeat_delay_ms(0) == 100


def test_unreachable_controller_during_pending_shutdown_ends_in_the_timeout():
    lifecycle = running()
    lifecycle.handle(E.SHUTDOWN_REQUESTED, 0)
    now = 0
    while (step := lifecycle.expire(now)) is None:  # bounded: the deadline is 30 s away
        lifecycle.on_heartbeat_failed(now)
        now += lifecycle.next_heartbeat_delay_ms(now)
    assert step.new is S.SHUTTING_DOWN and lifecycle.controlled_shutdown_timed_out
    assert now >= DEFAULT_CONTROLLED_SHUTDOWN_TIMEOUT_MS


@pytest.mark.parametrize("kwargs", [dict(heartbeat_interval_ms=0), dict(session_timeout_ms=-1),
                                    dict(controlled_shutdown_timeout_ms=1.5)])
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        BrokerLifecycle(**kwargs)


# --- an operator's shutdown request, and early heartbeats while another broker shuts down ------


@pytest.mark.parametrize(("state", "requested", "obeys"), [
    (S.RUNNING, True, True), (S.RECOVERY, True, True), (S.STARTING, True, True),
    (S.RUNNING, False, False), (S.NOT_RUNNING, True, False),
    (S.PENDING_CONTROLLED_SHUTDOWN, True, False), (S.SHUTTING_DOWN, True, False), (S.SHUTDOWN, True, False),
])
def test_obeys_shutdown_request(state, requested, obeys):
    lifecycle = BrokerLifecycle()
    lifecycle.state = state
    assert lifecycle.obeys_shutdown_request(requested) is obeys


@dataclass(frozen=True)
class _Flags:
    broker_id: int
    fenced: bool = False
    in_controlled_shutdown: bool = False


PENDING_OTHER = [_Flags(4), _Flags(5, in_controlled_shutdown=True)]


@pytest.mark.parametrize(("brokers", "state", "applied", "reported", "early"), [
    pytest.param(PENDING_OTHER, S.RUNNING, 10, 9, True, id="another-waits-on-new-records"),
    pytest.param(PENDING_OTHER, S.RUNNING, 10, 10, False, id="already-reported"),
    pytest.param([_Flags(4), _Flags(5)], S.RUNNING, 10, 9, False, id="nobody-waits"),
    pytest.param([_Flags(4), _Flags(5, fenced=True, in_controlled_shutdown=True)], S.RUNNING, 10, 9, False,
                 id="the-other-is-done"),
    pytest.param([_Flags(4, in_controlled_shutdown=True)], S.RUNNING, 10, 9, False, id="only-itself"),
    pytest.param(PENDING_OTHER, S.RECOVERY, 10, 9, False, id="not-active-nobody-waits-for-it"),
    pytest.param(PENDING_OTHER, S.PENDING_CONTROLLED_SHUTDOWN, 10, 9, False, id="itself-pending"),
])
def test_heartbeat_early_for_shutdown(brokers, state, applied, reported, early):
    assert heartbeat_early_for_shutdown(brokers, broker_id=4, state=state, applied_offset=applied,
                                        reported_offset=reported) is early


@pytest.mark.parametrize(("state", "broker_epoch", "applied", "reported", "early"), [
    pytest.param(S.STARTING, 5, 5, 3, True, id="just-replayed-its-registration"),
    pytest.param(S.STARTING, 5, 4, 3, False, id="not-yet"),
    pytest.param(S.STARTING, 5, 6, 5, False, id="already-reported"),
    pytest.param(S.STARTING, -1, 6, -1, False, id="not-registered"),
    pytest.param(S.RUNNING, 5, 6, 3, False, id="past-starting"),
])
def test_heartbeat_early_when_caught_up(state, broker_epoch, applied, reported, early):
    assert heartbeat_early_when_caught_up(state=state, broker_epoch=broker_epoch, applied_offset=applied,
                                          reported_offset=reported) is early


def test_a_shell_that_beats_on_catch_up_may_slow_the_starting_pace():
    lifecycle = BrokerLifecycle(heartbeat_interval_ms=INTERVAL, starting_heartbeat_ms=INTERVAL)
    lifecycle.start(0)
    lifecycle.handle(E.REGISTERED, 0)
    lifecycle.on_heartbeat_reply(is_caught_up=False, is_fenced=True, should_shut_down=False, now_ms=10)
    assert lifecycle.next_heartbeat_delay_ms(10) == INTERVAL
    with pytest.raises(ValueError, match="starting_heartbeat_ms"):
        BrokerLifecycle(starting_heartbeat_ms=0)


# -- stopping: clean only through SHUTTING_DOWN (issue 36) ------------------------------------


def test_a_follower_that_dies_while_running_stops_uncleanly_not_with_an_error():
    lifecycle = running()
    transition = lifecycle.stopped(5000)
    assert (transition.old, transition.new, lifecycle.state) == (S.RUNNING, S.SHUTDOWN, S.SHUTDOWN)
    assert stopped_uncleanly(transition)
    assert transition.message == "Transitioning from RUNNING to SHUTDOWN."
    assert lifecycle.next_heartbeat_delay_ms(5000) is None  # heartbeats are over


def test_a_controlled_shutdown_stops_cleanly():
    lifecycle = running()
    lifecycle.handle(E.SHUTDOWN_REQUESTED, 0)
    lifecycle.on_heartbeat_reply(is_caught_up=True, is_fenced=True, should_shut_down=True, now_ms=10)
    transition = lifecycle.stopped(20)
    assert transition.old is S.SHUTTING_DOWN and not stopped_uncleanly(transition)


def test_stopping_twice_is_still_a_typed_error():
    lifecycle = running()
    lifecycle.stopped(0)
    with pytest.raises(LifecycleError, match="STOPPED in state SHUTDOWN"):
        lifecycle.stopped(1)
