"""The asyncio side of request-level faults (issue 33): applying a matched fault to a request, and
the control routes a test harness installs faults through. The rules are broker/request_faults.py.

    answer = start_faulted(fault, row, request, version, client, serve)   # in RequestHandler.start
    routes = control_routes(table, token)     # POST/GET/DELETE /v1/request-faults on GET /metrics' port

How each kind is applied, and why:
- error: the API's answer with the error (request_faults.error_response); the handler never runs.
- delay: the request waits `delay_ms` on the event loop (other connections carry on), then is
  served. An API whose row says `ordered_appends` (Produce) is served first and its answer held
  instead: our server pipelines a connection's requests where Kafka mutes the channel until the
  answer is sent, so holding a Produce before its append would let the next Produce on that
  connection append first, which Kafka never does (an idempotent producer would see
  OUT_OF_ORDER_SEQUENCE_NUMBER).
- drop_before / drop_after: `InjectedDisconnect` ends the connection (the server closes it
  once the answers before it are out), before the handler runs or once it has, the answer
  discarded. It is a ConnectionError, so the server logs it as a routine end; this module
  logs the fault's own line.
- throttle: served through a codec that sets throttle_time_ms (KIP-219: the client backs off).

Every firing logs one INFO line naming the fault, the API and the client.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import logging
from collections.abc import Awaitable, Callable
from hashlib import sha256
from typing import Any, Final

from broker import request_faults as rf
from broker.handlers.context import ApiRow, ClientInfo
from broker.request_faults import ActiveFault, FaultTable
from broker.server import Later
from common.protocol.dispatch import Codec
from common.protocol.primitives import Chunk
from common.units import SECOND_MS

logger = logging.getLogger(__name__)

ROUTE: Final = "/v1/request-faults"
TOKEN_LABEL: Final = b"tidelog request faults v1"  # the control token is HMAC(RPC secret, this label)
MAX_BODY_BYTES: Final = 4096  # a fault's JSON is a few hundred bytes

Answer = list[Chunk] | None | Later[list[Chunk] | None]
Serve = Callable[[ApiRow], Answer]  # serves the request through this row (its codec)


class InjectedDisconnect(ConnectionResetError):
    """A drop_connection fault: the server ends the connection here."""


def control_token(secret: bytes) -> str:
    """The bearer token of the control routes, derived from the broker's RPC key (the harness derives
    the same key from the data dir's master secret), so the key itself never travels."""
    return hmac.new(secret, TOKEN_LABEL, sha256).hexdigest()


def start_faulted(fault: ActiveFault, row: ApiRow, request: Any, version: int, client: ClientInfo,
                  serve: Serve) -> Answer:
    """`RequestHandler.start`'s answer for a request `fault` matched (its firing is counted)."""
    spec = fault.spec
    logger.info("Request fault %d fired (%d/%s): %s; %s v%d from client %r at %s", fault.fault_id, fault.fired,
                spec.times if spec.times is not None else "unlimited", spec.describe(), rf.api_name(row.api_key),
                version, client.client_id, client.host or "?")
    if spec.kind == rf.ERROR:
        assert spec.error is not None, "FaultSpec: an error fault names its error"
        response = rf.error_response(row.api_key, version, request, spec.error)
        if response is None and getattr(request, "acks", None) == 0:
            return None  # Produce acks=0: no answer either way, and nothing appended
        if response is None:  # refused at install; a version outside the check: serve it as is
            return serve(row)
        return row.codec.encode(response, version)
    if spec.kind == rf.DROP_BEFORE:
        raise InjectedDisconnect(f"request fault {fault.fault_id}: connection dropped before serving")
    if spec.kind == rf.THROTTLE:
        return serve(dataclasses.replace(row, codec=_throttled(row.codec, spec.throttle_ms)))
    if spec.kind == rf.DROP_AFTER:
        answer = serve(row)  # served (a Produce appended): only the answer is lost
        lost = InjectedDisconnect(f"request fault {fault.fault_id}: answer dropped after serving")
        return Later(_then_raise(answer.answer, lost)) if isinstance(answer, Later) else _raise(lost)
    seconds = spec.delay_ms / SECOND_MS
    if row.ordered_appends:
        # Appends keep the connection's order (idempotent sequence numbers): served at once, the
        # answer held. Everything else is served after the delay, as if it arrived late: a Fetch
        # held so is a slow follower or consumer, whose fetch offset the leader learns only then
        # (serving it at once would move the follower's offset and so the high watermark on time).
        return Later(_held(seconds, serve(row)))
    return Later(_delayed(seconds, lambda: serve(row)))


