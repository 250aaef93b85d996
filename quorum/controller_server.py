"""The controller's HTTP server: admin JSON API under /v1, broker RPCs under /rpc, /metrics.

Reads are served by every controller from its own committed image (a follower may lag the
active controller by a few milliseconds). Writes are validated here first (a bad body never
leaves this node), then:

- on the active controller they go through `ActiveController.decide` and are answered once
  their records are committed and applied, with the resulting view and `metadata_offset`;
- on any other controller they are forwarded to the active one (found through the Raft
  leader and `controller.api.voters`) and its answer is passed back unchanged. A forward that
  is refused before anything was appended (NOT_CONTROLLER, connection refused) is retried
  against the new active controller until `ACTIVE_WAIT`; a forward whose outcome is unknown
  (timeout, connection lost mid-way) answers 504 REQUEST_TIMED_OUT: re-read before retrying.
  A forwarded request is never forwarded again (`FORWARDED_HEADER`), so there are no loops.

Every bad input answers 4xx `{"error", "message", "field"}` (`quorum.admin_api`); a 500 only
ever means a bug, and is logged with its traceback.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import random
from collections.abc import Awaitable, Callable
from typing import Any, Final

import aiohttp
from aiohttp import web

from common.errors import ErrorCode
from metadata.codec import MetadataRecordError
from metadata.image import MetadataImage
from quorum import admin_api as api
from quorum import admin_views as views
from quorum.active_controller import (
    ActiveController,
    ControllerBusyError,
    NotActiveControllerError,
)
from quorum.admin_api import AdminError, ApiSettings
from quorum.broker_config_routes import BrokerConfigRoutes
from quorum.broker_rpc import BrokerRpc
from quorum.controller_result import ControllerApiError
from quorum.controller_runtime import ControllerRuntime, NotCommittedError
from quorum.group_api import GroupApi
from quorum.http_json import read_json
from quorum.log_state import RecordTooLargeError
from quorum.metadata_log import MetadataLog
from quorum.openapi import openapi_document
from quorum.quorum_view import named_leader
from quorum.reassignment_routes import ReassignmentRoutes
from quorum.records_api import RecordsApi
from quorum.replication_control import elect_leaders
from quorum.topic_routes import TopicRoutes

logger = logging.getLogger(__name__)

FORWARDED_HEADER: Final = "X-Tidelog-Forwarded-By"  # node id of the controller that forwarded


def _source_address(host: str) -> tuple[str, int] | None:
    """(host, 0) to bind outgoing connections to, or None for a wildcard listener."""
    return None if host in ("", "0.0.0.0", "::") else (host, 0)


def _answer_field(body: bytes, field: str) -> Any:
    """One top-level field of a JSON answer, None if absent or not JSON."""
    try:
        answer = json.loads(body)
    except ValueError:
        return None
    return answer.get(field) if isinstance(answer, dict) else None


def _error_name(body: bytes) -> str | None:
    error = _answer_field(body, "error")
    return error if isinstance(error, str) else None


def _metadata_offset(body: bytes) -> int | None:
    """The metadata offset a write's answer says it committed at, if it says."""
    offset = _answer_field(body, "metadata_offset")
    return offset if isinstance(offset, int) else None


# The rules name their own arguments; the API names the request's fields.
_FIELD_NAMES: Final = {"total_count": "count"}


def api_error(exc: ControllerApiError) -> AdminError:
    """A rule's refusal as the API's error: Kafka's code name, message, and the request field."""
    field = _FIELD_NAMES.get(exc.field or "", exc.field)
    if exc.code is ErrorCode.INVALID_CONFIG and field and not field.startswith("configs"):
        field = f"configs.{field}"  # the rules name the config key itself
    return AdminError(exc.code.name, exc.message, field)


