"""ElectLeaders from the broker: forwarded to the controllers' `POST /v1/elections`, the
path `tidelog` and the admin API already use, so the one controller rule
(quorum/replication_control.elect_leaders) decides every election, whoever asks."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

from broker.controller_client import ControllerClient, read_body, unanswered_error
from common.errors import ErrorCode
from common.limits import ADMIN_WRITE_TIMEOUT, MAX_PARTITION_RESULTS_BYTES


log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ElectionOutcome:
    """A top-level error (code, message) or every partition's error code."""

    error_code: int
    error_message: str | None
    results: Mapping[tuple[str, int], int]


class LeaderElections(Protocol):
    async def elect(self, election: str, partitions: Sequence[tuple[str, int]] | None) -> ElectionOutcome:
        """`election` is "preferred" or "unclean"; None partitions: every one that needs it."""
        ...


class HttpLeaderElections:
    """LeaderElections over the admin API, on the controller the ControllerClient believes
    active (any controller forwards writes to the active one)."""

    def __init__(self, controller_client: ControllerClient) -> None:
        self._client = controller_client
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def elect(self, election: str, partitions: Sequence[tuple[str, int]] | None) -> ElectionOutcome:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=self._client.new_connector())
        body: dict[str, Any] = {"type": election, "partitions": None if partitions is None else [
            {"topic": topic, "partition": partition} for topic, partition in partitions]}
        url = self._client.url("/v1/elections")
        try:
            async with self._session.post(url, json=body,
                                          timeout=aiohttp.ClientTimeout(total=ADMIN_WRITE_TIMEOUT)) as reply:
                raw = await read_body(reply.content, MAX_PARTITION_RESULTS_BYTES) or b""
                status = reply.status
            answer = json.loads(raw)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            return ElectionOutcome(int(unanswered_error(exc)),
                                   f"controller at {url} did not answer ({type(exc).__name__})", {})
        if status >= 300 or not isinstance(answer, dict):
            name = answer.get("error") if isinstance(answer, dict) else None
            code = ErrorCode.__members__.get(name, ErrorCode.UNKNOWN_SERVER_ERROR) \
                if isinstance(name, str) else ErrorCode.UNKNOWN_SERVER_ERROR
            message = answer.get("message") if isinstance(answer, dict) else None
            return ElectionOutcome(int(code), str(message or f"HTTP {status}"), {})
        results = {(r["topic"], int(r["partition"])): int(ErrorCode.__members__.get(
            r["error"], ErrorCode.UNKNOWN_SERVER_ERROR)) for r in answer.get("results", ())}
        return ElectionOutcome(0, None, results)
