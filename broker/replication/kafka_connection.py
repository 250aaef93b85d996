"""A client connection to another broker's Kafka listener (the follower's fetcher uses it).

    conn = await KafkaConnection.open("127.0.0.5", 9092, client_id="broker-4-fetcher-5",
                                      timeout_s=30.0)
    response = await conn.request(ApiKey.FETCH, 11, encode_fetch_request(req, 11),
                                  decode_fetch_response)
    await conn.close()

One request at a time, answered in order (the fetcher has nothing to pipeline). Every read
is bounded by the timeout; any failure closes the connection and raises
`BrokerConnectionError`, and the caller opens a new one after its backoff.

Responses are read as the broker's listener reads requests (`broker.frame_receiver`): the
socket reads straight into a `FrameDecoder`, and a large response (a follower's fetch of bulk
records) is received in place, in a buffer of its own sized from its prefix, and decoded as
views of it. asyncio's StreamReader copied every byte twice in Python (into its buffer, then
out of it for `readexactly`): a sixth of a follower's event loop under 35 MB/s of acks=all load
(issue 35, py-spy of bench/loaded_latency.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Final, TypeVar

from broker.client_security import INTER_BROKER_SECURITY
from broker.frame_receiver import Frame, FrameReceiver
from common.client_security import (
    SASL_AUTHENTICATE_VERSION,
    SASL_HANDSHAKE_VERSION,
    SaslLogin,
    SaslRefused,
    authenticate_request,
    check_authenticate,
    check_handshake,
    handshake_request,
    next_token,
)
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol.frame import ClientFraming, FrameDecoder, strip_response_header
from common.protocol.primitives import Chunk, ProtocolError
from common.units import MIB

MAX_RESPONSE_BYTES: Final = 512 * MIB  # far above replica.fetch.response.max.bytes

T = TypeVar("T")


class BrokerConnectionError(ConnectionError):
    """The connection failed, timed out or got an answer it could not read; it is closed."""


class _Received:
    """The FrameReceiver's byte counter (it needs one; nothing reads it yet)."""

    __slots__ = ("bytes_in",)

    def __init__(self) -> None:
        self.bytes_in = 0