class ControllerServer:
    """The HTTP server of one controller; `start` binds it, `stop` drains and closes it."""

    def __init__(self, log: MetadataLog, controller: ActiveController, settings: ApiSettings) -> None:
        self._log, self._controller, self._settings = log, controller, settings
        self.runtime = ControllerRuntime(log, controller, settings, watch_listeners=True)
        self._brokers = BrokerRpc(log, self.runtime, settings, active_api=self.active_api)
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self._in_flight = 0
        self.app = web.Application(client_max_size=max(api.MAX_ADMIN_BODY_BYTES, api.MAX_RPC_BODY_BYTES),
                                   middlewares=[self._errors])
        self.rng = random.Random(os.urandom(16))  # replica placement; the rules take it as an argument
        self._runtime_task: asyncio.Task[None] | None = None
        self.app.add_routes(self._admin_routes() + self._brokers.routes()
                            + GroupApi(self.image, self.authorize).routes()  # consumer groups (issue 12)
                            + RecordsApi(self.image, self.authorize).routes())  # DeleteRecords (issue 18)

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            # forwarded requests leave from this controller's own address (chaos cuts links by it)
            connector=aiohttp.TCPConnector(limit=api.FORWARD_CONNECTIONS_MAX,
                                           local_addr=_source_address(self._settings.host)))
        self._runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=api.SHUTDOWN_GRACE)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._settings.host, self._settings.port)
        await site.start()
        await self._brokers.start()
        self._runtime_task = asyncio.create_task(self.runtime.run(), name="controller-runtime")
        logger.info("Controller %d HTTP API listening on http://%s:%d (admin /v1, broker RPCs /rpc)",
                    self._settings.node_id, self._settings.host, self._settings.port)

    async def stop(self) -> None:
        if self._runtime_task is not None:
            self._runtime_task.cancel()
            await asyncio.gather(self._runtime_task, return_exceptions=True)
        await self._brokers.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    # -- shared by the handlers ------------------------------------------------------

    @property
    def settings(self) -> ApiSettings:
        return self._settings

    def image(self) -> MetadataImage:
        return self._log.image()

    def active_api(self) -> tuple[int | None, str | None]:
        """(node id, HTTP API address) of the active controller as this node knows it."""
        node, _ = self.active_controller()
        return node, None if node is None else self._settings.api_voters.get(node)

    def active_controller(self) -> tuple[int | None, str | None]:
        """(the active controller's node id, None) or (None, why there is none, in words)."""
        if self._controller.is_active:
            return self._settings.node_id, None
        return named_leader(self._settings.node_id, self._settings.quorum_ids, self._log.leader_address(),
                            self._raft_status())

    def authorize(self, request: web.Request) -> None:
        """With `admin.token` set, a write needs `Authorization: Bearer <token>`: 401 without, 403 wrong."""
        token = self._settings.token
        if token is None:
            return
        header = request.headers.get("Authorization")
        if not header:
            raise AdminError("CLUSTER_AUTHORIZATION_FAILED", "this write needs an 'Authorization: Bearer "
                             "<admin.token>' header", "Authorization", status=401)
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
            raise AdminError("CLUSTER_AUTHORIZATION_FAILED", "the bearer token is not this cluster's "
                             "admin.token", "Authorization", status=403)

    async def write(self, request: web.Request, raw: bytes,
                    run: Callable[[], Awaitable[web.Response]]) -> web.Response:
        """Run a validated write here if active, else forward it; bounded by ACTIVE_WAIT."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + api.ACTIVE_WAIT
        forwarded = request.headers.get(FORWARDED_HEADER)
        while True:  # bounded by the deadline
            if self._controller.is_active:
                try:
                    return await run()
                except NotActiveControllerError:
                    pass  # renounced before appending anything: route it again
                except ControllerApiError as exc:
                    raise api_error(exc) from None
                except (RecordTooLargeError, MetadataRecordError) as exc:  # a record the input made invalid
                    raise AdminError("INVALID_REQUEST", str(exc)) from None
                except ControllerBusyError as exc:
                    raise AdminError("THROTTLING_QUOTA_EXCEEDED", str(exc)) from None
                except TimeoutError as exc:
                    raise AdminError("REQUEST_TIMED_OUT", f"{exc}; retry") from None
                except NotCommittedError as exc:  # NOT_CONTROLLER (retried by a forwarder) only if nothing applied
                    raise AdminError("NOT_CONTROLLER" if exc.applied_nothing else "REQUEST_TIMED_OUT",
                                     str(exc)) from None
            else:
                node, address = self.active_api()
                if node is not None and node != self._settings.node_id and address is not None:
                    if forwarded is not None:
                        raise AdminError("NOT_CONTROLLER", f"controller {self._settings.node_id} is not "
                                         f"active; controller {node} at {address} is")
                    response = await self._forward(request, raw, node, address)
                    if response is not None:
                        return response
            if loop.time() >= deadline:
                raise AdminError("NOT_CONTROLLER", f"no active controller within {api.ACTIVE_WAIT:.0f}s; "
                                 "nothing was written, retry")
            await asyncio.sleep(api.ACTIVE_POLL)

    async def _forward(self, request: web.Request, raw: bytes, node: int,
                       address: str) -> web.Response | None:
        """The active controller's answer, or None when it certainly applied nothing (retry)."""
        assert self._session is not None, "start() opens the session"
        headers = {"Content-Type": "application/json", FORWARDED_HEADER: str(self._settings.node_id)}
        if "Authorization" in request.headers:
            headers["Authorization"] = request.headers["Authorization"]
        url = f"http://{address}{request.rel_url}"
        try:
            async with self._session.request(
                    request.method, url, data=raw, headers=headers,
                    timeout=aiohttp.ClientTimeout(total=api.FORWARD_TIMEOUT)) as response:
                if (response.content_length or 0) > api.MAX_FORWARD_RESPONSE_BYTES:
                    raise AdminError("UNKNOWN_SERVER_ERROR", f"controller {node} answered "
                                     f"{response.content_length} bytes, more than this node relays")
                body = await response.read()
                status = response.status
        except aiohttp.ClientConnectorError:
            return None  # never connected: nothing was sent
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise AdminError("REQUEST_TIMED_OUT", f"forwarding to the active controller {node} at "
                             f"{address} failed ({type(exc).__name__}); the write may or may not "
                             "have been applied: re-read before retrying") from None
        if status == 503 and _error_name(body) == "NOT_CONTROLLER":
            return None  # it applied nothing (renounced, or not active yet): find the active one
        if 200 <= status < 300:
            await self._await_applied(_metadata_offset(body))
        return web.Response(status=status, body=body, content_type="application/json",
                            headers={"X-Tidelog-Served-By": str(node)})

    async def _caught_up(self) -> None:
        """Reads are served from this controller's image: after a restart, only once it holds
        what the quorum had committed when this voter first heard from the leader (pysyncobj's
        readiness); /v1/cluster answers regardless, it is how an operator sees the lag."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + api.READ_CATCH_UP_WAIT
        while not self._log.status().ready and loop.time() < deadline:
            await asyncio.sleep(api.ACTIVE_POLL)
        if not self._log.status().ready:
            raise AdminError("COORDINATOR_LOAD_IN_PROGRESS", f"controller {self._settings.node_id} has not "
                             "caught up with the metadata log since it started; retry, or ask another controller")

    async def _await_applied(self, offset: int | None) -> None:
        """Wait (bounded) until this controller's image holds metadata `offset`: read-your-writes."""
        if offset is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + api.FORWARD_APPLY_WAIT
        while self.image().offset < offset and loop.time() < deadline:
            await asyncio.sleep(api.ACTIVE_POLL / 5)
        if self.image().offset < offset:
            logger.warning("controller %d relays a write at metadata offset %d it has not applied after %.1f s "
                        "(applied %d)", self._settings.node_id, offset, api.FORWARD_APPLY_WAIT, self.image().offset)

    async def decide(self, fn: Callable[[MetadataImage], Any]) -> tuple[Any, int | None]:
        """Run one decision on the active controller: (its response, last committed offset)."""
        response, outcome = await self.runtime.decide(fn, api.WRITE_TIMEOUT)
        return response, None if outcome is None else outcome.last_offset

    # -- admin handlers --------------------------------------------------------------

    def _admin_routes(self) -> list[web.RouteDef]:
        return [
            web.get("/v1/cluster", self._get_cluster), web.get("/v1/brokers", self._get_brokers),
            *BrokerConfigRoutes(self).routes(),  # dynamic broker configs (issue 18): before /v1/brokers/{id}
            web.get("/v1/brokers/{id}", self._get_broker),
            web.post("/v1/brokers/{id}/shutdown", self._shutdown_broker),
            *TopicRoutes(self).routes(),
            *ReassignmentRoutes(self).routes(),  # KIP-455 (issue 18)
            web.post("/v1/elections", self._elect), web.get("/metrics", self._metrics),
            web.get("/openapi.json", self._openapi),
        ]

    async def _get_cluster(self, request: web.Request) -> web.Response:
        status = self._log.status()
        raft = self._raft_status()
        voters = []
        for address, node_id in sorted(self._settings.quorum_ids.items(), key=lambda item: item[1]):
            me = node_id == self._settings.node_id
            voters.append({
                "node_id": node_id, "quorum_address": address,
                "api_address": self._settings.api_voters.get(node_id),
                "role": "leader" if status.leader == address else "follower",
                # from this node's point of view; the leader also knows how far each one replicated
                "connected": True if me else raft.get(f"partner_node_status_server_{address}") == 2,
                "match_index": raft.get(f"match_idx_server_{address}"),
            })
        active, why_none = self.active_controller()
        return web.json_response({
            "cluster_id": self._settings.cluster_id, "node_id": self._settings.node_id,
            "active_controller": active, "no_active_controller_reason": why_none,
            "is_active": self._controller.is_active,
            "controller_epoch": status.image.controller_epoch, "term": status.term,
            "commit_index": status.commit_index, "last_applied": status.last_applied,
            "metadata_offset": status.image.offset, "log_start_offset": status.log_start_offset,
            "voters": voters,
        })

    def _raft_status(self) -> dict[str, Any]:
        try:  # pysyncobj builds it from dicts its tick thread owns: rarely, one changes under us
            return self._log.getStatus()
        except RuntimeError:
            return {}

    async def _get_brokers(self, request: web.Request) -> web.Response:
        ages = self.runtime.heartbeat_ages()
        brokers = self.image().cluster.brokers
        return web.json_response([views.broker_view(brokers[b], ages.get(b)) for b in sorted(brokers)])

    async def _get_broker(self, request: web.Request) -> web.Response:
        broker_id = api.parse_broker_id(request.match_info["id"])
        broker = self.image().broker(broker_id)
        if broker is None:
            raise AdminError("BROKER_ID_NOT_REGISTERED", f"broker {broker_id} is not registered", "id")
        return web.json_response(views.broker_view(broker, self.runtime.heartbeat_ages().get(broker_id)))

    async def _shutdown_broker(self, request: web.Request) -> web.Response:
        """Ask a broker to shut down: 202 at once; its next heartbeat (on the active controller)
        tells it, and it runs the same controlled shutdown as on SIGTERM."""
        self.authorize(request)
        broker_id = api.parse_broker_id(request.match_info["id"])
        raw, body = await read_json(request) if request.body_exists else (b"", None)
        api.parse_shutdown_broker(body)

        async def run() -> web.Response:
            broker = self.image().broker(broker_id)
            if broker is None:
                raise AdminError("BROKER_ID_NOT_REGISTERED", f"broker {broker_id} is not registered", "id")
            self.runtime.request_shutdown(broker_id, broker.broker_epoch)
            view = views.broker_view(broker, self.runtime.heartbeat_ages().get(broker_id))
            return web.json_response({**view, "shutdown_requested": True}, status=202)

        return await self.write(request, raw, run)

    async def _elect(self, request: web.Request) -> web.Response:
        self.authorize(request)
        raw, body = await read_json(request)
        req = api.parse_elections(body)

        async def run() -> web.Response:
            response, offset = await self.decide(lambda image: elect_leaders(
                image, election=req.election, partitions=req.partitions))
            return web.json_response({**views.election_view(response), "metadata_offset": offset})

        return await self.write(request, raw, run)

    async def _metrics(self, request: web.Request) -> web.Response:
        status = self._log.status()
        text = views.metrics_text(status.image, is_active=self._controller.is_active, term=status.term,
                                commit_index=status.commit_index,
                                heartbeat_ages_ms=self.runtime.heartbeat_ages())
        return web.Response(text=text, content_type="text/plain", headers={"X-Prometheus-Format": "0.0.4"})

    async def _openapi(self, request: web.Request) -> web.Response:
        return web.json_response(openapi_document())

    # -- errors ----------------------------------------------------------------------

    @web.middleware
    async def _errors(self, request: web.Request,
                      handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        """Bound the requests in flight; answer every error as JSON (RPCs answer their own)."""
        if self._in_flight >= api.MAX_IN_FLIGHT_REQUESTS:
            error = AdminError("THROTTLING_QUOTA_EXCEEDED", f"{self._in_flight} requests are being served; "
                               "retry later", None, status=429)
            return web.json_response(error.body(), status=error.status)
        self._in_flight += 1
        try:
            if request.method == "GET" and request.path.startswith("/v1/") and request.path != "/v1/cluster":
                await self._caught_up()
            return await handler(request)
        except AdminError as exc:
            error = exc
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            message = {404: f"no such endpoint: {request.path}",
                       405: f"{request.method} is not allowed on {request.path}"}.get(exc.status, exc.reason)
            error = AdminError("INVALID_REQUEST", message, None, status=exc.status)
        except Exception:  # a bug: say so, keep serving
            logger.exception("%s %s failed", request.method, request.path)
            error = AdminError("UNKNOWN_SERVER_ERROR", "internal error; see the controller's log", None)
        finally:
            self._in_flight -= 1
        headers = {"WWW-Authenticate": 'Bearer realm="tidelog"'} if error.status == 401 else None
        return web.json_response(error.body(), status=error.status, headers=headers)
