"""DescribeAcls, CreateAcls and DeleteAcls without an authorizer, answered as a Kafka broker
with no `authorizer.class.name` does (AclApis): SECURITY_DISABLED, nothing stored, and the
refusal in the broker log (once per client, `broker.refusal_log`). When security lands, these
become the authorizer's. Their messages are kio's (v0 read into v1's classes: `acls.py`)."""

from __future__ import annotations

from typing import Any, Final

from broker.handlers.context import BrokerContext, ClientInfo
from common.errors import ErrorCode
from common.protocol import acls, messages
from common.protocol.api_keys import ApiKey

SECURITY_DISABLED: Final = int(ErrorCode.SECURITY_DISABLED)
# Kafka's exact messages (DescribeAcls has its own wording).
DESCRIBE_MESSAGE: Final = "No Authorizer is configured on the broker"
ALTER_MESSAGE: Final = "No Authorizer is configured."


async def handle_describe_acls(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's DescribeAclsRequest of `acls.schema_version(version)`; so is the answer."""
    ctx.refusals.refused(client, "DescribeAcls", SECURITY_DISABLED, DESCRIBE_MESSAGE)
    m = messages.response_module(ApiKey.DESCRIBE_ACLS, acls.schema_version(version))
    return m.DescribeAclsResponse(throttle_time=messages.NO_THROTTLE, error_code=ErrorCode.SECURITY_DISABLED,
                                  error_message=DESCRIBE_MESSAGE, resources=())


async def handle_create_acls(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    ctx.refusals.refused(client, "CreateAcls", SECURITY_DISABLED, ALTER_MESSAGE)
    m = messages.response_module(ApiKey.CREATE_ACLS, acls.schema_version(version))
    return m.CreateAclsResponse(throttle_time=messages.NO_THROTTLE, results=tuple(
        m.AclCreationResult(error_code=ErrorCode.SECURITY_DISABLED, error_message=ALTER_MESSAGE)
        for _ in req.creations))


async def handle_delete_acls(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    ctx.refusals.refused(client, "DeleteAcls", SECURITY_DISABLED, ALTER_MESSAGE)
    m = messages.response_module(ApiKey.DELETE_ACLS, acls.schema_version(version))
    return m.DeleteAclsResponse(throttle_time=messages.NO_THROTTLE, filter_results=tuple(
        m.DeleteAclsFilterResult(error_code=ErrorCode.SECURITY_DISABLED, error_message=ALTER_MESSAGE,
                                 matching_acls=()) for _ in req.filters))
