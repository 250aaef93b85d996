"""The admin API's ACL routes (Kafka's CreateAcls / DescribeAcls / DeleteAcls, kafka-acls.sh).

    GET  /v1/acls?resource_type=TOPIC&resource_name=orders&pattern_type=MATCH&principal=...
    POST /v1/acls           {"acls": [ACL, ...]}            -> {"results": [...], "metadata_offset": n}
    POST /v1/acls/delete    {"filters": [filter, ...]}      -> {"results": [...], "metadata_offset": n}

An ACL is {"resource_type", "resource_name", "pattern_type" (LITERAL default), "principal",
"host" ("*" default), "operation", "permission_type" (ALLOW default)}, enum fields by Kafka's
names (any case) or codes; a filter has the same fields, each optional (absent: any; a
filter's pattern_type may also be ANY or MATCH). A body that is not of that shape is a 400
naming the field; a well-formed ACL that Kafka would refuse (a bad pattern type, a CLUSTER not
named kafka-cluster) is answered per ACL with INVALID_REQUEST, as CreateAcls answers it.
Brokers forward their clients' CreateAcls and DeleteAcls here (broker/handlers/acls.py).
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Iterator
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Final, TypeVar

from aiohttp import web

from metadata.image import MetadataImage
from quorum import admin_api as api
from quorum.acl_control import (
    MAX_ACLS_PER_REQUEST,
    AclOutcome,
    DeleteOutcome,
    create_acls,
    delete_acls,
    describe_acls,
)
from quorum.controller_result import ControllerResult
from quorum.http_json import read_json
from security.acl import AclBinding, AclFilter, AclOperation, AclPermissionType, PatternType, ResourceType
from security.acl import filter_error
from security.acl import to_json as acl_view

if TYPE_CHECKING:
    from quorum.controller_server import ControllerServer

log = logging.getLogger(__name__)

ACL_FIELDS: Final = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation",
                     "permission_type")
E = TypeVar("E", bound=IntEnum)


def new_acl_id() -> str:
    """A random UUID in Kafka's base64 form, as topic ids are."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _enum(cls: type[E], value: Any, field: str) -> E:
    if isinstance(value, str) and value.upper() in cls.__members__:
        return cls.__members__[value.upper()]
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 3:  # a code in a query
        value = int(value)
    if type(value) is int:
        try:
            return cls(value)
        except ValueError:
            pass
    names = ", ".join(cls.__members__)
    raise api.invalid(f"{field} must be one of {names} (or its code), got {value!r:.60}", field)


def _text(value: Any, field: str, *, nullable: bool) -> Any:
    if value is None and nullable:
        return None
    if not isinstance(value, str) or len(value) > api.MAX_ADMIN_BODY_BYTES:
        raise api.invalid(f"{field} must be a string, got {api.json_type(value)}", field)
    return value


def parse_binding(value: Any, where: str) -> AclBinding:
    body = api.check_object(value, ACL_FIELDS, ("resource_type", "resource_name", "principal", "operation"),
                            where=f"{where}.")
    return AclBinding(
        _enum(ResourceType, body["resource_type"], f"{where}.resource_type"),
        _text(body["resource_name"], f"{where}.resource_name", nullable=False),
        _enum(PatternType, body.get("pattern_type", "LITERAL"), f"{where}.pattern_type"),
        _text(body["principal"], f"{where}.principal", nullable=False),
        _text(body.get("host", "*"), f"{where}.host", nullable=False),
        _enum(AclOperation, body["operation"], f"{where}.operation"),
        _enum(AclPermissionType, body.get("permission_type", "ALLOW"), f"{where}.permission_type"))


