"""The admin API's per-group config routes (KIP-848's GroupConfig; kafka-configs.sh --entity-type groups).

    GET   /v1/groups/{id}/configs      the group's own configs, as stored
    PATCH /v1/groups/{id}/configs      {configs | ops | replace, validate_only?}: the body of
                                       PATCH /v1/topics/{name}/configs

Brokers forward IncrementalAlterConfigs and AlterConfigs of a GROUP resource here. The rule
(`alter_group_configs`) refuses an unknown key or a value that is not a positive int
(INVALID_CONFIG, naming the key) and returns one Config record (resource type GROUP) per key
whose value changes; the group's coordinator reads them from its metadata image at the
group's next heartbeat (`groups.group_configs`). A group need not exist to be configured, as in
Kafka.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web

from common.errors import ErrorCode
from groups.group_configs import check_group_config
from metadata.delta import apply
from metadata.image import MetadataImage
from metadata.records import Config, ConfigResourceType, Record
from quorum import admin_api as api
from quorum.controller_result import ControllerApiError, ControllerResult
from quorum.http_json import read_json
from quorum.topic_requests import parse_alter_configs

if TYPE_CHECKING:
    from quorum.controller_server import ControllerServer

GROUP: Final = ConfigResourceType.GROUP
MAX_GROUP_ID_CHARS: Final = 32_767  # a Kafka string


def check_group_id(raw: str) -> str:
    if not raw or len(raw) > MAX_GROUP_ID_CHARS:
        raise api.invalid("group id must be 1 to 32767 characters", "id")
    return raw


def alter_group_configs(image: MetadataImage, group_id: str,
                        changes: Mapping[str, str | None]) -> ControllerResult[None]:
    """One Config record per key whose value changes; nothing when any key is refused."""
    for name, value in sorted(changes.items()):
        problem = check_group_config(name, value)
        if problem is not None:
            raise ControllerApiError(ErrorCode.INVALID_CONFIG, problem, field=name)
    current = image.config(GROUP, group_id)
    records: list[Record] = [Config(GROUP, group_id, name, value) for name, value in sorted(changes.items())
                             if current.get(name) != value]
    return ControllerResult(records, None)


def group_configs_view(image: MetadataImage, group_id: str) -> dict[str, Any]:
    return {"group_id": group_id, "configs": dict(sorted(image.config(GROUP, group_id).items()))}


class GroupConfigRoutes:
    def __init__(self, server: ControllerServer) -> None:
        self._server = server

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/v1/groups/{id}/configs", self._get), web.patch("/v1/groups/{id}/configs", self._alter)]

    async def _get(self, request: web.Request) -> web.Response:
        return web.json_response(group_configs_view(self._server.image(), check_group_id(request.match_info["id"])))

    async def _alter(self, request: web.Request) -> web.Response:
        self._server.authorize(request)
        group_id = check_group_id(request.match_info["id"])
        raw, body = await read_json(request)
        changes = parse_alter_configs(body)

        def rule(image: MetadataImage) -> ControllerResult[None]:
            return alter_group_configs(image, group_id, changes.against(image.config(GROUP, group_id), broker=True))

        async def run() -> web.Response:
            if changes.validate_only:  # Kafka's validateOnly: the same rule, nothing appended
                image = self._server.image()
                result = rule(image)
                after = apply(image, enumerate(result.records, start=image.offset + 1))
                return web.json_response({**group_configs_view(after, group_id), "metadata_offset": None})
            _, offset = await self._server.decide(rule)
            return web.json_response({**group_configs_view(self._server.image(), group_id),
                                      "metadata_offset": offset})

        return await self._server.write(request, raw, run)
