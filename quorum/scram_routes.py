"""The admin API's SCRAM credential routes (KIP-554: AlterUserScramCredentials and
DescribeUserScramCredentials; `tidelog users`, and brokers forwarding their clients' alters).

    GET  /v1/scram-credentials[?user=alice&user=bob]     -> {"results": [{user, credentials, error, message}]}
    POST /v1/scram-credentials  {"deletions": [{name, mechanism}],
                                 "upsertions": [{name, mechanism, iterations, salt, salted_password}]}
                                                         -> {"results": [{user, error, message}], "metadata_offset": n}

A mechanism is SCRAM-SHA-256 / SCRAM-SHA-512 or Kafka's type code (1, 2); salt and
salted_password are base64 (the client salts and hashes: the password never reaches a
controller). The rules and Kafka's per-user errors are quorum.scram_control's; a body that is
not of that shape is a 400 naming the field.
"""

from __future__ import annotations

import base64
import binascii
import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web

from metadata.image import MetadataImage
from quorum import admin_api as api
from quorum.controller_result import ControllerResult
from quorum.http_json import read_json
from quorum.scram_control import (
    MAX_CHANGES_PER_REQUEST,
    Deletion,
    ScramOutcome,
    Upsertion,
    UserCredentials,
    alter_credentials,
    describe_credentials,
)
from security.scram import MECHANISMS, MECHANISMS_BY_TYPE

if TYPE_CHECKING:
    from quorum.controller_server import ControllerServer

log = logging.getLogger(__name__)


def mechanism_code(value: Any, field: str) -> int:
    """A mechanism's type code from its name or code; an unknown code is kept (the rule answers
    UNSUPPORTED_SASL_MECHANISM for it, as Kafka does)."""
    if isinstance(value, str) and value.upper() in MECHANISMS:
        return MECHANISMS[value.upper()].type_code
    if type(value) is int and -128 <= value <= 127:
        return value
    raise api.invalid(f"{field} must be SCRAM-SHA-256, SCRAM-SHA-512 or a mechanism code, got {value!r:.60}", field)


def _name(value: Any, field: str) -> str:
    if not isinstance(value, str) or len(value) > api.MAX_ADMIN_BODY_BYTES:
        raise api.invalid(f"{field} must be a string, got {api.json_type(value)}", field)
    return value


def _bytes(value: Any, field: str) -> bytes:
    try:
        return base64.b64decode(_name(value, field), validate=True)
    except binascii.Error:
        raise api.invalid(f"{field} must be base64", field) from None


def _int(value: Any, field: str) -> int:
    if type(value) is not int or not -(2**31) <= value < 2**31:
        raise api.invalid(f"{field} must be a 32-bit integer, got {value!r:.60}", field)
    return value


def parse_alter(body: Any) -> tuple[list[Deletion], list[Upsertion]]:
    body = api.check_object(body, ("deletions", "upsertions"))
    deletions_raw, upsertions_raw = body.get("deletions", []), body.get("upsertions", [])
    for key, items in (("deletions", deletions_raw), ("upsertions", upsertions_raw)):
        if not isinstance(items, list):
            raise api.invalid(f"{key} must be an array, got {api.json_type(items)}", key)
    if len(deletions_raw) + len(upsertions_raw) > MAX_CHANGES_PER_REQUEST:
        raise api.invalid(f"at most {MAX_CHANGES_PER_REQUEST} deletions and upsertions per request", "upsertions")
    deletions = []
    for i, item in enumerate(deletions_raw):
        at = f"deletions[{i}]"
        d = api.check_object(item, ("name", "mechanism"), ("name", "mechanism"), where=f"{at}.")
        deletions.append(Deletion(_name(d["name"], f"{at}.name"), mechanism_code(d["mechanism"], f"{at}.mechanism")))
    upsertions = []
    for i, item in enumerate(upsertions_raw):
        at = f"upsertions[{i}]"
        keys = ("name", "mechanism", "iterations", "salt", "salted_password")
        u = api.check_object(item, keys, keys, where=f"{at}.")
        upsertions.append(Upsertion(_name(u["name"], f"{at}.name"), mechanism_code(u["mechanism"], f"{at}.mechanism"),
                                    _int(u["iterations"], f"{at}.iterations"), _bytes(u["salt"], f"{at}.salt"),
                                    _bytes(u["salted_password"], f"{at}.salted_password")))
    return deletions, upsertions


def _outcome_view(outcome: ScramOutcome) -> dict[str, Any]:
    return {"user": outcome.user, "error": None if outcome.error is None else outcome.error.name,
            "message": outcome.message}


def _credentials_view(found: UserCredentials) -> dict[str, Any]:
    return {"user": found.user, "error": None if found.error is None else found.error.name, "message": found.message,
            "credentials": [{"mechanism": MECHANISMS_BY_TYPE[m].name if m in MECHANISMS_BY_TYPE else m,
                             "iterations": i} for m, i in found.credentials]}


class ScramRoutes:
    """The SCRAM credential routes of one ControllerServer."""

    def __init__(self, server: ControllerServer) -> None:
        self._server = server

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/v1/scram-credentials", self._describe),
                web.post("/v1/scram-credentials", self._alter)]

    async def _describe(self, request: web.Request) -> web.Response:
        users = request.query.getall("user", None)
        found = describe_credentials(self._server.image(), None if users is None else list(users))
        return web.json_response({"results": [_credentials_view(f) for f in found]})

    async def _alter(self, request: web.Request) -> web.Response:
        self._server.authorize(request)
        raw, body = await read_json(request)
        deletions, upsertions = parse_alter(body)

        def rule(image: MetadataImage) -> ControllerResult[list[ScramOutcome]]:
            return alter_credentials(image, deletions, upsertions)

        async def run() -> web.Response:
            outcomes, offset = await self._server.decide(rule)
            for outcome in outcomes:  # names only: never a salt or key in a log
                if outcome.error is None:
                    log.info("SCRAM credential of user %r altered at metadata offset %s", outcome.user, offset)
            return web.json_response({"results": [_outcome_view(o) for o in outcomes], "metadata_offset": offset})

        return await self._server.write(request, raw, run)
