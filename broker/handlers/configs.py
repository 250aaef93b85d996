"""Broker configs over the Kafka protocol (DescribeConfigs of a BROKER resource), and config
writes: AlterConfigs and IncrementalAlterConfigs.

DescribeConfigs of broker `id` lists every key the broker reads, as Kafka's ConfigHelper does:
the value (a password's hidden), STATIC_BROKER_CONFIG for a key its server.properties sets and
DEFAULT_CONFIG otherwise, read-only (no broker config is dynamic here), the type, and on
request the synonyms (the key itself) and documentation. The empty name means the cluster-wide
dynamic defaults: tidelog has none. Another broker's id is INVALID_REQUEST, as in Kafka: a
broker describes only itself.

A topic's change goes to the controllers' admin API (`PATCH /v1/topics/{name}/configs` through
the TopicAdmin) as the same body an operator sends, so the controller applies Kafka's rules in
one place (`quorum.config_control`), with validate_only as a dry run of that rule. Each
resource is answered on its own, as Kafka does.

Broker resources: every broker config is static in tidelog today (read from server.properties
at start), so a change to one is refused as Kafka refuses a read-only broker config
(INVALID_REQUEST "Cannot update these configs dynamically"); other resource types are
INVALID_REQUEST too.
"""

from __future__ import annotations

from typing import Any

from broker.handlers.context import BrokerContext, ClientInfo
from common.config import ConfigType
from common.errors import ErrorCode
from common.protocol import alter_configs as ac
from common.protocol import describe_configs as dc
from common.topic_config import CONFIG_TYPE_IDS, UNKNOWN_CONFIG_TYPE, ConfigSource, config_string
from metadata.records import ConfigResourceType
from metadata.topic_name import topic_name_error

NO_CONTROLLER = "this broker has no controller to send config changes to"
OP_NAMES = {0: "SET", 1: "DELETE", 2: "APPEND", 3: "SUBTRACT"}


def describe_broker(ctx: BrokerContext, resource: dc.DescribeConfigsResource,
                    req: dc.DescribeConfigsRequest) -> dc.DescribeConfigsResult:
    """One BROKER resource of a DescribeConfigs request (see the module doc)."""
    def result(code: ErrorCode, message: str | None,
               configs: tuple[dc.DescribeConfigsResourceResult, ...] = ()) -> dc.DescribeConfigsResult:
        return dc.DescribeConfigsResult(int(code), message, resource.resource_type, resource.resource_name, configs)

    if resource.resource_name == "":
        return result(ErrorCode.NONE, None)
    if resource.resource_name != str(ctx.broker_id):
        return result(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {ctx.broker_id} or empty "
                                                 f"string, but received {resource.resource_name}")
    config = ctx.config
    wanted = None if resource.configuration_keys is None else set(resource.configuration_keys)
    entries = []
    for name in sorted(config.definitions):
        if wanted is not None and name not in wanted:
            continue
        key = config.definitions[name]
        sensitive = key.type is ConfigType.PASSWORD
        raw = config[name]
        value = None if sensitive or raw is None else config_string(raw)
        source = ConfigSource.STATIC_BROKER_CONFIG if name in config.originals else ConfigSource.DEFAULT_CONFIG
        synonyms = (dc.DescribeConfigsSynonym(name, value, int(source)),) if req.include_synonyms else ()
        entries.append(dc.DescribeConfigsResourceResult(
            name, value, True, int(source), sensitive, synonyms, CONFIG_TYPE_IDS.get(key.type, UNKNOWN_CONFIG_TYPE),
            key.doc if req.include_documentation else None))
    return result(ErrorCode.NONE, None, tuple(entries))


async def handle_alter_configs(ctx: BrokerContext, req: ac.AlterConfigsRequest, version: int,
                               client: ClientInfo) -> ac.AlterConfigsResponse:
    return await _answer(ctx, req, incremental=False)


async def handle_incremental_alter_configs(ctx: BrokerContext, req: ac.AlterConfigsRequest, version: int,
                                           client: ClientInfo) -> ac.AlterConfigsResponse:
    return await _answer(ctx, req, incremental=True)


async def _answer(ctx: BrokerContext, req: ac.AlterConfigsRequest, *, incremental: bool) -> ac.AlterConfigsResponse:
    responses = []
    for resource in req.resources:  # one at a time: the controller commits each
        code, message = await _alter_one(ctx, resource, req.validate_only, incremental)
        responses.append(ac.AlterConfigsResourceResponse(int(code), message, resource.resource_type,
                                                         resource.resource_name))
    return ac.AlterConfigsResponse(0, tuple(responses))


def _body(resource: ac.AlterConfigsResource, validate_only: bool, incremental: bool) -> dict[str, Any]:
    if incremental:
        ops = [{"name": c.name, "op": OP_NAMES.get(c.config_operation, str(c.config_operation)),
                "value": c.value} for c in resource.configs]
        return {"ops": ops, "validate_only": validate_only}
    return {"replace": {c.name: c.value for c in resource.configs if c.value is not None},
            "validate_only": validate_only}


async def _alter_one(ctx: BrokerContext, resource: ac.AlterConfigsResource, validate_only: bool,
                     incremental: bool) -> tuple[int, str | None]:
    kind = resource.resource_type
    if kind == ConfigResourceType.BROKER:
        names = ", ".join(sorted(c.name for c in resource.configs))
        return ErrorCode.INVALID_REQUEST, (f"Cannot update these configs dynamically: {names} (every broker "
                                           "config is static in tidelog: set it in server.properties)")
    if kind != ConfigResourceType.TOPIC:
        return ErrorCode.INVALID_REQUEST, f"resource type {kind} has no configs to alter"
    invalid = topic_name_error(resource.resource_name)
    if invalid is not None:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, invalid
    if incremental and not resource.configs:
        return ErrorCode.NONE, None  # nothing to do, as Kafka answers an empty change
    if ctx.topic_admin is None:
        return ErrorCode.UNKNOWN_SERVER_ERROR, NO_CONTROLLER
    return await ctx.topic_admin.alter_configs(resource.resource_name, _body(resource, validate_only, incremental))
