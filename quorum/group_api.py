"""The admin API's consumer-group endpoints: the controller asks the brokers, in Kafka's protocol.

    GET    /v1/groups                   every group (ListGroups on each unfenced broker)
    GET    /v1/groups/{id}              type (classic, consumer, share), state, protocol or epochs and
                                        assignor, members (client id, host, assignment; a consumer or
                                        share group's member epochs), per partition: committed
                                        offset, log end offset (the HW), lag
    DELETE /v1/groups/{id}              an empty group and its offsets (409 NON_EMPTY_GROUP)
    POST   /v1/groups/{id}/offsets      reset: {"topic", "partitions"?, "to": earliest|latest|offset|
                                        timestamp|shift, "value"?, "execute"?: false} — a dry run unless
                                        execute is true; refused (409) while the group has members

Groups live in the brokers (their coordinators), not in the metadata log: each call opens
one short connection per broker it asks, bounded by `timeout_s`. Kafka error names and
4xx/5xx statuses as the rest of the admin API.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Final

from aiohttp import web

from common.errors import ErrorCode
from common.limits import ADMIN_BROKER_CALL_TIMEOUT, CLIENT_RETRY_BACKOFF, MAX_ADMIN_BROKER_ANSWER_BYTES
from common.protocol import list_offsets as lo
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol.frame import ClientFraming, strip_response_header
from common.protocol.primitives import ProtocolError
from groups.offset_reset import ResetTo, assigned_partitions, plan_reset
from metadata.image import MetadataImage
from quorum import admin_api as api
from quorum.admin_api import AdminError

CLIENT_ID: Final = "tidelog-admin-api"
FIND_COORDINATOR_VERSION: Final = 2  # key and key type, before KIP-699's batching
_RETRY: Final = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                           ErrorCode.NOT_COORDINATOR})
_STATUS: Final = {"GROUP_ID_NOT_FOUND": 404, "NON_EMPTY_GROUP": 409, "INVALID_GROUP_ID": 400,
                  "COORDINATOR_NOT_AVAILABLE": 503, "COORDINATOR_LOAD_IN_PROGRESS": 503,
                  "NOT_COORDINATOR": 503, "BROKER_NOT_AVAILABLE": 503}
RESET_FIELDS: Final = ("topic", "partitions", "to", "value", "execute")


def _error(code: int, message: str) -> AdminError:
    name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else f"ERROR_CODE_{code}"
    return AdminError(name, message, None, status=_STATUS.get(name, 500 if code == -1 else 400))


def _typed_members(kind: str, group: Any) -> tuple[dict[str, Any], list[dict[str, Any]], dict[tuple[str, int], str]]:
    """A KIP-848 or KIP-932 group's head, members and partition owners (a share group's partitions
    have many members: none is named the owner)."""
    def listed(assignment: Any) -> list[dict[str, Any]]:
        return [{"topic": tp.topic_name, "partition": p} for tp in assignment.topic_partitions for p in tp.partitions]

    head = {"type": kind, "state": group.group_state, "protocol_type": kind, "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch, "assignor": group.assignor_name}
    members = []
    for m in group.members:
        member = {"member_id": m.member_id, "member_epoch": m.member_epoch, "client_id": m.client_id,
                  "client_host": m.client_host, "rack_id": m.rack_id, "assignment": listed(m.assignment)}
        if kind == "consumer":
            member.update(group_instance_id=m.instance_id, target_assignment=listed(m.target_assignment))
        members.append(member)
    owners = {} if kind == "share" else {(tp.topic_name, p): m.member_id for m in group.members
                                         for tp in m.assignment.topic_partitions for p in tp.partitions}
    return head, members, owners


class GroupApi:
    def __init__(self, image: Callable[[], MetadataImage], authorize: Callable[[web.Request], None], *,
                 timeout_s: float = ADMIN_BROKER_CALL_TIMEOUT) -> None:
        self._image, self._authorize, self.timeout_s = image, authorize, timeout_s

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/v1/groups", self._list), web.get("/v1/groups/{id}", self._describe),
                web.delete("/v1/groups/{id}", self._delete), web.post("/v1/groups/{id}/offsets", self._reset)]

    # ---- Kafka calls ---------------------------------------------------------------------

    def _brokers(self) -> dict[int, tuple[str, int]]:
        out = {}
        for broker_id, b in sorted(self._image().cluster.brokers.items()):
            if not b.fenced and b.listeners:
                out[broker_id] = (b.listeners[0].host, b.listeners[0].port)
        return out

    async def _call(self, broker_id: int, api_key: ApiKey, version: int, request: Any, encode: Any,
                    decode: Any) -> Any:
        address = self._brokers().get(broker_id)
        if address is None:
            raise AdminError("BROKER_NOT_AVAILABLE", f"broker {broker_id} is not unfenced", None, status=503)
        framing = ClientFraming(CLIENT_ID, MAX_ADMIN_BROKER_ANSWER_BYTES)
        writer = None
        try:
            async with asyncio.timeout(self.timeout_s):
                reader, writer = await asyncio.open_connection(*address)
                writer.write(framing.request(int(api_key), version, encode(request, version)))
                await writer.drain()
                head = await reader.readexactly(ClientFraming.HEAD_BYTES)
                body = await reader.readexactly(framing.body_size(head))
            # header v1's tagged fields (flexible versions: ConsumerGroupDescribe, ShareGroupDescribe)
            return decode(strip_response_header(int(api_key), version, memoryview(body)), version)
        except (OSError, TimeoutError, EOFError, ProtocolError, asyncio.IncompleteReadError) as e:
            raise AdminError("BROKER_NOT_AVAILABLE", f"{api_key.name} to broker {broker_id} failed: "
                             f"{e or type(e).__name__}", None, status=503) from None
        finally:
            if writer is not None:
                writer.close()

    async def _coordinator(self, group_id: str) -> int:
        deadline = time.monotonic() + self.timeout_s
        request = messages.request_module(ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION).FindCoordinatorRequest(
            key=group_id, key_type=messages.KEY_TYPE_GROUP)
        while True:  # bounded by the deadline
            for broker_id in self._brokers():
                r = await self._call(broker_id, ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION, request,
                                     messages.encode_request, messages.response_decoder(ApiKey.FIND_COORDINATOR))
                if r.error_code == 0:
                    return int(r.node_id)
                if r.error_code not in _RETRY:
                    raise _error(r.error_code, r.error_message or f"no coordinator for {group_id!r}")
                break
            if time.monotonic() > deadline:
                raise _error(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no coordinator for {group_id!r}")
            await asyncio.sleep(CLIENT_RETRY_BACKOFF)

    async def _at_coordinator(self, group_id: str, api_key: ApiKey, version: int, request: Any, encode: Any,
                              decode: Any, error_of: Callable[[Any], int]) -> Any:
        deadline = time.monotonic() + self.timeout_s
        while True:  # bounded by the deadline
            response = await self._call(await self._coordinator(group_id), api_key, version, request, encode, decode)
            code = error_of(response)
            if code not in _RETRY or time.monotonic() > deadline:
                if code:
                    raise _error(code, f"{api_key.name} for group {group_id!r} failed")
                return response
            await asyncio.sleep(CLIENT_RETRY_BACKOFF)

    async def _offsets(self, topic: str, timestamp: int) -> dict[int, int]:
        """ListOffsets (as a consumer: up to the HW) for every partition of `topic`, from its leader."""
        image = self._image()
        t = image.topic(topic)
        if t is None:
            raise AdminError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {topic!r} does not exist", "topic")
        by_leader: dict[int, list[int]] = {}
        for p, registration in t.partitions.items():
            by_leader.setdefault(registration.leader, []).append(p)
        out = {}
        for leader, partitions in sorted(by_leader.items()):
            if leader < 0:
                continue
            request = lo.request(5, -1, [(topic, p, timestamp, lo.NO_LEADER_EPOCH) for p in sorted(partitions)])
            response = await self._call(leader, ApiKey.LIST_OFFSETS, 5, request, lo.encode_request, lo.decode_response)
            out.update({p.partition_index: p.offset for t_ in response.topics for p in t_.partitions
                        if p.error_code == 0 and p.offset >= 0})
        return out

    async def _committed(self, group_id: str) -> dict[tuple[str, int], Any]:
        """kio's OffsetFetch v5 partitions (committed_offset, metadata) by (topic, partition)."""
        request = messages.request_module(ApiKey.OFFSET_FETCH, 5).OffsetFetchRequest(group_id=group_id, topics=None)
        response = await self._at_coordinator(group_id, ApiKey.OFFSET_FETCH, 5, request, messages.encode_request,
                                              messages.response_decoder(ApiKey.OFFSET_FETCH), lambda r: r.error_code)
        return {(t.name, p.partition_index): p for t in response.topics for p in t.partitions
                if p.committed_offset >= 0}

    async def _group(self, group_id: str) -> Any:
        """kio's DescribeGroups v4 DescribedGroup."""
        request = messages.request_module(ApiKey.DESCRIBE_GROUPS, 4).DescribeGroupsRequest(
            groups=(group_id,), include_authorized_operations=False)
        response = await self._at_coordinator(group_id, ApiKey.DESCRIBE_GROUPS, 4, request, messages.encode_request,
                                              messages.response_decoder(ApiKey.DESCRIBE_GROUPS),
                                              lambda r: r.groups[0].error_code)
        group = response.groups[0]
        if group.group_state == "Dead":
            raise AdminError("GROUP_ID_NOT_FOUND", f"group {group_id!r} does not exist", None, status=404)
        return group

    async def _typed_group(self, group_id: str) -> tuple[str, Any] | None:
        """("consumer", ConsumerGroupDescribe v1's DescribedGroup) of a KIP-848 group, ("share",
        ShareGroupDescribe v1's) of a KIP-932 one; None for a classic group or none (DescribeGroups
        describes a consumer-protocol group as Dead, as Kafka's does)."""
        for kind, api in (("consumer", ApiKey.CONSUMER_GROUP_DESCRIBE), ("share", ApiKey.SHARE_GROUP_DESCRIBE)):
            module = messages.request_module(api, 1)
            request = getattr(module, api.name.title().replace("_", "") + "Request")(
                group_ids=(group_id,), include_authorized_operations=False)
            try:
                response = await self._at_coordinator(group_id, api, 1, request, messages.encode_request,
                                                      messages.response_decoder(api), lambda r: r.groups[0].error_code)
            except AdminError as e:
                if e.error == "GROUP_ID_NOT_FOUND":
                    continue
                raise
            return kind, response.groups[0]
        return None

    # ---- handlers ------------------------------------------------------------------------

    async def _list(self, request: web.Request) -> web.Response:
        groups: dict[str, dict[str, Any]] = {}
        for broker_id in self._brokers():
            r = await self._call(broker_id, ApiKey.LIST_GROUPS, 2,
                                 messages.request_module(ApiKey.LIST_GROUPS, 2).ListGroupsRequest(),
                                 messages.encode_request, messages.response_decoder(ApiKey.LIST_GROUPS))
            if r.error_code:
                raise _error(r.error_code, f"broker {broker_id} could not list its groups")
            for g in r.groups:
                groups[g.group_id] = {"group_id": g.group_id, "protocol_type": g.protocol_type,
                                      "coordinator": broker_id}
        return web.json_response([groups[k] for k in sorted(groups)])

    async def _describe(self, request: web.Request) -> web.Response:
        group_id = request.match_info["id"]
        coordinator = await self._coordinator(group_id)
        typed = await self._typed_group(group_id)
        if typed is not None:
            head, members, owners = _typed_members(*typed)
        else:
            group = await self._group(group_id)
            owners = {tp: m.member_id for m in group.members for tp in assigned_partitions(m.member_assignment)}
            members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id, "client_host": m.client_host,
                        "assignment": [{"topic": t, "partition": p}
                                       for t, p in assigned_partitions(m.member_assignment)]} for m in group.members]
            head = {"type": "classic", "state": group.group_state, "protocol_type": group.protocol_type,
                    "protocol": group.protocol_data}
        committed = await self._committed(group_id)
        keys = sorted(set(committed) | set(owners))
        ends: dict[tuple[str, int], int] = {}
        for topic in sorted({t for t, _ in keys}):
            if self._image().topic(topic) is not None:
                ends.update({(topic, p): o for p, o in (await self._offsets(topic, lo.LATEST_TIMESTAMP)).items()})
        offsets = []
        for key in keys:
            c, end = committed.get(key), ends.get(key)
            current = None if c is None else c.committed_offset
            offsets.append({"topic": key[0], "partition": key[1], "committed_offset": current,
                            "metadata": None if c is None else c.metadata, "log_end_offset": end,
                            "lag": None if current is None or end is None else max(end - current, 0),
                            "member_id": owners.get(key)})
        return web.json_response({"group_id": group_id, **head, "coordinator": coordinator, "members": members,
                                  "offsets": offsets})

    async def _delete(self, request: web.Request) -> web.Response:
        self._authorize(request)
        group_id = request.match_info["id"]
        request = messages.request_module(ApiKey.DELETE_GROUPS, 1).DeleteGroupsRequest(groups_names=(group_id,))
        await self._at_coordinator(group_id, ApiKey.DELETE_GROUPS, 1, request, messages.encode_request,
                                   messages.response_decoder(ApiKey.DELETE_GROUPS), lambda r: r.results[0].error_code)
        return web.json_response({"group_id": group_id, "deleted": True})

    async def _reset(self, request: web.Request) -> web.Response:
        self._authorize(request)
        group_id = request.match_info["id"]
        try:
            body = await request.json()
        except ValueError:
            raise api.invalid("the request body is not JSON", None) from None
        body = api.check_object(body, RESET_FIELDS, ("topic", "to"))
        topic = api.check_topic_name(body["topic"], "topic")
        try:
            to = ResetTo(body["to"])
        except ValueError:
            raise api.invalid(f"to must be one of {', '.join(r.value for r in ResetTo)}", "to") from None
        value = 0
        if to in (ResetTo.OFFSET, ResetTo.SHIFT, ResetTo.TIMESTAMP):
            value = api.check_int(body.get("value"), "value", -(2**63), 2**63 - 1)
        execute = body.get("execute", False)
        if not isinstance(execute, bool):
            raise api.invalid("execute must be true or false", "execute")
        t = self._image().topic(topic)
        if t is None:
            raise AdminError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {topic!r} does not exist", "topic")
        partitions = body.get("partitions", sorted(t.partitions))
        if not isinstance(partitions, list) or any(type(p) is not int or p not in t.partitions for p in partitions):
            raise api.invalid(f"partitions must be a list of partitions of {topic}", "partitions")
        group = await self._described_or_empty(group_id)
        if group is not None and group.members:  # as kafka-consumer-groups: only an inactive group
            raise AdminError("NON_EMPTY_GROUP", f"offsets can only be reset while group {group_id!r} has no "
                             f"members; it is {group.group_state}", None, status=409)
        committed = {p: c.committed_offset for (tp, p), c in (await self._committed(group_id)).items() if tp == topic}
        earliest = await self._offsets(topic, lo.EARLIEST_TIMESTAMP)
        latest = await self._offsets(topic, lo.LATEST_TIMESTAMP)
        by_time = await self._offsets(topic, value) if to is ResetTo.TIMESTAMP else None
        missing = [p for p in partitions if p not in earliest or p not in latest]
        if missing:
            raise AdminError("LEADER_NOT_AVAILABLE", f"no offsets for partitions {missing} of {topic}", None,
                             status=503)
        plan = plan_reset(sorted(partitions), committed, earliest, latest, to, value, by_time)
        if execute:
            await self._commit(group_id, topic, plan)
        return web.json_response({"group_id": group_id, "topic": topic, "dry_run": not execute, "offsets": [
            {"partition": p, "committed_offset": committed.get(p), "new_offset": o} for p, o in sorted(plan.items())]})

    async def _described_or_empty(self, group_id: str) -> Any | None:
        try:
            return await self._group(group_id)
        except AdminError as e:
            if e.error == "GROUP_ID_NOT_FOUND":
                return None
            raise

    async def _commit(self, group_id: str, topic: str, plan: dict[int, int]) -> None:
        m = messages.request_module(ApiKey.OFFSET_COMMIT, 7)
        request = m.OffsetCommitRequest(
            group_id=group_id, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
            topics=(m.OffsetCommitRequestTopic(name=topic, partitions=tuple(m.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata="")
                for p, o in sorted(plan.items()))),))
        await self._at_coordinator(group_id, ApiKey.OFFSET_COMMIT, 7, request, messages.encode_request,
                                   messages.response_decoder(ApiKey.OFFSET_COMMIT),
                                   lambda r: max((p.error_code for t in r.topics for p in t.partitions), default=0))
