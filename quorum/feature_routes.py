"""Finalized features on the controller's HTTP API (KIP-584's UpdateFeatures, issue 28).

    GET  /v1/features             supported ranges, finalized levels and their epoch (this controller's image)
    POST /v1/features             {"updates": [{feature, max_version_level, upgrade_type}], "validate_only"?}
    POST /rpc/update-features     the same body in msgpack: what a broker asks for a client's UpdateFeatures

`upgrade_type` is Kafka's name or number: "upgrade" (1, the default), "safe_downgrade" (2),
"unsafe_downgrade" (3). The write runs `quorum.feature_control.update_features` on the active
controller (the admin route forwards it there as every write; the RPC answers NOT_CONTROLLER
naming the active one, which the broker's ControllerClient follows). Kafka's controllers answer
UpdateFeatures on their own listener; tidelog's speak HTTP, so these are the two ways to ask.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final

import msgpack
from aiohttp import web

from common import rpc
from common.errors import ErrorCode
from common.protocol.api_versions import SUPPORTED_FEATURES, finalized_levels
from metadata.codec import INT16_MAX
from metadata.image import MetadataImage
from quorum import admin_api as api
from quorum.active_controller import ControllerBusyError, NotActiveControllerError
from quorum.admin_api import AdminError
from quorum.broker_rpc import MSGPACK, RpcError
from quorum.controller_result import ControllerApiError, ControllerResult
from quorum.controller_runtime import NotCommittedError
from quorum.feature_control import MAX_FEATURE_UPDATES, FeaturesUpdated, FeatureUpdate, UpgradeType, update_features
from quorum.http_json import read_json
from quorum.request_routing import api_error

if TYPE_CHECKING:
    from quorum.controller_server import ControllerServer

logger = logging.getLogger(__name__)

UPGRADE_TYPES: Final = {"upgrade": UpgradeType.UPGRADE, "safe_downgrade": UpgradeType.SAFE_DOWNGRADE,
                        "unsafe_downgrade": UpgradeType.UNSAFE_DOWNGRADE}
MAX_FEATURE_NAME_CHARS: Final = 255


def parse_update_features(body: Any) -> tuple[list[FeatureUpdate], bool]:
    """The updates and validate_only of a POST body; AdminError (400) naming the field."""
    body = api.check_object(body, ("updates", "validate_only"), ("updates",))
    updates = body["updates"]
    if not isinstance(updates, list) or len(updates) > MAX_FEATURE_UPDATES:
        raise api.invalid(f"updates must be an array of at most {MAX_FEATURE_UPDATES} objects", "updates")
    parsed = []
    for i, item in enumerate(updates):
        where = f"updates[{i}]."
        item = api.check_object(item, ("feature", "max_version_level", "upgrade_type"),
                                ("feature", "max_version_level"), where)
        name = item["feature"]
        if not isinstance(name, str) or not 0 < len(name) <= MAX_FEATURE_NAME_CHARS:
            raise api.invalid(f"feature must be a name of 1-{MAX_FEATURE_NAME_CHARS} characters", where + "feature")
        level = api.check_int(item["max_version_level"], where + "max_version_level", -(2**15), INT16_MAX)
        raw_type = item.get("upgrade_type", "upgrade")
        if isinstance(raw_type, str) and raw_type.lower() in UPGRADE_TYPES:
            upgrade_type = UPGRADE_TYPES[raw_type.lower()]
        elif type(raw_type) is int and raw_type in tuple(UpgradeType):
            upgrade_type = UpgradeType(raw_type)
        else:
            raise api.invalid(f"upgrade_type must be one of {', '.join(UPGRADE_TYPES)}", where + "upgrade_type")
        parsed.append(FeatureUpdate(name, level, upgrade_type))
    validate_only = body.get("validate_only", False)
    if not isinstance(validate_only, bool):
        raise api.invalid("validate_only must be a boolean", "validate_only")
    return parsed, validate_only


def features_view(image: MetadataImage) -> dict[str, Any]:
    """What `GET /v1/features` and `tidelog features describe` show (kafka-features.sh's columns)."""
    finalized = finalized_levels(image.features.levels)
    return {"epoch": image.offset,
            "features": [{"feature": f.name, "supported_min_version": f.min_version,
                          "supported_max_version": f.max_version, "finalized_version_level": finalized.get(f.name, 0)}
                         for f in SUPPORTED_FEATURES]}


class FeatureRoutes:
    """The feature routes of one ControllerServer."""

    def __init__(self, server: ControllerServer) -> None:
        self._server = server

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/v1/features", self._get), web.post("/v1/features", self._post),
                web.post("/rpc/update-features", self._rpc)]

    async def _get(self, request: web.Request) -> web.Response:
        return web.json_response(features_view(self._server.image()))

    async def _update(self, updates: list[FeatureUpdate], validate_only: bool) -> tuple[FeaturesUpdated, int | None]:
        settings = self._server.settings

        def rule(image: MetadataImage) -> ControllerResult[FeaturesUpdated]:
            return update_features(image, updates, validate_only=validate_only, node_id=settings.node_id,
                                   min_insync_replicas=settings.min_insync_replicas)

        if validate_only:  # Kafka's validateOnly: the same rule on the active image, nothing appended
            return rule(self._server.image()).response, None
        answer, offset = await self._server.decide(rule)
        logger.info("Updated finalized features (%s) at metadata offset %s: now %s",
                    ", ".join(f"{u.feature}={u.max_version_level} {u.upgrade_type.name}" for u in updates),
                    offset, answer.levels)
        return answer, offset

    async def _post(self, request: web.Request) -> web.Response:
        self._server.authorize(request)
        raw, body = await read_json(request)
        updates, validate_only = parse_update_features(body)

        async def run() -> web.Response:
            answer, offset = await self._update(updates, validate_only)
            return web.json_response({"finalized": dict(answer.levels), "validate_only": validate_only,
                                      "metadata_offset": offset})

        return await self._server.write(request, raw, run)

    async def _rpc(self, request: web.Request) -> web.Response:
        try:
            reply = rpc.encode_reply(await self._serve_rpc(request))
        except RpcError as exc:
            reply = exc.reply
        return web.Response(body=msgpack.packb(reply, use_bin_type=True), content_type=MSGPACK)

    async def _serve_rpc(self, request: web.Request) -> dict[str, Any]:
        if request.content_length is not None and request.content_length > api.MAX_RPC_BODY_BYTES:
            raise RpcError(ErrorCode.INVALID_REQUEST, f"a body of more than {api.MAX_RPC_BODY_BYTES} bytes")
        try:
            body = msgpack.unpackb(await request.read(), raw=False, strict_map_key=True)
            updates, validate_only = parse_update_features(body)
        except AdminError as exc:
            raise RpcError(ErrorCode.INVALID_REQUEST, exc.message, exc.field) from None
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise RpcError(ErrorCode.INVALID_REQUEST, f"the body is not msgpack: {type(exc).__name__}") from None
        if not self._server.runtime.is_active:  # validate_only too: only the active image is current
            node, address = self._server.active_api()
            raise RpcError(ErrorCode.NOT_CONTROLLER, f"controller {self._server.settings.node_id} is not the "
                           "active controller", controller_id=node, controller_address=address)
        try:
            answer, offset = await self._update(updates, validate_only)
        except ControllerApiError as exc:
            error = api_error(exc)
            raise RpcError(exc.code, error.message, error.field) from None
        except NotActiveControllerError as exc:
            node, address = self._server.active_api()
            raise RpcError(ErrorCode.NOT_CONTROLLER, f"controller {self._server.settings.node_id} is not the "
                           f"active controller: {exc}", controller_id=node, controller_address=address) from None
        except NotCommittedError as exc:
            node, address = self._server.active_api()
            if exc.applied_nothing:
                raise RpcError(ErrorCode.NOT_CONTROLLER, str(exc), controller_id=node,
                               controller_address=address) from None
            raise RpcError(ErrorCode.REQUEST_TIMED_OUT, f"no committed outcome in time: {exc}") from None
        except (TimeoutError, ControllerBusyError) as exc:
            raise RpcError(ErrorCode.REQUEST_TIMED_OUT, f"{type(exc).__name__}: {exc}") from None
        return {"finalized": dict(answer.levels), "metadata_offset": -1 if offset is None else offset}
