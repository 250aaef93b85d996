"""DescribeQuorum on the controller's HTTP API (issue 28).

- `GET /v1/quorum` (admin API, JSON; OpenAPI in quorum.openapi): served by the active
  controller — the Raft leader, the only voter that knows the followers' progress — and
  forwarded there by any other controller, as writes are (`RequestRouter.write`).
- `POST /rpc/describe-quorum` (broker RPC, msgpack): what a broker asks when a client sends
  DescribeQuorum (`broker/handlers/describe_quorum.py`), as Kafka's brokers forward it to the
  controller; any other controller answers NOT_CONTROLLER naming the active one.
Both carry `QuorumDescription.to_map()`; tidelog's controllers have no Kafka-protocol
listener (their API is HTTP), so these are the controllers' two ways to be asked.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import msgpack
from aiohttp import web

from common import rpc
from common.errors import ErrorCode
from quorum.admin_api import AdminError
from quorum.broker_rpc import MSGPACK, RpcError

if TYPE_CHECKING:
    from quorum.active_controller import ActiveController
    from quorum.controller_runtime import ControllerRuntime
    from quorum.metadata_log import MetadataLog

Write = Callable[[web.Request, bytes, Callable[[], Awaitable[web.Response]]], Awaitable[web.Response]]


class QuorumRoutes:
    """The two DescribeQuorum routes of one controller."""

    def __init__(self, log: MetadataLog, controller: ActiveController, runtime: ControllerRuntime,
                 node_id: int, *, write: Write, active_api: Callable[[], tuple[int | None, str | None]]) -> None:
        self._log, self._controller, self._runtime, self._node_id = log, controller, runtime, node_id
        self._write, self._active_api = write, active_api

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/v1/quorum", self._get_quorum), web.post("/rpc/describe-quorum", self._rpc)]

    def description(self) -> dict[str, Any] | None:
        """This controller's answer if it leads the quorum, else None."""
        observers = []
        if self._controller.is_active:  # the brokers' sessions live on the active controller
            sessions, wall_ms = self._runtime.sessions(), int(time.time() * 1000)
            for broker_id, age_ms in self._runtime.heartbeat_ages().items():
                offset = sessions.metadata_offset(broker_id)
                observers.append((broker_id, wall_ms - age_ms, -1 if offset is None else offset))
        answer = self._log.describe_quorum(observers)
        return None if answer is None else answer.to_map()

    async def _get_quorum(self, request: web.Request) -> web.Response:
        async def run() -> web.Response:
            answer = self.description()
            if answer is None:  # active controller but no longer Raft leader: route again
                raise AdminError("NOT_CONTROLLER", f"controller {self._node_id} no longer leads the quorum")
            return web.json_response(answer)
        return await self._write(request, b"", run)

    async def _rpc(self, request: web.Request) -> web.Response:
        answer = self.description()
        if answer is None:
            node, address = self._active_api()
            reply = RpcError(ErrorCode.NOT_CONTROLLER, f"controller {self._node_id} does not "
                             "lead the quorum", controller_id=node, controller_address=address).reply
        else:
            reply = rpc.encode_reply(answer)
        return web.Response(body=msgpack.packb(reply, use_bin_type=True), content_type=MSGPACK)
