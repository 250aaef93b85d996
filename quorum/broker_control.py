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

Controlled shutdown (want_shutdown, in_controlled_shutdown, SHUTDOWN_NOW) belongs to the
`shutdown/` state machine and is deliberately not handled here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from metadata.codec import MetadataRecordError
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
from quorum.controller_result import ApiErrorCode, ControllerApiError, ControllerResult
from quorum.heartbeat_manager import BrokerHeartbeatManager
from quorum.topic_control import TopicElectionConfig, topic_election_config

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
        raise ControllerApiError(ApiErrorCode.BROKER_ID_NOT_REGISTERED,
                                 f"Broker {broker_id} is not registered.", field="broker_id")
    if registration.broker_epoch != broker_epoch:
        raise ControllerApiError(ApiErrorCode.STALE_BROKER_EPOCH,
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
) -> list[PartitionChange]:
    """`rule` applied to every `wanted` partition, in (topic, partition) order, with its
    topic's election settings."""
    out: list[PartitionChange] = []
    for name in sorted(image.topics.by_name):
        topic = image.topics.by_name[name]
        config = None
        for partition_id in sorted(topic.partitions):
            partition = topic.partitions[partition_id]
            if not wanted(partition):
                continue
            config = config or topic_election_config(image, name)
            change = rule(partition, config)
            if change is not None:
                out.append(change)
    return out


def _leave_partitions(image: MetadataImage, broker_id: int) -> list[PartitionChange]:
    """remove_from_isr for every partition the broker leads or is in the ISR of."""
    is_active = _is_active(image)
    return _partition_changes(
        image,
        lambda p: broker_id in p.isr or p.leader == broker_id,
        lambda p, config: remove_from_isr(
            p, broker_id, is_acceptable=is_active, unclean_allowed=config.unclean_allowed,
            elr_enabled=config.elr_enabled, min_insync_replicas=config.min_insync_replicas))


def _elect_for_unfenced(image: MetadataImage, broker_id: int) -> list[PartitionChange]:
    """Kafka's handleBrokerUnfenced: leaderless partitions the broker replicates may elect it."""
    is_active = _is_active(image)

    def acceptable(replica: int) -> bool:
        return replica == broker_id or is_active(replica)

    return _partition_changes(
        image,
        lambda p: not p.has_leader and broker_id in p.replicas,
        lambda p, config: elect_leader(
            p, is_acceptable=acceptable, unclean_allowed=config.unclean_allowed,
            elr_enabled=config.elr_enabled, min_insync_replicas=config.min_insync_replicas))


def register_broker(image: MetadataImage, *, broker_id: int, incarnation_id: str,
                    listeners: Iterable[Listener], rack: str | None, now_ms: int,
                    heartbeats: BrokerHeartbeatManager) -> ControllerResult[None]:
    """BrokerRegistration: RegisterBroker(fenced=True) first, then any ISR/leader moves it implies."""
    existing = image.broker(broker_id)
    if existing is not None and existing.incarnation_id != incarnation_id:
        heartbeats.begin_sessions(image, now_ms)
        if not existing.fenced and heartbeats.has_valid_session(broker_id, now_ms):
            raise ControllerApiError(
                ApiErrorCode.DUPLICATE_BROKER_REGISTRATION,
                f"Another broker is registered with broker id {broker_id} (incarnation "
                f"{existing.incarnation_id}) and its session has not expired.", field="broker_id")
        heartbeats.remove(broker_id)  # the old incarnation's session
    try:
        record = RegisterBroker(broker_id, incarnation_id, tuple(listeners), rack, fenced=True)
    except MetadataRecordError as exc:
        raise ControllerApiError(ApiErrorCode.INVALID_REQUEST, f"Bad broker registration: {exc}") from None
    records: list[Record] = [record]
    if existing is not None:  # the new registration is fenced: it may lead nothing until unfenced
        records.extend(_leave_partitions(image, broker_id))
    return ControllerResult(records, None)


def fence_broker(image: MetadataImage, broker_id: int, *, reason: str) -> ControllerResult[None]:
    """Move ISRs and leaders away from the broker, then BrokerRegistrationChange(fenced=True)."""
    registration = image.broker(broker_id)
    if registration is None:
        raise ControllerApiError(ApiErrorCode.BROKER_ID_NOT_REGISTERED,
                                 f"Broker {broker_id} is not registered.", field="broker_id")
    changes = _leave_partitions(image, broker_id)
    records: list[Record] = list(changes)
    if not registration.fenced:
        records.append(BrokerRegistrationChange(broker_id, registration.broker_epoch, fenced=True))
    logger.info("Fencing broker %d (%s): %d partition change(s)", broker_id, reason, len(changes))
    return ControllerResult(records, None)


def unregister_broker(image: MetadataImage, broker_id: int, *,
                      heartbeats: BrokerHeartbeatManager | None = None) -> ControllerResult[None]:
    """UnregisterBroker: move ISRs and leaders away, then remove the registration (and its session)."""
    registration = image.broker(broker_id)
    if registration is None:
        raise ControllerApiError(ApiErrorCode.BROKER_ID_NOT_REGISTERED,
                                 f"Broker ID {broker_id} is not currently registered", field="broker_id")
    records: list[Record] = list(_leave_partitions(image, broker_id))
    records.append(UnregisterBroker(broker_id, registration.broker_epoch))
    if heartbeats is not None:
        heartbeats.remove(broker_id)
    return ControllerResult(records, None)


def process_heartbeat(image: MetadataImage, *, broker_id: int, broker_epoch: int, metadata_offset: int,
                      want_fence: bool, want_shutdown: bool, now_ms: int,
                      heartbeats: BrokerHeartbeatManager) -> ControllerResult[HeartbeatReply]:
    """BrokerHeartbeat: touch the session, unfence a caught-up broker, fence one that asks to be.

    want_shutdown is ignored (should_shut_down is always False): controlled shutdown is the
    `shutdown/` state machine's, and a broker already in controlled shutdown is left to it.
    """
    registration = check_broker_epoch(image, broker_id, broker_epoch)
    heartbeats.touch(broker_id, now_ms, metadata_offset)
    is_caught_up = metadata_offset >= registration.broker_epoch
    records: list[Record] = []
    fenced = registration.fenced
    if registration.in_controlled_shutdown:
        pass  # owned by the controlled-shutdown state machine
    elif fenced and not want_fence and is_caught_up:
        records.append(BrokerRegistrationChange(broker_id, broker_epoch, fenced=False))
        records.extend(_elect_for_unfenced(image, broker_id))
        fenced = False
    elif not fenced and want_fence:
        records.extend(fence_broker(image, broker_id, reason="the broker asked to be fenced").records)
        fenced = True
    return ControllerResult(records, HeartbeatReply(is_caught_up, fenced, should_shut_down=False))
