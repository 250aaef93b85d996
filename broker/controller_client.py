"""The broker's client of the controllers' /rpc/ API: msgpack over HTTP POST, bounded everywhere.

    async with ControllerClient(["127.0.0.1:9094", "127.0.0.2:9094", "127.0.0.3:9094"]) as client:
        reply = await client.call("broker-registration", body)       # to the active controller
        reply = await client.fetch_metadata(from_offset=0, max_wait_ms=1000)  # any controller

Writes (registration, heartbeat, alter-partition, producer ids) must reach the active
controller: a NOT_CONTROLLER (41) answer names it and the client goes there; a controller
that cannot be reached (refused, reset, timed out) makes the client try the next address,
skipping for a while the ones that just timed out (a SIGSTOPped controller still accepts
connections: only a timeout tells). Every request has a timeout; a broker gives its heartbeats,
registrations and metadata fetches half its session (`liveness_timeout`, Kafka's KAFKA-14392),
so a stalled controller costs at most half a session.
Attempts are bounded (`max_attempts`, with a doubling backoff between rounds); when they run
out `ControllerUnavailableError` says what was tried. Any other error code is returned to the
caller in the reply: deciding on it is the core's job.

Brokers learn the active controller from the quorum as they follow it: every metadata-fetch
reply names the active controller as the answering voter knows it, with its Raft term, and
the client sends its next write there when the term is at least the newest it has seen
(a deposed leader waking up from a pause names itself at an older term, and is ignored).

With a TLS context (`tls`, from listener.name.controller.ssl.truststore.location) every request
goes over https and the controller's certificate is checked against that CA and its address.

With a signer (`security.rpc_auth.RpcSigner`, from controller.rpc.secret.file) every request
carries the broker's proof: an HMAC of the request with the broker's own key (derived from the
cluster's secret), its node id, the wall-clock time and a fresh nonce (the controller refuses
anything else with 401, and a request speaking for another broker with 403; both come back as
replies with their error code).

Metadata fetches are answered by every controller from its committed log, but the active one
has each record first: a follower controller learns a commit only from the leader's next
AppendEntries, so a broker fetching from it sees every decision a quorum round late (at 100,000
partitions a controlled shutdown took 11.5-12.8 s that way, against 9.3 s from the active one).
So the fetch stream goes to the controller the quorum names active, once for each Raft term
that names one, as KRaft's brokers fetch from the Raft leader. It is kept apart from the write
target all the same: a fetch that times out leaves a stalled active controller for the next
one, and stays there until a newer term names an active controller (a stalled leader is not
tried again and again at the same term).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Final

import aiohttp
import msgpack

from common import rpc
from common.errors import ErrorCode
from common.limits import CONNECT_TIMEOUT
from common.rpc import NOT_CONTROLLER, RpcDecodeError
from common.units import MIB, SECONDS
from security.controller_tls import controller_url
from security.rpc_auth import RpcSigner
from security.rpc_secret import signed_headers

logger = logging.getLogger(__name__)

MSGPACK: Final = "application/x-msgpack"
REQUEST_TIMEOUT: Final = 10 * SECONDS  # one write RPC (the controller's own write timeout is 5 s)
# One heartbeat, registration or fetch beyond its long-poll: half of Kafka's default 9 s broker
# session (KAFKA-14392), so a stalled controller is left while the session still runs.
LIVENESS_TIMEOUT: Final = 4.5 * SECONDS
FETCH_TIMEOUT_MARGIN: Final = 5 * SECONDS  # a catch-up fetch (max_wait 0) may carry a whole snapshot
# A long-poll answers after max_wait_ms, plus this: the fetch stream is how a broker learns of a
# new active controller, so a stalled controller must not hold it for long.
LONG_POLL_MARGIN: Final = 1 * SECONDS
MAX_ATTEMPTS: Final = 12  # one write: redirects plus connection failures
INITIAL_BACKOFF: Final = 0.05 * SECONDS  # after a full round over the controllers (or a redirect to nobody)
MAX_BACKOFF: Final = 1 * SECONDS
# A registration waits at most this long between attempts: a broker started with its controllers
# usually asks while their election is still on, and the doubling up to MAX_BACKOFF made it wait
# up to 0.2 s past the election's end (most of a one-node test cluster's start). Kafka's
# BrokerLifecycleManager resends a registration from a 100 ms backoff.
REGISTRATION_MAX_BACKOFF: Final = 0.1 * SECONDS
MAX_REPLY_BYTES: Final = 256 * MIB  # a snapshot of a large cluster; refused before reading beyond this
MAX_CONNECTIONS: Final = 16
MAX_VOTER_ADDRESSES: Final = 9  # quorum.voter_set.MAX_VOTERS: a longer list in a reply is not the quorum's
SUSPECT_FOR: Final = 5 * SECONDS  # an address that timed out is tried last for this long


async def read_body(content: aiohttp.StreamReader, limit: int) -> bytes | None:
    """The whole body, or None once it passes `limit` bytes. (StreamReader.read(n) returns what has
    arrived so far, not n bytes: a single read cut every reply larger than one TCP read short.)"""
    body = bytearray()
    while chunk := await content.read(limit + 1 - len(body)):  # bounded: stops at EOF or past the limit
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def unanswered_error(exc: BaseException) -> ErrorCode:
    """The Kafka error for an admin request forwarded to the controllers that got no answer (a
    dropped connection, a timeout: a controller failover looks exactly so). Kafka's forwarding
    retries until the request's timeout and then answers REQUEST_TIMED_OUT, which clients retry;
    a reply that is not one (ValueError) is the server's own error."""
    return ErrorCode.UNKNOWN_SERVER_ERROR if isinstance(exc, ValueError) else ErrorCode.REQUEST_TIMED_OUT


