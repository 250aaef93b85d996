"""Broker side of the lifecycle: Kafka's BrokerLifecycleManager, sans I/O.

Everything that affects the broker's lifecycle state lives here (style #4, h11 form): the
transitions are one table `TRANSITIONS[state][event] -> state`; an event the table does not
list for a state is a `LifecycleError` naming both. `BrokerLifecycle` wraps the table with
the soft state a shell needs (when to heartbeat next, the controlled-shutdown deadline) and
takes `now_ms`; it never reads a clock, sleeps or sends anything.

    NOT_RUNNING --START--> STARTING          registering, then heartbeating fast (10 ms)
    STARTING --CAUGHT_UP--> RECOVERY         replayed up to its registration; still fenced
    RECOVERY --UNFENCED--> RUNNING           the controller unfenced it
    RUNNING --FENCED--> RECOVERY             the controller fenced it (asks to unfence again)
    STARTING, RECOVERY, RUNNING --SHUTDOWN_REQUESTED--> PENDING_CONTROLLED_SHUTDOWN
                                             (SIGTERM) heartbeat want_shutdown at once, then often
    STARTING --SHUTDOWN_REQUESTED--> SHUTTING_DOWN   when not registered: nothing to ask about
    PENDING_CONTROLLED_SHUTDOWN --SHOULD_SHUT_DOWN--> SHUTTING_DOWN           clean
    PENDING_CONTROLLED_SHUTDOWN --CONTROLLED_SHUTDOWN_TIMED_OUT--> SHUTTING_DOWN   dirty
    SHUTTING_DOWN --STOPPED--> SHUTDOWN
    any other state --STOPPED--> SHUTDOWN    the process stops without a controlled shutdown:
                                             the metadata follower ended (a fatal error) or the
                                             node failed before it started

Kafka facts kept: a second SIGTERM while pending changes nothing; STARTING beats
10 ms after each reply; entering PENDING_CONTROLLED_SHUTDOWN beats immediately; failed
heartbeats back off exponentially from 100 ms up to half the session timeout (without
Kafka's 2 % jitter, which would need randomness: the shell may add it). want_fence is
`not ready_to_unfence` (Kafka's setReadyToUnfence, called once log recovery is done);
want_shutdown is `state is PENDING_CONTROLLED_SHUTDOWN`.

Beside the table, pure decisions the shell asks about heartbeats: `obeys_shutdown_request`
(an operator's POST /v1/brokers/{id}/shutdown relayed in a reply starts the SIGTERM path),
`heartbeat_early_when_caught_up` and `heartbeat_early_for_shutdown` (report the applied
metadata offset at once when the controller is waiting for exactly that).

Deliberate differences from Kafka: every REGISTERED broker asks for a controlled shutdown,
whatever its state (Kafka's BeginControlledShutdownEvent skips it unless RUNNING). A STARTING or
RECOVERY broker may already be unfenced: the controller decides so on a heartbeat whose reply
is still on its way, or in the reply that catches it up (one step per reply here). Skipping
left it active at the controller until its session expired, so its leaderships stayed put and
every other broker's controlled shutdown waited for its offset (the lowest-active-offset rule;
issue 35, bench/partition_scale.py: 7 of 9.1 s of one). A fenced broker is answered
should_shut_down on its first want_shutdown heartbeat (FENCED -> SHUTDOWN_NOW), so asking costs
one round trip, bounded as always by controlled.shutdown.timeout.ms. Also: RUNNING --FENCED-->
RECOVERY (Kafka only logs); the pending state beats every 50 ms, not just once after the
first reply ("then often"); REGISTRATION_LOST (STALE_BROKER_EPOCH / BROKER_ID_NOT_REGISTERED,
our follower re-registers) goes back to STARTING, or, when pending, to SHUTTING_DOWN: the controller
has already fenced or replaced that registration, so it leads nothing. STOPPED is defined
in every state but SHUTDOWN (Kafka's BrokerServer.shutdown runs from any state): a broker
whose follower died while RUNNING stops uncleanly, and `stopped_uncleanly` says so for the
shell's log line; its partitions move when its session expires.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Final

from common.config import default_int
from shutdown.controller_states import BrokerFlags, another_broker_shutting_down

# The key table's defaults (common.config): a lifecycle built without settings behaves as Kafka's.
DEFAULT_HEARTBEAT_INTERVAL_MS: Final = default_int("broker.heartbeat.interval.ms")
DEFAULT_SESSION_TIMEOUT_MS: Final = default_int("broker.session.timeout.ms")
DEFAULT_CONTROLLED_SHUTDOWN_TIMEOUT_MS: Final = default_int("controlled.shutdown.timeout.ms")
STARTING_HEARTBEAT_MS: Final = 10  # Kafka: "after only 10 ms so that ... we start up a bit quicker"
PENDING_SHUTDOWN_HEARTBEAT_MS: Final = 50  # Kafka's delay after the first pending-shutdown reply
RETRY_BACKOFF_BASE_MS: Final = 100  # Kafka's resendExponentialBackoff: 100 ms, x2, max session/2


class BrokerState(Enum):
    """Kafka's BrokerState names (plus SHUTDOWN, the process has stopped)."""

    NOT_RUNNING = "NOT_RUNNING"
    STARTING = "STARTING"
    RECOVERY = "RECOVERY"
    RUNNING = "RUNNING"
    PENDING_CONTROLLED_SHUTDOWN = "PENDING_CONTROLLED_SHUTDOWN"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    SHUTDOWN = "SHUTDOWN"


