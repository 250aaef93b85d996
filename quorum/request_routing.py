"""Where a request to this controller's HTTP API is served, and what it may read.

    router = RequestRouter(log, controller, settings, active_api)
    router.start()                                   # the session forwarded writes use
    response = await router.write(request, raw, run)  # here if active, else on the active one
    await router.caught_up()                         # before a GET /v1/... is served from our image

Writes run on the active controller. Any other controller forwards them (found through the Raft
leader and `controller.api.voters`) and passes the answer back unchanged, once its own image
holds the answer's `metadata_offset` (read-your-writes through any controller). A forward
refused before anything was appended (NOT_CONTROLLER, connection refused) is retried against
the new active controller until `ACTIVE_WAIT`; one whose outcome is unknown (timeout,
connection lost mid-way) answers 504 REQUEST_TIMED_OUT: re-read before retrying. A forwarded
request is never forwarded again (`FORWARDED_HEADER`), so there are no loops.

A busy but healthy active controller (a few 10,000-partition creates queued) times a write out
in its decision queue before appending anything; the write is queued again until
`QUEUE_RETRY_WAIT` instead of answering 504 at once, as Kafka's controller queue keeps an event
until its request's own deadline. The forwarder's `FORWARD_TIMEOUT` covers that wait plus the
largest user operation's append (`USER_OP_APPEND_BUDGET`), so a forwarded create of 10,000
partitions is not answered 504 while the active controller is still committing it.

Reads are served from this controller's own image, but after a restart only once it has caught
up with what the quorum had committed (pysyncobj's readiness). The routes are
`quorum.controller_server`'s.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

import aiohttp
from aiohttp import web

from common.errors import ErrorCode
from common.limits import MAX_ADMIN_ANSWER_BYTES
from metadata.codec import MetadataRecordError
from quorum import admin_api as api
from quorum.active_controller import (
    ActiveController,
    ControllerBusyError,
    NotActiveControllerError,
)
from quorum.admin_api import AdminError, ApiSettings
from quorum.controller_result import ControllerApiError
from quorum.controller_runtime import NotCommittedError, QueueTimeoutError
from quorum.log_state import RecordTooLargeError
from quorum.metadata_log import MetadataLog
from security.controller_tls import controller_url
from security.controller_tls_context import client_context_of

logger = logging.getLogger(__name__)

FORWARDED_HEADER: Final = "X-Tidelog-Forwarded-By"  # node id of the controller that forwarded


def _source_address(host: str) -> tuple[str, int] | None:
    """(host, 0) to bind outgoing connections to, or None for a wildcard listener."""
    return None if host in ("", "0.0.0.0", "::") else (host, 0)


def _answer_field(body: bytes, field: str) -> Any:
    """One top-level field of a JSON answer, None if absent or not JSON."""
    try:
        answer = json.loads(body)
    except ValueError:
        return None
    return answer.get(field) if isinstance(answer, dict) else None


def _error_name(body: bytes) -> str | None:
    error = _answer_field(body, "error")
    return error if isinstance(error, str) else None


def _metadata_offset(body: bytes) -> int | None:
    """The metadata offset a write's answer says it committed at, if it says."""
    offset = _answer_field(body, "metadata_offset")
    return offset if isinstance(offset, int) else None


# The rules name their own arguments; the API names the request's fields.
_FIELD_NAMES: Final = {"total_count": "count"}


def api_error(exc: ControllerApiError) -> AdminError:
    """A rule's refusal as the API's error: Kafka's code name, message, and the request field."""
    field = _FIELD_NAMES.get(exc.field or "", exc.field)
    if exc.code is ErrorCode.INVALID_CONFIG and field and not field.startswith("configs"):
        field = f"configs.{field}"  # the rules name the config key itself
    return AdminError(exc.code.name, exc.message, field)



