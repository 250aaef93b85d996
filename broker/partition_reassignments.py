"""AlterPartitionReassignments and ListPartitionReassignments from the broker: forwarded to
the controllers' `/v1/reassignments`, the path `tidelog reassign` and the admin API use, so
the one controller rule (quorum/reassignment_control) decides, whoever asks."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from broker.controller_client import ControllerClient, read_body, unanswered_error
from common.errors import ErrorCode
from common.limits import ADMIN_WRITE_TIMEOUT, MAX_PARTITION_RESULTS_BYTES


log = logging.getLogger(__name__)

PartitionTarget = tuple[str, int, "tuple[int, ...] | None"]


@dataclass(frozen=True, slots=True)
class ReassignOutcome:
    """A top-level error (code, message), or each partition's (code, message)."""

    error_code: int
    error_message: str | None
    results: dict[tuple[str, int], tuple[int, str | None]]


@dataclass(frozen=True, slots=True)
class ListOutcome:
    error_code: int
    error_message: str | None
    # (topic, partition, replicas, adding, removing)
    ongoing: tuple[tuple[str, int, tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...]


def _code(name: Any) -> int:
    return int(ErrorCode.__members__.get(name, ErrorCode.UNKNOWN_SERVER_ERROR)) if isinstance(name, str) \
        else int(ErrorCode.UNKNOWN_SERVER_ERROR)


class HttpPartitionReassignments:
    """Reassignments over the admin API, on the controller the ControllerClient believes active
    (any controller forwards writes to the active one)."""

    def __init__(self, controller_client: ControllerClient) -> None:
        self._client = controller_client
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _call(self, method: str, body: Any = None) -> tuple[int, Any] | tuple[int, str]:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=self._client.new_connector())
        url = self._client.url("/v1/reassignments")
        try:
            async with self._session.request(method, url, json=body,
                                             timeout=aiohttp.ClientTimeout(total=ADMIN_WRITE_TIMEOUT)) as reply:
                raw = await read_body(reply.content, MAX_PARTITION_RESULTS_BYTES) or b""
                return reply.status, json.loads(raw)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            return -int(unanswered_error(exc)), f"controller at {url} did not answer ({type(exc).__name__})"

    async def alter(self, targets: Sequence[PartitionTarget]) -> ReassignOutcome:
        status, answer = await self._call("POST", {"version": 1, "partitions": [
            {"topic": t, "partition": p, "replicas": None if r is None else list(r)} for t, p, r in targets]})
        if status < 0:
            return ReassignOutcome(-status, str(answer), {})
        if not isinstance(answer, dict) or (status >= 300 and "results" not in answer):
            name = answer.get("error") if isinstance(answer, dict) else None
            message = answer.get("message") if isinstance(answer, dict) else None
            return ReassignOutcome(_code(name), str(message or f"HTTP {status}"), {})
        results = {(r["topic"], int(r["partition"])): (_code(r["error"]) if r["error"] != "NONE" else 0,
                                                       r.get("message")) for r in answer["results"]}
        return ReassignOutcome(0, None, results)

    async def list(self) -> ListOutcome:
        status, answer = await self._call("GET")
        if status < 0:
            return ListOutcome(-status, str(answer), ())
        if status >= 300 or not isinstance(answer, dict):
            name = answer.get("error") if isinstance(answer, dict) else None
            return ListOutcome(_code(name), f"HTTP {status}", ())
        return ListOutcome(0, None, tuple(
            (o["topic"], int(o["partition"]), tuple(o["replicas"]), tuple(o["adding_replicas"]),
             tuple(o["removing_replicas"])) for o in answer["partitions"]))
