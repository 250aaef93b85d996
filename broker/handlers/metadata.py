"""Metadata (with auto topic creation) and FindCoordinator.

Metadata answers from this broker's committed metadata image: unfenced brokers only, the
advertised listener for itself, and LEADER_NOT_AVAILABLE for a partition whose leader is not
alive; `__consumer_offsets` marked internal. FindCoordinator goes to `__consumer_offsets` for a group and to `__transaction_state` for a
transactional id (each an `InternalTopic`, broker.coordinator.location), which creates its topic
when first asked.
"""

from __future__ import annotations

from typing import Any, Final

from broker.coordinator.location import Found
from broker.handlers.context import BrokerContext, ClientInfo
from broker.listener_security import CLIENT_LISTENER
from common.errors import ErrorCode
from common.protocol import acls, messages
from common.protocol import metadata as md
from common.protocol.api_keys import ApiKey
from common.protocol.messages import FIND_COORDINATOR_BATCHED_VERSION, KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION
from groups.partitioner import GROUP_METADATA_TOPIC_NAME
from metadata.image import BrokerRegistration, MetadataImage, TopicImage
from metadata.topic_name import topic_name_error
from transactions.partitioner import TRANSACTION_STATE_TOPIC_NAME

LEADER_NOT_AVAILABLE: Final = int(ErrorCode.LEADER_NOT_AVAILABLE)
INTERNAL_TOPICS: Final = frozenset({GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME})
# v8+ "authorized operations", when asked for: everything supported, as Kafka without an
# authorizer answers.
CLUSTER_OPERATIONS_BITS: Final = acls.operations_bitfield(acls.CLUSTER_OPERATIONS)
TOPIC_OPERATIONS_BITS: Final = acls.operations_bitfield(acls.TOPIC_OPERATIONS)


async def handle_metadata(ctx: BrokerContext, req: md.MetadataRequest, version: int, client: ClientInfo) -> md.MetadataResponse:
    image = ctx.image()
    brokers = alive_brokers(ctx, image)
    alive = {b.node_id for b in brokers}
    operations = CLUSTER_OPERATIONS_BITS if req.include_cluster_authorized_operations \
        else md.AUTHORIZED_OPERATIONS_OMITTED
    return md.MetadataResponse(0, tuple(brokers), ctx.cluster_id, controller_id_for_clients(ctx, alive),
                               _topics(ctx, req, version, image, alive), operations)


def _topics(ctx: BrokerContext, req: md.MetadataRequest, version: int, image: MetadataImage,
            alive: set[int]) -> tuple[md.MetadataResponseTopic, ...]:
    if req.topics is not None and (req.topic_ids or req.null_names) and version < 12:
        # Kafka: "Topic IDs are not supported in requests for version 10/11", answered on
        # every topic named (KafkaApis throws InvalidRequestException before looking).
        return tuple(md.MetadataResponseTopic(int(ErrorCode.INVALID_REQUEST), name, False, ())
                     for name in req.topics)
    if req.topic_ids:  # by id (v12+): names are ignored and nothing is auto-created
        by_uuid = {md.wire_topic_id(t.topic_id): t for t in image.topics.by_id.values()}
        known = [by_uuid[i].name for i in dict.fromkeys(req.topic_ids) if i in by_uuid]
        unknown = [md.MetadataResponseTopic(int(ErrorCode.UNKNOWN_TOPIC_ID), None, False, (), topic_id=i)
                   for i in dict.fromkeys(req.topic_ids) if i not in by_uuid]
        return (*_named(ctx, req, image, alive, known, auto_create=False), *unknown)
    names = sorted(image.topics.by_name) if req.topics is None else list(dict.fromkeys(req.topics))
    auto_create = ctx.auto_topics is not None and req.allow_auto_topic_creation and req.topics is not None
    return _named(ctx, req, image, alive, names, auto_create=auto_create)


def _named(ctx: BrokerContext, req: md.MetadataRequest, image: MetadataImage, alive: set[int],
           names: list[str], *, auto_create: bool) -> tuple[md.MetadataResponseTopic, ...]:
    topics = []
    for name in names:
        topic = image.topic(name)
        if topic is not None:
            internal = name in INTERNAL_TOPICS  # as Kafka marks its internal topics
            operations = TOPIC_OPERATIONS_BITS if req.include_topic_authorized_operations \
                else md.AUTHORIZED_OPERATIONS_OMITTED
            topics.append(md.MetadataResponseTopic(0, name, internal, _partitions(image, topic, alive), operations,
                                                   md.wire_topic_id(topic.topic_id)))
        elif topic_name_error(name) is not None:
            topics.append(md.MetadataResponseTopic(int(ErrorCode.INVALID_TOPIC_EXCEPTION), name, False, ()))
        elif auto_create and ctx.auto_topics is not None:
            ctx.auto_topics.start(name)  # the client asks again while it is being created
            topics.append(md.MetadataResponseTopic(LEADER_NOT_AVAILABLE, name, False, ()))
        else:
            topics.append(md.MetadataResponseTopic(int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), name, False, ()))
    return tuple(topics)


