"""UpdateFeatures (Kafka API 57, v0-v2) through a broker: asked of the active controller (issue 28).

Kafka's brokers forward UpdateFeatures to the controller; tidelog's controllers speak HTTP, so
the broker asks the active one with the `update-features` RPC (`quorum/feature_routes.py`,
which `POST /v1/features` shares) and answers on kio's messages of the version sent, as
Kafka's QuorumController.updateFeatures does: an error is the top-level one ("The update failed
for all features since the following feature had an error: ..."), nothing is written; on
success v0-v1 list each feature with NONE, v2 has no per-feature results. v0's allow_downgrade
is SAFE_DOWNGRADE when set (FeatureUpdate's v0 mapping). A committed change is answered once
this broker's image holds it, so ApiVersions through the same broker shows the new levels.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from broker.controller_client import ControllerUnavailableError
from broker.handlers.admin import await_applied
from broker.handlers.context import BrokerContext, ClientInfo
from broker.topic_admin import AdminReply
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import ApiKey

log = logging.getLogger(__name__)

RPC_NAME: Final = "update-features"
SAFE_DOWNGRADE: Final = 2
UPGRADE: Final = 1
FAILED_FOR_ALL: Final = "The update failed for all features since the following feature had an error: "


def _upgrade_type(update: Any) -> int:
    if hasattr(update, "upgrade_type"):
        return int(update.upgrade_type)
    return SAFE_DOWNGRADE if update.allow_downgrade else UPGRADE  # v0


async def handle_update_features(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    """`req` is kio's UpdateFeaturesRequest of `version`."""
    m = messages.response_module(ApiKey.UPDATE_FEATURES, version)
    names = [u.feature for u in req.feature_updates]
    if ctx.controller_client is None:
        return _answer(m, version, names, ErrorCode.UNKNOWN_SERVER_ERROR, "this broker has no controller")
    body = {"updates": [{"feature": u.feature, "max_version_level": int(u.max_version_level),
                         "upgrade_type": _upgrade_type(u)} for u in req.feature_updates],
            "validate_only": bool(getattr(req, "validate_only", False))}
    try:
        reply = await ctx.controller_client.call(RPC_NAME, body)
    except ControllerUnavailableError as exc:
        log.warning("UpdateFeatures from %s: no answer from the controllers: %s", client.client_id, exc)
        return _answer(m, version, names, ErrorCode.NOT_CONTROLLER, f"no active controller answered: {exc}")
    code = messages.error_code(reply.get("error_code", 0))
    if code != ErrorCode.NONE:
        message = reply.get("error_message")
        ctx.refusals.refused(client, "UpdateFeatures", int(code), message)
        text = f"{FAILED_FOR_ALL}{message}" if code == ErrorCode.INVALID_UPDATE_VERSION else message
        return _answer(m, version, names, code, text)
    offset = reply.get("metadata_offset", -1)
    applied = await await_applied(ctx, [AdminReply(0, None, metadata_offset=offset if offset >= 0 else None)],
                                  messages.milliseconds(req.timeout))
    if applied[0].error_code:
        return _answer(m, version, names, ErrorCode(applied[0].error_code), applied[0].error_message)
    log.info("UpdateFeatures from %s: finalized %s (metadata offset %s)", client.client_id,
             reply.get("finalized"), offset)
    return _answer(m, version, names, ErrorCode.NONE, None)


def _answer(m: Any, version: int, names: list[str], code: ErrorCode, message: str | None) -> Any:
    results: tuple[Any, ...] = ()
    if version <= 1 and code == ErrorCode.NONE:  # per-feature results only on success, v0-v1
        results = tuple(m.UpdatableFeatureResult(feature=n, error_code=ErrorCode.NONE, error_message=None)
                        for n in names)
    return messages.build(m.UpdateFeaturesResponse, throttle_time=messages.NO_THROTTLE, error_code=code,
                          error_message=message, results=results)