def parse_filter(value: Any, where: str) -> AclFilter:
    body = api.check_object(value, ACL_FIELDS, where=f"{where}." if where else "")
    at = f"{where}." if where else ""
    return AclFilter(
        _enum(ResourceType, body.get("resource_type", "ANY"), f"{at}resource_type"),
        _text(body.get("resource_name"), f"{at}resource_name", nullable=True),
        _enum(PatternType, body.get("pattern_type", "ANY"), f"{at}pattern_type"),
        _text(body.get("principal"), f"{at}principal", nullable=True),
        _text(body.get("host"), f"{at}host", nullable=True),
        _enum(AclOperation, body.get("operation", "ANY"), f"{at}operation"),
        _enum(AclPermissionType, body.get("permission_type", "ANY"), f"{at}permission_type"))


def _list(body: Any, key: str) -> list[Any]:
    body = api.check_object(body, (key,), (key,))
    items = body[key]
    if not isinstance(items, list):
        raise api.invalid(f"{key} must be an array, got {api.json_type(items)}", key)
    if len(items) > MAX_ACLS_PER_REQUEST:
        raise api.invalid(f"{key}: at most {MAX_ACLS_PER_REQUEST} per request, got {len(items)}", key)
    return items


def _outcome_view(outcome: AclOutcome) -> dict[str, Any]:
    return {"error": None if outcome.error is None else outcome.error.name, "message": outcome.message}


def _delete_view(outcome: DeleteOutcome) -> dict[str, Any]:
    return {"error": None if outcome.error is None else outcome.error.name, "message": outcome.message,
            "deleted": [acl_view(b) for b in outcome.deleted]}


class AclRoutes:
    """The ACL routes of one ControllerServer."""

    def __init__(self, server: ControllerServer, new_ids: Iterator[str] | None = None) -> None:
        self._server = server
        self._new_ids = new_ids if new_ids is not None else iter(new_acl_id, None)

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/v1/acls", self._describe),
                web.post("/v1/acls", self._create),
                web.post("/v1/acls/delete", self._delete)]

    async def _describe(self, request: web.Request) -> web.Response:
        flt = parse_filter(dict(request.query), "")
        error = filter_error(flt)
        if error is not None:  # Kafka refuses a filter with an UNKNOWN part
            unknown = [f for f in ACL_FIELDS if getattr(getattr(flt, f), "name", None) == "UNKNOWN"]
            raise api.invalid(f"{error} ({unknown[0]} UNKNOWN)", unknown[0])
        return web.json_response({"acls": [acl_view(b) for b in describe_acls(self._server.image(), flt)]})

    async def _create(self, request: web.Request) -> web.Response:
        self._server.authorize(request)
        raw, body = await read_json(request)
        bindings = [parse_binding(item, f"acls[{i}]") for i, item in enumerate(_list(body, "acls"))]

        def rule(image: MetadataImage) -> ControllerResult[list[AclOutcome]]:
            return create_acls(image, bindings, self._new_ids)

        async def run() -> web.Response:
            outcomes, offset = await self._server.decide(rule)
            for binding, outcome in zip(bindings, outcomes):
                if outcome.error is None:
                    log.info("ACL created (or already present) at metadata offset %s: %s", offset, acl_view(binding))
            return web.json_response({"results": [_outcome_view(o) for o in outcomes], "metadata_offset": offset})

        return await self._server.write(request, raw, run)

    async def _delete(self, request: web.Request) -> web.Response:
        self._server.authorize(request)
        raw, body = await read_json(request)
        filters = [parse_filter(item, f"filters[{i}]") for i, item in enumerate(_list(body, "filters"))]

        def rule(image: MetadataImage) -> ControllerResult[list[DeleteOutcome]]:
            return delete_acls(image, filters)

        async def run() -> web.Response:
            outcomes, offset = await self._server.decide(rule)
            for outcome in outcomes:
                for binding in outcome.deleted:
                    log.info("ACL deleted at metadata offset %s: %s", offset, acl_view(binding))
            return web.json_response({"results": [_delete_view(o) for o in outcomes], "metadata_offset": offset})

        return await self._server.write(request, raw, run)
