"""Controller side of the broker lifecycle: Kafka's BrokerHeartbeatManager.calculateNextBrokerState.

Everything that decides a broker's next control state lives in this file, as ONE pure
function (style #4): `calculate_next_broker_state(...) -> BrokerControlStates(current, next)`.
It writes nothing and reads no clock; `records_plan(states, ...)` then says which records
the caller (the active controller's heartbeat path) must write, in one batch.

States (Kafka's BrokerControlState):

    state                fenced  in_controlled_shutdown  should_shut_down
    FENCED               yes     no                      no
    UNFENCED             no      no                      no
    CONTROLLED_SHUTDOWN  no      yes                     no
    SHUTDOWN_NOW         yes     no                      yes

The current state is read from the broker's registration in the image, never from soft
state, so a new active controller continues a controlled shutdown its predecessor began:
fenced -> FENCED (fencing wins: a fenced broker leads nothing), else in_controlled_shutdown
-> CONTROLLED_SHUTDOWN, else UNFENCED. SHUTDOWN_NOW is only ever a next state.

Transitions (Kafka's, exactly):

    FENCED               want_shutdown                        -> SHUTDOWN_NOW
                         not want_fence and is_caught_up      -> UNFENCED
                         otherwise                            -> FENCED
    UNFENCED             want_fence and want_shutdown         -> SHUTDOWN_NOW
                         want_fence                           -> FENCED
                         want_shutdown and leads partitions   -> CONTROLLED_SHUTDOWN
                         want_shutdown, leads nothing         -> SHUTDOWN_NOW
                         otherwise                            -> UNFENCED
    CONTROLLED_SHUTDOWN  still leads partitions               -> CONTROLLED_SHUTDOWN
                         every active broker has replayed up
                         to the controlled-shutdown offset    -> SHUTDOWN_NOW
                         otherwise                            -> CONTROLLED_SHUTDOWN
                         (want_fence / want_shutdown are not consulted, as in Kafka)

What happens BEFORE this function (the caller's job, as Kafka's processBrokerHeartbeat):
the broker epoch is checked (`quorum.broker_control.check_broker_epoch`): a heartbeat
from an unknown broker or with a stale broker epoch is rejected with
BROKER_ID_NOT_REGISTERED / STALE_BROKER_EPOCH and never reaches here, so a previous
incarnation can neither unfence nor shut down the current one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol


class BrokerControlState(Enum):
    """Kafka's BrokerControlState, with the heartbeat-reply flags each implies."""

    FENCED = "FENCED"
    UNFENCED = "UNFENCED"
    CONTROLLED_SHUTDOWN = "CONTROLLED_SHUTDOWN"
    SHUTDOWN_NOW = "SHUTDOWN_NOW"

    @property
    def fenced(self) -> bool:
        return self in (BrokerControlState.FENCED, BrokerControlState.SHUTDOWN_NOW)

    @property
    def in_controlled_shutdown(self) -> bool:
        return self is BrokerControlState.CONTROLLED_SHUTDOWN

    @property
    def should_shut_down(self) -> bool:
        return self is BrokerControlState.SHUTDOWN_NOW


FENCED = BrokerControlState.FENCED
UNFENCED = BrokerControlState.UNFENCED
CONTROLLED_SHUTDOWN = BrokerControlState.CONTROLLED_SHUTDOWN
SHUTDOWN_NOW = BrokerControlState.SHUTDOWN_NOW


@dataclass(frozen=True, slots=True)
class BrokerControlStates:
    """Kafka's BrokerControlStates: where the broker is and where this heartbeat takes it."""

    current: BrokerControlState
    next: BrokerControlState

    def __post_init__(self) -> None:
        if self.current is SHUTDOWN_NOW:
            raise ValueError("SHUTDOWN_NOW is never a current state (a shut-down broker is FENCED)")

    @property
    def changed(self) -> bool:
        return self.current is not self.next


def current_broker_state(*, fenced: bool, in_controlled_shutdown: bool) -> BrokerControlState:
    """The state a registration (image.broker(id)) is in; fencing wins over controlled shutdown."""
    if fenced:
        return FENCED
    if in_controlled_shutdown:
        return CONTROLLED_SHUTDOWN
    return UNFENCED


