"""The admin API's voter routes (KIP-853, issue 28): the quorum's voter set and changes to it.

- `GET /v1/quorum/voters`: the voter set this controller's log holds (ids, directory ids,
  quorum and API addresses) and the observers the leader is catching up.
- `POST /v1/quorum/voters` `{"voter_id", "api_address", "directory_id"?, "raft_address"?}`:
  AddRaftVoter. The active controller asks the new controller's API who it is (Kafka sends it
  ApiVersions), catches it up as an observer, then appends its membership entry and answers
  once a majority of the new set committed it.
- `DELETE /v1/quorum/voters/{id}?directory_id=...`: RemoveRaftVoter; removing the active
  controller hands leadership over first and the request is served by the next one.
- `GET /v1/quorum/replica`: this controller's own identity (what an add asks).
Errors are Kafka's names (`quorum.voter_set`), with the request field at fault; the quorum is
unchanged by any refused change.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

import aiohttp
import msgpack
from aiohttp import web

from common import rpc
from common.errors import ErrorCode
from common.rpc_messages import RpcStatus
from common.units import SECONDS
from quorum.active_controller import NotActiveControllerError
from quorum.admin_api import AdminError
from quorum.broker_rpc import MSGPACK
from quorum.http_json import read_json
from security.controller_tls import controller_url
from security.controller_tls_context import client_context_of
from quorum.voter_set import (
    MAX_VOTERS,
    VoterChangeError,
    VoterEntry,
    VoterSet,
    check_address,
    check_directory_id,
    check_identity,
)

if TYPE_CHECKING:
    from quorum.controller_server import ControllerServer
    from quorum.metadata_log import MetadataLog

VOTER_CHANGE_TIMEOUT: Final = 5 * SECONDS  # catch-up and commit of one change (fits a forwarded write)
PROBE_TIMEOUT: Final = 2 * SECONDS  # asking the new controller who it is
MAX_PROBE_ANSWER_BYTES: Final = 64 * 1024
STATUS_BY_ERROR: Final = {"DUPLICATE_VOTER": 409, "VOTER_NOT_FOUND": 404, "REQUEST_TIMED_OUT": 504,
                          "INVALID_REQUEST": 400}


def admin_error(exc: VoterChangeError) -> Exception:
    """The API's answer to a refused change; NOT_LEADER_OR_FOLLOWER is routed again instead."""
    if exc.error == "NOT_LEADER_OR_FOLLOWER":
        return NotActiveControllerError(exc.message)
    return AdminError(exc.error, exc.message, exc.field, status=STATUS_BY_ERROR.get(exc.error, 400))


def parse_add(body: object) -> tuple[int, str, str | None, str | None]:
    """(voter id, API address, directory id or None, quorum address or None) of an add request."""
    if not isinstance(body, dict):
        raise AdminError("INVALID_REQUEST", "the request body must be a JSON object", None)
    unknown = sorted(set(body) - {"voter_id", "api_address", "directory_id", "raft_address"})
    if unknown:
        raise AdminError("INVALID_REQUEST", f"unknown field {unknown[0]!r}", unknown[0])
    voter_id = body.get("voter_id")
    if type(voter_id) is not int or voter_id < 0:
        raise AdminError("INVALID_REQUEST", f"voter_id must be a non-negative integer, got {voter_id!r:.40}",
                         "voter_id")
    try:
        api_address = check_address(body.get("api_address"), "api_address")
        directory_id = body.get("directory_id")
        if directory_id is not None:
            directory_id = check_directory_id(directory_id)
        raft_address = body.get("raft_address")
        if raft_address is not None:
            raft_address = check_address(raft_address, "raft_address")
    except VoterChangeError as exc:
        raise AdminError(exc.error, exc.message, exc.field) from None
    return voter_id, api_address, directory_id, raft_address


