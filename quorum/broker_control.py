"""Broker rules: registration, heartbeats, fencing, unregistration.

Kafka's ClusterControlManager and the broker half of ReplicationControlManager as plain
functions. The heartbeat manager (soft state, not in the log) is passed in; the rules
touch or drop its sessions as Kafka's do, and return every log change as records.

Kafka's rules kept here:
- the broker epoch is the offset of the broker's RegisterBroker record, which is always
  the first record a registration returns (the caller reads it from the append outcome);
- a broker is unfenced only once its reported metadata offset reaches its broker epoch;
- fencing (heartbeat, session expiry, re-registration) and unregistration first move every
  ISR and leadership away from the broker through `remove_from_isr`, honouring each
  topic's unclean.leader.election.enable and min.insync.replicas; KIP-841 keeps the last
  ISR member and the partition goes leaderless; unfencing then re-elects leaderless
  partitions the broker replicates.

Not Kafka's: those moves are bounded, at most `MAX_PARTITIONS_PER_DECISION` partitions per
decision (Kafka computes a fence in one event, which Java does in milliseconds; ours took
seconds at 83,000 partitions and starved the heartbeats). The registration change goes in the
first batch, the rule names where its walk stopped (`ControllerResult.follow_up`) and
`continue_leaving` computes each next batch from the image the previous one left; the shell
queues them (`quorum.controller_runtime`). A failover between batches leaves a fenced broker
in ISRs it shares: `brokers_left_behind` finds it from the image alone. An unfence's elections
of leaderless partitions are bounded the same way (`continue_electing`; after a failover,
`brokers_with_elections_left`).

Heartbeats follow `shutdown.controller_states`: `calculate_next_broker_state` decides where
the broker goes (FENCED / UNFENCED / CONTROLLED_SHUTDOWN / SHUTDOWN_NOW) and `records_plan`
says which records that takes; `process_heartbeat` only turns the plan into records (in one
batch) and keeps the controlled-shutdown offset in the heartbeat manager (soft state).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from common.errors import ErrorCode
from metadata.codec import MetadataRecordError
from metadata.delta import apply
from metadata.image import BrokerRegistration, MetadataImage, PartitionRegistration
from metadata.partition_change import elect_leader, remove_from_isr
from metadata.records import (
    BrokerRegistrationChange,
    Listener,
    PartitionChange,
    Record,
    RegisterBroker,
    UnregisterBroker,
)
from quorum.controller_result import (
    MAX_LEADERSHIPS_PER_DECISION,
    MAX_PARTITIONS_PER_DECISION,
    ControllerApiError,
    ControllerResult,
    ElectFollowUp,
    FollowUp,
    LeaveFollowUp,
    PartitionKey,
)
from quorum.heartbeat_manager import BrokerHeartbeatManager
from quorum.topic_control import TopicElectionConfig, topic_election_config
from shutdown.controller_states import (
    CONTROLLED_SHUTDOWN,
    RegistrationChangeOrder,
    calculate_next_broker_state,
    every_active_broker_caught_up,
    records_plan,
)

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    """BrokerHeartbeatResponse: caught up to its registration, fenced, told to shut down."""

    is_caught_up: bool
    is_fenced: bool
    should_shut_down: bool


def check_broker_epoch(image: MetadataImage, broker_id: int, broker_epoch: int) -> BrokerRegistration:
    """The broker's registration; BROKER_ID_NOT_REGISTERED or STALE_BROKER_EPOCH otherwise."""
    registration = image.broker(broker_id)
    if registration is None:
        raise ControllerApiError(ErrorCode.BROKER_ID_NOT_REGISTERED,
                                 f"Broker {broker_id} is not registered.", field="broker_id")
    if registration.broker_epoch != broker_epoch:
        raise ControllerApiError(ErrorCode.STALE_BROKER_EPOCH,
                                 f"Expected broker epoch {registration.broker_epoch} for broker {broker_id}, "
                                 f"but got broker epoch {broker_epoch}.", field="broker_epoch")
    return registration


def _is_active(image: MetadataImage) -> Callable[[int], bool]:
    def is_active(broker_id: int) -> bool:
        registration = image.broker(broker_id)
        return registration is not None and registration.is_active
    return is_active


