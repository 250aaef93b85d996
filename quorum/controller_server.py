"""The controller's HTTP server: admin JSON API under /v1, broker RPCs under /rpc, /metrics.

Reads are served by every controller from its own committed image (a follower may lag the
active controller by a few milliseconds), once it has caught up after a restart. Writes are
validated here first (a bad body never leaves this node), then on the active controller they
go through `ActiveController.decide` and are answered once their records are committed and
applied, with the resulting view and `metadata_offset`; any other controller forwards them to
the active one. Where a request runs, the forwarding and the read gate are
`quorum.request_routing`'s; the routes and their handlers are here (and in `topic_routes`,
`reassignment_routes`, `broker_config_routes`, `broker_rpc`, `group_api`, `records_api`,
`transaction_api`).

Every bad input answers 4xx `{"error", "message", "field"}` (`quorum.admin_api`); a 500 only
ever means a bug, and is logged with its traceback.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import random
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web

from common.prometheus import CONTENT_TYPE
from metadata.image import MetadataImage
from quorum import admin_api as api
from quorum import admin_views as views
from quorum.acl_routes import AclRoutes
from quorum.scram_routes import ScramRoutes
from quorum.active_controller import ActiveController
from quorum.admin_api import AdminError, ApiSettings
from quorum.broker_config_routes import BrokerConfigRoutes
from quorum.group_config_routes import GroupConfigRoutes
from quorum.broker_rpc import BrokerRpc, RpcAuthGate
from quorum.controller_runtime import ControllerRuntime
from quorum.group_api import GroupApi
from quorum.http_json import read_json
from quorum.feature_routes import FeatureRoutes
from quorum.metadata_log import MetadataLog
from quorum.openapi import openapi_document
from quorum.quorum_routes import QuorumRoutes
from quorum.quorum_view import named_leader
from quorum.reassignment_routes import ReassignmentRoutes
from quorum.records_api import RecordsApi
from quorum.replication_control import elect_leaders
from quorum.request_routing import RequestRouter
from quorum.topic_routes import TopicRoutes
from quorum.transaction_api import TransactionApi
from quorum.voter_routes import VoterRoutes
from security.controller_tls import controller_url
from security.controller_tls_context import server_context
from security.rpc_secret import verifier_from_file

logger = logging.getLogger(__name__)


class ServerExtension(Protocol):
    """More routes on the controller's server, from a package above `quorum` (the web console)."""

    def routes(self) -> list[web.RouteDef]: ...
    def is_public(self, path: str) -> bool: ...  # served without admin.token even beyond loopback
    def openapi_paths(self) -> dict[str, Any]: ...
    async def close(self) -> None: ...


# What the process's entry point adds to every ControllerServer it starts: `tidelog controller`
# and `tidelog combined` (tidelog.cli, the app layer) add the web console (issue 32). quorum
# imports none of them, so the architecture drawing keeps its arrows.
EXTENSIONS: list[Callable[["ControllerServer"], ServerExtension]] = []


