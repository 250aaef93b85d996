"""A client connection to another broker's Kafka listener (the follower's fetcher uses it).

    conn = await KafkaConnection.open("127.0.0.5", 9092, client_id="broker-4-fetcher-5",
                                      timeout_s=30.0)
    response = await conn.request(ApiKey.FETCH, 11, encode_fetch_request(req, 11),
                                  decode_fetch_response)
    await conn.close()

One request at a time, answered in order (the fetcher has nothing to pipeline). Every read
is bounded by the timeout; any failure closes the connection and raises
`BrokerConnectionError`, and the caller opens a new one after its backoff.

A caller that sends its next request as soon as an answer is handled (the fetcher's rounds)
uses `requests`: each answer is decoded and handed on in the receiver's own turn, as its bytes
arrive, and the next request is written there; the awaiting task is not woken per answer.
`request` woke it: the answer set a future in the read callback and the task resumed one
event-loop pass later (a select, a task step: ~300 of a follower round's ~3,700 opcodes,
issue 35, bench/follower_round_cpu.py).

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
from typing import Any, Final, Generic, TypeVar

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


class _Chain(Generic[T]):
    """One `requests` call: what each answer is decoded with and handed to, and how it ended."""

    __slots__ = ("key", "version", "decode", "on_answer", "extra_timeout_s", "running", "error", "failed")

    def __init__(self, key: int, version: int, decode: Callable[[memoryview, int], T],
                 on_answer: Callable[[T], list[Chunk] | None], extra_timeout_s: float) -> None:
        self.key, self.version, self.decode, self.on_answer = key, version, decode, on_answer
        self.extra_timeout_s = extra_timeout_s
        self.running = True  # a request of the chain is in flight
        self.error: Exception | None = None  # the connection's: an answer that cannot be read
        self.failed: Exception | None = None  # what on_answer raised


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
        self._chain: _Chain[Any] | None = None  # the `requests` call whose answers are taken in turn

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
        self._write(key, version, body, extra_timeout_s)
        try:
            if self._writer.transport.get_write_buffer_size():  # the socket took less than all
                await self._writer.drain()  # (waits while it is over its high-water mark)
            return self._decode(key, version, decode, await self._receiver.receive(), extra_timeout_s)
        except (OSError, EOFError, TimeoutError, ProtocolError) as e:
            raise self._failed(api_key, version, e, extra_timeout_s) from e
        except BaseException:
            self.abort()  # cancelled mid-request: the stream is out of step now
            raise

    async def requests(self, api_key: ApiKey, version: int, body: list[Chunk],
                       decode: Callable[[memoryview, int], T], on_answer: Callable[[T], list[Chunk] | None],
                       *, extra_timeout_s: float = 0.0) -> None:
        """Send `body`, then one request after another for as long as `on_answer` asks: each
        answer is decoded and handed to `on_answer` in the receiver's turn as it arrives, and
        what it returns is the next request's body (the same API and version), written at once;
        None stops. Returns then. Raises BrokerConnectionError as `request` does (closed), or
        what `on_answer` raised (the connection as it was, nothing in flight); each request is
        bounded by the timeout (plus `extra_timeout_s`) from its own start."""
        if self.closed:
            raise BrokerConnectionError(f"connection to {self.address} is closed")
        chain: _Chain[T] = _Chain(int(api_key), version, decode, on_answer, extra_timeout_s)
        receiver = self._receiver
        self._write(chain.key, version, body, extra_timeout_s)
        try:
            if self._writer.transport.get_write_buffer_size():
                await self._writer.drain()
            self._chain, receiver.sink = chain, self._take_in_turn
            # Each pass is one wake-up: the chain stopped in the receiver's turn, an answer came
            # while nobody waited (during the drain), EOF, or the receiver's error.
            while chain.running:  # until on_answer stops or a request fails
                frames = await receiver.receive()
                if chain.error is not None:
                    raise chain.error
                if chain.running:
                    self._step(chain, frames)
        except (OSError, EOFError, TimeoutError, ProtocolError) as e:
            raise self._failed(api_key, version, e, extra_timeout_s) from e
        except BaseException:
            self.abort()  # cancelled mid-request, or an answer that does not decode
            raise
        finally:
            self._chain = receiver.sink = None
        if chain.failed is not None:
            raise chain.failed

    def _take_in_turn(self, frames: list[Frame]) -> list[Frame]:
        """FrameReceiver.sink while `requests` waits: the chain's answer taken in the read's own
        turn. Returns [] while the chain goes on (its task sleeps on), else the frames (already
        handled, or left for the task to fail on), which wake the task. Never raises: the
        transport's read callback would take it for a fatal error of its own."""
        chain = self._chain
        if chain is None or not chain.running or self.closed or self._timed_out:
            return frames
        try:
            self._step(chain, frames)
        except Exception as e:  # noqa: BLE001 - raised in the waiting task, as `request` raises it
            chain.error = e
            chain.running = False
        return [] if chain.running else frames

    def _step(self, chain: _Chain[Any], frames: list[Frame]) -> None:
        """Decode the chain's answer, hand it on, and write the next request if one comes back."""
        response = self._decode(chain.key, chain.version, chain.decode, frames, chain.extra_timeout_s)
        try:
            body = chain.on_answer(response)
        except Exception as e:  # noqa: BLE001 - the caller's error, raised as is by `requests`
            chain.failed = e
            body = None
        if body is None:
            chain.running = False
            return
        if self.closed:  # (on_answer closed it) the request it built is lost: fail as a lost link
            raise EOFError("the connection was closed while its answer was handled")
        # Written without a drain: one request in flight at a time, and the next is written only
        # once its predecessor's answer arrived, so the buffer holds at most one small request.
        self._write(chain.key, chain.version, body, chain.extra_timeout_s)

    def _write(self, key: int, version: int, body: list[Chunk], extra_timeout_s: float) -> None:
        """Frame and write one request; its deadline is armed."""
        frame = self._framing.request(key, version, body)
        deadline = self._deadline = self._loop.time() + self.timeout_s + extra_timeout_s
        if self._watchdog is None:
            self._watchdog = self._loop.call_at(deadline, self._check_deadline)
        self._writer.transport.write(frame)

    def _decode(self, key: int, version: int, decode: Callable[[memoryview, int], T], frames: list[Frame],
                extra_timeout_s: float) -> T:
        """The answer to the request in flight, decoded; it is no longer in flight. EOFError for
        none (the broker closed), ProtocolError for more than one (answers nobody asked for) or
        another correlation id."""
        if self._timed_out:
            raise TimeoutError(f"no answer in {self.timeout_s + extra_timeout_s:.1f} s")
        self._deadline = None
        if len(frames) != 1:
            if not frames:
                raise EOFError("the broker closed the connection before answering")
            raise ProtocolError(f"{len(frames)} responses to one request")
        # A flexible version's response header v1 ends in tagged fields, skipped here.
        return decode(strip_response_header(key, version, self._framing.response_body(frames[0])), version)

    def _failed(self, api_key: ApiKey, version: int, e: BaseException, extra_timeout_s: float
                ) -> BrokerConnectionError:
        """Close, and the error a failed request raises."""
        self.abort()
        if self._timed_out and not isinstance(e, TimeoutError):  # the watchdog's abort, seen as a lost link
            e = TimeoutError(f"no answer in {self.timeout_s + extra_timeout_s:.1f} s")
        return BrokerConnectionError(f"{api_key.name} v{version} to {self.address} failed: {e or type(e).__name__}")

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
