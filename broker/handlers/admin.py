"""Topic admin: CreateTopics, DeleteTopics, CreatePartitions, forwarded to the controllers
through the TopicAdmin (validate_only and manual assignments included) and answered once this
broker's own image holds the committed change: read-your-writes (`await_applied`, which the
config writes of `broker.handlers.configs` use too)."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Final

from broker.handlers.context import UNKNOWN_SERVER_ERROR, BrokerContext, ClientInfo
from broker.topic_admin import UNSET, AdminReply, resolve_topic_sizes
from common.errors import ErrorCode
from common.protocol import admin
from common.topic_config import describe_topic_configs
from common.units import SECONDS
from metadata.topic_name import topic_name_error

log = logging.getLogger(__name__)

INVALID_REQUEST: Final = int(ErrorCode.INVALID_REQUEST)
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


async def handle_create_topics(ctx: BrokerContext, req: admin.CreateTopicsRequest,
                               version: int, client: ClientInfo) -> admin.CreateTopicsResponse:
    counts = Counter(t.name for t in req.topics)
    duplicates = sorted(name for name, n in counts.items() if n > 1)
    topics = [t for t in req.topics if counts[t.name] == 1]
    replies = [await _create_one(ctx, t, req.validate_only) for t in topics]  # the controller commits each
    replies = await await_applied(ctx, replies, req.timeout_ms)
    results = [_topic_result(ctx, t.name, r) for t, r in zip(topics, replies, strict=True)]
    for name in duplicates:  # Kafka answers each duplicated name once, creating nothing for it
        results.append(admin.CreatableTopicResult(
            name, INVALID_REQUEST, f"Create topics request from client `{client.client_id}` contains multiple "
            f"entries for the following topics: {','.join(duplicates)}"))
    return admin.CreateTopicsResponse(0, tuple(results))


def _topic_result(ctx: BrokerContext, name: str, reply: AdminReply) -> admin.CreatableTopicResult:
    if reply.error_code:
        return admin.CreatableTopicResult(name, reply.error_code, reply.error_message)
    described = describe_topic_configs(ctx.topic_defaults, dict(reply.configs))
    configs = tuple(admin.CreatableTopicConfigs(d.name, d.value, False, int(d.source), False) for d in described)
    return admin.CreatableTopicResult(name, 0, None, reply.num_partitions, reply.replication_factor, configs)


async def _create_one(ctx: BrokerContext, t: admin.CreatableTopic, validate_only: bool) -> AdminReply:
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


async def handle_delete_topics(ctx: BrokerContext, req: admin.DeleteTopicsRequest,
                               version: int, client: ClientInfo) -> admin.DeleteTopicsResponse:
    replies = []
    for name in req.topic_names:
        if ctx.topic_admin is None:
            reply = AdminReply(UNKNOWN_SERVER_ERROR, NO_CONTROLLER)
        else:
            reply = await ctx.topic_admin.delete_topic(name)
            if reply.error_code:
                log.info("DeleteTopics %s: error %d: %s", name, reply.error_code, reply.error_message)
        replies.append(reply)
    replies = await await_applied(ctx, replies, req.timeout_ms)
    return admin.DeleteTopicsResponse(0, tuple(admin.DeletableTopicResult(name, r.error_code)
                                               for name, r in zip(req.topic_names, replies, strict=True)))


async def handle_create_partitions(ctx: BrokerContext, req: admin.CreatePartitionsRequest,
                                   version: int, client: ClientInfo) -> admin.CreatePartitionsResponse:
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
    replies = await await_applied(ctx, replies, req.timeout_ms)
    return admin.CreatePartitionsResponse(0, tuple(
        admin.CreatePartitionsTopicResult(t.name, r.error_code, r.error_message)
        for t, r in zip(req.topics, replies, strict=True)))