class LifecycleEvent(Enum):
    START = "START"  # the broker process starts its lifecycle manager
    REGISTERED = "REGISTERED"  # BrokerRegistration succeeded (broker epoch known)
    CAUGHT_UP = "CAUGHT_UP"  # heartbeat reply is_caught_up
    UNFENCED = "UNFENCED"  # heartbeat reply is_fenced=False
    FENCED = "FENCED"  # heartbeat reply is_fenced=True while RUNNING
    REGISTRATION_LOST = "REGISTRATION_LOST"  # STALE_BROKER_EPOCH / BROKER_ID_NOT_REGISTERED
    CONTROLLER_UNREACHABLE = "CONTROLLER_UNREACHABLE"  # a heartbeat failed or timed out
    SHUTDOWN_REQUESTED = "SHUTDOWN_REQUESTED"  # SIGTERM / Ctrl-C
    SHOULD_SHUT_DOWN = "SHOULD_SHUT_DOWN"  # heartbeat reply should_shut_down
    CONTROLLED_SHUTDOWN_TIMED_OUT = "CONTROLLED_SHUTDOWN_TIMED_OUT"  # controlled.shutdown.timeout.ms
    STOPPED = "STOPPED"  # logs flushed and closed, marker written (or not): the process exits


S, E = BrokerState, LifecycleEvent

TRANSITIONS: Final[Mapping[BrokerState, Mapping[LifecycleEvent, BrokerState]]] = MappingProxyType({
    S.NOT_RUNNING: MappingProxyType({
        E.START: S.STARTING,
        E.SHUTDOWN_REQUESTED: S.SHUTTING_DOWN,
        E.STOPPED: S.SHUTDOWN,  # the node failed before its follower ran
    }),
    S.STARTING: MappingProxyType({
        E.REGISTERED: S.STARTING,
        E.CAUGHT_UP: S.RECOVERY,
        E.CONTROLLER_UNREACHABLE: S.STARTING,
        E.REGISTRATION_LOST: S.STARTING,
        E.SHUTDOWN_REQUESTED: S.PENDING_CONTROLLED_SHUTDOWN,  # registered (else UNREGISTERED_TRANSITIONS)
        E.STOPPED: S.SHUTDOWN,  # unclean: the follower ended (a fatal error)
    }),
    S.RECOVERY: MappingProxyType({
        E.UNFENCED: S.RUNNING,
        E.FENCED: S.RECOVERY,
        E.CONTROLLER_UNREACHABLE: S.RECOVERY,
        E.REGISTRATION_LOST: S.STARTING,
        E.SHUTDOWN_REQUESTED: S.PENDING_CONTROLLED_SHUTDOWN,  # the controller may have unfenced it already
        E.STOPPED: S.SHUTDOWN,  # unclean: the follower ended (a fatal error)
    }),
    S.RUNNING: MappingProxyType({
        E.FENCED: S.RECOVERY,
        E.UNFENCED: S.RUNNING,
        E.CONTROLLER_UNREACHABLE: S.RUNNING,
        E.REGISTRATION_LOST: S.STARTING,
        E.SHUTDOWN_REQUESTED: S.PENDING_CONTROLLED_SHUTDOWN,
        E.STOPPED: S.SHUTDOWN,  # unclean: the follower ended while serving; leaderships move at session expiry
    }),
    S.PENDING_CONTROLLED_SHUTDOWN: MappingProxyType({
        E.SHUTDOWN_REQUESTED: S.PENDING_CONTROLLED_SHUTDOWN,  # "already in that state"
        E.FENCED: S.PENDING_CONTROLLED_SHUTDOWN,  # keep asking: a fenced broker is told SHUTDOWN_NOW
        E.UNFENCED: S.PENDING_CONTROLLED_SHUTDOWN,
        E.CONTROLLER_UNREACHABLE: S.PENDING_CONTROLLED_SHUTDOWN,  # keep trying until the timeout
        E.SHOULD_SHUT_DOWN: S.SHUTTING_DOWN,
        E.CONTROLLED_SHUTDOWN_TIMED_OUT: S.SHUTTING_DOWN,
        E.REGISTRATION_LOST: S.SHUTTING_DOWN,
        E.STOPPED: S.SHUTDOWN,  # unclean: the follower ended before the controller answered
    }),
    S.SHUTTING_DOWN: MappingProxyType({
        E.SHUTDOWN_REQUESTED: S.SHUTTING_DOWN,
        E.STOPPED: S.SHUTDOWN,
    }),
    S.SHUTDOWN: MappingProxyType({}),
})