class _Redirected(Exception):
    """A write in flight was abandoned for the controller the quorum now names active."""


class ControllerUnavailableError(ConnectionError):
    """No controller answered an RPC within the attempts; the message lists what happened."""


class ControllerClient:
    """RPCs to a set of controllers; remembers which one is active. One aiohttp session."""

    def __init__(self, addresses: Sequence[str], *, request_timeout: float = REQUEST_TIMEOUT,
                 liveness_timeout: float = LIVENESS_TIMEOUT, max_attempts: int = MAX_ATTEMPTS,
                 initial_backoff: float = INITIAL_BACKOFF, max_backoff: float = MAX_BACKOFF,
                 name: str = "broker", local_host: str | None = None, signer: RpcSigner | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        if not addresses:
            raise ValueError("at least one controller address (host:port) is needed")
        self.addresses = tuple(addresses)
        self._target = self.addresses[0]  # the controller believed active: writes go here
        self._fetch_target = self.addresses[0]  # the controller the metadata fetches go to
        self._request_timeout, self._max_attempts = request_timeout, max_attempts
        self._liveness_timeout = min(liveness_timeout, request_timeout)
        self._initial_backoff, self._max_backoff = initial_backoff, max_backoff
        self._name = name  # who we are, in log lines
        self._signer = signer  # None: the controllers do not authenticate RPCs (no secret configured)
        self.tls = tls  # None: the controllers' listener is plain http (security.controller_tls)
        self._leader_term = -1  # the newest Raft term a fetch reply named an active controller for
        self._fetch_term = -1  # the Raft term whose active controller the fetch stream last went to
        self._suspect_until: dict[str, float] = {}  # address -> monotonic time; one entry per address
        self._session: aiohttp.ClientSession | None = None
        # one event per write in flight, set when the quorum names another active controller
        self._redirect_waiters: set[asyncio.Event] = set()
        # the broker's own address: its RPCs leave from it, so chaos can cut this broker's links
        self.local_addr = (local_host, 0) if local_host not in (None, "", "0.0.0.0", "::") else None

    def new_connector(self, limit: int = MAX_CONNECTIONS) -> aiohttp.TCPConnector:
        """A connector whose connections leave from the broker's own address (when it has one)."""
        return aiohttp.TCPConnector(limit=limit, local_addr=self.local_addr,
                                    ssl=self.tls if self.tls is not None else True)

    def url(self, path: str, address: str | None = None) -> str:
        """The URL of `path` on `address` (default: the controller believed active), https when the
        controllers' listener is (issue 29)."""
        return controller_url(self._target if address is None else address, self.tls) + path

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

    def _next_after(self, address: str) -> str:
        """The address after `address`, preferring one that has not timed out lately."""
        index = self.addresses.index(address) if address in self.addresses else -1
        ring = [self.addresses[(index + i) % len(self.addresses)] for i in range(1, len(self.addresses) + 1)]
        now = time.monotonic()
        return next((a for a in ring if self._suspect_until.get(a, 0.0) <= now), ring[0])

    def _rotate(self, away_from: str) -> None:
        if self._target == away_from:
            self._target = self._next_after(away_from)

    def _failed(self, address: str, exc: BaseException) -> None:
        if isinstance(exc, TimeoutError):  # refused connections fail fast: only a stall is suspect
            self._suspect_until[address] = time.monotonic() + SUSPECT_FOR

    def observe_leader(self, reply: Mapping[str, Any]) -> None:
        """A metadata-fetch reply names the active controller (as its voter knows it) and the Raft
        term: writes go there next, unless a newer term was already seen."""
        term, address = reply.get("raft_term"), reply.get("controller_address")
        if type(term) is not int or term < self._leader_term:
            return
        self._leader_term = term
        self._follow_voters(reply.get("controller_voters"))
        if isinstance(address, str) and address in self.addresses and term > self._fetch_term:
            self._fetch_term = term
            if address != self._fetch_target:
                logger.info("%s: fetching metadata from controller %s (%s), active at raft term %d, instead "
                            "of %s", self._name, reply.get("controller_id"), address, term, self._fetch_target)
                self._fetch_target = address
        if isinstance(address, str) and address in self.addresses and address != self._target:
            logger.info("%s: the quorum names controller %s (%s) active at raft term %d; sending writes there "
                        "instead of %s", self._name, reply.get("controller_id"), address, term, self._target)
            self._target = address
            self._suspect_until.pop(address, None)
            for waiter in self._redirect_waiters:
                waiter.set()

    def _follow_voters(self, voters: object) -> None:
        """The quorum's voters (KIP-853), as a fetch reply of the newest term names them, replace the
        addresses tried: a controller added later is reached, one removed no longer tried."""
        if not isinstance(voters, list) or not voters or len(voters) > MAX_VOTER_ADDRESSES \
                or not all(isinstance(a, str) and a for a in voters):
            return  # an older controller's reply names none: keep what we have
        addresses = tuple(voters)
        if addresses == self.addresses:
            return
        logger.info("%s: the quorum's voters are now at %s (were %s)", self._name, ", ".join(addresses),
                    ", ".join(self.addresses))
        self.addresses = addresses
        if self._target not in addresses:
            self._target = addresses[0]
        if self._fetch_target not in addresses:
            self._fetch_target = addresses[0]

    async def post(self, address: str, name: str, body: Mapping[str, Any], timeout: float) -> dict[str, Any]:
        """One POST /rpc/<name> to one controller; the decoded reply (any HTTP status carries one).

        Raises aiohttp.ClientError, TimeoutError or ValueError (a reply that is not one msgpack map).
        """
        data = msgpack.packb(dict(body), use_bin_type=True)
        headers = {"Content-Type": MSGPACK, **signed_headers(self._signer, address, f"/rpc/{name}", data)}
        async with self._http().post(
                self.url(f"/rpc/{name}", address), data=data, headers=headers,
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
        try:
            rpc.decode_status(reply)  # every reply carries the envelope; the caller decodes the rest
        except RpcDecodeError as exc:
            raise ValueError(f"{address} answered {name} with HTTP {status}: {exc}: {reply!r:.100}") from None
        return reply

    async def call(self, name: str, body: Mapping[str, Any], *, timeout: float | None = None,
                   max_backoff: float | None = None) -> dict[str, Any]:
        """A write RPC on the active controller: follows NOT_CONTROLLER, rotates on failures.

        Returns the first reply that is not NOT_CONTROLLER (its error_code may be non-zero);
        raises ControllerUnavailableError after `max_attempts`. `max_backoff` caps the waits
        between attempts below the client's own cap.
        """
        backoff = self._initial_backoff
        cap = self._max_backoff if max_backoff is None else min(max_backoff, self._max_backoff)
        tried: list[str] = []
        for attempt in range(self._max_attempts):  # bounded: max_attempts
            address = self._target
            try:
                reply = await self._post_unless_redirected(address, name, body, timeout or self._request_timeout)
            except _Redirected:
                tried.append(f"{address}: left for {self._target}, which the quorum names active")
                continue
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                tried.append(f"{address}: {type(exc).__name__} {exc}".rstrip())
                self._failed(address, exc)
                self._rotate(address)
                if len(tried) % len(self.addresses) == 0:  # a full round failed
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, cap)
                continue
            status = rpc.decode_status(reply)
            if status.error_code != NOT_CONTROLLER:
                return reply
            active = status.controller_address
            tried.append(f"{address}: NOT_CONTROLLER (active: {active})")
            if active and active != address:
                self._target = active
                continue  # a redirect to a named controller: no wait
            self._rotate(address)  # no active controller known there (an election): wait a little
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, cap)
        raise ControllerUnavailableError(f"{name}: no active controller answered in {self._max_attempts} "
                                         f"attempts: {'; '.join(tried[-6:])}")

    async def _post_unless_redirected(self, address: str, name: str, body: Mapping[str, Any],
                                      timeout: float) -> dict[str, Any]:
        """`post`, abandoned (_Redirected) as soon as the quorum names another active controller: a
        request stuck on a stalled, deposed one would otherwise wait out its whole timeout. Its
        late outcome cannot matter: a deposed controller's appends are fenced by epoch."""
        changed = asyncio.Event()
        self._redirect_waiters.add(changed)
        post = asyncio.ensure_future(self.post(address, name, body, timeout))
        redirect = asyncio.ensure_future(changed.wait())
        try:
            await asyncio.wait({post, redirect}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._redirect_waiters.discard(changed)
            redirect.cancel()
            if not post.done():
                post.cancel()
                await asyncio.gather(post, return_exceptions=True)
        if post.cancelled() or not post.done():
            raise _Redirected()
        return post.result()

    async def register(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """broker-registration on the active controller (the reply; error_code may be non-zero)."""
        return await self.call("broker-registration", body, timeout=self._liveness_timeout,
                               max_backoff=REGISTRATION_MAX_BACKOFF)

    async def heartbeat(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """broker-heartbeat on the active controller (the reply; error_code may be non-zero)."""
        return await self.call("broker-heartbeat", body, timeout=self._liveness_timeout)

    async def fetch_metadata(self, from_offset: int, max_wait_ms: int, *, broker_id: int = -1,
                             max_records: int | None = None) -> dict[str, Any]:
        """metadata-fetch of committed records from `from_offset` (a long-poll of `max_wait_ms`).

        Any controller answers; it goes to the one the fetch stream uses (the active one, once a
        reply named it); on a connection error or a timeout the next controller is tried, once
        per address, then ControllerUnavailableError.
        """
        body: dict[str, Any] = {"offset": from_offset, "max_wait_ms": max_wait_ms, "broker_id": broker_id}
        if max_records is not None:
            body["max_records"] = max_records
        margin = LONG_POLL_MARGIN if max_wait_ms > 0 else FETCH_TIMEOUT_MARGIN
        timeout = max_wait_ms / 1000 + min(margin, self._liveness_timeout)
        tried: list[str] = []
        for _ in range(len(self.addresses)):  # bounded: one round over the controllers
            address = self._fetch_target
            try:
                reply = await self.post(address, "metadata-fetch", body, timeout)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                tried.append(f"{address}: {type(exc).__name__} {exc}".rstrip())
                self._failed(address, exc)
                self._fetch_target = self._next_after(address)
                continue
            self.observe_leader(reply)
            return reply
        raise ControllerUnavailableError(f"metadata-fetch: no controller answered: {'; '.join(tried)}")
