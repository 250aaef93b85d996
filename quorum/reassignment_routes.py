"""The admin API's reassignment routes (KIP-455), in `kafka-reassign-partitions.sh`'s JSON:

    POST /v1/reassignments {"version": 1, "partitions": [{"topic": "t", "partition": 0,
                            "replicas": [5, 6, 7]}, ...]}      ("replicas": null cancels)
    GET  /v1/reassignments[?topic=t]                           the ongoing reassignments

A POST answers one result per entry, as AlterPartitionReassignments does: 200 when every
entry was accepted; when none was, the first one's Kafka error as a 4xx naming its field
(`partitions[i].replicas`), with every result; when some were, 200 with the errors listed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from common.errors import ErrorCode
from common.limits import MAX_RECORDS_PER_USER_OP, MAX_REPLICATION_FACTOR
from metadata.image import MetadataImage
from metadata.reassignment import list_reassignments
from quorum.admin_api import (
    AdminError,
    check_int,
    check_object,
    check_topic_name,
    invalid,
    json_type,
)
from quorum.controller_result import ControllerResult
from quorum.http_json import read_json
from quorum.reassignment_control import (
    ReassignmentRequest,
    ReassignmentResult,
    alter_partition_reassignments,
)

if TYPE_CHECKING:
    from quorum.controller_server import ControllerServer



def _replicas(value: Any, field: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise invalid(f"{field} must be an array of broker ids or null (to cancel), got {json_type(value)}", field)
    if len(value) > MAX_REPLICATION_FACTOR:
        raise invalid(f"{field} names {len(value)} replicas, at most {MAX_REPLICATION_FACTOR} are allowed", field,
                      "INVALID_REPLICA_ASSIGNMENT")
    return tuple(check_int(v, f"{field}[{i}]", 0, 2**31 - 1, "INVALID_REPLICA_ASSIGNMENT")
                 for i, v in enumerate(value))


def parse_reassignments(body: Any) -> tuple[ReassignmentRequest, ...]:
    """The plan file `kafka-reassign-partitions.sh --execute` takes; log_dirs only as "any"."""
    body = check_object(body, ("version", "partitions"), ("partitions",))
    if "version" in body and body["version"] != 1:
        raise invalid(f"version must be 1, got {body['version']!r:.40}", "version")
    items = body["partitions"]
    if not isinstance(items, list):
        raise invalid(f"partitions must be an array, got {json_type(items)}", "partitions")
    if len(items) > MAX_RECORDS_PER_USER_OP:
        raise invalid(f"partitions names {len(items)} partitions, at most {MAX_RECORDS_PER_USER_OP} "
                      "are allowed", "partitions")
    out = []
    for i, item in enumerate(items):
        at = f"partitions[{i}]."
        check_object(item, ("topic", "partition", "replicas", "log_dirs"), ("topic", "partition", "replicas"), at)
        replicas = _replicas(item["replicas"], at + "replicas")
        dirs = item.get("log_dirs")
        if dirs is not None and (not isinstance(dirs, list) or any(d != "any" for d in dirs)
                                 or replicas is None or len(dirs) != len(replicas)):
            raise invalid(f"{at}log_dirs must list \"any\" once per replica: tidelog has one log "
                          "directory per broker", at + "log_dirs")
        out.append(ReassignmentRequest(check_topic_name(item["topic"], at + "topic"),
                                       check_int(item["partition"], at + "partition", 0, 2**31 - 1), replicas))
    return tuple(out)


def result_view(result: ReassignmentResult) -> dict[str, Any]:
    return {"topic": result.topic, "partition": result.partition_id, "error": result.error.name,
            "message": result.message}


def ongoing_view(image: MetadataImage, topic: str | None) -> dict[str, Any]:
    """GET /v1/reassignments: every ongoing reassignment, or those of one topic."""
    wanted: list[tuple[str, int]] | None = None
    if topic is not None:
        found = image.topic(topic)
        wanted = [] if found is None else [(topic, p) for p in sorted(found.partitions)]
    return {"version": 1, "partitions": [
        {"topic": o.topic, "partition": o.partition_id, "replicas": list(o.replicas),
         "adding_replicas": list(o.adding_replicas), "removing_replicas": list(o.removing_replicas),
         "target_replicas": [r for r in o.replicas if r not in o.removing_replicas]}
        for o in list_reassignments(image, wanted)]}


class ReassignmentRoutes:
    """The /v1/reassignments routes of one ControllerServer."""

    def __init__(self, server: ControllerServer) -> None:
        self._server = server

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/v1/reassignments", self._list), web.post("/v1/reassignments", self._alter)]

    async def _list(self, request: web.Request) -> web.Response:
        topic = request.query.get("topic")
        if topic is not None:
            check_topic_name(topic, "topic")
        return web.json_response(ongoing_view(self._server.image(), topic))

    async def _alter(self, request: web.Request) -> web.Response:
        self._server.authorize(request)
        raw, body = await read_json(request)
        requests = parse_reassignments(body)

        async def run() -> web.Response:
            def rule(image: MetadataImage) -> ControllerResult[tuple[ReassignmentResult, ...]]:
                return alter_partition_reassignments(image, requests)

            results, offset = await self._server.decide(rule)
            views = [result_view(r) for r in results]
            failed = [(i, r) for i, r in enumerate(results) if r.error is not ErrorCode.NONE]
            if failed and len(failed) == len(results):
                i, first = failed[0]
                unknown = first.error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                error = AdminError(first.error.name, first.message or first.error.name,
                                   f"partitions[{i}].{'partition' if unknown else 'replicas'}")
                return web.json_response({**error.body(), "results": views}, status=error.status)
            return web.json_response({"results": views, "metadata_offset": offset})

        return await self._server.write(request, raw, run)

