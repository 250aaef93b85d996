"""Topic admin: CreateTopics, DeleteTopics, CreatePartitions (forwarded to the controllers
through the TopicAdmin) and DescribeConfigs (answered here from the metadata image and
this broker's config, as Kafka's ConfigHelper does)."""

from __future__ import annotations

import logging
from typing import Final

from broker.handlers.configs import describe_broker
from broker.handlers.context import UNKNOWN_SERVER_ERROR, BrokerContext, ClientInfo
from broker.topic_admin import AdminResult
from common.errors import ErrorCode
from common.protocol import admin
from common.protocol import describe_configs as dc
from common.topic_config import DescribedConfig, describe_topic_configs
from metadata.records import ConfigResourceType
from metadata.topic_name import topic_name_error

log = logging.getLogger(__name__)

INVALID_REQUEST: Final = int(ErrorCode.INVALID_REQUEST)
NO_CONTROLLER: Final = "this broker has no controller to send topic admin requests to"


async def handle_create_topics(ctx: BrokerContext, req: admin.CreateTopicsRequest,
                               version: int, client: ClientInfo) -> admin.CreateTopicsResponse:
    results = []
    for t in req.topics:  # one at a time: the controller commits each
        code, message = await _create_one(ctx, t, req.validate_only)
        results.append(admin.CreatableTopicResult(t.name, code, message))
    return admin.CreateTopicsResponse(0, tuple(results))


async def _create_one(ctx: BrokerContext, t: admin.CreatableTopic, validate_only: bool) -> AdminResult:
    if ctx.topic_admin is None:
        return UNKNOWN_SERVER_ERROR, NO_CONTROLLER
    if validate_only:
        return INVALID_REQUEST, "validate_only is not supported by tidelog"
    if t.assignments:
        return INVALID_REQUEST, "manual replica assignments are not supported by tidelog"
    configs = {c.name: c.value for c in t.configs if c.value is not None}
    return await ctx.topic_admin.create_topic(
        t.name, t.num_partitions if t.num_partitions > 0 else None,
        t.replication_factor if t.replication_factor > 0 else None, configs)


async def handle_delete_topics(ctx: BrokerContext, req: admin.DeleteTopicsRequest,
                               version: int, client: ClientInfo) -> admin.DeleteTopicsResponse:
    results = []
    for name in req.topic_names:
        if ctx.topic_admin is None:
            code = UNKNOWN_SERVER_ERROR
        else:
            code, message = await ctx.topic_admin.delete_topic(name)
            if code:
                log.info("DeleteTopics %s: error %d: %s", name, code, message)
        results.append(admin.DeletableTopicResult(name, code))
    return admin.DeleteTopicsResponse(0, tuple(results))


async def handle_create_partitions(ctx: BrokerContext, req: admin.CreatePartitionsRequest,
                                   version: int, client: ClientInfo) -> admin.CreatePartitionsResponse:
    results = []
    for t in req.topics:
        message: str | None
        if ctx.topic_admin is None:
            code, message = UNKNOWN_SERVER_ERROR, "no controller to send the request to"
        elif req.validate_only or t.assignments is not None:
            code, message = INVALID_REQUEST, "validate_only and manual assignments are not supported"
        else:
            code, message = await ctx.topic_admin.create_partitions(t.name, t.count)
        results.append(admin.CreatePartitionsTopicResult(t.name, code, message))
    return admin.CreatePartitionsResponse(0, tuple(results))


async def handle_describe_configs(ctx: BrokerContext, req: dc.DescribeConfigsRequest,
                                  version: int, client: ClientInfo) -> dc.DescribeConfigsResponse:
    image = ctx.image()
    results = []
    for res in req.resources:
        if res.resource_type == dc.RESOURCE_TYPE_BROKER:
            results.append(describe_broker(ctx, res, req))
            continue
        if res.resource_type != dc.RESOURCE_TYPE_TOPIC:
            results.append(dc.DescribeConfigsResult(int(ErrorCode.INVALID_REQUEST), f"resource type "
                           f"{res.resource_type} has no configs here", res.resource_type, res.resource_name, ()))
            continue
        invalid = topic_name_error(res.resource_name)
        if invalid is not None:  # Kafka's Topic.validate comes first
            results.append(dc.DescribeConfigsResult(
                int(ErrorCode.INVALID_TOPIC_EXCEPTION), invalid, res.resource_type, res.resource_name, ()))
            continue
        if image.topic(res.resource_name) is None:
            results.append(dc.DescribeConfigsResult(
                int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), f"topic {res.resource_name!r} does not exist",
                res.resource_type, res.resource_name, ()))
            continue
        overrides = image.config(ConfigResourceType.TOPIC, res.resource_name)
        described = describe_topic_configs(ctx.topic_defaults, overrides, res.configuration_keys)
        results.append(dc.DescribeConfigsResult(
            0, None, res.resource_type, res.resource_name,
            tuple(_entry(d, req) for d in described)))
    return dc.DescribeConfigsResponse(0, tuple(results))


def _entry(described: DescribedConfig, req: dc.DescribeConfigsRequest) -> dc.DescribeConfigsResourceResult:
    synonyms = tuple(dc.DescribeConfigsSynonym(s.name, s.value, int(s.source))
                     for s in described.synonyms) if req.include_synonyms else ()
    return dc.DescribeConfigsResourceResult(
        described.name, described.value, False, int(described.source), False, synonyms,
        described.config_type, described.documentation if req.include_documentation else None)
