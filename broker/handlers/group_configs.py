"""DescribeConfigs and Incremental/AlterConfigs of GROUP resources (KIP-848's per-group configs).

A change goes to the controllers (`PATCH /v1/groups/{id}/configs`, whose rule checks the keys),
as the other config writes do; DescribeConfigs answers from this broker's metadata image: the
group's own values (GROUP_CONFIG) and, for the keys it has not set, the broker's
group.consumer.* or group.share.* value (DEFAULT_CONFIG), as Kafka's describe of a group resource shows them.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Final

from broker.handlers.context import BrokerContext
from broker.topic_admin import AdminReply
from common.errors import ErrorCode
from common.protocol import messages
from groups.group_configs import (
    CONSUMER_HEARTBEAT_INTERVAL_MS,
    CONSUMER_SESSION_TIMEOUT_MS,
    GROUP_CONFIG_DOCS,
    GROUP_CONFIG_KEYS,
    SHARE_AUTO_OFFSET_RESET,
)
from metadata.records import ConfigResourceType

GROUP_CONFIG_SOURCE: Final = 8  # Kafka's DescribeConfigsResponse.ConfigSource.GROUP_CONFIG
DEFAULT_CONFIG_SOURCE: Final = 5
INT_CONFIG_TYPE: Final = 3
STRING_CONFIG_TYPE: Final = 2  # Kafka's DescribeConfigsResponse.ConfigType
NO_CONTROLLER: Final = "no controller client: this broker cannot change group configs"


async def alter_group(ctx: BrokerContext, resource: Any, validate_only: bool, incremental: bool,
                      body: dict[str, Any]) -> AdminReply:
    if not resource.resource_name:
        return AdminReply(ErrorCode.INVALID_REQUEST, "Group name must not be empty.")
    if incremental and not resource.configs:
        return AdminReply(ErrorCode.NONE)
    if ctx.topic_admin is None:
        return AdminReply(ErrorCode.UNKNOWN_SERVER_ERROR, NO_CONTROLLER)
    reply = await ctx.topic_admin.alter_group_configs(resource.resource_name, body)
    return AdminReply(reply.error_code, reply.error_message) if validate_only else reply


def describe_group(ctx: BrokerContext, m: ModuleType, resource: Any, req: Any) -> Any:
    own = ctx.image().config(ConfigResourceType.GROUP, resource.resource_name)
    defaults: dict[str, object] = {
        CONSUMER_SESSION_TIMEOUT_MS: ctx.groups.settings.consumer.session_timeout_ms,
        CONSUMER_HEARTBEAT_INTERVAL_MS: ctx.groups.settings.consumer.heartbeat_interval_ms,
        SHARE_AUTO_OFFSET_RESET: ctx.config[SHARE_AUTO_OFFSET_RESET]}
    for key in GROUP_CONFIG_KEYS:  # a share group's defaults are the broker's group.share.* (Kafka's)
        if key not in defaults:
            defaults[key] = ctx.config[f"group.{key}"]
    wanted = GROUP_CONFIG_KEYS if not resource.configuration_keys else tuple(
        k for k in resource.configuration_keys if k in GROUP_CONFIG_KEYS)
    wants_documentation = getattr(req, "include_documentation", False)
    entries = tuple(messages.build(
        m.DescribeConfigsResourceResult, name=key, value=own.get(key, str(defaults[key])), read_only=False,
        config_source=GROUP_CONFIG_SOURCE if key in own else DEFAULT_CONFIG_SOURCE, is_sensitive=False,
        synonyms=(), config_type=STRING_CONFIG_TYPE if key == SHARE_AUTO_OFFSET_RESET else INT_CONFIG_TYPE,
        documentation=GROUP_CONFIG_DOCS[key] if wants_documentation else None) for key in wanted)
    return m.DescribeConfigsResult(error_code=ErrorCode.NONE, error_message=None, resource_type=resource.resource_type,
                                   resource_name=resource.resource_name, configs=entries)
