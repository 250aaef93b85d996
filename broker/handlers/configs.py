"""Configs over the Kafka protocol: DescribeConfigs (topics and brokers, answered here from the
metadata image and this broker's config, as Kafka's ConfigHelper does), and the config writes
AlterConfigs and IncrementalAlterConfigs.

DescribeConfigs of broker `id` lists every key the broker reads (common.dynamic_config's
`describe_broker_configs`): the effective value (a password's hidden), its source
(DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG or DEFAULT_CONFIG),
read-only unless the key is dynamic, the type, and on request the synonyms in Kafka's order and
documentation. The empty name is the cluster-wide dynamic defaults: only the keys set there.
Another broker's id is INVALID_REQUEST, as in Kafka: a broker describes only itself.

A change goes to the controllers' admin API (`PATCH /v1/topics/{name}/configs`, `PATCH
/v1/brokers/{id}/configs`, `PATCH /v1/brokers/configs` through the TopicAdmin) as the same body
an operator sends, so the controller applies Kafka's rules in one place (`quorum.config_control`),
with validate_only as a dry run of that rule. Each resource is answered on its own, as Kafka does;
each refused one is logged at INFO, once per client and reason (`broker.refusal_log`).
A BROKER change names this broker or "" (Kafka's ConfigAdminManager: a per-broker change goes to
that broker); other resource types are INVALID_REQUEST. The alter APIs are served on kio's
generated messages (`common.protocol.messages`).
"""

from __future__ import annotations

from collections import Counter
from types import ModuleType
from typing import Any

from broker.handlers.admin import await_applied, note_refusals
from broker.handlers.context import UNKNOWN_SERVER_ERROR, BrokerContext, ClientInfo
from broker.handlers.group_configs import alter_group, describe_group
from broker.topic_admin import AdminReply
from common.dynamic_config import describe_broker_configs
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol import describe_configs as dc
from common.topic_config import DescribedConfig, describe_topic_configs
from metadata.records import ConfigResourceType
from metadata.topic_name import topic_name_error

NO_CONTROLLER = "this broker has no controller to send config changes to"
OP_NAMES = {0: "SET", 1: "DELETE", 2: "APPEND", 3: "SUBTRACT"}
DELETE_OP = 1


def describe_broker(ctx: BrokerContext, m: ModuleType, resource: Any, req: Any) -> Any:
    """One BROKER resource of a DescribeConfigs request (see the module doc); `m` is the
    response module of the version answered."""
    def result(code: ErrorCode, message: str | None, configs: tuple[Any, ...] = ()) -> Any:
        return _result(m, resource, code, message, configs)

    name = resource.resource_name
    if name not in ("", str(ctx.broker_id)):
        return result(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {ctx.broker_id} or empty "
                                                 f"string, but received {name}")
    dynamic = ctx.dynamic_config
    described = describe_broker_configs(dynamic.static, dynamic.layers, per_broker=name != "",
                                        keys=resource.configuration_keys)
    return result(ErrorCode.NONE, None, tuple(_entry(m, d, req) for d in described))


def _result(m: ModuleType, resource: Any, code: ErrorCode, message: str | None, configs: tuple[Any, ...]) -> Any:
    return m.DescribeConfigsResult(error_code=code, error_message=message, resource_type=resource.resource_type,
                                   resource_name=resource.resource_name, configs=configs)


