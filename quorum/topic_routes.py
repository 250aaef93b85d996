"""The admin API's topic routes: list, describe, create, delete, grow, and read or change configs.

    routes = TopicRoutes(server).routes()   # aiohttp RouteDefs, served by the ControllerServer

Each write parses its body (`quorum.topic_requests`), then runs one rule on the active
controller through `server.write` (forwarded when this controller is not active) and
`server.decide`; validate_only runs the same rule on the active image and appends nothing.
Reads answer from this controller's image.
"""

from __future__ import annotations

import base64
import uuid
from typing import TYPE_CHECKING

from aiohttp import web

from metadata.delta import apply
from metadata.image import MetadataImage
from metadata.records import ConfigResourceType
from quorum import admin_api as api
from quorum import admin_views as views
from quorum.controller_result import ControllerResult
from quorum.http_json import read_json
from quorum.topic_control import (
    TopicCreated,
    alter_topic_configs,
    create_partitions,
    create_topic,
    delete_topic,
)
from quorum.topic_requests import (
    parse_alter_configs,
    parse_create_partitions,
    parse_create_topic,
)

if TYPE_CHECKING:
    from quorum.controller_server import ControllerServer


class TopicRoutes:
    """The /v1/topics routes of one ControllerServer."""

    def __init__(self, server: ControllerServer) -> None:
        self._server = server

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/v1/topics", self._get_topics), web.post("/v1/topics", self._create_topic),
                web.get("/v1/topics/{name}", self._get_topic), web.delete("/v1/topics/{name}", self._delete_topic),
                web.post("/v1/topics/{name}/partitions", self._create_partitions),
                web.get("/v1/topics/{name}/configs", self._get_configs),
                web.patch("/v1/topics/{name}/configs", self._alter_configs)]

    async def _get_topics(self, request: web.Request) -> web.Response:
        topics = self._server.image().topics.by_name
        return web.json_response([views.topic_summary(topics[name]) for name in sorted(topics)])

    async def _get_topic(self, request: web.Request) -> web.Response:
        image = self._server.image()
        return web.json_response(views.topic_view(image, api.known_topic(image, request.match_info["name"])))

    async def _get_configs(self, request: web.Request) -> web.Response:
        image = self._server.image()
        topic = api.known_topic(image, request.match_info["name"])
        return web.json_response({"name": topic.name, "configs": views.topic_configs(image, topic)})

    def _topic_answer(self, name: str, offset: int | None, status: int = 200) -> web.Response:
        image = self._server.image()  # this controller applied `offset` before its decision returned
        return web.json_response({**views.topic_view(image, api.known_topic(image, name)),
                                  "metadata_offset": offset}, status=status)

    async def _create_topic(self, request: web.Request) -> web.Response:
        self._server.authorize(request)
        raw, body = await read_json(request)
        req = parse_create_topic(body, default_partitions=self._server.settings.default_partitions,
                                 default_replication_factor=self._server.settings.default_replication_factor)

        async def run() -> web.Response:
            topic_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")

            def rule(image: MetadataImage) -> ControllerResult[TopicCreated]:
                return create_topic(image, name=req.name, partitions=req.partitions,
                                    replication_factor=req.replication_factor, configs=dict(req.configs),
                                    topic_id=topic_id, rng=self._server.rng, assignments=req.assignments)

            if req.validate_only:  # Kafka's validateOnly: the same rule on the active image, nothing appended
                return web.json_response(views.validated_topic_view(rule(self._server.image()).response))
            _, offset = await self._server.decide(rule)
            return self._topic_answer(req.name, offset, status=201)

        return await self._server.write(request, raw, run)

    async def _delete_topic(self, request: web.Request) -> web.Response:
        self._server.authorize(request)
        name = api.check_topic_name(request.match_info["name"])

        async def run() -> web.Response:
            _, offset = await self._server.decide(lambda image: delete_topic(image, name))
            return web.json_response({"name": name, "deleted": True, "metadata_offset": offset})

        return await self._server.write(request, b"", run)

    async def _create_partitions(self, request: web.Request) -> web.Response:
        self._server.authorize(request)
        name = api.check_topic_name(request.match_info["name"])
        raw, body = await read_json(request)
        req = parse_create_partitions(body)

        async def run() -> web.Response:
            def rule(image: MetadataImage) -> ControllerResult[dict[int, tuple[int, ...]]]:
                return create_partitions(image, name, req.count, self._server.rng, req.assignments)

            if req.validate_only:
                return web.json_response(views.validated_partitions_view(name, req.count, rule(self._server.image()).response))
            _, offset = await self._server.decide(rule)
            return self._topic_answer(name, offset)

        return await self._server.write(request, raw, run)

    async def _alter_configs(self, request: web.Request) -> web.Response:
        self._server.authorize(request)
        name = api.check_topic_name(request.match_info["name"])
        raw, body = await read_json(request)
        request_changes = parse_alter_configs(body)

        def rule(image: MetadataImage) -> ControllerResult[None]:
            return alter_topic_configs(image, name, request_changes.against(image.config(ConfigResourceType.TOPIC, name)))

        async def run() -> web.Response:
            if request_changes.validate_only:  # Kafka's validateOnly: the same rule, nothing appended
                image = self._server.image()
                result = rule(image)
                # the records as they would apply (at offsets past the image: a dry run's own)
                after = apply(image, enumerate(result.records, start=image.offset + 1))
                return web.json_response({"name": name, "configs": views.topic_configs(after, api.known_topic(
                    after, name)), "metadata_offset": None})
            _, offset = await self._server.decide(rule)
            image = self._server.image()
            return web.json_response({"name": name, "configs": views.topic_configs(image, api.known_topic(
                image, name)), "metadata_offset": offset})

        return await self._server.write(request, raw, run)

