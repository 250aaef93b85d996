"""The admin API's dynamic broker config routes (Kafka's kafka-configs.sh --entity-type brokers).

    GET   /v1/brokers/configs          the cluster-wide dynamic defaults (BROKER "")
    PATCH /v1/brokers/configs          {configs | ops | replace, validate_only?}
    GET   /v1/brokers/{id}/configs     broker id's own dynamic configs
    PATCH /v1/brokers/{id}/configs     the same body as PATCH /v1/topics/{name}/configs

Each PATCH parses its body as the topic route does (`quorum.topic_requests.parse_alter_configs`)
and runs `quorum.config_control.alter_broker_configs` on the active controller (forwarded when
this controller is not); validate_only runs the same rule on the active image and appends
nothing. Reads answer from this controller's image: only the dynamic values, as stored (the
static ones live in each broker's server.properties; DescribeConfigs on a broker shows both).
A key no broker knows is stored, as Kafka stores it, with one WARNING here saying nothing reads it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from aiohttp import web

from metadata.delta import apply
from metadata.image import MetadataImage
from common.dynamic_config import unread_key_hint, unread_keys
from metadata.records import Config, ConfigResourceType
from quorum import admin_api as api
from quorum.config_control import alter_broker_configs
from quorum.controller_result import ControllerResult
from quorum.http_json import read_json
from quorum.topic_requests import parse_alter_configs

if TYPE_CHECKING:
    from quorum.controller_server import ControllerServer

log = logging.getLogger(__name__)

MAX_BROKER_ID_DIGITS = 10  # an int32 node id


def check_broker_id(raw: str) -> str:
    """The {id} of a broker route: a node id (digits), else 400 naming the field."""
    if not (raw.isascii() and raw.isdigit()) or len(raw) > MAX_BROKER_ID_DIGITS or int(raw) > 2**31 - 1:
        raise api.invalid(f"broker id must be a non-negative integer, got {raw[:40]!r}", "id")
    return str(int(raw))


def broker_configs_view(image: MetadataImage, name: str) -> dict[str, Any]:
    configs = dict(sorted(image.config(ConfigResourceType.BROKER, name).items()))
    return {"broker_id": None if name == "" else int(name), "configs": configs}


class BrokerConfigRoutes:
    """The dynamic broker config routes of one ControllerServer (register before /v1/brokers/{id})."""

    def __init__(self, server: ControllerServer) -> None:
        self._server = server

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/v1/brokers/configs", self._get_default),
                web.patch("/v1/brokers/configs", self._alter_default),
                web.get("/v1/brokers/{id}/configs", self._get_broker),
                web.patch("/v1/brokers/{id}/configs", self._alter_broker)]

    async def _get_default(self, request: web.Request) -> web.Response:
        return web.json_response(broker_configs_view(self._server.image(), ""))

    async def _get_broker(self, request: web.Request) -> web.Response:
        name = check_broker_id(request.match_info["id"])
        return web.json_response(broker_configs_view(self._server.image(), name))

    async def _alter_default(self, request: web.Request) -> web.Response:
        return await self._alter(request, "")

    async def _alter_broker(self, request: web.Request) -> web.Response:
        return await self._alter(request, check_broker_id(request.match_info["id"]))

    async def _alter(self, request: web.Request, name: str) -> web.Response:
        self._server.authorize(request)
        raw, body = await read_json(request)
        changes = parse_alter_configs(body)

        unread: list[str] = []  # of the change the controller committed (the rule's last run)

        def rule(image: MetadataImage) -> ControllerResult[None]:
            current = image.config(ConfigResourceType.BROKER, name)
            result = alter_broker_configs(image, name, changes.against(current, broker=True))
            unread[:] = unread_keys(r.name for r in result.records
                                    if isinstance(r, Config) and r.value is not None)
            return result

        async def run() -> web.Response:
            if changes.validate_only:  # Kafka's validateOnly: the same rule, nothing appended
                image = self._server.image()
                result = rule(image)
                after = apply(image, enumerate(result.records, start=image.offset + 1))
                return web.json_response({**broker_configs_view(after, name), "metadata_offset": None})
            _, offset = await self._server.decide(rule)
            for key in unread:  # once, when it is stored: Kafka keeps it, and no broker reads it
                log.warning("Dynamic broker config %s of %s stored at metadata offset %s, but no broker reads it: %s",
                            key, f"broker {name}" if name else "the cluster default", offset, unread_key_hint(key))
            return web.json_response({**broker_configs_view(self._server.image(), name),
                                      "metadata_offset": offset})

        return await self._server.write(request, raw, run)