class ControllerServer:
    """The HTTP server of one controller; `start` binds it, `stop` drains and closes it."""

    def __init__(self, log: MetadataLog, controller: ActiveController, settings: ApiSettings) -> None:
        self._log, self._controller, self._settings = log, controller, settings
        self.runtime = ControllerRuntime(log, controller, settings, watch_listeners=True)
        self._brokers = BrokerRpc(log, self.runtime, settings, active_api=self.active_api)
        self.router = RequestRouter(log, controller, settings, self.active_api)  # writes, read readiness
        self._runner: web.AppRunner | None = None
        self._in_flight = 0
        # issue 29: every /rpc/ request proven with the cluster's RPC secret (security.rpc_auth)
        rpc_auth = RpcAuthGate(verifier_from_file(settings.rpc_secret_file, settings.node_id), settings.node_id)
        self.app = web.Application(client_max_size=max(api.MAX_ADMIN_BODY_BYTES, api.MAX_RPC_BODY_BYTES),
                                   middlewares=[self._errors, rpc_auth.middleware])
        self.rng = random.Random(os.urandom(16))  # replica placement; the rules take it as an argument
        self._runtime_task: asyncio.Task[None] | None = None
        self.extensions = [make(self) for make in EXTENSIONS]
        self.app.add_routes(self._admin_routes() + self._brokers.routes()
                            + GroupApi(self.image, self.authorize).routes()  # consumer groups (issue 12)
                            + RecordsApi(self.image, self.authorize).routes()  # DeleteRecords (issue 18)
                            + TransactionApi(self.image, self.authorize).routes()  # KIP-664 (issue 27)
                            + QuorumRoutes(log, controller, self.runtime, settings.node_id, write=self.write,
                                           active_api=self.active_api).routes()  # DescribeQuorum (issue 28)
                            + VoterRoutes(self, log).routes()  # AddRaftVoter / RemoveRaftVoter (KIP-853)
                            + FeatureRoutes(self).routes()  # UpdateFeatures, finalized features (issue 28)
                            + [r for e in self.extensions for r in e.routes()])  # the web console (issue 32)

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        self.router.start()
        self._runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=api.SHUTDOWN_GRACE)
        await self._runner.setup()
        # issue 29: https when listener.name.controller.ssl.keystore.location is set, else plain http
        tls = server_context(self._settings.tls)
        site = web.TCPSite(self._runner, self._settings.host, self._settings.port, ssl_context=tls)
        await site.start()
        await self._brokers.start()
        self._runtime_task = asyncio.create_task(self.runtime.run(), name="controller-runtime")
        logger.info("Controller %d HTTP API listening on %s (admin /v1, broker RPCs /rpc)", self._settings.node_id,
                    controller_url(f"{self._settings.host}:{self._settings.port}", tls))

    async def stop(self) -> None:
        if self._runtime_task is not None:
            self._runtime_task.cancel()
            await asyncio.gather(self._runtime_task, return_exceptions=True)
        await self._brokers.stop()
        for extension in self.extensions:
            await extension.close()
        if self._runner is not None:
            await self._runner.cleanup()
        await self.router.close()

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
        """Run a validated write here if active, else forward it (`RequestRouter.write`)."""
        return await self.router.write(request, raw, run)

    async def decide(self, fn: Callable[[MetadataImage], Any]) -> tuple[Any, int | None]:
        """Run one decision on the active controller: (its response, last committed offset)."""
        response, outcome = await self.runtime.decide(fn, api.WRITE_TIMEOUT)
        return response, None if outcome is None else outcome.last_offset

    # -- admin handlers --------------------------------------------------------------

    def _admin_routes(self) -> list[web.RouteDef]:
        return [
            web.get("/v1/cluster", self._get_cluster), web.get("/v1/brokers", self._get_brokers),
            *BrokerConfigRoutes(self).routes(),  # dynamic broker configs (issue 18): before /v1/brokers/{id}
            *GroupConfigRoutes(self).routes(),  # per-group configs (KIP-848)
            web.get("/v1/brokers/{id}", self._get_broker),
            web.post("/v1/brokers/{id}/shutdown", self._shutdown_broker),
            *TopicRoutes(self).routes(),
            *ReassignmentRoutes(self).routes(),  # KIP-455 (issue 18)
            *AclRoutes(self).routes(),  # CreateAcls / DescribeAcls / DeleteAcls (issue 29)
            *ScramRoutes(self).routes(),  # AlterUserScramCredentials / DescribeUserScramCredentials (KIP-554)
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
        return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})

    async def _openapi(self, request: web.Request) -> web.Response:
        document = openapi_document()
        for extension in self.extensions:
            document["paths"].update(extension.openapi_paths())
        return web.json_response(document)

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
            # issue 29: beyond loopback, reads need admin.token too (/rpc/ has its own proofs; who
            # an observer is, /v1/quorum/replica, is asked by the active controller before it joins)
            if self._settings.reads_need_token and not request.path.startswith("/rpc/") \
                    and request.path != "/v1/quorum/replica" \
                    and not any(e.is_public(request.path) for e in self.extensions):
                self.authorize(request)
            # /v1/quorum/replica: who this controller is, asked of an observer before it joins (KIP-853)
            if request.method == "GET" and request.path.startswith("/v1/") \
                    and request.path not in ("/v1/cluster", "/v1/quorum/replica"):
                await self.router.caught_up()
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
