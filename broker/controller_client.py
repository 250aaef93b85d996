"""The broker's client of the controllers' /rpc/ API: msgpack over HTTP POST, bounded everywhere.

    async with ControllerClient(["127.0.0.1:9094", "127.0.0.2:9094", "127.0.0.3:9094"]) as client:
        reply = await client.call("broker-registration", body)       # to the active controller
        reply = await client.fetch_metadata(from_offset=0, max_wait_ms=1000)  # any controller

Writes (registration, heartbeat, alter-partition, producer ids) must reach the active
controller: a NOT_CONTROLLER (41) answer names it and the client goes there; a controller
that cannot be reached (refused, reset, timed out) makes the client try the next address.
Attempts are bounded (`max_attempts`, with a doubling backoff between rounds) and every
request has a timeout; when they run out `ControllerUnavailableError` says what was tried.
Any other error code is returned to the caller in the reply: deciding on it is the core's job.

Metadata fetches are answered by every controller from its committed log, so they go to
whichever controller the client currently talks to, and rotate on connection errors only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Final

import aiohttp
import msgpack

from common.units import MIB, SECONDS

logger = logging.getLogger(__name__)

MSGPACK: Final = "application/x-msgpack"
NOT_CONTROLLER: Final = 41
REQUEST_TIMEOUT: Final = 10 * SECONDS  # one write RPC (the controller's own write timeout is 5 s)
CONNECT_TIMEOUT: Final = 1 * SECONDS  # a dead controller on loopback refuses at once; a cut link does not
FETCH_TIMEOUT_MARGIN: Final = 5 * SECONDS  # a long-poll answers after max_wait_ms, plus this
MAX_ATTEMPTS: Final = 12  # one write: redirects plus connection failures
INITIAL_BACKOFF: Final = 0.05 * SECONDS  # after a full round over the controllers (or a redirect to nobody)
MAX_BACKOFF: Final = 1 * SECONDS
MAX_REPLY_BYTES: Final = 256 * MIB  # a snapshot of a large cluster; refused before reading beyond this
MAX_CONNECTIONS: Final = 16


async def read_body(content: aiohttp.StreamReader, limit: int) -> bytes | None:
    """The whole body, or None once it passes `limit` bytes. (StreamReader.read(n) returns what has
    arrived so far, not n bytes: a single read cut every reply larger than one TCP read short.)"""
    body = bytearray()
    while chunk := await content.read(limit + 1 - len(body)):  # bounded: stops at EOF or past the limit
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


class ControllerUnavailableError(ConnectionError):
    """No controller answered an RPC within the attempts; the message lists what happened."""


class ControllerClient:
    """RPCs to a set of controllers; remembers which one is active. One aiohttp session."""

    def __init__(self, addresses: Sequence[str], *, request_timeout: float = REQUEST_TIMEOUT,
                 max_attempts: int = MAX_ATTEMPTS, initial_backoff: float = INITIAL_BACKOFF,
                 max_backoff: float = MAX_BACKOFF, local_host: str | None = None) -> None:
        if not addresses:
            raise ValueError("at least one controller address (host:port) is needed")
        self.addresses = tuple(addresses)
        self._target = self.addresses[0]  # the controller believed active
        self._request_timeout, self._max_attempts = request_timeout, max_attempts
        self._initial_backoff, self._max_backoff = initial_backoff, max_backoff
        self._session: aiohttp.ClientSession | None = None
        # the broker's own address: its RPCs leave from it, so chaos can cut this broker's links
        self.local_addr = (local_host, 0) if local_host not in (None, "", "0.0.0.0", "::") else None

    def new_connector(self, limit: int = MAX_CONNECTIONS) -> aiohttp.TCPConnector:
        """A connector whose connections leave from the broker's own address (when it has one)."""
        return aiohttp.TCPConnector(limit=limit, local_addr=self.local_addr)

    @property
    def target(self) -> str:
        """The controller the next RPC goes to first."""
        return self._target

    async def __aenter__(self) -> ControllerClient:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=self.new_connector())
        return self._session

    def _rotate(self, away_from: str) -> None:
        if self._target == away_from:
            index = self.addresses.index(away_from) if away_from in self.addresses else -1
            self._target = self.addresses[(index + 1) % len(self.addresses)]

    async def post(self, address: str, name: str, body: Mapping[str, Any], timeout: float) -> dict[str, Any]:
        """One POST /rpc/<name> to one controller; the decoded reply (any HTTP status carries one).

        Raises aiohttp.ClientError, TimeoutError or ValueError (a reply that is not one msgpack map).
        """
        data = msgpack.packb(dict(body), use_bin_type=True)
        async with self._http().post(
                f"http://{address}/rpc/{name}", data=data, headers={"Content-Type": MSGPACK},
                timeout=aiohttp.ClientTimeout(total=timeout, sock_connect=min(CONNECT_TIMEOUT, timeout))) as answer:
            if (answer.content_length or 0) > MAX_REPLY_BYTES:
                raise ValueError(f"{address} answered {answer.content_length} bytes to {name}, more than "
                                 f"{MAX_REPLY_BYTES}")
            raw = await read_body(answer.content, MAX_REPLY_BYTES)
            if raw is None:
                raise ValueError(f"{address} answered more than {MAX_REPLY_BYTES} bytes to {name}")
            status = answer.status
        try:
            reply = msgpack.unpackb(raw, raw=False, strict_map_key=True)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise ValueError(f"{address} answered {name} with HTTP {status} and a body that is not "
                             f"msgpack ({type(exc).__name__})") from None
        if not isinstance(reply, dict) or type(reply.get("error_code")) is not int:
            raise ValueError(f"{address} answered {name} with HTTP {status} and no error_code: {reply!r:.100}")
        return reply

    async def call(self, name: str, body: Mapping[str, Any], *, attempt_timeout: float | None = None,
                   give_up: Callable[[], bool] | None = None) -> dict[str, Any]:
        """A write RPC on the active controller: follows NOT_CONTROLLER, rotates on failures.

        Returns the first reply that is not NOT_CONTROLLER (its error_code may be non-zero);
        raises ControllerUnavailableError after `max_attempts`. `attempt_timeout` (default: the
        client's request timeout) bounds each attempt: a controller that silently drops packets
        (cut off, or SIGSTOPped) costs one attempt that long before the next is tried; `give_up()`
        turning true between attempts (the broker is stopping) ends the call there.
        """
        backoff = self._initial_backoff
        tried: list[str] = []
        for attempt in range(self._max_attempts):  # bounded: max_attempts
            if attempt and give_up is not None and give_up():
                raise ControllerUnavailableError(f"{name}: given up after {attempt} attempts: {'; '.join(tried[-3:])}")
            address = self._target
            try:
                reply = await self.post(address, name, body, attempt_timeout or self._request_timeout)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                tried.append(f"{address}: {type(exc).__name__} {exc}".rstrip())
                self._rotate(address)
                if self._target == self.addresses[0] or len(self.addresses) == 1:  # a full round failed
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, self._max_backoff)
                continue
            if reply["error_code"] != NOT_CONTROLLER:
                return reply
            active = reply.get("controller_address")
            tried.append(f"{address}: NOT_CONTROLLER (active: {active})")
            if isinstance(active, str) and active and active != address:
                self._target = active
                continue  # a redirect to a named controller: no wait
            self._rotate(address)  # no active controller known there (an election): wait a little
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self._max_backoff)
        raise ControllerUnavailableError(f"{name}: no active controller answered in {self._max_attempts} "
                                         f"attempts: {'; '.join(tried[-6:])}")

    async def register(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """broker-registration on the active controller (the reply; error_code may be non-zero)."""
        return await self.call("broker-registration", body)

    async def heartbeat(self, body: Mapping[str, Any], *, attempt_timeout: float | None = None,
                        give_up: Callable[[], bool] | None = None) -> dict[str, Any]:
        """broker-heartbeat on the active controller (the reply; error_code may be non-zero)."""
        return await self.call("broker-heartbeat", body, attempt_timeout=attempt_timeout, give_up=give_up)

    async def fetch_metadata(self, from_offset: int, max_wait_ms: int, *, broker_id: int = -1,
                             max_records: int | None = None) -> dict[str, Any]:
        """metadata-fetch of committed records from `from_offset` (a long-poll of `max_wait_ms`).

        Any controller answers, so it goes to the current one; on a connection error or a
        timeout the next controller is tried, once per address, then ControllerUnavailableError.
        """
        body: dict[str, Any] = {"offset": from_offset, "max_wait_ms": max_wait_ms, "broker_id": broker_id}
        if max_records is not None:
            body["max_records"] = max_records
        timeout = max_wait_ms / 1000 + FETCH_TIMEOUT_MARGIN
        tried: list[str] = []
        for _ in range(len(self.addresses)):  # bounded: one round over the controllers
            address = self._target
            try:
                return await self.post(address, "metadata-fetch", body, timeout)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                tried.append(f"{address}: {type(exc).__name__} {exc}".rstrip())
                self._rotate(address)
        raise ControllerUnavailableError(f"metadata-fetch: no controller answered: {'; '.join(tried)}")
