"""Topic admin: CreateTopics, DeleteTopics, CreatePartitions, forwarded to the controllers
through the TopicAdmin (validate_only and manual assignments included) and answered once this
broker's own image holds the committed change: read-your-writes (`await_applied`, which the
config writes of `broker.handlers.configs` use too).

DeleteTopics v6 names topics by name or by topic id: `plan_deletions` resolves ids against this
broker's image and refuses what Kafka's ControllerApis.deleteTopics refuses (both or neither
given, duplicates, an unknown id) before anything is sent to the controllers. Every refusal is
logged at INFO, once per client and reason (`broker.refusal_log`)."""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final

from broker.handlers.context import UNKNOWN_SERVER_ERROR, BrokerContext, ClientInfo
from broker.topic_admin import UNSET, AdminReply, resolve_topic_sizes
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol.metadata import wire_topic_id
from common.topic_config import describe_topic_configs
from common.units import SECONDS
from metadata.image import MetadataImage

log = logging.getLogger(__name__)

INVALID_REQUEST: Final = int(ErrorCode.INVALID_REQUEST)
UNKNOWN_TOPIC_ID: Final = int(ErrorCode.UNKNOWN_TOPIC_ID)
ZERO_UUID: Final = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID: "no topic id"
# Kafka's messages (ControllerApis.deleteTopics; Errors.UNKNOWN_TOPIC_ID's default message)
NEITHER_NAME_NOR_ID: Final = "Neither topic name nor id were specified."
BOTH_NAME_AND_ID: Final = "You may not specify both topic name and topic id."
DUPLICATE_NAME: Final = "Duplicate topic name."
DUPLICATE_ID: Final = "Duplicate topic id."
NAME_OF_GIVEN_ID: Final = "The provided topic name maps to an ID that was already supplied."
UNKNOWN_ID: Final = "This server does not host this topic ID."
REQUEST_TIMED_OUT: Final = int(ErrorCode.REQUEST_TIMED_OUT)
NO_CONTROLLER: Final = "this broker has no controller to send topic admin requests to"
# How long a write with timeout_ms <= 0 still waits for this broker's image: Kafka answers such a
# request without waiting for propagation, but a client reading right after should see its write.
DEFAULT_APPLY_WAIT: Final = 5 * SECONDS
MAX_APPLY_WAIT: Final = 60 * SECONDS


async def await_applied(ctx: BrokerContext, replies: list[AdminReply], timeout_ms: int) -> list[AdminReply]:
    """Wait (bounded) until this broker's image holds every committed change; a change it does not
    hold within timeout_ms answers REQUEST_TIMED_OUT, as Kafka's DelayedCreatePartitions does."""
    offsets = [r.metadata_offset for r in replies if r.error_code == 0 and r.metadata_offset is not None]
    if not offsets or ctx.applied_offsets is None:
        return replies
    timeout = min(timeout_ms / 1000, MAX_APPLY_WAIT) if timeout_ms > 0 else DEFAULT_APPLY_WAIT
    if await ctx.applied_offsets.wait_for(max(offsets), timeout) or timeout_ms <= 0:
        return replies
    applied = ctx.image().offset
    log.warning("Broker %d: a topic write committed at metadata offset %d is not applied here within "
                "timeout_ms=%d (applied offset %d)", ctx.broker_id, max(offsets), timeout_ms, applied)
    return [AdminReply(REQUEST_TIMED_OUT, f"committed at metadata offset {r.metadata_offset}, but broker "
                       f"{ctx.broker_id} had not applied it within timeout_ms={timeout_ms}")
            if r.error_code == 0 and r.metadata_offset is not None and r.metadata_offset > applied else r
            for r in replies]


def note_refusals(ctx: BrokerContext, client: ClientInfo, api: str,
                  answers: Iterable[tuple[int, str | None]]) -> None:
    """Each refused part of an admin request in the broker log (`broker.refusal_log`: once per
    client and reason), so an operator sees why a tool's change did not happen."""
    for error_code, message in answers:
        if error_code:
            ctx.refusals.refused(client, api, error_code, message)