class RequestRouter:
    """Runs a validated write here or forwards it to the active controller; gates reads on
    this controller having caught up. `start` opens the forwarding session, `close` closes it."""

    def __init__(self, log: MetadataLog, controller: ActiveController, settings: ApiSettings,
                 active_api: Callable[[], tuple[int | None, str | None]]) -> None:
        self._log, self._controller, self._settings = log, controller, settings
        self._active_api = active_api  # (node id, HTTP API address) of the active controller
        self._session: aiohttp.ClientSession | None = None
        # issue 29: the other controllers' listener is https when this one's is configured so
        self._tls = client_context_of(settings.tls)

    def start(self) -> None:
        self._session = aiohttp.ClientSession(
            # forwarded requests leave from this controller's own address (chaos cuts links by it)
            connector=aiohttp.TCPConnector(limit=api.FORWARD_CONNECTIONS_MAX,
                                           local_addr=_source_address(self._settings.host),
                                           ssl=self._tls if self._tls is not None else True))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def write(self, request: web.Request, raw: bytes,
                    run: Callable[[], Awaitable[web.Response]]) -> web.Response:
        """Run a validated write here if active, else forward it; bounded by ACTIVE_WAIT."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + api.ACTIVE_WAIT
        queue_deadline = loop.time() + api.QUEUE_RETRY_WAIT
        forwarded = request.headers.get(FORWARDED_HEADER)
        while True:  # bounded by the deadlines
            if self._controller.is_active:
                try:
                    return await run()
                except NotActiveControllerError:
                    pass  # renounced before appending anything: route it again
                except ControllerApiError as exc:
                    raise api_error(exc) from None
                except (RecordTooLargeError, MetadataRecordError) as exc:  # a record the input made invalid
                    raise AdminError("INVALID_REQUEST", str(exc)) from None
                except ControllerBusyError as exc:
                    raise AdminError("THROTTLING_QUOTA_EXCEEDED", str(exc)) from None
                except QueueTimeoutError as exc:
                    # its deadline passed in the decision queue, before anything was appended:
                    # safe to queue again while the controller is busy (any other timeout is not)
                    if loop.time() < queue_deadline and self._controller.is_active:
                        logger.info("controller %d: a %s %s timed out in the decision queue (nothing "
                                    "appended); queueing it again", self._settings.node_id, request.method,
                                    request.rel_url.path)
                        continue
                    raise AdminError("REQUEST_TIMED_OUT", f"{exc}; retry") from None
                except TimeoutError as exc:
                    raise AdminError("REQUEST_TIMED_OUT", f"{exc}; retry") from None
                except NotCommittedError as exc:  # NOT_CONTROLLER (retried by a forwarder) only if nothing applied
                    raise AdminError("NOT_CONTROLLER" if exc.applied_nothing else "REQUEST_TIMED_OUT",
                                     str(exc)) from None
            else:
                node, address = self._active_api()
                if node is not None and node != self._settings.node_id and address is not None:
                    if forwarded is not None:
                        raise AdminError("NOT_CONTROLLER", f"controller {self._settings.node_id} is not "
                                         f"active; controller {node} at {address} is")
                    response = await self._forward(request, raw, node, address)
                    if response is not None:
                        return response
            if loop.time() >= deadline:
                raise AdminError("NOT_CONTROLLER", f"no active controller within {api.ACTIVE_WAIT:.0f}s; "
                                 "nothing was written, retry")
            await asyncio.sleep(api.ACTIVE_POLL)

    async def _forward(self, request: web.Request, raw: bytes, node: int,
                       address: str) -> web.Response | None:
        """The active controller's answer, or None when it certainly applied nothing (retry)."""
        assert self._session is not None, "start() opens the session"
        headers = {"Content-Type": "application/json", FORWARDED_HEADER: str(self._settings.node_id)}
        if "Authorization" in request.headers:
            headers["Authorization"] = request.headers["Authorization"]
        url = f"{controller_url(address, self._tls)}{request.rel_url}"
        try:
            async with self._session.request(
                    request.method, url, data=raw, headers=headers,
                    timeout=aiohttp.ClientTimeout(total=api.FORWARD_TIMEOUT)) as response:
                if (response.content_length or 0) > MAX_ADMIN_ANSWER_BYTES:
                    raise AdminError("UNKNOWN_SERVER_ERROR", f"controller {node} answered "
                                     f"{response.content_length} bytes, more than this node relays")
                body = await response.read()
                status = response.status
        except aiohttp.ClientConnectorError:
            return None  # never connected: nothing was sent
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise AdminError("REQUEST_TIMED_OUT", f"forwarding to the active controller {node} at "
                             f"{address} failed ({type(exc).__name__}); the write may or may not "
                             "have been applied: re-read before retrying") from None
        if status == 503 and _error_name(body) == "NOT_CONTROLLER":
            return None  # it applied nothing (renounced, or not active yet): find the active one
        if 200 <= status < 300:
            await self._await_applied(_metadata_offset(body))
        return web.Response(status=status, body=body, content_type="application/json",
                            headers={"X-Tidelog-Served-By": str(node)})

    async def caught_up(self) -> None:
        """Reads are served from this controller's image: after a restart, only once it holds
        what the quorum had committed when this voter first heard from the leader (pysyncobj's
        readiness); /v1/cluster answers regardless, it is how an operator sees the lag."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + api.READ_CATCH_UP_WAIT
        while not self._log.status().ready and loop.time() < deadline:
            await asyncio.sleep(api.ACTIVE_POLL)
        if not self._log.status().ready:
            raise AdminError("COORDINATOR_LOAD_IN_PROGRESS", f"controller {self._settings.node_id} has not "
                             "caught up with the metadata log since it started; retry, or ask another controller")

    async def _await_applied(self, offset: int | None) -> None:
        """Wait (bounded) until this controller's image holds metadata `offset`: read-your-writes."""
        if offset is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + api.FORWARD_APPLY_WAIT
        while self._log.image().offset < offset and loop.time() < deadline:
            await asyncio.sleep(api.ACTIVE_POLL / 5)
        if self._log.image().offset < offset:
            logger.warning("controller %d relays a write at metadata offset %d it has not applied after %.1f s "
                        "(applied %d)", self._settings.node_id, offset, api.FORWARD_APPLY_WAIT, self._log.image().offset)

