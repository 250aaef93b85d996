"""The broker's topic writes (CreateTopics, DeleteTopics, CreatePartitions, config changes,
auto topic creation): forwarded to the controllers' admin HTTP API, which any controller forwards to
the active one."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import Any, Final, Protocol

import aiohttp

from broker.controller_client import ControllerClient, read_body
from common.errors import ErrorCode
from common.units import SECONDS

ADMIN_TIMEOUT: Final = 15 * SECONDS  # one admin HTTP call (the controller forwards, then commits)
MAX_ANSWER_BYTES: Final = 1024 * 1024
MAX_PENDING_AUTO_CREATES: Final = 64  # topics whose creation is in flight at once

log = logging.getLogger(__name__)

AdminResult = tuple[int, str | None]  # (Kafka error code, message)


class TopicAdmin(Protocol):
    """Topic writes on the controllers; each answers (error code, message)."""

    async def create_topic(self, name: str, partitions: int | None, replication_factor: int | None,
                           configs: Mapping[str, str]) -> AdminResult: ...

    async def delete_topic(self, name: str) -> AdminResult: ...

    async def create_partitions(self, name: str, count: int) -> AdminResult: ...

    async def alter_configs(self, name: str, body: Mapping[str, Any]) -> AdminResult:
        """A topic's config change in the admin API's PATCH body form."""
        ...


class HttpTopicAdmin:
    """TopicAdmin over the controllers' admin API (`/v1/topics`), on the controller the
    ControllerClient believes active (any controller forwards writes to the active one)."""

    def __init__(self, controller_client: ControllerClient, *, token: str | None = None) -> None:
        self._client, self._token = controller_client, token
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _request(self, method: str, path: str, body: Any) -> AdminResult:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=self._client.new_connector())
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        url = f"http://{self._client.target}{path}"
        try:
            async with self._session.request(method, url, json=body, headers=headers,
                                             timeout=aiohttp.ClientTimeout(total=ADMIN_TIMEOUT)) as reply:
                raw = await read_body(reply.content, MAX_ANSWER_BYTES) or b""  # error bodies are small
                status = reply.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            return ErrorCode.UNKNOWN_SERVER_ERROR, f"controller at {url} did not answer ({type(exc).__name__})"
        if status < 300:
            return 0, None
        try:
            answer = json.loads(raw)
            name, message = answer.get("error"), answer.get("message")
        except (ValueError, AttributeError):
            name, message = None, raw[:200].decode(errors="replace")
        # The admin API answers with Kafka's error names: the one ErrorCode enum maps them.
        code = ErrorCode.__members__.get(name, ErrorCode.UNKNOWN_SERVER_ERROR) if isinstance(name, str) \
            else ErrorCode.UNKNOWN_SERVER_ERROR
        return int(code), message or f"HTTP {status}"

    async def create_topic(self, name: str, partitions: int | None, replication_factor: int | None,
                           configs: Mapping[str, str]) -> AdminResult:
        body: dict[str, Any] = {"name": name, "configs": dict(configs)}
        if partitions is not None:
            body["partitions"] = partitions
        if replication_factor is not None:
            body["replication_factor"] = replication_factor
        return await self._request("POST", "/v1/topics", body)

    async def delete_topic(self, name: str) -> AdminResult:
        return await self._request("DELETE", f"/v1/topics/{name}", None)

    async def create_partitions(self, name: str, count: int) -> AdminResult:
        return await self._request("POST", f"/v1/topics/{name}/partitions", {"count": count})

    async def alter_configs(self, name: str, body: Mapping[str, Any]) -> AdminResult:
        return await self._request("PATCH", f"/v1/topics/{name}/configs", dict(body))


class AutoTopicCreator:
    """Metadata's auto topic creation: at most one creation in flight per topic, and at most
    MAX_PENDING_AUTO_CREATES in all; the client asks again (LEADER_NOT_AVAILABLE) meanwhile."""

    def __init__(self, topic_admin: TopicAdmin) -> None:
        self._admin = topic_admin
        self._creating: dict[str, asyncio.Task[None]] = {}

    def start(self, name: str) -> None:
        """Ask the controllers to create `name` unless it is already being created."""
        if name in self._creating or len(self._creating) >= MAX_PENDING_AUTO_CREATES:
            return
        self._creating[name] = asyncio.get_running_loop().create_task(self._create(name))

    async def _create(self, name: str) -> None:
        try:
            code, message = await self._admin.create_topic(name, None, None, {})
            if code not in (0, ErrorCode.TOPIC_ALREADY_EXISTS):  # a concurrent creation is fine
                log.warning("Auto-creating topic %s failed: error %d: %s", name, code, message)
            else:
                log.info("Auto-created topic %s", name)
        finally:
            self._creating.pop(name, None)

    def close(self) -> None:
        for task in list(self._creating.values()):
            task.cancel()