def _partition_changes(
    image: MetadataImage,
    wanted: Callable[[PartitionRegistration], bool],
    rule: Callable[[PartitionRegistration, TopicElectionConfig], PartitionChange | None],
    *, after: PartitionKey | None = None, max_partitions: int | None = None,
) -> tuple[list[PartitionChange], PartitionKey | None]:
    """`rule` applied to every `wanted` partition after `after`, in (topic, partition) order, with
    its topic's election settings; at most `max_partitions` of them (None: all).

    Returns the changes and, when it stopped at the limit with wanted partitions left, the key
    of the last partition it looked at (where the next batch resumes), else None. The walk
    resumes by key, not by index, so topics created or deleted in between change nothing.
    """
    out: list[PartitionChange] = []
    seen = 0
    last: PartitionKey | None = None
    names = sorted(image.topics.by_name)
    for name in names[bisect.bisect_left(names, after[0]) if after is not None else 0:]:
        topic = image.topics.by_name[name]
        ids = sorted(topic.partitions)
        start = bisect.bisect_right(ids, after[1]) if after is not None and name == after[0] else 0
        config = None
        for partition_id in ids[start:]:  # bounded by the topic's partitions
            partition = topic.partitions[partition_id]
            if not wanted(partition):
                continue
            if max_partitions is not None and seen >= max_partitions:
                return out, last
            seen += 1
            last = (name, partition_id)
            config = config or topic_election_config(image, name)
            change = rule(partition, config)
            if change is not None:
                out.append(change)
    return out, None


def _leave_partitions(image: MetadataImage, broker_id: int, *, after: PartitionKey | None = None,
                      max_partitions: int | None = None,
                      wanted: Callable[[PartitionRegistration], bool] | None = None,
                      ) -> tuple[list[PartitionChange], PartitionKey | None]:
    """remove_from_isr for every partition the broker leads or is in the ISR of (a batch of them
    when `max_partitions` is set; see `_partition_changes`); of those, only the `wanted` ones
    when given."""
    is_active = _is_active(image)
    if wanted is None:
        wanted = lambda p: broker_id in p.isr or p.leader == broker_id  # noqa: E731 - the default walk
    return _partition_changes(
        image,
        wanted,
        lambda p, config: remove_from_isr(
            p, broker_id, is_acceptable=is_active, unclean_allowed=config.unclean_allowed,
            elr_enabled=config.elr_enabled, min_insync_replicas=config.min_insync_replicas),
        after=after, max_partitions=max_partitions)


def _follow_up(broker_id: int, stopped: PartitionKey | None) -> LeaveFollowUp | None:
    return None if stopped is None else LeaveFollowUp(broker_id, stopped)


def _leave_leaders_first(image: MetadataImage, broker_id: int, *, after: PartitionKey | None,
                         max_partitions: int | None, max_leaderships: int | None,
                         ) -> tuple[list[PartitionChange], LeaveFollowUp | None]:
    """A controlled shutdown's batch: at most `max_leaderships` of the broker's leaderships
    (after `after`), and once none is left, in the same batch while it has room under
    `max_partitions`, its other ISR seats from the first partition; the follow-up says which
    pass goes on where.

    Kafka moves all of them in one event, which the broker's shutdown waits for. Ours are
    batches, and the broker waits only for those that move its leaderships: walking in
    (topic, partition) order moved the last of 33,000 leaderships in the last of 100 batches at
    100,000 partitions; leaderships first, in the 34th; in batches of
    `MAX_LEADERSHIPS_PER_DECISION`, in the 7th.
    """
    changes, stopped = _leave_partitions(image, broker_id, after=after, max_partitions=max_leaderships,
                                         wanted=lambda p: p.leader == broker_id)
    if stopped is not None:
        return changes, LeaveFollowUp(broker_id, stopped, leaders_only=True)
    # every leadership change was a change (a led partition always gets a new leader or none)
    room = None if max_partitions is None else max_partitions - len(changes)
    if room is not None and room <= 0:
        return changes, LeaveFollowUp(broker_id, None)
    seats, stopped = _leave_partitions(image, broker_id, max_partitions=room,
                                       wanted=lambda p: broker_id in p.isr and p.leader != broker_id)
    return [*changes, *seats], _follow_up(broker_id, stopped)


