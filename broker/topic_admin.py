"""The broker's topic writes (CreateTopics, DeleteTopics, CreatePartitions, config changes, auto
topic creation): forwarded to the controllers' admin HTTP API, which any controller forwards to
the active one. Each answer carries the metadata offset of the committed change, which the
handler waits for its own image to apply (`broker.applied_offset`) before answering."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol
from urllib.parse import quote

import aiohttp

from broker.controller_client import ControllerClient, read_body, unanswered_error
from common.config_schema import Config
from common.errors import ErrorCode
from common.limits import ADMIN_WRITE_TIMEOUT, MAX_CONTROLLER_ANSWER_BYTES
from metadata.image import MetadataImage
from metadata.placement import eligible_brokers

MAX_PENDING_AUTO_CREATES: Final = 64  # topics whose creation is in flight at once
UNSET: Final = -1  # Kafka's "not given" for num_partitions and replication_factor (KIP-464)

log = logging.getLogger(__name__)

@dataclass(frozen=True, slots=True)
class AdminReply:
    """A controller's answer to one topic write."""

    error_code: int
    error_message: str | None = None
    metadata_offset: int | None = None  # the committed change's last record (None: nothing written)
    num_partitions: int = -1  # the topic's partitions after the write (or what validate_only would make)
    replication_factor: int = -1
    configs: tuple[tuple[str, str], ...] = ()  # the topic's explicitly set configs
    topic_id: str | None = None  # the created topic's id (None: validate_only, or not a creation)


@dataclass(frozen=True, slots=True)
class TopicDefaults:
    """The broker configs that fill a topic's unset (-1) sizes: Kafka's KIP-464 and auto-creation."""

    num_partitions: int = 1  # num.partitions
    replication_factor: int = 1  # default.replication.factor

    @classmethod
    def from_config(cls, config: Config) -> TopicDefaults:
        return cls(config.get_int("num.partitions"), config.get_int("default.replication.factor"))


KAFKA_TOPIC_SIZES: Final = TopicDefaults()


def resolve_topic_sizes(image: MetadataImage, defaults: TopicDefaults, name: str, num_partitions: int,
                        replication_factor: int) -> tuple[int, int]:
    """(partitions, replication factor) with -1 replaced by the broker defaults; a defaulted
    replication factor above the live (unfenced, not shutting down) brokers is capped, with a
    WARNING, so a small dev cluster can still auto-create. An explicit one is never changed."""
    partitions = defaults.num_partitions if num_partitions == UNSET else num_partitions
    if replication_factor != UNSET:
        return partitions, replication_factor
    live = len(eligible_brokers(image.cluster.brokers.values()))
    wanted = defaults.replication_factor
    if live < wanted:
        log.warning("Creating topic %s with replication factor %d: default.replication.factor=%d but only %d "
                    "broker(s) are alive", name, max(live, 1), wanted, live)
        return partitions, max(live, 1)
    return partitions, wanted


class TopicAdmin(Protocol):
    """Topic writes on the controllers. Sizes of None are left to the controller (its defaults,
    or -1 with manual assignments)."""

    async def create_topic(self, name: str, partitions: int | None, replication_factor: int | None,
                           configs: Mapping[str, str], *,
                           assignments: Sequence[tuple[int, Sequence[int]]] = (),
                           validate_only: bool = False) -> AdminReply: ...

    async def delete_topic(self, name: str) -> AdminReply: ...

    async def create_partitions(self, name: str, count: int, *,
                                assignments: Sequence[Sequence[int]] | None = None,
                                validate_only: bool = False) -> AdminReply: ...

    async def alter_configs(self, name: str, body: Mapping[str, Any]) -> AdminReply:
        """A topic's config change in the admin API's PATCH body form."""
        ...

    async def alter_broker_configs(self, name: str, body: Mapping[str, Any]) -> AdminReply:
        """Dynamic broker configs of broker `name` ("": the cluster default), same body form."""
        ...

    async def alter_group_configs(self, group_id: str, body: Mapping[str, Any]) -> AdminReply:
        """A group's own configs (KIP-848's GroupConfig), same body form."""
        ...


def _reply_of(answer: Any) -> AdminReply:
    """A 2xx body of the admin API: a topic view, a validate_only view or a deletion."""
    if not isinstance(answer, dict):
        return AdminReply(0)
    offset = answer.get("metadata_offset")
    partitions = answer.get("partitions")
    replication_factor = answer.get("replication_factor", -1)
    if isinstance(partitions, list):  # a topic view: partition 0's replicas give the factor
        replication_factor = len(partitions[0].get("replicas", ())) if partitions else -1
        partitions = len(partitions)
    elif "count" in answer:  # CreatePartitions' validate_only view
        partitions = answer["count"]
    configs, topic_id = answer.get("configs"), answer.get("topic_id")
    return AdminReply(0, None, offset if type(offset) is int else None,
                      partitions if type(partitions) is int else -1,
                      replication_factor if type(replication_factor) is int else -1,
                      tuple(sorted((str(k), str(v)) for k, v in configs.items()))
                      if isinstance(configs, dict) else (),
                      topic_id if isinstance(topic_id, str) and topic_id else None)