def _raise(error: BaseException) -> Answer:
    raise error


async def _then_raise(pending: Awaitable[Any], error: BaseException) -> list[Chunk] | None:
    await pending
    raise error


async def _held(seconds: float, answer: Answer) -> list[Chunk] | None:
    await asyncio.sleep(seconds)
    return await answer.answer if isinstance(answer, Later) else answer


async def _delayed(seconds: float, serve: Callable[[], Answer]) -> list[Chunk] | None:
    await asyncio.sleep(seconds)
    answer = serve()
    return await answer.answer if isinstance(answer, Later) else answer


def _throttled(codec: Codec, throttle_ms: int) -> Codec:
    """`codec`, with throttle_time_ms set on every answer it encodes."""
    def encode(response: Any, version: int) -> list[Chunk]:
        return codec.encode(rf.with_throttle(response, throttle_ms), version)
    return dataclasses.replace(codec, encode=encode)


# ---- the control routes -------------------------------------------------------------------------

def control_routes(table: FaultTable, token: str | None, broker_id: int) -> list[tuple[str, str, Any]]:
    """(method, path, handler) rows for the broker's HTTP app. Without a token (no RPC secret) every
    route answers 404: fault injection is off."""
    from aiohttp import web

    def authorized(request: web.Request) -> web.Response | None:
        if token is None:
            return web.json_response({"error": "request faults are off: this broker has no "
                                      "controller.rpc.secret.file"}, status=404)
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return web.json_response({"error": "a request-fault token is required (Authorization: Bearer)"},
                                     status=403)
        return None

    async def install(request: web.Request) -> web.Response:
        if (refused := authorized(request)) is not None:
            return refused
        if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
            return web.json_response({"error": f"body larger than {MAX_BODY_BYTES} bytes"}, status=413)
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("body: a JSON object describing one fault")
            fault = table.install(rf.parse_fault(body))
        except ValueError as exc:  # json.JSONDecodeError is one too
            return web.json_response({"error": str(exc)}, status=400)
        logger.info("Broker %d: request fault %d installed: %s", broker_id, fault.fault_id, fault.spec.describe())
        return web.json_response(fault.to_json(), status=201)

    async def listing(request: web.Request) -> web.Response:
        if (refused := authorized(request)) is not None:
            return refused
        return web.json_response({"faults": rf.installed_json(table.faults.values())})

    async def remove(request: web.Request) -> web.Response:
        if (refused := authorized(request)) is not None:
            return refused
        try:
            fault_id = int(request.match_info["fault_id"])
        except ValueError:
            return web.json_response({"error": "fault id: a whole number"}, status=400)
        fault = table.remove(fault_id)
        if fault is None:
            return web.json_response({"error": f"no request fault {fault_id}"}, status=404)
        logger.info("Broker %d: request fault %d removed after firing %d time(s)", broker_id, fault_id, fault.fired)
        return web.json_response(fault.to_json())

    async def clear(request: web.Request) -> web.Response:
        if (refused := authorized(request)) is not None:
            return refused
        removed = table.clear()
        if removed:
            logger.info("Broker %d: %d request fault(s) removed", broker_id, len(removed))
        return web.json_response({"faults": rf.installed_json(removed)})

    return [("POST", ROUTE, install), ("GET", ROUTE, listing), ("DELETE", ROUTE, clear),
            ("DELETE", ROUTE + "/{fault_id}", remove)]


def token_from_config(config: Any) -> str | None:
    """The control token of a broker whose config names an RPC secret file, derived from its own
    RPC key (a broker holds no master secret, issue 29; the harness derives the same key from the
    data dir's master); None (fault injection off) without one. The file exists by now: the broker
    refuses to start without it."""
    from security.rpc_secret import signer_from_config

    signer = signer_from_config(config, config["node.id"])
    return None if signer is None else control_token(signer.secret)
