"""The broker's topic writes (CreateTopics, DeleteTopics, CreatePartitions): forwarded to
the controllers' admin HTTP API, which any controller forwards to the active one."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, Protocol

import aiohttp

from broker.controller_client import ControllerClient, read_body
from common.errors import ErrorCode
from common.units import SECONDS

ADMIN_TIMEOUT: Final = 15 * SECONDS  # one admin HTTP call (the controller forwards, then commits)
MAX_ANSWER_BYTES: Final = 1024 * 1024
UNKNOWN_SERVER_ERROR: Final = -1

# Kafka error names the admin API answers with, to their codes.
ADMIN_ERROR_CODES: Final = {
    "UNKNOWN_SERVER_ERROR": -1, "UNKNOWN_TOPIC_OR_PARTITION": 3, "REQUEST_TIMED_OUT": 7,
    "INVALID_TOPIC_EXCEPTION": 17, "TOPIC_AUTHORIZATION_FAILED": 29,
    "CLUSTER_AUTHORIZATION_FAILED": 31, "TOPIC_ALREADY_EXISTS": 36, "INVALID_PARTITIONS": 37,
    "INVALID_REPLICATION_FACTOR": 38, "INVALID_REPLICA_ASSIGNMENT": 39, "INVALID_CONFIG": 40,
    "NOT_CONTROLLER": 41, "INVALID_REQUEST": 42, "POLICY_VIOLATION": 44,
    "THROTTLING_QUOTA_EXCEEDED": 89,
}

AdminResult = tuple[int, str | None]  # (Kafka error code, message)


class TopicAdmin(Protocol):
    """Topic writes on the controllers; each answers (error code, message)."""

    async def create_topic(self, name: str, partitions: int | None, replication_factor: int | None,
                           configs: Mapping[str, str]) -> AdminResult: ...

    async def delete_topic(self, name: str) -> AdminResult: ...

    async def create_partitions(self, name: str, count: int) -> AdminResult: ...


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
        return ADMIN_ERROR_CODES.get(name, UNKNOWN_SERVER_ERROR), message or f"HTTP {status}"

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