class ControllerAdminApi:
    """A broker's writes through the controllers' admin API, on the controller the
    ControllerClient believes active (any controller forwards writes to the active one): topics
    here, ACLs and SCRAM credentials in their handlers."""

    def __init__(self, controller_client: ControllerClient, *, token: str | None = None,
                 max_answer_bytes: int = MAX_CONTROLLER_ANSWER_BYTES) -> None:
        self._client, self._token, self._max_answer_bytes = controller_client, token, max_answer_bytes
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def call(self, method: str, path: str, body: Any) -> tuple[int, Any, bytes] | AdminReply:
        """(HTTP status, the JSON answer or None, the raw body), or the error when no answer came."""
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=self._client.new_connector())
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        url = self._client.url(path)
        try:
            async with self._session.request(method, url, json=body, headers=headers,
                                             timeout=aiohttp.ClientTimeout(total=ADMIN_WRITE_TIMEOUT)) as reply:
                raw = await read_body(reply.content, self._max_answer_bytes) or b""
                status = reply.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            return AdminReply(unanswered_error(exc), f"controller at {url} did not answer ({type(exc).__name__})")
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = None
        return status, answer, raw


def refusal_reply(status: int, answer: Any, raw: bytes) -> AdminReply:
    """The admin API's refusal as a Kafka error: it answers with Kafka's error names, which the
    one ErrorCode enum maps."""
    if isinstance(answer, dict):
        name, message = answer.get("error"), answer.get("message")
    else:
        name, message = None, raw[:200].decode(errors="replace")
    code = ErrorCode.__members__.get(name, ErrorCode.UNKNOWN_SERVER_ERROR) if isinstance(name, str) \
        else ErrorCode.UNKNOWN_SERVER_ERROR
    return AdminReply(int(code), message if isinstance(message, str) and message else f"HTTP {status}")


class HttpTopicAdmin:
    """TopicAdmin over the controllers' admin API (`/v1/topics`)."""

    def __init__(self, controller_client: ControllerClient, *, token: str | None = None) -> None:
        self._api = ControllerAdminApi(controller_client, token=token)

    async def close(self) -> None:
        await self._api.close()

    async def _request(self, method: str, path: str, body: Any) -> AdminReply:
        called = await self._api.call(method, path, body)
        if isinstance(called, AdminReply):
            return called
        status, answer, raw = called
        return _reply_of(answer) if status < 300 else refusal_reply(status, answer, raw)

    async def create_topic(self, name: str, partitions: int | None, replication_factor: int | None,
                           configs: Mapping[str, str], *,
                           assignments: Sequence[tuple[int, Sequence[int]]] = (),
                           validate_only: bool = False) -> AdminReply:
        body: dict[str, Any] = {"name": name, "configs": dict(configs)}
        if partitions is not None:
            body["partitions"] = partitions
        if replication_factor is not None:
            body["replication_factor"] = replication_factor
        if assignments:
            body["assignments"] = [{"partition": p, "replicas": list(r)} for p, r in assignments]
        if validate_only:
            body["validate_only"] = True
        return await self._request("POST", "/v1/topics", body)

    async def delete_topic(self, name: str) -> AdminReply:
        return await self._request("DELETE", f"/v1/topics/{name}", None)

    async def create_partitions(self, name: str, count: int, *,
                                assignments: Sequence[Sequence[int]] | None = None,
                                validate_only: bool = False) -> AdminReply:
        body: dict[str, Any] = {"count": count}
        if assignments is not None:
            body["assignments"] = [list(r) for r in assignments]
        if validate_only:
            body["validate_only"] = True
        return await self._request("POST", f"/v1/topics/{name}/partitions", body)

    async def alter_configs(self, name: str, body: Mapping[str, Any]) -> AdminReply:
        return await self._request("PATCH", f"/v1/topics/{name}/configs", dict(body))

    async def alter_broker_configs(self, name: str, body: Mapping[str, Any]) -> AdminReply:
        path = "/v1/brokers/configs" if name == "" else f"/v1/brokers/{name}/configs"
        return await self._request("PATCH", path, dict(body))

    async def alter_group_configs(self, group_id: str, body: Mapping[str, Any]) -> AdminReply:
        return await self._request("PATCH", f"/v1/groups/{quote(group_id, safe='')}/configs", dict(body))


class AutoTopicCreator:
    """Metadata's auto topic creation with the broker's num.partitions and default.replication.factor:
    at most one creation in flight per topic, and at most MAX_PENDING_AUTO_CREATES in all; the
    client asks again (LEADER_NOT_AVAILABLE) meanwhile."""

    def __init__(self, topic_admin: TopicAdmin, image: Callable[[], MetadataImage],
                 defaults: TopicDefaults = KAFKA_TOPIC_SIZES) -> None:
        self._admin, self._image, self.defaults = topic_admin, image, defaults
        self._creating: dict[str, asyncio.Task[None]] = {}

    def start(self, name: str) -> None:
        """Ask the controllers to create `name` unless it is already being created."""
        if name in self._creating or len(self._creating) >= MAX_PENDING_AUTO_CREATES:
            return
        self._creating[name] = asyncio.get_running_loop().create_task(self._create(name))

    async def _create(self, name: str) -> None:
        try:
            partitions, replication_factor = resolve_topic_sizes(self._image(), self.defaults, name, UNSET, UNSET)
            reply = await self._admin.create_topic(name, partitions, replication_factor, {})
            if reply.error_code not in (0, ErrorCode.TOPIC_ALREADY_EXISTS):  # a concurrent creation is fine
                log.warning("Auto-creating topic %s failed: error %d: %s", name, reply.error_code,
                            reply.error_message)
            elif reply.error_code == 0:
                log.info("Auto-created topic %s with %d partition(s), replication factor %d (metadata offset %s)",
                         name, partitions, replication_factor, reply.metadata_offset)
        finally:
            self._creating.pop(name, None)

    def close(self) -> None:
        for task in list(self._creating.values()):
            task.cancel()