class VoterRoutes:
    """The /v1/quorum/voters routes of one ControllerServer."""

    def __init__(self, server: ControllerServer, log: MetadataLog) -> None:
        self._server, self._log = server, log

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/v1/quorum/voters", self._get_voters), web.post("/v1/quorum/voters", self._add),
                web.delete("/v1/quorum/voters/{id}", self._remove), web.get("/v1/quorum/replica", self._replica),
                web.post("/v1/quorum/replica", self._replica_told),
                web.post("/rpc/add-raft-voter", self._rpc_add), web.post("/rpc/remove-raft-voter", self._rpc_remove),
                web.post("/rpc/update-raft-voter", self._rpc_update)]

    def identity(self) -> dict[str, Any]:
        me = self._log.voter_set().get(self._server.settings.node_id)
        return {"node_id": self._server.settings.node_id, "directory_id": self._log.directory_id,
                "raft_address": self._log.raft_address,
                "api_address": f"{self._server.settings.host}:{self._server.settings.port}",
                "is_voter": me is not None}

    async def _replica(self, request: web.Request) -> web.Response:
        return web.json_response(self.identity())

    async def _replica_told(self, request: web.Request) -> web.Response:
        """The leader's probe before an add: `{"voters": [quorum addresses]}`, this controller's identity
        back. An observer connects to (or accepts) those voters from now on; a hint, so no token: it
        changes no state but whom an observer talks to, and every quorum message needs the password."""
        _raw, body = await read_json(request)
        voters = body.get("voters") if isinstance(body, dict) else None
        if not isinstance(voters, list) or len(voters) > MAX_VOTERS:
            raise AdminError("INVALID_REQUEST", f"voters must be a list of at most {MAX_VOTERS} host:port", "voters")
        try:
            addresses = [check_address(a, "voters") for a in voters]
        except VoterChangeError as exc:
            raise AdminError(exc.error, exc.message, exc.field) from None
        await self._log.on_tick(lambda: self._log.learn_peers(addresses))
        return web.json_response(self.identity())

    async def _get_voters(self, request: web.Request) -> web.Response:
        leader = self._log.leader_address()
        voters = [{**v.to_map(), "api_address": self._server.settings.api_voters.get(v.node_id, v.api_address),
                   "role": "leader" if v.raft_address == leader else "follower"} for v in self._log.voter_set()]
        observers = [{**o.to_map(), "role": "observer"} for o in self._log.learners()]
        return web.json_response({"voters": voters, "observers": observers})

    async def _probe(self, api_address: str) -> dict[str, Any]:
        """The new controller's answer to `POST /v1/quorum/replica` (Kafka: its ApiVersions), which
        tells it the current voters' quorum addresses (it may know none of them but the static ones)."""
        tls = client_context_of(self._server.settings.tls)
        url = f"{controller_url(api_address, tls)}/v1/quorum/replica"  # https when configured (issue 29)
        voters = [v.raft_address for v in self._log.voter_set()]
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT),
                                             connector=aiohttp.TCPConnector(ssl=tls if tls is not None else True)) \
                    as session:
                async with session.post(url, json={"voters": voters}) as answer:
                    body = await answer.content.read(MAX_PROBE_ANSWER_BYTES)
            found = json.loads(body)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise AdminError("REQUEST_TIMED_OUT", f"the new controller at {api_address} is not ready to receive "
                             f"requests ({type(exc).__name__}): start it first", "api_address", status=504) from None
        if not isinstance(found, dict) or type(found.get("node_id")) is not int \
                or not isinstance(found.get("directory_id"), str) or not isinstance(found.get("raft_address"), str):
            raise AdminError("REQUEST_TIMED_OUT", f"{url} did not answer as a tidelog controller", "api_address",
                             status=504)
        return found

    async def _add(self, request: web.Request) -> web.Response:
        self._server.authorize(request)
        raw, body = await read_json(request)
        voter_id, api_address, directory_id, raft_address = parse_add(body)

        async def run() -> web.Response:
            try:
                voters = await self._add_voter(voter_id, api_address, directory_id, raft_address)
            except VoterChangeError as exc:
                raise admin_error(exc) from None
            return web.json_response({"voters": voters.to_list()})
        return await self._server.write(request, raw, run)

    async def _add_voter(self, voter_id: int, api_address: str, directory_id: str | None,
                         raft_address: str | None) -> VoterSet:
        """Probe the new controller, then AddRaftVoter on this (leading) controller."""
        try:
            found = await self._probe(api_address)
        except AdminError as exc:
            raise VoterChangeError(exc.error, exc.message, exc.field) from None
        entry = VoterEntry(voter_id, directory_id or found["directory_id"], raft_address or found["raft_address"],
                           api_address)
        check_identity(entry, found["node_id"], found["directory_id"])
        if found["raft_address"] != entry.raft_address:
            raise VoterChangeError("INVALID_REQUEST", f"controller {voter_id} listens for the quorum on "
                                   f"{found['raft_address']}, not {entry.raft_address}", "raft_address")
        return await self._log.add_voter(entry, timeout_s=VOTER_CHANGE_TIMEOUT)

    async def _remove(self, request: web.Request) -> web.Response:
        self._server.authorize(request)
        text = request.match_info["id"]
        if not text.isdigit() or len(text) > 10:
            raise AdminError("INVALID_REQUEST", f"the voter id must be a non-negative integer, got {text!r:.40}",
                             "id")
        voter_id = int(text)
        try:
            directory_id = check_directory_id(request.query.get("directory_id"), "directory_id")
        except VoterChangeError as exc:
            raise AdminError(exc.error, exc.message + " (the directory_id query parameter)", exc.field) from None

        async def run() -> web.Response:
            try:
                voters = await self._log.remove_voter(voter_id, directory_id, timeout_s=VOTER_CHANGE_TIMEOUT)
            except VoterChangeError as exc:
                raise admin_error(exc) from None
            return web.json_response({"voters": voters.to_list()})
        return await self._server.write(request, b"", run)

    # -- the broker RPCs behind AddRaftVoter / RemoveRaftVoter / UpdateRaftVoter (broker/handlers/raft_voters.py)

    async def _rpc(self, request: web.Request, change: Callable[[dict[str, Any]], Awaitable[VoterSet]]) -> web.Response:
        """Run `change` on the leader; every outcome is a reply (NOT_CONTROLLER names the active one)."""
        try:
            if (request.content_length or 0) > rpc.MAX_RPC_BODY_BYTES:
                raise VoterChangeError("INVALID_REQUEST", f"body larger than {rpc.MAX_RPC_BODY_BYTES} bytes")
            try:
                body = msgpack.unpackb(await request.read(), raw=False, strict_map_key=True)
            except (ValueError, TypeError, msgpack.UnpackException) as exc:
                raise VoterChangeError("INVALID_REQUEST", f"the body is not msgpack ({type(exc).__name__})") from None
            if not isinstance(body, dict) or type(body.get("voter_id")) is not int \
                    or not isinstance(body.get("directory_id"), str):
                raise VoterChangeError("INVALID_REQUEST", "the body needs voter_id and directory_id")
            cluster_id = body.get("cluster_id")
            if cluster_id is not None and cluster_id != self._server.settings.cluster_id:
                raise VoterChangeError("INCONSISTENT_CLUSTER_ID", f"cluster id {cluster_id!r} is not this "
                                       f"cluster's ({self._server.settings.cluster_id})", "cluster_id")
            if not self._log.leadership()[0]:
                raise VoterChangeError("NOT_LEADER_OR_FOLLOWER", "this controller does not lead the quorum")
            voters = await change(body)
            reply = rpc.encode_reply({"voter_ids": voters.ids})
        except VoterChangeError as exc:
            if exc.error == "NOT_LEADER_OR_FOLLOWER":  # the broker's client follows the redirect
                node, address = self._server.active_api()
                reply = rpc.encode_reply(None, RpcStatus(int(ErrorCode.NOT_CONTROLLER), exc.message, None, node,
                                                         address if node != self._server.settings.node_id else None))
            else:
                reply = rpc.encode_reply(None, RpcStatus(int(ErrorCode[exc.error]), exc.message, exc.field))
        return web.Response(body=msgpack.packb(reply, use_bin_type=True), content_type=MSGPACK)

    async def _rpc_add(self, request: web.Request) -> web.Response:
        async def change(body: dict[str, Any]) -> VoterSet:
            api_address = check_address(body.get("api_address"), "api_address")
            raft = body.get("raft_address")
            return await self._add_voter(body["voter_id"], api_address, check_directory_id(body["directory_id"]),
                                         None if raft is None else check_address(raft, "raft_address"))
        return await self._rpc(request, change)

    async def _rpc_remove(self, request: web.Request) -> web.Response:
        async def change(body: dict[str, Any]) -> VoterSet:
            return await self._log.remove_voter(body["voter_id"], check_directory_id(body["directory_id"]),
                                                timeout_s=VOTER_CHANGE_TIMEOUT)
        return await self._rpc(request, change)

    async def _rpc_update(self, request: web.Request) -> web.Response:
        """UpdateRaftVoter: a voter's endpoints are part of pysyncobj's membership entry (its quorum
        address names it), so an update that changes nothing is accepted and any real change is
        refused with what to do instead; a voter that is not one is VOTER_NOT_FOUND."""
        async def change(body: dict[str, Any]) -> VoterSet:
            voters = self._log.voter_set()
            current = voters.get(body["voter_id"])
            if current is None or not current.matches(check_directory_id(body["directory_id"])):
                raise VoterChangeError("VOTER_NOT_FOUND", f"no voter {body['voter_id']} with directory id "
                                       f"{body['directory_id']} in the voter set {voters.ids}", "voter_id")
            raft, api = body.get("raft_address"), body.get("api_address")
            known_api = current.api_address or self._server.settings.api_voters.get(current.node_id)
            if (raft is not None and raft != current.raft_address) or (api is not None and api != known_api):
                raise VoterChangeError("INVALID_REQUEST", f"voter {current.node_id} is at {current.raft_address} "
                                       f"(API {known_api}); tidelog cannot move a voter in place: remove it, then "
                                       "add it at its new address", "listeners")
            return voters
        return await self._rpc(request, change)