def calculate_next_broker_state(*, fenced: bool, in_controlled_shutdown: bool, want_fence: bool,
                                want_shutdown: bool, is_caught_up: bool,
                                leads_partitions: Callable[[], bool],
                                active_brokers_caught_up: Callable[[], bool]) -> BrokerControlStates:
    """Kafka's calculateNextBrokerState, as one function over the four states.

    fenced, in_controlled_shutdown: from the broker's registration in the image.
    want_fence, want_shutdown: from the heartbeat request.
    is_caught_up: the heartbeat's current_metadata_offset >= the broker epoch (the offset
        of its RegisterBroker record).
    leads_partitions: does the broker still lead any partition (lazy, as Kafka's Supplier:
        only asked on the want_shutdown and controlled-shutdown paths).
    active_brokers_caught_up: has every active broker (unfenced, not in controlled
        shutdown) replayed up to this broker's controlled-shutdown offset (lazy; see
        `every_active_broker_caught_up`).
    """
    current = current_broker_state(fenced=fenced, in_controlled_shutdown=in_controlled_shutdown)
    match current:
        case BrokerControlState.FENCED:
            if want_shutdown:
                nxt = SHUTDOWN_NOW  # "Fenced broker has requested and been granted an immediate shutdown."
            elif not want_fence and is_caught_up:
                nxt = UNFENCED  # caught up with the offset of its register broker record
            else:
                nxt = FENCED  # asked to stay fenced, or not caught up yet: stays FENCED
        case BrokerControlState.UNFENCED:
            if want_fence:
                nxt = SHUTDOWN_NOW if want_shutdown else FENCED
            elif want_shutdown:
                nxt = CONTROLLED_SHUTDOWN if leads_partitions() else SHUTDOWN_NOW
            else:
                nxt = UNFENCED
        case BrokerControlState.CONTROLLED_SHUTDOWN:
            if leads_partitions():
                nxt = CONTROLLED_SHUTDOWN  # more leaders still need to be moved
            elif active_brokers_caught_up():
                nxt = SHUTDOWN_NOW  # the lowest active offset reached the controlled-shutdown offset
            else:
                nxt = CONTROLLED_SHUTDOWN
        case _:  # pragma: no cover - current_broker_state never returns SHUTDOWN_NOW
            raise AssertionError(current)
    return BrokerControlStates(current, nxt)


def every_active_broker_caught_up(active_metadata_offsets: Iterable[int | None],
                                  controlled_shutdown_offset: int | None) -> bool:
    """Kafka's `controlledShutdownOffset <= lowestActiveOffset()`.

    active_metadata_offsets: the last reported metadata offset of every ACTIVE broker
    (unfenced and not in controlled shutdown; the shutting-down broker itself is not
    active), None or -1 for one not heard from yet. No active broker: True (Kafka's
    lowestActiveOffset is Long.MAX_VALUE). An unknown controlled-shutdown offset (None:
    a new active controller has not recorded one yet) is never reached.
    """
    if controlled_shutdown_offset is None:
        return False
    return all(offset is not None and offset >= controlled_shutdown_offset
               for offset in active_metadata_offsets)


class RegistrationChangeOrder(Enum):
    """Where the BrokerRegistrationChange goes relative to the partition changes (Kafka's order)."""

    FIRST = "first"  # handleBrokerInControlledShutdown / handleBrokerUnfenced
    LAST = "last"  # handleBrokerFenced: leave the partitions, then fence


@dataclass(frozen=True, slots=True)
class RecordsPlan:
    """What the caller must write for one heartbeat, all in ONE batch (or nothing at all).

    set_fenced / set_in_controlled_shutdown: the BrokerRegistrationChange fields (None:
        unchanged; both None: no BrokerRegistrationChange).
    leave_partitions: `remove_from_isr(partition, broker_id, ...)` for every partition the
        broker leads or is in the ISR of, honouring each topic's unclean/ELR/min.insync
        settings. That rule keeps the LAST ISR member (KIP-841): a partition whose only
        in-sync replica is this broker keeps it in the ISR and goes leaderless (offline)
        rather than electing an out-of-sync replica and losing acknowledged data.
    keeps_last_isr_member: always True when leave_partitions; spelled out for readers.
    elect_leaderless: Kafka's handleBrokerUnfenced (leaderless partitions it replicates).
    remember_controlled_shutdown_offset: record the end offset of this heartbeat's batch
        (with no records: the last committed offset) as the broker's controlled-shutdown
        offset, unless one is already known (Kafka's maybeUpdateControlledShutdownOffset).
    """

    set_fenced: bool | None = None
    set_in_controlled_shutdown: bool | None = None
    registration_change: RegistrationChangeOrder | None = None
    leave_partitions: bool = False
    keeps_last_isr_member: bool = False
    elect_leaderless: bool = False
    remember_controlled_shutdown_offset: bool = False

    @property
    def writes_nothing(self) -> bool:
        return not (self.registration_change or self.leave_partitions or self.elect_leaderless)


NO_RECORDS = RecordsPlan()
_FENCE = RecordsPlan(set_fenced=True, registration_change=RegistrationChangeOrder.LAST,
                     leave_partitions=True, keeps_last_isr_member=True)