async def handle_create_topics(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's CreateTopicsRequest of `version`; the answer that version's response."""
    m = messages.response_module(ApiKey.CREATE_TOPICS, version)
    counts = Counter(t.name for t in req.topics)
    duplicates = sorted(name for name, n in counts.items() if n > 1)
    topics = [t for t in req.topics if counts[t.name] == 1]
    replies = [await _create_one(ctx, t, req.validate_only) for t in topics]  # the controller commits each
    replies = await await_applied(ctx, replies, messages.milliseconds(req.timeout))
    results = [_topic_result(ctx, m, t.name, r) for t, r in zip(topics, replies, strict=True)]
    for name in duplicates:  # Kafka answers each duplicated name once, creating nothing for it
        results.append(_failed(m, name, INVALID_REQUEST, f"Create topics request from client `{client.client_id}` "
                                f"contains multiple entries for the following topics: {','.join(duplicates)}"))
    note_refusals(ctx, client, "CreateTopics", ((r.error_code, r.error_message) for r in results))
    return m.CreateTopicsResponse(throttle_time=messages.NO_THROTTLE, topics=tuple(results))


def _failed(m: ModuleType, name: str, error_code: int, message: str | None) -> Any:
    """A refused topic: Kafka's defaults for the v5+ fields (-1, -1, an empty configs array)."""
    return messages.build(m.CreatableTopicResult, name=name, topic_id=None, error_code=messages.error_code(error_code),
                          error_message=message, topic_config_error_code=0, num_partitions=-1,
                          replication_factor=-1, configs=())


def _topic_result(ctx: BrokerContext, m: ModuleType, name: str, reply: AdminReply) -> Any:
    """Kafka's CreatableTopicResult: on success (and validate_only) the sizes and every config of
    the topic with its source (v5+) and its id (v7+; none for validate_only, which creates none);
    an error leaves them at their defaults. `build` drops what the version lacks."""
    if reply.error_code:
        return _failed(m, name, reply.error_code, reply.error_message)
    described = describe_topic_configs(ctx.topic_defaults, dict(reply.configs))
    configs = tuple(m.CreatableTopicConfigs(name=d.name, value=d.value, read_only=False,
                                            config_source=int(d.source), is_sensitive=False)
                    for d in described) if hasattr(m, "CreatableTopicConfigs") else ()
    topic_id = wire_topic_id(reply.topic_id) if reply.topic_id else None
    return messages.build(m.CreatableTopicResult, name=name, topic_id=topic_id, error_code=ErrorCode.NONE,
                          error_message=None, topic_config_error_code=0, num_partitions=reply.num_partitions,
                          replication_factor=reply.replication_factor, configs=configs)


async def _create_one(ctx: BrokerContext, t: Any, validate_only: bool) -> AdminReply:
    """One topic of kio's CreateTopicsRequest, sent to the controllers (or refused here)."""
    if ctx.topic_admin is None:
        return AdminReply(UNKNOWN_SERVER_ERROR, NO_CONTROLLER)
    configs = {c.name: c.value for c in t.configs if c.value is not None}
    if t.assignments:  # sizes come from the assignments; any other value is the rule's INVALID_REQUEST
        partitions = None if t.num_partitions == UNSET else t.num_partitions
        replication_factor = None if t.replication_factor == UNSET else t.replication_factor
    else:  # KIP-464: -1 takes this broker's num.partitions / default.replication.factor
        partitions, replication_factor = resolve_topic_sizes(
            ctx.image(), ctx.topic_sizes, t.name, t.num_partitions, t.replication_factor)
    return await ctx.topic_admin.create_topic(
        t.name, partitions, replication_factor, configs,
        assignments=tuple((a.partition_index, a.broker_ids) for a in t.assignments), validate_only=validate_only)


@dataclass(frozen=True, slots=True)
class Deletion:
    """One topic of a DeleteTopics request: sent to the controllers (error_code 0) or refused."""

    name: str | None
    topic_id: uuid.UUID = ZERO_UUID
    error_code: int = 0
    error_message: str | None = None


def plan_deletions(image: MetadataImage, names: Sequence[str], topics: Sequence[Any]) -> list[Deletion]:
    """Kafka's ControllerApis.deleteTopics before it deletes: names (v0-v5, or v6 entries with a zero
    id) and ids (v6 entries without a name) in request order, each duplicate answered once with
    INVALID_REQUEST, an id this broker does not know UNKNOWN_TOPIC_ID, a name that maps to an id also
    given INVALID_REQUEST. Names unknown here still go to the controllers, which answer for them.
    `topics` are v6's DeleteTopicState entries (kio reads a zero topic id as None)."""
    given = [*((name, ZERO_UUID) for name in names), *((t.name, t.topic_id or ZERO_UUID) for t in topics)]
    name_counts = Counter(name for name, topic_id in given if name is not None and topic_id == ZERO_UUID)
    id_counts = Counter(topic_id for name, topic_id in given if name is None and topic_id != ZERO_UUID)
    by_id = {wire_topic_id(t.topic_id): t.name for t in image.topics.by_id.values()} if id_counts else {}
    plan: list[Deletion] = []
    answered: set[str | uuid.UUID] = set()
    for name, topic_id in given:
        key: str | uuid.UUID = name if name is not None else topic_id
        if key in answered:
            continue
        if name is None and topic_id == ZERO_UUID:
            plan.append(Deletion(None, ZERO_UUID, INVALID_REQUEST, NEITHER_NAME_NOR_ID))
            continue  # Kafka answers every such entry
        if name is not None and topic_id != ZERO_UUID:
            plan.append(Deletion(name, topic_id, INVALID_REQUEST, BOTH_NAME_AND_ID))
            continue
        answered.add(key)
        if name is not None:
            topic = image.topic(name)
            known_id = wire_topic_id(topic.topic_id) if topic is not None else ZERO_UUID
            if name_counts[name] > 1:
                plan.append(Deletion(name, ZERO_UUID, INVALID_REQUEST, DUPLICATE_NAME))
            elif known_id != ZERO_UUID and known_id in id_counts:
                plan.append(Deletion(name, known_id, INVALID_REQUEST, NAME_OF_GIVEN_ID))
            else:
                plan.append(Deletion(name, known_id))
        elif id_counts[topic_id] > 1:
            plan.append(Deletion(None, topic_id, INVALID_REQUEST, DUPLICATE_ID))
        elif topic_id not in by_id:
            plan.append(Deletion(None, topic_id, UNKNOWN_TOPIC_ID, UNKNOWN_ID))
        else:
            plan.append(Deletion(by_id[topic_id], topic_id))
    return plan


async def handle_delete_topics(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's DeleteTopicsRequest of `version` (names to v5, DeleteTopicState from v6)."""
    plan = plan_deletions(ctx.image(), getattr(req, "topic_names", ()), getattr(req, "topics", ()))
    replies = []
    for deletion in plan:
        if deletion.error_code or deletion.name is None:
            reply = AdminReply(deletion.error_code, deletion.error_message)
        elif ctx.topic_admin is None:
            reply = AdminReply(UNKNOWN_SERVER_ERROR, NO_CONTROLLER)
        else:
            reply = await ctx.topic_admin.delete_topic(deletion.name)
        if reply.error_code:
            ctx.refusals.refused(client, "DeleteTopics", reply.error_code,
                                 f"topic {deletion.name} (id {deletion.topic_id}): {reply.error_message}")
        replies.append(reply)
    replies = await await_applied(ctx, replies, messages.milliseconds(req.timeout))
    m = messages.response_module(ApiKey.DELETE_TOPICS, version)
    return m.DeleteTopicsResponse(throttle_time=messages.NO_THROTTLE, responses=tuple(
        messages.build(m.DeletableTopicResult, name=d.name, error_code=messages.error_code(r.error_code),
                       error_message=r.error_message if r.error_code else None,
                       topic_id=None if d.topic_id == ZERO_UUID else d.topic_id)
        for d, r in zip(plan, replies, strict=True)))


async def handle_create_partitions(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's CreatePartitionsRequest of `version`."""
    replies = []
    counts = Counter(t.name for t in req.topics)
    for t in req.topics:
        if counts[t.name] > 1:  # Kafka's handleCreatePartitionsRequest: each duplicate refused, none grown
            replies.append(AdminReply(INVALID_REQUEST, "Duplicate topic in request."))
            continue
        if ctx.topic_admin is None:
            replies.append(AdminReply(UNKNOWN_SERVER_ERROR, NO_CONTROLLER))
            continue
        assignments = None if t.assignments is None else tuple(a.broker_ids for a in t.assignments)
        replies.append(await ctx.topic_admin.create_partitions(t.name, t.count, assignments=assignments,
                                                               validate_only=req.validate_only))
    replies = await await_applied(ctx, replies, messages.milliseconds(req.timeout))
    note_refusals(ctx, client, "CreatePartitions", ((r.error_code, r.error_message) for r in replies))
    m = messages.response_module(ApiKey.CREATE_PARTITIONS, version)
    return m.CreatePartitionsResponse(throttle_time=messages.NO_THROTTLE, results=tuple(
        m.CreatePartitionsTopicResult(name=t.name, error_code=messages.error_code(r.error_code),
                                      error_message=r.error_message)
        for t, r in zip(req.topics, replies, strict=True)))