def _elect_for_unfenced(image: MetadataImage, broker_id: int, *, after: PartitionKey | None = None,
                        max_partitions: int | None = None) -> tuple[list[PartitionChange], ElectFollowUp | None]:
    """Kafka's handleBrokerUnfenced: leaderless partitions the broker replicates may elect it;
    at most `max_partitions` of them after `after` (see `_partition_changes`), the rest as the
    follow-up (`continue_electing`)."""
    is_active = _is_active(image)

    def acceptable(replica: int) -> bool:
        return replica == broker_id or is_active(replica)

    changes, stopped = _partition_changes(
        image,
        lambda p: not p.has_leader and broker_id in p.replicas,
        lambda p, config: elect_leader(
            p, is_acceptable=acceptable, unclean_allowed=config.unclean_allowed,
            elr_enabled=config.elr_enabled, min_insync_replicas=config.min_insync_replicas),
        after=after, max_partitions=max_partitions)
    return changes, None if stopped is None else ElectFollowUp(broker_id, stopped)


def continue_electing(image: MetadataImage, broker_id: int, *, after: PartitionKey | None,
                      max_partitions: int | None = MAX_PARTITIONS_PER_DECISION) -> ControllerResult[int]:
    """The next batch of an unfence's elections (`_elect_for_unfenced` after `after`). Nothing
    when the broker is no longer active (fenced, shutting down or gone since): its own moves
    away then decide. The response is the number of partition changes."""
    registration = image.broker(broker_id)
    if registration is None or not registration.is_active:
        return ControllerResult((), 0)
    changes, follow_up = _elect_for_unfenced(image, broker_id, after=after, max_partitions=max_partitions)
    return ControllerResult(changes, len(changes), follow_up=follow_up, splittable=True)


def brokers_with_elections_left(image: MetadataImage) -> list[int]:
    """Active brokers in the ISR of a leaderless partition they replicate: what an unfence's
    elections cut short by a controller failover left to do. A new active controller continues
    them (`continue_electing` from the first partition). One pass over every partition."""
    found: set[int] = set()
    brokers = image.cluster.brokers
    for topic in image.topics.by_id.values():
        for partition in topic.partitions.values():
            if not partition.has_leader:
                found.update(b for b in partition.isr if b in brokers and brokers[b].is_active)
    return sorted(found)


def register_broker(image: MetadataImage, *, broker_id: int, incarnation_id: str,
                    listeners: Iterable[Listener], rack: str | None, now_ms: int,
                    heartbeats: BrokerHeartbeatManager,
                    max_partitions: int | None = MAX_PARTITIONS_PER_DECISION) -> ControllerResult[None]:
    """BrokerRegistration: RegisterBroker(fenced=True) first, then the ISR/leader moves it implies
    (at most `max_partitions`; the rest is the result's follow_up)."""
    existing = image.broker(broker_id)
    if existing is not None and existing.incarnation_id != incarnation_id:
        heartbeats.begin_sessions(image, now_ms)
        if not existing.fenced and heartbeats.has_valid_session(broker_id, now_ms):
            raise ControllerApiError(
                ErrorCode.DUPLICATE_BROKER_REGISTRATION,
                f"Another broker is registered with broker id {broker_id} (incarnation "
                f"{existing.incarnation_id}) and its session has not expired.", field="broker_id")
        heartbeats.remove(broker_id)  # the old incarnation's session
    try:
        record = RegisterBroker(broker_id, incarnation_id, tuple(listeners), rack, fenced=True)
    except MetadataRecordError as exc:
        raise ControllerApiError(ErrorCode.INVALID_REQUEST, f"Bad broker registration: {exc}") from None
    records: list[Record] = [record]
    stopped = None
    if existing is not None:  # the new registration is fenced: it may lead nothing until unfenced
        changes, stopped = _leave_partitions(image, broker_id, max_partitions=max_partitions)
        records.extend(changes)
    return ControllerResult(records, None, follow_up=_follow_up(broker_id, stopped))