# The one pair that depends on registration, looked up first while the broker is not registered
# (before its first BrokerRegistration succeeds, or after REGISTRATION_LOST): the controller holds
# no registration of this incarnation, so there is nothing to hand over and no heartbeat to send.
UNREGISTERED_TRANSITIONS: Final[Mapping[BrokerState, Mapping[LifecycleEvent, BrokerState]]] = MappingProxyType({
    S.STARTING: MappingProxyType({E.SHUTDOWN_REQUESTED: S.SHUTTING_DOWN}),
})

del S, E


class LifecycleError(Exception):
    """An event the transition table does not allow in the current state."""

    def __init__(self, state: BrokerState, event: LifecycleEvent) -> None:
        super().__init__(f"can't handle event {event.name} in state {state.name}")
        self.state = state
        self.event = event


def next_state(state: BrokerState, event: LifecycleEvent, *, registered: bool = True) -> BrokerState:
    """The table lookup (UNREGISTERED_TRANSITIONS first when not `registered`); LifecycleError for
    a missing key."""
    if not registered:
        unregistered = UNREGISTERED_TRANSITIONS.get(state)
        if unregistered is not None and event in unregistered:
            return unregistered[event]
    try:
        return TRANSITIONS[state][event]
    except KeyError:
        raise LifecycleError(state, event) from None


def transition_message(old: BrokerState, new: BrokerState) -> str:
    """The operator's words, as Kafka logs them."""
    return f"Transitioning from {old.name} to {new.name}."


@dataclass(frozen=True, slots=True)
class Transition:
    old: BrokerState
    new: BrokerState
    event: LifecycleEvent

    @property
    def message(self) -> str:
        return transition_message(self.old, self.new)


@dataclass(frozen=True, slots=True)
class HeartbeatFlags:
    """What this broker asks for in its next BrokerHeartbeat."""

    want_fence: bool
    want_shutdown: bool


_HEARTBEATING: Final = frozenset({BrokerState.STARTING, BrokerState.RECOVERY, BrokerState.RUNNING,
                                  BrokerState.PENDING_CONTROLLED_SHUTDOWN})
_OBEYS_SHUTDOWN_REQUEST: Final = frozenset({BrokerState.STARTING, BrokerState.RECOVERY, BrokerState.RUNNING})