async def handle_alter_configs(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's AlterConfigsRequest of `version`; the answer its response."""
    replies = await _answer(ctx, req, client, incremental=False)
    m = messages.response_module(ApiKey.ALTER_CONFIGS, version)
    return m.AlterConfigsResponse(throttle_time=messages.NO_THROTTLE, responses=_responses(m, req, replies))


async def handle_incremental_alter_configs(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's IncrementalAlterConfigsRequest of `version`; the answer its response."""
    replies = await _answer(ctx, req, client, incremental=True)
    m = messages.response_module(ApiKey.INCREMENTAL_ALTER_CONFIGS, version)
    return m.IncrementalAlterConfigsResponse(throttle_time=messages.NO_THROTTLE,
                                             responses=_responses(m, req, replies))


def _responses(m: ModuleType, req: Any, replies: list[AdminReply]) -> tuple[Any, ...]:
    return tuple(m.AlterConfigsResourceResponse(
        error_code=messages.error_code(reply.error_code), error_message=reply.error_message,
        resource_type=resource.resource_type, resource_name=resource.resource_name)
        for resource, reply in zip(req.resources, replies, strict=True))


def _kind(resource: Any) -> str:
    try:
        return ConfigResourceType(resource.resource_type).name
    except ValueError:
        return f"resource type {resource.resource_type}"


async def _answer(ctx: BrokerContext, req: Any, client: ClientInfo, *, incremental: bool) -> list[AdminReply]:
    """One reply per resource of an AlterConfigs or IncrementalAlterConfigs request (kio's:
    a resource has resource_type, resource_name and configs; an incremental config entry
    also its config_operation)."""
    seen = Counter((r.resource_type, r.resource_name) for r in req.resources)
    replies = [await _alter_one(ctx, resource, req.validate_only, incremental)  # the controller commits each
               if seen[resource.resource_type, resource.resource_name] == 1
               else AdminReply(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
               for resource in req.resources]
    replies = await await_applied(ctx, replies, 0)  # read-your-writes: a DescribeConfigs here sees them
    api = "IncrementalAlterConfigs" if incremental else "AlterConfigs"
    note_refusals(ctx, client, api, ((reply.error_code, f"{_kind(resource)} {resource.resource_name!r}: "
                                      f"{reply.error_message}") for resource, reply in zip(req.resources, replies)))
    return replies


def _body(resource: Any, validate_only: bool, incremental: bool) -> dict[str, Any]:
    if incremental:
        ops = [{"name": c.name, "op": OP_NAMES.get(c.config_operation, str(c.config_operation)),
                "value": c.value} for c in resource.configs]
        return {"ops": ops, "validate_only": validate_only}
    return {"replace": {c.name: c.value for c in resource.configs if c.value is not None},
            "validate_only": validate_only}


def _null_values(resource: Any, incremental: bool) -> list[str]:
    """Kafka's preprocess: a null value is a DELETE's only (AlterConfigs has none)."""
    return [c.name for c in resource.configs
            if c.value is None and not (incremental and c.config_operation == DELETE_OP)]


async def _alter_one(ctx: BrokerContext, resource: Any, validate_only: bool,
                     incremental: bool) -> AdminReply:
    kind = resource.resource_type
    nulls = _null_values(resource, incremental)
    if nulls:
        return AdminReply(ErrorCode.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls))
    if kind == ConfigResourceType.BROKER:
        return await _alter_broker(ctx, resource, validate_only, incremental)
    if kind == ConfigResourceType.GROUP:  # KIP-848's per-group configs: broker/handlers/group_configs.py
        return await alter_group(ctx, resource, validate_only, incremental, _body(resource, validate_only, incremental))
    if kind != ConfigResourceType.TOPIC:
        return AdminReply(ErrorCode.INVALID_REQUEST, f"resource type {kind} has no configs to alter")
    invalid = topic_name_error(resource.resource_name)
    if invalid is not None:
        return AdminReply(ErrorCode.INVALID_TOPIC_EXCEPTION, invalid)
    if incremental and not resource.configs:
        return AdminReply(ErrorCode.NONE)  # nothing to do, as Kafka answers an empty change
    if ctx.topic_admin is None:
        return AdminReply(UNKNOWN_SERVER_ERROR, NO_CONTROLLER)
    reply = await ctx.topic_admin.alter_configs(resource.resource_name, _body(resource, validate_only, incremental))
    # a dry run committed nothing: no offset to wait for
    return AdminReply(reply.error_code, reply.error_message) if validate_only else reply


async def _alter_broker(ctx: BrokerContext, resource: Any, validate_only: bool,
                        incremental: bool) -> AdminReply:
    """Kafka's ConfigAdminManager.preprocess for a BROKER resource, then the controller's rule."""
    name = resource.resource_name
    if name != "":
        if not (name.isascii() and name.isdigit()):
            return AdminReply(ErrorCode.INVALID_REQUEST, f"Node id must be an integer, but it is: {name}")
        if int(name) != ctx.broker_id:
            return AdminReply(ErrorCode.INVALID_REQUEST,
                              f"Unexpected broker id, expected {ctx.broker_id}, but received {name}")
    if incremental and not resource.configs:
        return AdminReply(ErrorCode.NONE)
    if ctx.topic_admin is None:
        return AdminReply(UNKNOWN_SERVER_ERROR, NO_CONTROLLER)
    reply = await ctx.topic_admin.alter_broker_configs(name, _body(resource, validate_only, incremental))
    return AdminReply(reply.error_code, reply.error_message) if validate_only else reply


async def handle_describe_configs(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's DescribeConfigsRequest of `dc.schema_version(version)` (v0 is read into
    v1's classes); the answer is that version's response."""
    m = messages.response_module(ApiKey.DESCRIBE_CONFIGS, dc.schema_version(version))
    image = ctx.image()
    ctx.dynamic_config.update(image)  # no-op once the follower applied it; the image this answer reads
    results = []
    for res in req.resources:
        if res.resource_type == dc.RESOURCE_TYPE_BROKER:
            results.append(describe_broker(ctx, m, res, req))
            continue
        if res.resource_type == ConfigResourceType.GROUP:
            results.append(describe_group(ctx, m, res, req))
            continue
        if res.resource_type != dc.RESOURCE_TYPE_TOPIC:
            results.append(_result(m, res, ErrorCode.INVALID_REQUEST,
                                   f"resource type {res.resource_type} has no configs here", ()))
            continue
        invalid = topic_name_error(res.resource_name)
        if invalid is not None:  # Kafka's Topic.validate comes first
            results.append(_result(m, res, ErrorCode.INVALID_TOPIC_EXCEPTION, invalid, ()))
            continue
        if image.topic(res.resource_name) is None:
            results.append(_result(m, res, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                   f"topic {res.resource_name!r} does not exist", ()))
            continue
        overrides = image.config(ConfigResourceType.TOPIC, res.resource_name)
        described = describe_topic_configs(ctx.topic_defaults, overrides, res.configuration_keys)
        results.append(_result(m, res, ErrorCode.NONE, None, tuple(_entry(m, d, req) for d in described)))
    return m.DescribeConfigsResponse(throttle_time=messages.NO_THROTTLE, results=tuple(results))


def _entry(m: ModuleType, described: DescribedConfig, req: Any) -> Any:
    """One config of a DescribeConfigs answer; v3's type and documentation are dropped
    before v3 (`build`), the documentation unless asked for."""
    synonyms = tuple(m.DescribeConfigsSynonym(name=s.name, value=s.value, source=int(s.source))
                     for s in described.synonyms) if req.include_synonyms else ()
    wants_documentation = getattr(req, "include_documentation", False)
    return messages.build(
        m.DescribeConfigsResourceResult, name=described.name, value=described.value,
        read_only=described.read_only, config_source=int(described.source), is_sensitive=described.sensitive,
        synonyms=synonyms, config_type=described.config_type,
        documentation=described.documentation if wants_documentation else None)