def fence_broker(image: MetadataImage, broker_id: int, *, reason: str,
                 max_partitions: int | None = MAX_PARTITIONS_PER_DECISION) -> ControllerResult[None]:
    """BrokerRegistrationChange(fenced=True), then move ISRs and leaders away from the broker.

    Kafka writes the fence after the partition changes, in one event. Ours is bounded: the
    first batch carries the fence and at most `max_partitions` partitions, so the batches
    after it (the result's follow_up, `continue_leaving`) are computed from an image in which
    the broker is already fenced, and a new active controller finds the rest from the image
    alone (`brokers_left_behind`).
    """
    registration = image.broker(broker_id)
    if registration is None:
        raise ControllerApiError(ErrorCode.BROKER_ID_NOT_REGISTERED,
                                 f"Broker {broker_id} is not registered.", field="broker_id")
    changes, stopped = _leave_partitions(image, broker_id, max_partitions=max_partitions)
    records: list[Record] = []
    if not registration.fenced:
        records.append(BrokerRegistrationChange(broker_id, registration.broker_epoch, fenced=True))
    records.extend(changes)
    logger.info("Fencing broker %d (%s): %d partition change(s)%s", broker_id, reason, len(changes),
                f", more after {stopped[0]}-{stopped[1]} in later decisions" if stopped else "")
    return ControllerResult(records, None, follow_up=_follow_up(broker_id, stopped), splittable=True)


def fence_if_expired(image: MetadataImage, broker_id: int, *, heartbeats: BrokerHeartbeatManager,
                     now_ms: int, max_partitions: int | None = MAX_PARTITIONS_PER_DECISION) -> ControllerResult[None]:
    """The fence-expired-brokers pass's decision for the broker `next_expired` named: fence it,
    unless it heartbeated, was fenced or is gone since (nothing then). Kafka re-checks the
    session inside the decision the same way, as heartbeats race with the pass."""
    registration = image.broker(broker_id)
    if registration is None or registration.fenced or heartbeats.has_valid_session(broker_id, now_ms):
        return ControllerResult((), None)
    age = now_ms - (heartbeats.last_contact_ms(broker_id) or 0)
    return fence_broker(image, broker_id, reason=f"no heartbeat for {age} ms, session timeout "
                                                 f"{heartbeats.session_timeout_ms} ms",
                        max_partitions=max_partitions)


def unregister_broker(image: MetadataImage, broker_id: int, *,
                      heartbeats: BrokerHeartbeatManager | None = None,
                      max_partitions: int | None = MAX_PARTITIONS_PER_DECISION) -> ControllerResult[None]:
    """UnregisterBroker, then move ISRs and leaders away (at most `max_partitions` here, the rest
    as the follow_up, which continues for a broker no longer registered); drops its session."""
    registration = image.broker(broker_id)
    if registration is None:
        raise ControllerApiError(ErrorCode.BROKER_ID_NOT_REGISTERED,
                                 f"Broker ID {broker_id} is not currently registered", field="broker_id")
    changes, stopped = _leave_partitions(image, broker_id, max_partitions=max_partitions)
    records: list[Record] = [UnregisterBroker(broker_id, registration.broker_epoch), *changes]
    if heartbeats is not None:
        heartbeats.remove(broker_id)
    return ControllerResult(records, None, follow_up=_follow_up(broker_id, stopped), splittable=True)


def continue_leaving(image: MetadataImage, broker_id: int, *, after: PartitionKey | None,
                     max_partitions: int | None = MAX_PARTITIONS_PER_DECISION,
                     leaders_only: bool = False,
                     max_leaderships: int | None = MAX_LEADERSHIPS_PER_DECISION) -> ControllerResult[int]:
    """The next batch of a fence, unregistration or controlled shutdown: `remove_from_isr` for
    the broker's partitions after `after` (None: from the first), at most `max_partitions`;
    only its leaderships when `leaders_only`, at most `max_leaderships` (then the ISR seats, as
    the follow-up).

    Nothing when the broker is active again (unfenced and not shutting down: a new incarnation
    that caught up belongs in its ISRs). The response is the number of partition changes.
    """
    registration = image.broker(broker_id)
    if registration is not None and registration.is_active:
        return ControllerResult((), 0)
    if leaders_only:
        changes, follow_up = _leave_leaders_first(image, broker_id, after=after, max_partitions=max_partitions,
                                                  max_leaderships=max_leaderships)
        return ControllerResult(changes, len(changes), follow_up=follow_up, splittable=True)
    changes, stopped = _leave_partitions(image, broker_id, after=after, max_partitions=max_partitions)
    return ControllerResult(changes, len(changes), follow_up=_follow_up(broker_id, stopped), splittable=True)


