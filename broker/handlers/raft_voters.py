"""AddRaftVoter (80, v0-v1), RemoveRaftVoter (81, v0) and UpdateRaftVoter (82, v0) through a
broker: asked of the active controller (KIP-853, issue 28).

Kafka serves these on its controllers' listener and forwards them from brokers; tidelog's
controllers speak HTTP, so the broker asks the active one with the `add-raft-voter` /
`remove-raft-voter` / `update-raft-voter` RPCs (`quorum/voter_routes.py`, which the admin
API's /v1/quorum/voters shares) and answers on kio's messages of the version sent. A voter's
listeners: `CONTROLLER` is its HTTP API (what tidelog's controllers serve, as Kafka's
controller listener does), `RAFT` its quorum address (optional on an add: the new controller
says which). Errors are Kafka's: DUPLICATE_VOTER, VOTER_NOT_FOUND, REQUEST_TIMED_OUT,
INVALID_REQUEST, INCONSISTENT_CLUSTER_ID; a broker that reaches no active controller answers
NOT_CONTROLLER (retriable).
"""

from __future__ import annotations

import base64
import logging
import uuid
from typing import Any, Final

from broker.controller_client import ControllerUnavailableError
from broker.handlers.context import BrokerContext, ClientInfo
from common.errors import ErrorCode
from common.protocol import messages
from common.protocol.api_keys import ApiKey

log = logging.getLogger(__name__)

CONTROLLER_LISTENER: Final = "CONTROLLER"  # the voter's HTTP API
RAFT_LISTENER: Final = "RAFT"  # the voter's quorum (pysyncobj) address


def directory_id(value: uuid.UUID | None) -> str:
    """Kafka's Uuid as the admin API writes it (url-safe base64, unpadded)."""
    return base64.urlsafe_b64encode((value or uuid.UUID(int=0)).bytes).decode().rstrip("=")


def listeners(req: Any) -> dict[str, str]:
    return {lst.name: f"{lst.host}:{int(lst.port)}" for lst in req.listeners}


async def _ask(ctx: BrokerContext, rpc: str, body: dict[str, Any], what: str,
               client: ClientInfo) -> tuple[ErrorCode, str | None]:
    if ctx.controller_client is None:
        return ErrorCode.UNKNOWN_SERVER_ERROR, "this broker has no controller"
    try:
        reply = await ctx.controller_client.call(rpc, body)
    except ControllerUnavailableError as exc:
        log.warning("%s from %s: no answer from the controllers: %s", what, client.client_id, exc)
        return ErrorCode.NOT_CONTROLLER, f"no active controller answered: {exc}"
    code = messages.error_code(reply.get("error_code", 0))
    if code != ErrorCode.NONE:
        ctx.refusals.refused(client, what, int(code), reply.get("error_message"))
        return code, reply.get("error_message")
    log.info("%s from %s: voters now %s", what, client.client_id, reply.get("voter_ids"))
    return ErrorCode.NONE, None


async def handle_add_raft_voter(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    m = messages.response_module(ApiKey.ADD_RAFT_VOTER, version)
    endpoints = listeners(req)
    message: str | None
    if CONTROLLER_LISTENER not in endpoints:
        code, message = ErrorCode.INVALID_REQUEST, (f"the listeners {sorted(endpoints)} name no "
                                                     f"{CONTROLLER_LISTENER} listener (the controller's API)")
    else:
        body = {"cluster_id": req.cluster_id, "voter_id": int(req.voter_id),
                "directory_id": directory_id(req.voter_directory_id), "api_address": endpoints[CONTROLLER_LISTENER],
                "raft_address": endpoints.get(RAFT_LISTENER)}
        code, message = await _ask(ctx, "add-raft-voter", body, "AddRaftVoter", client)
    return messages.build(m.AddRaftVoterResponse, throttle_time=messages.NO_THROTTLE, error_code=code,
                          error_message=message)


async def handle_remove_raft_voter(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    m = messages.response_module(ApiKey.REMOVE_RAFT_VOTER, version)
    body = {"cluster_id": req.cluster_id, "voter_id": int(req.voter_id),
            "directory_id": directory_id(req.voter_directory_id)}
    code, message = await _ask(ctx, "remove-raft-voter", body, "RemoveRaftVoter", client)
    return messages.build(m.RemoveRaftVoterResponse, throttle_time=messages.NO_THROTTLE, error_code=code,
                          error_message=message)


async def handle_update_raft_voter(ctx: BrokerContext, req: Any, version: int, client: ClientInfo) -> Any:
    m = messages.response_module(ApiKey.UPDATE_RAFT_VOTER, version)
    endpoints = listeners(req)
    body = {"cluster_id": req.cluster_id, "voter_id": int(req.voter_id),
            "directory_id": directory_id(req.voter_directory_id), "api_address": endpoints.get(CONTROLLER_LISTENER),
            "raft_address": endpoints.get(RAFT_LISTENER)}
    code, _message = await _ask(ctx, "update-raft-voter", body, "UpdateRaftVoter", client)
    leader = messages.build(m.CurrentLeader, leader_id=-1, leader_epoch=-1, host="", port=0)
    return messages.build(m.UpdateRaftVoterResponse, throttle_time=messages.NO_THROTTLE, error_code=code,
                          current_leader=leader)
