"""DescribeAcls, CreateAcls and DeleteAcls without an authorizer, answered as a Kafka broker
with no `authorizer.class.name` does (AclApis): SECURITY_DISABLED, nothing stored, and the
refusal in the broker log (once per client, `broker.refusal_log`). When security lands, these
become the authorizer's."""

from __future__ import annotations

from typing import Final

from broker.handlers.context import BrokerContext, ClientInfo
from common.errors import ErrorCode
from common.protocol import acls

SECURITY_DISABLED: Final = int(ErrorCode.SECURITY_DISABLED)
# Kafka's exact messages (DescribeAcls has its own wording).
DESCRIBE_MESSAGE: Final = "No Authorizer is configured on the broker"
ALTER_MESSAGE: Final = "No Authorizer is configured."


async def handle_describe_acls(ctx: BrokerContext, req: acls.AclFilter, version: int,
                               client: ClientInfo) -> acls.DescribeAclsResponse:
    ctx.refusals.refused(client, "DescribeAcls", SECURITY_DISABLED, DESCRIBE_MESSAGE)
    return acls.DescribeAclsResponse(SECURITY_DISABLED, DESCRIBE_MESSAGE, ())


async def handle_create_acls(ctx: BrokerContext, req: acls.CreateAclsRequest, version: int,
                             client: ClientInfo) -> acls.CreateAclsResponse:
    ctx.refusals.refused(client, "CreateAcls", SECURITY_DISABLED, ALTER_MESSAGE)
    return acls.CreateAclsResponse(tuple(
        acls.AclCreationResult(SECURITY_DISABLED, ALTER_MESSAGE) for _ in req.creations))


async def handle_delete_acls(ctx: BrokerContext, req: acls.DeleteAclsRequest, version: int,
                             client: ClientInfo) -> acls.DeleteAclsResponse:
    ctx.refusals.refused(client, "DeleteAcls", SECURITY_DISABLED, ALTER_MESSAGE)
    return acls.DeleteAclsResponse(tuple(
        acls.DeleteAclsFilterResult(SECURITY_DISABLED, ALTER_MESSAGE) for _ in req.filters))