def leaving_after(image: MetadataImage, records: Sequence[Record], follow_up: LeaveFollowUp) -> ControllerResult[int]:
    """The batch `follow_up` names, computed from the image `records` leave when they commit
    right after `image` (offsets image.offset + 1 ..., as a splittable result's do): what
    `continue_leaving` returns on that committed image, since replay is deterministic. The shell
    computes it while `records` are still being committed (`quorum.controller_runtime`)."""
    after = apply(image, enumerate(records, start=image.offset + 1))
    return continue_leaving(after, follow_up.broker_id, after=follow_up.after, leaders_only=follow_up.leaders_only)


def brokers_left_behind(image: MetadataImage) -> list[int]:
    """Brokers that are not active (fenced, shutting down or unregistered) yet still lead a
    partition or sit in an ISR beside other members: what a fence, shutdown or unregistration
    cut short by a controller failover left to do. A new active controller continues them
    (`continue_leaving` from the first partition). A fenced broker alone in an ISR is no such
    leftover: KIP-841 keeps the last member there on purpose."""
    found: set[int] = set()
    brokers = image.cluster.brokers

    def inactive(broker_id: int) -> bool:
        registration = brokers.get(broker_id)
        return registration is None or not registration.is_active

    for topic in image.topics.by_id.values():  # one pass over every partition
        for partition in topic.partitions.values():
            if partition.has_leader and inactive(partition.leader):
                found.add(partition.leader)
            if len(partition.isr) > 1:
                found.update(b for b in partition.isr if inactive(b))
    return sorted(found)


def _leads_partitions(image: MetadataImage, broker_id: int, heartbeats: BrokerHeartbeatManager) -> bool:
    """Whether the broker leads a partition. A broker in controlled shutdown is asked on every
    heartbeat (every 50 ms) while its leaderships move away in (topic, partition) order, and a
    scan from the first partition cost 30 ms at 100,000: the walk starts at the first partition
    it led last time (`BrokerHeartbeatManager.leader_hint`), so all the heartbeats of one
    shutdown walk the partitions about once. No leader found from there: one scan from the start
    decides (a partition before the hint may have elected it before it was shutting down), and
    the answer is kept while it stays in controlled shutdown: no election picks a broker that
    is not active (`BrokerRegistration.is_active`)."""
    if heartbeats.led_nothing(broker_id):
        return False  # in controlled shutdown it is never elected (not active): it stays so
    hint = heartbeats.leader_hint(broker_id)
    found = _first_led(image, broker_id, from_key=hint)
    if found is None and hint is not None:
        found = _first_led(image, broker_id, from_key=None)
    heartbeats.set_leader_hint(broker_id, found)
    return found is not None


def _first_led(image: MetadataImage, broker_id: int, *, from_key: PartitionKey | None) -> PartitionKey | None:
    """The first partition at or after `from_key`, in (topic, partition) order, that the broker leads."""
    names = sorted(image.topics.by_name)
    for name in names[bisect.bisect_left(names, from_key[0]) if from_key is not None else 0:]:
        partitions = image.topics.by_name[name].partitions
        ids = sorted(partitions)
        start = bisect.bisect_left(ids, from_key[1]) if from_key is not None and name == from_key[0] else 0
        for partition_id in ids[start:]:  # bounded by the topic's partitions
            if partitions[partition_id].leader == broker_id:
                return name, partition_id
    return None


def _active_brokers_caught_up(image: MetadataImage, broker_id: int, heartbeats: BrokerHeartbeatManager) -> bool:
    """Every active broker (not this one) replayed up to this broker's controlled-shutdown offset."""
    offsets = [heartbeats.metadata_offset(other) for other, registration in sorted(image.cluster.brokers.items())
               if other != broker_id and registration.is_active]
    return every_active_broker_caught_up(offsets, heartbeats.controlled_shutdown_offset(broker_id))