class KafkaConnection:
    """A connected socket to one broker, with its own correlation ids."""

    def __init__(self, receiver: FrameReceiver, writer: asyncio.StreamWriter, *,
                 address: str, client_id: str, timeout_s: float) -> None:
        self._receiver, self._writer = receiver, writer
        self.address, self.timeout_s = address, timeout_s
        self._framing = ClientFraming(client_id, MAX_RESPONSE_BYTES)
        self.closed = False
        # The request in flight must be answered by `_deadline` (loop time; None: none in
        # flight). One watchdog timer checks it, re-armed at most once per timeout: a Timeout
        # context per request scheduled and cancelled a timer on every fetch round, ~5 % of a
        # follower's loop work per round (issue 35, bench/follower_round_cpu.py --opcodes).
        self._loop = asyncio.get_running_loop()
        self._deadline: float | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self._timed_out = False

    @classmethod
    async def open(cls, host: str, port: int, *, client_id: str, timeout_s: float,
                   local_host: str | None = None) -> KafkaConnection:
        """Connect (bounded by `timeout_s`) from `local_host` when given (the broker's own address,
        so chaos can cut this broker's links), with the inter-broker listener's TLS and SASL
        (INTER_BROKER_SECURITY); BrokerConnectionError when it cannot."""
        address = f"{host}:{port}"
        security = INTER_BROKER_SECURITY.get()
        context = None if security is None else security.ssl_context
        loop = asyncio.get_running_loop()
        counter = _Received()
        try:
            async with asyncio.timeout(timeout_s):
                transport, receiver = await loop.create_connection(
                    lambda: FrameReceiver(FrameDecoder(MAX_RESPONSE_BYTES), counter), host, port,
                    local_addr=None if local_host is None else (local_host, 0),
                    ssl=context, server_hostname=host if context is not None else None)
        except (OSError, TimeoutError) as e:
            raise BrokerConnectionError(f"cannot connect to {address}: {e or type(e).__name__}") from e
        writer = asyncio.StreamWriter(transport, receiver, receiver.reader, loop)
        connection = cls(receiver, writer, address=address, client_id=client_id, timeout_s=timeout_s)
        if security is not None and security.sasl is not None:
            await connection._authenticate(security.sasl)
        return connection

    async def _authenticate(self, login: SaslLogin) -> None:
        """SaslHandshake v1 and SaslAuthenticate v2 as a client (PLAIN or SCRAM, the tokens of
        security.sasl_client as the CLI's client sends them); on a refusal the connection is
        closed and BrokerConnectionError names the user and Kafka's message."""
        try:
            check_handshake(await self._sasl_call(ApiKey.SASL_HANDSHAKE, SASL_HANDSHAKE_VERSION,
                                                  handshake_request(login.mechanism)), login.mechanism, self.address)
            steps = login.steps()
            token: bytes | None = next(steps)
            while token is not None:  # bounded: a mechanism sends at most a few tokens, then stops
                answer = await self._sasl_call(ApiKey.SASL_AUTHENTICATE, SASL_AUTHENTICATE_VERSION,
                                               authenticate_request(token))
                token = next_token(steps, check_authenticate(answer, login.username, self.address))
        except SaslRefused as exc:
            self.abort()
            raise BrokerConnectionError(str(exc)) from None

    async def _sasl_call(self, api_key: ApiKey, version: int, body: list[Chunk]) -> Any:
        return await self.request(api_key, version, body, messages.response_decoder(api_key))

    async def request(self, api_key: ApiKey, version: int, body: list[Chunk],
                      decode: Callable[[memoryview, int], T], *, extra_timeout_s: float = 0.0) -> T:
        """Send one request and return its decoded response (a long poll adds `extra_timeout_s`)."""
        if self.closed:
            raise BrokerConnectionError(f"connection to {self.address} is closed")
        key = int(api_key)
        frame = self._framing.request(key, version, body)
        deadline = self._deadline = self._loop.time() + self.timeout_s + extra_timeout_s
        if self._watchdog is None:
            self._watchdog = self._loop.call_at(deadline, self._check_deadline)
        try:
            transport = self._writer.transport
            transport.write(frame)
            if transport.get_write_buffer_size():  # the socket took less than all: wait while it is over its high-water mark
                await self._writer.drain()
            frames = await self._receiver.receive()
            if self._timed_out:
                raise TimeoutError(f"no answer in {self.timeout_s + extra_timeout_s:.1f} s")
            self._deadline = None
            payload = self._answer(frames)
            # A flexible version's response header v1 ends in tagged fields, skipped here.
            return decode(strip_response_header(key, version, payload), version)
        except (OSError, EOFError, TimeoutError, ProtocolError) as e:
            self.abort()
            if self._timed_out and not isinstance(e, TimeoutError):  # the watchdog's abort, seen as a lost link
                e = TimeoutError(f"no answer in {self.timeout_s + extra_timeout_s:.1f} s")
            raise BrokerConnectionError(
                f"{api_key.name} v{version} to {self.address} failed: {e or type(e).__name__}") from e
        except BaseException:
            self.abort()  # cancelled mid-request: the stream is out of step now
            raise

    def _check_deadline(self) -> None:
        """The watchdog: abort a request in flight past its deadline (its await then fails),
        or wait for the later deadline a newer request set; idle, stop until the next request."""
        self._watchdog = None
        deadline = self._deadline
        if deadline is None or self.closed:
            return
        if self._loop.time() >= deadline:
            self._timed_out = True
            self._writer.transport.abort()  # wakes the receive (EOF) or the drain (lost link)
        else:
            self._watchdog = self._loop.call_at(deadline, self._check_deadline)

    def _answer(self, frames: list[Frame]) -> memoryview:
        """The body of the one response to the request in flight; EOFError for none (the broker
        closed), ProtocolError for more than one (answers nobody asked for) or another id."""
        if not frames:
            raise EOFError("the broker closed the connection before answering")
        if len(frames) > 1:
            raise ProtocolError(f"{len(frames)} responses to one request")
        return self._framing.response_body(frames[0])

    def abort(self) -> None:
        """Close at once, without waiting (cancellation paths)."""
        self.closed = True
        self._stop_watchdog()
        self._writer.close()

    def _stop_watchdog(self) -> None:
        self._deadline = None
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._stop_watchdog()
        self._writer.close()
        try:
            async with asyncio.timeout(1.0):
                await self._writer.wait_closed()
        except (OSError, TimeoutError):
            pass