def records_plan(states: BrokerControlStates, *, in_controlled_shutdown: bool) -> RecordsPlan:
    """The records intent of a transition (Kafka's switch in processBrokerHeartbeat).

    in_controlled_shutdown: the registration's flag (a fenced broker may carry it).
    """
    if not states.changed:
        if states.next is CONTROLLED_SHUTDOWN:  # e.g. the first heartbeat after a failover
            return RecordsPlan(remember_controlled_shutdown_offset=True)
        return NO_RECORDS
    match states.next:
        case BrokerControlState.FENCED | BrokerControlState.SHUTDOWN_NOW:
            # SHUTDOWN_NOW writes exactly what fencing writes (Kafka: handleBrokerFenced).
            return _FENCE
        case BrokerControlState.UNFENCED:
            # Kafka writes only fenced=False. We also clear a leftover in_controlled_shutdown
            # (a broker fenced mid-shutdown that then asked to run again), or the broker
            # would be unfenced yet never active.
            return RecordsPlan(set_fenced=False,
                               set_in_controlled_shutdown=False if in_controlled_shutdown else None,
                               registration_change=RegistrationChangeOrder.FIRST, elect_leaderless=True)
        case BrokerControlState.CONTROLLED_SHUTDOWN:
            # Only UNFENCED gets here, so the flag is not set yet (Kafka checks it anyway).
            return RecordsPlan(set_in_controlled_shutdown=True, registration_change=RegistrationChangeOrder.FIRST,
                               leave_partitions=True, keeps_last_isr_member=True,
                               remember_controlled_shutdown_offset=True)
    raise AssertionError(states)  # pragma: no cover


# --- Operator-requested shutdown (POST /v1/brokers/{id}/shutdown) ------------------------------
#
# Kafka has no remote "shut this broker down"; ours rides on the heartbeat. The active
# controller remembers (soft state, like the heartbeat sessions, so a failover forgets it:
# the API answers 202 and the operator asks again) the broker epoch the request was made
# for, and answers that broker's heartbeats with shutdown_requested=true until the broker
# obeys, i.e. heartbeats want_shut_down: from then on the ordinary controlled shutdown above
# runs, exactly as after a SIGTERM. A request never outlives the incarnation it was made
# for: a broker that restarted (new broker epoch) is not shut down again.


class ShutdownRequestOutcome(Enum):
    """What one heartbeat does to a pending operator shutdown request."""

    ASK = "ask"  # answer shutdown_requested=true; keep the request until it is obeyed
    OBEYED = "obeyed"  # the broker asks to shut down itself now: forget the request
    STALE = "stale"  # made for an earlier incarnation (another broker epoch): forget it

    @property
    def shutdown_requested(self) -> bool:
        """The heartbeat reply's flag; the request is kept exactly as long as it is asked."""
        return self is ShutdownRequestOutcome.ASK


def shutdown_request_outcome(*, requested_epoch: int, broker_epoch: int,
                             want_shutdown: bool) -> ShutdownRequestOutcome:
    """Decide for a heartbeat of `broker_epoch` while a request made for `requested_epoch` is pending."""
    if requested_epoch != broker_epoch:
        return ShutdownRequestOutcome.STALE
    if want_shutdown:
        return ShutdownRequestOutcome.OBEYED
    return ShutdownRequestOutcome.ASK


# --- Combined nodes (process.roles=broker,controller) -------------------------------------------
#
# A combined process stops its broker half first (a controlled shutdown needs the quorum),
# then its controller half. When several combined nodes stop together (`tidelog down`), the
# last brokers still need a quorum of controllers to finish their controlled shutdown, so a
# controller half lingers while any OTHER broker is unfenced and in controlled shutdown; the
# shell bounds the wait.


class BrokerFlags(Protocol):
    """What the linger rule reads of a registration (metadata.image.BrokerRegistration has it)."""

    @property
    def broker_id(self) -> int: ...

    @property
    def fenced(self) -> bool: ...

    @property
    def in_controlled_shutdown(self) -> bool: ...


def another_broker_shutting_down(brokers: Iterable[BrokerFlags], *, own_broker_id: int) -> bool:
    """Whether another broker is in the middle of a controlled shutdown (unfenced with
    in_controlled_shutdown; SHUTDOWN_NOW fences it)."""
    return any(b.in_controlled_shutdown and not b.fenced for b in brokers if b.broker_id != own_broker_id)


def controller_may_stop(brokers: Iterable[BrokerFlags], *, own_broker_id: int) -> bool:
    """Whether a combined node's controller half may stop now: no other broker still needs the
    quorum for its controlled shutdown."""
    return not another_broker_shutting_down(brokers, own_broker_id=own_broker_id)