class BrokerLifecycle:
    """The broker's lifecycle state plus the timers around it, driven by `now_ms`.

    The shell: `start(now)`; register, then `handle(REGISTERED, now)`; while
    `next_heartbeat_delay_ms(now)` is not None, wait that long (or until
    `controlled_shutdown_remaining_ms`), send `heartbeat_flags()` and feed the reply to
    `on_heartbeat_reply` (or `on_heartbeat_failed`); on SIGTERM `handle(SHUTDOWN_REQUESTED)`;
    call `expire(now)` when woken; in SHUTTING_DOWN flush, close, then `handle(STOPPED)`.
    Log every returned Transition's `message`.
    """

    def __init__(self, *, heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
                 session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                 controlled_shutdown_timeout_ms: int = DEFAULT_CONTROLLED_SHUTDOWN_TIMEOUT_MS,
                 starting_heartbeat_ms: int = STARTING_HEARTBEAT_MS) -> None:
        for name, value in (("heartbeat_interval_ms", heartbeat_interval_ms),
                            ("session_timeout_ms", session_timeout_ms),
                            ("starting_heartbeat_ms", starting_heartbeat_ms),
                            ("controlled_shutdown_timeout_ms", controlled_shutdown_timeout_ms)):
            if type(value) is not int or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.session_timeout_ms = session_timeout_ms
        self.controlled_shutdown_timeout_ms = controlled_shutdown_timeout_ms
        self.starting_heartbeat_ms = starting_heartbeat_ms  # a shell that beats on catch-up may slow this
        self.state = BrokerState.NOT_RUNNING
        self.ready_to_unfence = False
        # The controller holds a registration of this incarnation (REGISTERED, until START or
        # REGISTRATION_LOST): a stop request then asks for a controlled shutdown in any state.
        self.registered = False
        self.shutdown_cause: LifecycleEvent | None = None  # the event that entered SHUTTING_DOWN
        self._next_heartbeat_ms: int | None = None  # None: none scheduled
        self._failed_attempts = 0
        self._controlled_shutdown_deadline_ms: int | None = None

    # -- the table -----------------------------------------------------------------------

    def handle(self, event: LifecycleEvent, now_ms: int) -> Transition:
        """Apply one event; LifecycleError (state unchanged) if the table forbids it."""
        old = self.state
        new = next_state(old, event, registered=self.registered)
        self.state = new
        if event is LifecycleEvent.REGISTERED:
            self.registered = True
        elif event in (LifecycleEvent.START, LifecycleEvent.REGISTRATION_LOST):
            self.registered = False
        if new is not old:
            self._entered(new, event, now_ms)
        elif event is LifecycleEvent.REGISTERED:
            self._failed_attempts = 0
            self._next_heartbeat_ms = now_ms  # first heartbeat at once
        return Transition(old, new, event)

    def _entered(self, new: BrokerState, event: LifecycleEvent, now_ms: int) -> None:
        if new is BrokerState.STARTING:  # (re-)register first: no heartbeat until REGISTERED
            self._next_heartbeat_ms = None
        elif new is BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            self._next_heartbeat_ms = now_ms  # tell the controller as soon as possible
            self._controlled_shutdown_deadline_ms = now_ms + self.controlled_shutdown_timeout_ms
        elif new is BrokerState.SHUTTING_DOWN:
            self.shutdown_cause = event
            self._next_heartbeat_ms = None
            self._controlled_shutdown_deadline_ms = None

    def start(self, now_ms: int) -> Transition:
        return self.handle(LifecycleEvent.START, now_ms)

    def set_ready_to_unfence(self) -> None:
        """Log recovery is done: heartbeats stop asking to stay fenced (Kafka's setReadyToUnfence)."""
        self.ready_to_unfence = True

    # -- heartbeats ----------------------------------------------------------------------

    def heartbeat_flags(self) -> HeartbeatFlags:
        return HeartbeatFlags(want_fence=not self.ready_to_unfence,
                              want_shutdown=self.state is BrokerState.PENDING_CONTROLLED_SHUTDOWN)

    def next_heartbeat_delay_ms(self, now_ms: int) -> int | None:
        """Milliseconds until the next heartbeat (0: now), or None when none is due
        (not registered yet, or heartbeats are over)."""
        if self.state not in _HEARTBEATING or self._next_heartbeat_ms is None:
            return None
        return max(0, self._next_heartbeat_ms - now_ms)

    def on_heartbeat_reply(self, *, is_caught_up: bool, is_fenced: bool, should_shut_down: bool,
                           now_ms: int) -> Transition | None:
        """A successful reply: at most one step (Kafka's handleResponse), then schedule the next beat."""
        self._failed_attempts = 0
        event: LifecycleEvent | None = None
        match self.state:
            case BrokerState.STARTING if is_caught_up:
                event = LifecycleEvent.CAUGHT_UP
            case BrokerState.RECOVERY if not is_fenced:
                event = LifecycleEvent.UNFENCED
            case BrokerState.RUNNING if is_fenced:
                event = LifecycleEvent.FENCED
            case BrokerState.PENDING_CONTROLLED_SHUTDOWN if should_shut_down:
                event = LifecycleEvent.SHOULD_SHUT_DOWN
        transition = None if event is None else self.handle(event, now_ms)
        if self.state in _HEARTBEATING:
            self._next_heartbeat_ms = now_ms + self._delay_after_success()
        return transition

    def on_heartbeat_failed(self, now_ms: int) -> Transition:
        """No answer (timeout, NOT_CONTROLLER, connection refused): back off and retry."""
        transition = self.handle(LifecycleEvent.CONTROLLER_UNREACHABLE, now_ms)
        self._failed_attempts += 1
        backoff = RETRY_BACKOFF_BASE_MS * 2 ** min(self._failed_attempts - 1, 30)
        self._next_heartbeat_ms = now_ms + min(backoff, max(RETRY_BACKOFF_BASE_MS, self.session_timeout_ms // 2))
        return transition

    def obeys_shutdown_request(self, shutdown_requested: bool) -> bool:
        """Whether a heartbeat reply's shutdown_requested (POST /v1/brokers/{id}/shutdown) starts
        this broker's shutdown now: set, and no shutdown is under way yet. The shell then takes
        the SIGTERM path (SHUTDOWN_REQUESTED), so both causes run the same controlled shutdown."""
        return shutdown_requested and self.state in _OBEYS_SHUTDOWN_REQUEST

    def _delay_after_success(self) -> int:
        if self.state is BrokerState.STARTING:
            return self.starting_heartbeat_ms
        if self.state is BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            return PENDING_SHUTDOWN_HEARTBEAT_MS
        return self.heartbeat_interval_ms

    # -- the controlled-shutdown timeout ----------------------------------------------------

    def controlled_shutdown_remaining_ms(self, now_ms: int) -> int | None:
        """Milliseconds left before controlled.shutdown.timeout.ms expires, or None if not pending."""
        if self._controlled_shutdown_deadline_ms is None:
            return None
        return max(0, self._controlled_shutdown_deadline_ms - now_ms)

    def controlled_shutdown_expired(self, now_ms: int) -> bool:
        remaining = self.controlled_shutdown_remaining_ms(now_ms)
        return remaining == 0

    def expire(self, now_ms: int) -> Transition | None:
        """Fire CONTROLLED_SHUTDOWN_TIMED_OUT if the deadline has passed, else nothing."""
        if not self.controlled_shutdown_expired(now_ms):
            return None
        return self.handle(LifecycleEvent.CONTROLLED_SHUTDOWN_TIMED_OUT, now_ms)

    def stopped(self, now_ms: int) -> Transition:
        """The process stops (STOPPED): SHUTDOWN from any state; the transition says from where."""
        return self.handle(LifecycleEvent.STOPPED, now_ms)

    @property
    def controlled_shutdown_timed_out(self) -> bool:
        """The broker exits dirty: the controller never said should_shut_down in time."""
        return self.shutdown_cause is LifecycleEvent.CONTROLLED_SHUTDOWN_TIMED_OUT


def stopped_uncleanly(transition: Transition) -> bool:
    """A STOPPED that did not come through SHUTTING_DOWN: the broker left without handing its
    leaderships over (the follower died, or the node failed while starting)."""
    return transition.event is LifecycleEvent.STOPPED and transition.old is not BrokerState.SHUTTING_DOWN


def heartbeat_early_when_caught_up(*, state: BrokerState, broker_epoch: int, applied_offset: int,
                                   reported_offset: int) -> bool:
    """Whether a STARTING broker should heartbeat now: it has just replayed up to its own
    registration (its broker epoch), which is exactly what the controller's is_caught_up checks
    in the reported offset. Kafka polls every 10 ms while STARTING; beating on the event is as
    fast and costs the active controller one heartbeat instead of dozens."""
    return (state is BrokerState.STARTING and broker_epoch >= 0 and applied_offset >= broker_epoch
            and reported_offset < broker_epoch)


def heartbeat_early_for_shutdown(brokers: Iterable[BrokerFlags], *, broker_id: int, state: BrokerState,
                                 applied_offset: int, reported_offset: int) -> bool:
    """Whether a RUNNING broker should report its applied metadata offset now rather than at its
    next heartbeat interval: another broker is in controlled shutdown, and the controller lets it
    go only once every active broker has REPORTED replaying its records (Kafka's
    `controlledShutdownOffset <= lowestActiveOffset`). Waiting for the regular beat would add up
    to broker.heartbeat.interval.ms (2 s) to every controlled shutdown; tidelog beats once per
    applied batch while someone waits (not in Kafka, which waits)."""
    if state is not BrokerState.RUNNING or applied_offset <= reported_offset:
        return False
    return another_broker_shutting_down(brokers, own_broker_id=broker_id)