def process_heartbeat(image: MetadataImage, *, broker_id: int, broker_epoch: int, metadata_offset: int,
                      want_fence: bool, want_shutdown: bool, now_ms: int,
                      heartbeats: BrokerHeartbeatManager,
                      max_partitions: int | None = MAX_PARTITIONS_PER_DECISION,
                      max_leaderships: int | None = MAX_LEADERSHIPS_PER_DECISION,
                      ) -> ControllerResult[HeartbeatReply]:
    """BrokerHeartbeat (Kafka's processBrokerHeartbeat): touch the session, compute the next
    control state, write what that transition takes in one batch, reply from the next state.

    A transition that leaves partitions (fenced, controlled shutdown, shut down now) writes
    the registration change first and at most `max_partitions` partitions (a controlled
    shutdown: at most `max_leaderships` leaderships); the rest is the result's follow_up (see
    `fence_broker`). The broker stays in CONTROLLED_SHUTDOWN while it
    still leads any, and the shell raises its controlled-shutdown offset past every later batch.

    The controlled-shutdown offset is the offset the batch will end at: decisions run one at
    a time on the committed image (quorum.active_controller), and a batch that leaves
    partitions is splittable (plain chunks, no transaction markers), so this batch's records
    take offsets image.offset + 1 .. image.offset + len(records) — Kafka's
    `writeOffset + records.size()`. With no records it is the committed offset.
    """
    registration = check_broker_epoch(image, broker_id, broker_epoch)
    heartbeats.touch(broker_id, now_ms, metadata_offset)
    is_caught_up = metadata_offset >= registration.broker_epoch
    # A broker whose partitions later batches still move away stays fenced until they are done.
    may_unfence = is_caught_up and not heartbeats.is_leaving(broker_id)
    states = calculate_next_broker_state(
        fenced=registration.fenced, in_controlled_shutdown=registration.in_controlled_shutdown,
        want_fence=want_fence, want_shutdown=want_shutdown, is_caught_up=may_unfence,
        leads_partitions=lambda: _leads_partitions(image, broker_id, heartbeats),
        active_brokers_caught_up=lambda: _active_brokers_caught_up(image, broker_id, heartbeats))
    plan = records_plan(states, in_controlled_shutdown=registration.in_controlled_shutdown)
    change: list[Record] = []
    if plan.registration_change is not None and not (plan.set_fenced and registration.fenced):
        # (already fenced: FENCED -> SHUTDOWN_NOW writes no second fence, as Kafka and fence_broker)
        change.append(BrokerRegistrationChange(broker_id, broker_epoch, fenced=plan.set_fenced,
                                               in_controlled_shutdown=plan.set_in_controlled_shutdown))
    partitions: list[Record] = []
    follow_up: FollowUp | None = None
    if plan.leave_partitions and states.next is CONTROLLED_SHUTDOWN:  # leaderships first: it waits for those
        leaving, follow_up = _leave_leaders_first(image, broker_id, after=None, max_partitions=max_partitions,
                                                  max_leaderships=max_leaderships)
        partitions.extend(leaving)
    elif plan.leave_partitions:  # fenced: everything in one pass
        leaving, stopped = _leave_partitions(image, broker_id, max_partitions=max_partitions)
        follow_up = _follow_up(broker_id, stopped)
        partitions.extend(leaving)
    if plan.elect_leaderless:  # (an unfence: never with leave_partitions, so one follow-up at most)
        elected, follow_up = _elect_for_unfenced(image, broker_id, max_partitions=max_partitions)
        partitions.extend(elected)
    # Leaving partitions is bounded (see fence_broker), so its registration change goes first
    # even where records_plan keeps Kafka's fence-last order.
    first = plan.registration_change is RegistrationChangeOrder.FIRST or plan.leave_partitions
    records = [*change, *partitions] if first else [*partitions, *change]
    if plan.remember_controlled_shutdown_offset:
        heartbeats.maybe_update_controlled_shutdown_offset(broker_id, image.offset + len(records))
    elif states.next is not CONTROLLED_SHUTDOWN:
        heartbeats.clear_controlled_shutdown_offset(broker_id)
    if states.changed:
        logger.info("Broker %d goes from %s to %s (want_fence=%s, want_shutdown=%s): %d record(s)",
                    broker_id, states.current.name, states.next.name, want_fence, want_shutdown, len(records))
    reply = HeartbeatReply(is_caught_up, states.next.fenced, should_shut_down=states.next.should_shut_down)
    # Moves away go as plain chunks (registration change first; see ControllerResult.splittable),
    # which spares each batch a transaction's two serial commit rounds; other transitions are
    # small and stay one append.
    return ControllerResult(records, reply, follow_up=follow_up, splittable=plan.leave_partitions)
