"""AlterUserScramCredentials (51) and DescribeUserScramCredentials (50), KIP-554.

Describe answers from this broker's metadata image (Kafka's brokers answer it from their
metadata cache); Alter goes to the controllers' admin API (`POST /v1/scram-credentials`,
quorum/scram_routes.py, forwarded by any controller to the active one, as other admin writes)
and answers once this broker's image holds the change, so a login right after it works here.
With an authorizer, Kafka's ACLs apply (api_table: ALTER / DESCRIBE on the CLUSTER).
"""

from __future__ import annotations

import base64
from typing import Any

from broker.handlers.acls import HttpAclAdmin
from broker.handlers.admin import await_applied
from broker.handlers.context import BrokerContext, ClientInfo
from broker.topic_admin import AdminReply
from common.limits import ADMIN_APPLY_WAIT_MS
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from security.scram_image import describe_credentials



def _admin(ctx: BrokerContext) -> HttpAclAdmin:
    """The admin-API client credential changes go through (HttpAclAdmin posts any admin write)."""
    if ctx.scram_admin is None:
        assert ctx.controller_client is not None
        token = ctx.config["admin.token"]
        ctx.scram_admin = HttpAclAdmin(ctx.controller_client, token=getattr(token, "value", None))
    admin: HttpAclAdmin = ctx.scram_admin
    return admin


def _code(name: Any) -> ErrorCode:
    return ErrorCode.NONE if name is None else ErrorCode.__members__.get(str(name), ErrorCode.UNKNOWN_SERVER_ERROR)


async def handle_alter_user_scram_credentials(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    m = messages.response_module(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, version)

    def answer(results: list[tuple[str, ErrorCode, str | None]]) -> Any:
        return m.AlterUserScramCredentialsResponse(throttle_time=messages.NO_THROTTLE, results=tuple(
            m.AlterUserScramCredentialsResult(user=user, error_code=code, error_message=message)
            for user, code, message in results))

    users = list(dict.fromkeys([d.name for d in req.deletions] + [u.name for u in req.upsertions]))
    if ctx.controller_client is None:
        return answer([(user, ErrorCode.NOT_CONTROLLER, "no controller to send the change to") for user in users])
    body = {"deletions": [{"name": d.name, "mechanism": int(d.mechanism)} for d in req.deletions],
            "upsertions": [{"name": u.name, "mechanism": int(u.mechanism), "iterations": int(u.iterations),
                            "salt": base64.b64encode(bytes(u.salt)).decode(),
                            "salted_password": base64.b64encode(bytes(u.salted_password)).decode()}
                           for u in req.upsertions]}
    reply = await _admin(ctx).post("/v1/scram-credentials", body)
    if isinstance(reply, AdminReply):
        return answer([(user, messages.error_code(reply.error_code), reply.error_message) for user in users])
    results, offset = reply
    applied = await await_applied(ctx, [AdminReply(0, None, offset)], ADMIN_APPLY_WAIT_MS)
    late = applied[0].error_message if applied[0].error_code else None
    out = []
    for result in results:
        if not isinstance(result, dict):
            continue
        code = _code(result.get("error"))
        message = result.get("message") if isinstance(result.get("message"), str) else None
        if code == ErrorCode.NONE and late is not None:
            code, message = ErrorCode.REQUEST_TIMED_OUT, late
        out.append((str(result.get("user", "")), code, message))
    return answer(out)


async def handle_describe_user_scram_credentials(ctx: BrokerContext, req: Any, version: int,
                                                 client: ClientInfo) -> Any:
    m = messages.response_module(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, version)
    users = None if req.users is None else [u.name for u in req.users]
    found = describe_credentials(ctx.image(), users)
    return m.DescribeUserScramCredentialsResponse(
        throttle_time=messages.NO_THROTTLE, error_code=ErrorCode.NONE, error_message=None, results=tuple(
            m.DescribeUserScramCredentialsResult(
                user=f.user, error_code=f.error or ErrorCode.NONE, error_message=f.message,
                credential_infos=tuple(m.CredentialInfo(mechanism=mechanism, iterations=iterations)
                                       for mechanism, iterations in f.credentials))
            for f in found))