def controller_id_for_clients(ctx: BrokerContext, alive: set[int]) -> int:
    """Clients cannot reach KRaft controllers: Kafka names an alive broker instead (this one)."""
    return ctx.broker_id if ctx.broker_id in alive else min(alive, default=-1)


def alive_brokers(ctx: BrokerContext, image: MetadataImage) -> list[md.MetadataResponseBroker]:
    """The unfenced brokers with an endpoint on this listener, by id."""
    out = []
    for broker_id in sorted(image.cluster.brokers):
        registration = image.cluster.brokers[broker_id]
        if registration.fenced:
            continue
        endpoint = _endpoint(ctx, registration)
        if endpoint is not None:
            out.append(md.MetadataResponseBroker(broker_id, endpoint[0], endpoint[1], registration.rack))
    return out


def _endpoint(ctx: BrokerContext, registration: BrokerRegistration,
              listener: str | None = None) -> tuple[str, int] | None:
    """The broker's address on `listener`, else on the listener of the request being handled
    (CLIENT_LISTENER), else on this broker's own listener_name."""
    name = listener or CLIENT_LISTENER.get() or ctx.listener_name
    if registration.broker_id == ctx.broker_id and (name is None or name == ctx.listener_name):
        return ctx.advertised_listener
    for advertised in registration.listeners:
        if name is None or advertised.name == name:
            return advertised.host, advertised.port
    return None


def _partitions(image: MetadataImage, topic: TopicImage, alive: set[int]) -> tuple[md.MetadataResponsePartition, ...]:
    out = []
    brokers = image.cluster.brokers
    for partition_id in sorted(topic.partitions):
        p = topic.partitions[partition_id]
        # Kafka's offline replicas: on a broker that is not alive, or whose replica failed there
        # (OfflineReplicas: it could not open that partition's log).
        offline = tuple(r for r in p.replicas if r not in alive
                        or brokers[r].is_replica_offline(p.topic_id, partition_id))
        error = 0 if p.has_leader and p.leader in alive else LEADER_NOT_AVAILABLE
        out.append(md.MetadataResponsePartition(error, partition_id, p.leader, p.leader_epoch,
                                                p.replicas, p.isr, offline))
    return tuple(out)


async def handle_find_coordinator(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's FindCoordinatorRequest of `version` (v0 names a group; v1+ a key type;
    v4+ many keys); the answer that version's response."""
    m = messages.response_module(ApiKey.FIND_COORDINATOR, version)
    image = ctx.image()
    key_type = getattr(req, "key_type", KEY_TYPE_GROUP)
    if version < FIND_COORDINATOR_BATCHED_VERSION:
        one = _find_one(ctx, client, req.key, key_type, image)
        return messages.build(m.FindCoordinatorResponse, throttle_time=messages.NO_THROTTLE,
                              error_code=one.error, error_message=one.message,
                              node_id=one.node_id, host=one.host, port=one.port)
    answers = []  # v4+: one answer per key, each found as a v3 request would be
    for key in dict.fromkeys(req.coordinator_keys):
        one = _find_one(ctx, client, key, key_type, image)
        answers.append(m.Coordinator(key=key, node_id=one.node_id, host=one.host, port=one.port,
                                     error_code=one.error, error_message=one.message))
    return m.FindCoordinatorResponse(throttle_time=messages.NO_THROTTLE, coordinators=tuple(answers))


def _find_one(ctx: BrokerContext, client: ClientInfo, key: str, key_type: int,
              image: MetadataImage) -> Found:
    """A group's coordinator (`ctx.offsets_topic`), a transactional id's (`ctx.transaction_topic`),
    INVALID_REQUEST for another key type (Kafka: "Unknown coordinator type")."""
    if key_type == KEY_TYPE_GROUP:
        return ctx.offsets_topic.find_coordinator(key, image)
    if key_type == KEY_TYPE_TRANSACTION:
        found = ctx.transaction_topic.find_coordinator(key, image)
        return Found(found.error, found.node_id, found.host, found.port, found.message)
    answer = Found(ErrorCode.INVALID_REQUEST, message=f"unknown coordinator key type {key_type}")
    _note_refusal(ctx, client, key_type, answer)
    return answer


def _note_refusal(ctx: BrokerContext, client: ClientInfo, key_type: int, answer: Found) -> None:
    """A coordinator of a type tidelog does not have (Kafka 4's share groups, key type 2): the
    broker log says why, once per client."""
    ctx.refusals.refused(client, f"FindCoordinator(key_type {key_type})", answer.error, answer.message)


def broker_endpoint(ctx: BrokerContext, image: MetadataImage, broker_id: int,
                    listener: str | None = None) -> tuple[str, int] | None:
    """Where `broker_id` is reached on `listener` (None: the listener of the request being
    handled); None when it is unknown or fenced."""
    registration = image.broker(broker_id)
    if registration is None or registration.fenced:
        return None
    return _endpoint(ctx, registration, listener)
