"""DescribeAcls, CreateAcls and DeleteAcls (Kafka's AclApis).

Without an authorizer (`authorizer.class.name` empty, the default) a Kafka broker answers all
three with SECURITY_DISABLED, stores nothing, and so does tidelog (the refusal logged once per
client, `broker.refusal_log`). With one (`broker.handlers.authorization.BrokerAuthorizer`):
DescribeAcls needs DESCRIBE on the cluster and answers from this broker's metadata image;
CreateAcls and DeleteAcls need ALTER on the cluster and go to the controllers' admin API
(`/v1/acls`, quorum/acl_routes.py), which any controller forwards to the active one, and answer
once this broker's image holds the change, so a DescribeAcls that follows sees it. Their
messages are kio's (v0 read into v1's classes: common/protocol/acls.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

from broker.controller_client import ControllerClient
from broker.handlers.admin import await_applied
from broker.handlers.authorization import BrokerAuthorizer
from broker.handlers.context import BrokerContext, ClientInfo
from broker.topic_admin import AdminReply, ControllerAdminApi, refusal_reply
from common.config_schema import Config, Password
from common.errors import ErrorCode
from common.limits import ADMIN_APPLY_WAIT_MS
from common.protocol import acls, messages
from common.protocol.api_keys import ApiKey
from common.units import MIB
from security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    binding_of,
    describe,
    filter_error,
    filter_of,
)
from security.acl import to_json as acl_view
from security.authorizer import AuthorizerSettings

log = logging.getLogger(__name__)

SECURITY_DISABLED: Final = int(ErrorCode.SECURITY_DISABLED)
# Kafka's exact messages (DescribeAcls has its own wording).
DESCRIBE_MESSAGE: Final = "No Authorizer is configured on the broker"
ALTER_MESSAGE: Final = "No Authorizer is configured."
MAX_ANSWER_BYTES: Final = 4 * MIB  # a controller's answer to one CreateAcls / DeleteAcls


def install(ctx: BrokerContext, config: Config) -> None:
    """Set the context's authorizer and ACL admin from `authorizer.class.name` and friends (the
    keys were checked when the config was parsed)."""
    settings = AuthorizerSettings.parse(str(config["authorizer.class.name"] or ""),
                                        super_users=str(config["super.users"] or ""),
                                        allow_everyone_if_no_acl_found=bool(config["allow.everyone.if.no.acl.found"]))
    if settings is None:
        return
    ctx.authorizer = BrokerAuthorizer(settings, ctx.image)
    if ctx.controller_client is not None:
        token = config["admin.token"]
        ctx.acl_admin = HttpAclAdmin(ctx.controller_client, token=token.value if isinstance(token, Password) else None)
    log.info("Broker %d: ACLs enforced (StandardAuthorizer), super.users=%s, allow.everyone.if.no.acl.found=%s",
             ctx.broker_id, ";".join(sorted(settings.super_users)) or "(none)", settings.allow_everyone_if_no_acl_found)


class HttpAclAdmin:
    """CreateAcls / DeleteAcls (and SCRAM credential changes) on the controllers' admin API
    (`POST /v1/acls`, `/v1/acls/delete`, `/v1/scram-credentials`)."""

    def __init__(self, controller_client: ControllerClient, *, token: str | None = None) -> None:
        self._api = ControllerAdminApi(controller_client, token=token, max_answer_bytes=MAX_ANSWER_BYTES)

    async def close(self) -> None:
        await self._api.close()

    async def post(self, path: str, body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], int | None] | AdminReply:
        """(one result per item, the metadata offset) or, when the call failed whole, the error."""
        called = await self._api.call("POST", path, body)
        if isinstance(called, AdminReply):
            return called
        status, answer, raw = called
        if status < 300 and isinstance(answer, dict) and isinstance(answer.get("results"), list):
            offset = answer.get("metadata_offset")
            return answer["results"], offset if type(offset) is int else None
        return refusal_reply(status, answer, raw)


def _code(result: Mapping[str, Any]) -> tuple[ErrorCode, str | None]:
    name, message = result.get("error"), result.get("message")
    if name is None:
        return ErrorCode.NONE, None
    code = ErrorCode.__members__.get(name, ErrorCode.UNKNOWN_SERVER_ERROR) if isinstance(name, str) \
        else ErrorCode.UNKNOWN_SERVER_ERROR
    return code, message if isinstance(message, str) else None


def _may_alter(ctx: BrokerContext, client: ClientInfo) -> bool:
    authorizer: BrokerAuthorizer = ctx.authorizer
    return authorizer.allowed(client, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)


async def _applied(ctx: BrokerContext, offset: int | None) -> str | None:
    """None once this broker's image holds `offset`, else why not (REQUEST_TIMED_OUT's message)."""
    replies = await await_applied(ctx, [AdminReply(0, None, offset)], ADMIN_APPLY_WAIT_MS)
    return None if replies[0].error_code == 0 else replies[0].error_message


async def handle_describe_acls(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's DescribeAclsRequest of `acls.schema_version(version)`; so is the answer."""
    m = messages.response_module(ApiKey.DESCRIBE_ACLS, acls.schema_version(version))

    def answer(code: ErrorCode, message: str | None, resources: tuple[Any, ...] = ()) -> Any:
        return m.DescribeAclsResponse(throttle_time=messages.NO_THROTTLE, error_code=code, error_message=message,
                                      resources=resources)

    if ctx.authorizer is None:
        ctx.refusals.refused(client, "DescribeAcls", SECURITY_DISABLED, DESCRIBE_MESSAGE)
        return answer(ErrorCode.SECURITY_DISABLED, DESCRIBE_MESSAGE)
    authorizer: BrokerAuthorizer = ctx.authorizer
    if not authorizer.allowed(client, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    flt = filter_of(req.resource_type_filter, req.resource_name_filter, req.pattern_type_filter,
                    req.principal_filter, req.host_filter, req.operation, req.permission_type)
    if isinstance(flt, str) or (flt_error := filter_error(flt)) is not None:  # Kafka: an UNKNOWN part
        return answer(ErrorCode.INVALID_REQUEST, flt if isinstance(flt, str) else flt_error)
    by_resource: dict[tuple[int, str, int], list[AclBinding]] = {}
    for b in describe(ctx.image(), flt):
        by_resource.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    return answer(ErrorCode.NONE, None, tuple(
        m.DescribeAclsResource(resource_type=t, resource_name=name, pattern_type=pattern, acls=tuple(
            m.AclDescription(principal=b.principal, host=b.host, operation=b.operation,
                             permission_type=b.permission_type) for b in found))
        for (t, name, pattern), found in by_resource.items()))


async def handle_create_acls(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    m = messages.response_module(ApiKey.CREATE_ACLS, acls.schema_version(version))

    def result(code: ErrorCode, message: str | None) -> Any:
        return m.AclCreationResult(error_code=code, error_message=message)

    def answer(results: Sequence[Any]) -> Any:
        return m.CreateAclsResponse(throttle_time=messages.NO_THROTTLE, results=tuple(results))

    if ctx.authorizer is None:
        ctx.refusals.refused(client, "CreateAcls", SECURITY_DISABLED, ALTER_MESSAGE)
        return answer([result(ErrorCode.SECURITY_DISABLED, ALTER_MESSAGE) for _ in req.creations])
    if not _may_alter(ctx, client):
        return answer([result(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None) for _ in req.creations])
    parsed = [binding_of(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
                         c.operation, c.permission_type) for c in req.creations]
    valid = [b for b in parsed if isinstance(b, AclBinding)]
    outcomes: list[tuple[ErrorCode, str | None]] = []
    if valid:
        reply = await _admin(ctx).post("/v1/acls", {"acls": [acl_view(b) for b in valid]})
        if isinstance(reply, AdminReply):
            outcomes = [(messages.error_code(reply.error_code), reply.error_message)] * len(valid)
        else:
            outcomes = [_code(r) if isinstance(r, dict) else (ErrorCode.UNKNOWN_SERVER_ERROR, None)
                        for r in reply[0]]
            late = await _applied(ctx, reply[1])
            if late is not None:
                outcomes = [(ErrorCode.REQUEST_TIMED_OUT, late) if code == ErrorCode.NONE else (code, message)
                            for code, message in outcomes]
    answers = iter(outcomes)
    return answer([result(ErrorCode.INVALID_REQUEST, b) if isinstance(b, str)
                   else result(*next(answers, (ErrorCode.UNKNOWN_SERVER_ERROR, "no answer from the controller")))
                   for b in parsed])


async def handle_delete_acls(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    m = messages.response_module(ApiKey.DELETE_ACLS, acls.schema_version(version))

    def result(code: ErrorCode, message: str | None, matching: tuple[Any, ...] = ()) -> Any:
        return m.DeleteAclsFilterResult(error_code=code, error_message=message, matching_acls=matching)

    def answer(results: Sequence[Any]) -> Any:
        return m.DeleteAclsResponse(throttle_time=messages.NO_THROTTLE, filter_results=tuple(results))

    if ctx.authorizer is None:
        ctx.refusals.refused(client, "DeleteAcls", SECURITY_DISABLED, ALTER_MESSAGE)
        return answer([result(ErrorCode.SECURITY_DISABLED, ALTER_MESSAGE) for _ in req.filters])
    if not _may_alter(ctx, client):
        return answer([result(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None) for _ in req.filters])
    parsed = [filter_of(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter, f.principal_filter,
                        f.host_filter, f.operation, f.permission_type) for f in req.filters]
    valid = [f for f in parsed if isinstance(f, AclFilter)]
    outcomes: list[Any] = []
    if valid:
        reply = await _admin(ctx).post("/v1/acls/delete", {"filters": [_filter_body(f) for f in valid]})
        if isinstance(reply, AdminReply):
            outcomes = [result(messages.error_code(reply.error_code), reply.error_message)] * len(valid)
        else:
            late = await _applied(ctx, reply[1])
            outcomes = [_delete_result(m, r, late) for r in reply[0]]
    answers = iter(outcomes)
    return answer([result(ErrorCode.INVALID_REQUEST, f) if isinstance(f, str)
                   else next(answers, result(ErrorCode.UNKNOWN_SERVER_ERROR, "no answer from the controller"))
                   for f in parsed])


def _admin(ctx: BrokerContext) -> HttpAclAdmin:
    if ctx.acl_admin is None:
        raise RuntimeError("an authorizer without a controller client cannot change ACLs")
    admin: HttpAclAdmin = ctx.acl_admin
    return admin


def _filter_body(f: AclFilter) -> dict[str, Any]:
    body: dict[str, Any] = {"resource_type": f.resource_type.name, "pattern_type": f.pattern_type.name,
                            "operation": f.operation.name, "permission_type": f.permission_type.name}
    for key in ("resource_name", "principal", "host"):
        if getattr(f, key) is not None:
            body[key] = getattr(f, key)
    return body


def _delete_result(m: Any, r: Any, late: str | None) -> Any:
    if not isinstance(r, dict):
        return m.DeleteAclsFilterResult(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, error_message=None,
                                        matching_acls=())
    code, message = _code(r)
    if code == ErrorCode.NONE and late is not None:
        code, message = ErrorCode.REQUEST_TIMED_OUT, late
    matching = []
    for acl in r.get("deleted") or ():
        try:
            matching.append(m.DeleteAclsMatchingAcl(
                error_code=ErrorCode.NONE, error_message=None,
                resource_type=ResourceType[acl["resource_type"]], resource_name=acl["resource_name"],
                pattern_type=PatternType[acl["pattern_type"]], principal=acl["principal"], host=acl["host"],
                operation=AclOperation[acl["operation"]], permission_type=AclPermissionType[acl["permission_type"]]))
        except (KeyError, TypeError):
            log.warning("A controller's DeleteAcls answer lists a malformed ACL: %.200r", acl)
    return m.DeleteAclsFilterResult(error_code=code, error_message=message, matching_acls=tuple(matching))

