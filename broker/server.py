"""The broker's Kafka listener: the asyncio shell around `FrameDecoder` and a request handler.

    server = KafkaServer(handler, host="127.0.0.4", port=9092, max_request_bytes=100 * MIB)
    await server.start()          # listening; server.port is the bound port
    ...
    await server.stop()           # stop accepting, let in-flight requests finish (bounded), close

Per connection: the socket reads straight into a `FrameDecoder` (broker.frame_receiver: sized
frames checked against `socket.request.max.bytes` before a body is kept, a large frame's body
received in place, never copied in Python); each header is parsed and its handler started in
the receiver's own turn while the reader task waits (on SASL listeners, and past the in-flight
limit, by the reader task): a request the handler answers at once (a Produce with acks 0 or 1)
costs no task; one that must wait gets its own task when it is a coroutine (a long-poll Fetch,
a group join) and none when it is a future set elsewhere (an acks=all Produce's). A
writer task sends the responses strictly in request order, every answer ready by then in one
transport write; while it is idle, an answer is written from the turn that makes it ready (the
request's own, or the done callback of the future or task it waits for), and the writer wakes
only for what it must do itself (a backlog, a failure, a slice on TLS). Both meet in a bounded deque of in-flight requests: when it is full the
reader stops reading, so a client that pipelines without reading answers is held by TCP, not
by memory. (At 10k tiny Produce requests/s, a task and a socket write per request were a
fifth of the broker's CPU.)

Handling may overlap (a long-poll Fetch does not hold up a Produce behind it on the same
connection); each handler's synchronous prefix (e.g. an append) runs in request order: tasks
start in FIFO order, and no request is handled at once while an earlier one's task has not
started.

A `ProtocolError` (malformed or oversized frame, undecodable request) closes that connection
with one log line naming the peer and the reason; in-flight requests of that connection are
cancelled; the broker and every other connection carry on.

Why a StreamWriter on the way out: `writer.drain()` is the backpressure we want (a slow
consumer pauses its own writer task); on the way in, a read loop that awaits room in a full
in-flight deque stops taking frames, and the receiver then pauses reading.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import socket
import ssl
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from functools import partial
from types import CoroutineType
from typing import Any, Final, Generic, Protocol, TypeVar, cast

from broker import slice_sender
from broker.frame_receiver import Frame, FrameReceiver
from broker.listener_security import (
    CLIENT_LISTENER,
    SASL_MAX_RECEIVE_BYTES,
    Answer,
    AuthenticationFailed,
    ListenerSecurity,
    SaslGate,
)
from broker.purgatory import AnswerFuture
from broker.slice_sender import ShortReadError, send_slice
from security.ssl_principal import NoMatchingRule
from common.protocol.frame import (
    DEFAULT_MAX_REQUEST_BYTES,
    FrameDecoder,
    RequestHeader,
    parse_request_header,
    response_head,
)
from common.protocol.primitives import Chunk, ProtocolError, RecordsPlaceholder
from common.units import KIB, SECOND_MS, SECONDS
from security.authorizer import ANONYMOUS

logger = logging.getLogger(__name__)

# --- limits, in one place -------------------------------------------------------------------
MAX_IN_FLIGHT: Final = 100  # requests read but not yet answered, per connection
# Records go out with sendfile (broker.slice_sender); where a loop has none, through os.pread
# and a transport write of this many bytes at a time.
PREAD_CHUNK: Final = slice_sender.PREAD_CHUNK
# Answers ready in the same turn go out in one transport write (one send syscall, not one per
# chunk and per answer); a segment slice up to this size is read into that write, and the
# write is flushed once it holds this much.
COALESCE_BYTES: Final = 64 * KIB
SHUTDOWN_GRACE: Final = 5 * SECONDS  # in-flight requests may finish this long after stop()
CLOSE_TIMEOUT: Final = 1 * SECONDS  # waiting for a transport to close
SSL_HANDSHAKE_TIMEOUT: Final = 10 * SECONDS  # a TLS client that does not finish its handshake is dropped
TLS_BACKLOG: Final = 100  # pending connections of a TLS listener (asyncio.start_server's default)
LATENCY_BUCKETS_MS: Final = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)


T = TypeVar("T")
R = TypeVar("R")

# The clock of request times (received, answered): the C function itself, not the loop's time()
# (asyncio's is a Python method around it), read twice per request.
_monotonic: Final = time.monotonic


@dataclass(frozen=True, slots=True)
class Later(Generic[T]):
    """An answer that is not ready when the request is started: the server awaits it (see `Encoding`)."""

    answer: Awaitable[T]


class Encoding(Generic[R, T]):
    """An awaitable of `encode(await pending, version)`: a handler's response to come, and its
    codec's encoder with the request's version (a response of None stays None: no answer).

    The server takes it apart instead of awaiting it in a coroutine: a future `pending` (an
    acks=all Produce's, set where the high watermark moves) is the request's awaitable itself,
    with no task; a coroutine runs as the request's task, with no wrapper; the server applies
    `encode` when it takes the answer (`encoded`). So an acks=all answer reaches the write loop in
    the loop pass after the HW move, not through a task's step first. The encoder and the
    version are kept apart, not joined in a closure: the codec's encode is then the one call
    per answer, not a lambda's frame around it (every waiting request: a long-poll Fetch, an
    acks=all Produce). Anyone else may await it (once, when `pending` is a coroutine)."""

    __slots__ = ("pending", "encode", "version")

    def __init__(self, pending: Awaitable[R | None], encode: Callable[[R, int], T], version: int) -> None:
        self.pending, self.encode, self.version = pending, encode, version

    def encoded(self, response: R | None) -> T | None:
        return None if response is None else self.encode(response, self.version)

    def __await__(self) -> Generator[Any, None, T | None]:
        return self.encoded((yield from self.pending.__await__()))


class RequestHandler(Protocol):
    """What the server calls: the response body chunks, or None to send nothing (acks=0).

    `start` answers at once when it can (no task per request: a Produce with acks 0 or 1 is
    appended and answered in the read loop's turn), else returns `Later`; `handle` is the
    same as one awaitable. Both raise ProtocolError for a request they cannot decode (the
    connection is then closed).
    """

    def start(self, header: RequestHeader, body: memoryview,
              client_host: str = "") -> list[Chunk] | None | Later[list[Chunk] | None]: ...

    async def handle(self, header: RequestHeader, body: memoryview,
                     client_host: str = "") -> list[Chunk] | None: ...

    # A listener with authentication also passes principal="Type:name" (broker.handlers.context)


@dataclass(slots=True)
class ServerMetrics:
    """Counters for /metrics; updated by the server, read by anyone (single event loop)."""

    connections_total: int = 0
    connections_active: int = 0
    connections_closed_on_error: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    requests_by_api: dict[int, int] = field(default_factory=dict)
    latency_buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_MS) + 1))
    latency_sum_ms: float = 0.0
    latency_count: int = 0

    def observe(self, api_key: int, latency_ms: float) -> None:
        self.requests_by_api[api_key] = self.requests_by_api.get(api_key, 0) + 1
        self.latency_buckets[bisect_left(LATENCY_BUCKETS_MS, latency_ms)] += 1
        self.latency_sum_ms += latency_ms
        self.latency_count += 1


@dataclass(slots=True)
class _InFlight:
    header: RequestHeader
    received: float  # time.monotonic(), as every request time here (`_monotonic`)
    # What the answer waits for (a task, or an acks=all Produce's future); None: answered (or failed) at once
    task: asyncio.Future[Any] | None = None
    encoding: Encoding[Any, list[Chunk]] | None = None  # the task's result -> the answer
    body: list[Chunk] | None = None  # the answer when there is no task
    error: BaseException | None = None  # raised at once: the connection ends at this request
    framed: bool = False  # `body` is a whole frame already (a raw SASL v0 token answer)

    def answer(self) -> list[Chunk] | None:
        if self.task is not None:  # ProtocolError (undecodable request) ends the connection
            result = self.task.result()
            encoding = self.encoding
            return result if encoding is None or result is None else encoding.encode(result, encoding.version)
        if self.error is not None:
            raise self.error
        return self.body


class Connection:
    """One client connection: a reader task and a writer task joined by a bounded deque."""

    def __init__(self, server: KafkaServer, receiver: FrameReceiver, writer: asyncio.StreamWriter) -> None:
        self.server, self.receiver, self.writer = server, receiver, writer
        self.transport = writer.transport  # StreamWriter.transport and .write are Python calls: twice per answer
        self._metrics = server.metrics
        self.tls = server.security is not None and server.security.ssl_context is not None  # no sendfile
        # The socket, for a Fetch answered from the reader's turn (`_sendfile_in_turn`): its head
        # and its records slice go straight to it. asyncio's selector transport keeps it as `_sock`
        # (get_extra_info's TransportSocket has no send); a transport without one (TLS, another
        # loop) answers through the writer instead. Used only while the transport holds nothing
        # and is not closing: it closes the socket after that, and the descriptor may be reused.
        raw = None if self.tls else getattr(self.transport, "_sock", None)
        self._sock: socket.socket | None = raw if isinstance(raw, socket.socket) else None
        self._sock_fd = -1 if self._sock is None else self._sock.fileno()  # asked once, not per answer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.peer_host = str(peer[0]) if isinstance(peer, tuple) else str(peer)  # groups: a member's host
        # The loop, kept: asyncio.get_running_loop() makes a getpid(2) per call in CPython 3.11 (its
        # check against a fork), and the receiver's turn asked it once per request read.
        self._loop = asyncio.get_running_loop()
        self.accepted = self._loop.time()  # the authentication deadline counts from here
        self.gate = server.security.gate() if server.security is not None else None  # SASL
        # SSL without SASL: the principal is the client certificate's subject (or ANONYMOUS)
        self.principal = ANONYMOUS
        if server.security is not None and server.security.protocol == "SSL":
            self.principal = server.security.certificate_principal(writer.get_extra_info("peercert"))
        self.pending: deque[_InFlight] = deque()  # read, not yet written, in request order
        # The coroutine of the newest handler task: tasks start in creation order, so once this one
        # has taken its first step, every earlier handler task of this connection has (`_start`).
        self._newest: CoroutineType[Any, Any, Any] | None = None
        self.reading_done = False  # the reader adds no more requests
        self._failed = False  # a request taken in the receiver's turn failed at once: no more are taken
        self._context = contextvars.Context()  # the reader task's, where `_take` starts requests
        self.draining = False
        self._read_task: asyncio.Task[None] | None = None
        self._writer_wakeup: asyncio.Future[None] | None = None  # the writer waits for a request
        self._reader_wakeup: asyncio.Future[None] | None = None  # the reader waits for room
        self._watched: asyncio.Future[Any] | None = None  # the answer `_ready` waits for (`_answer_in_turn`)

    async def run(self) -> None:
        read_task = asyncio.create_task(self._read_loop(), name=f"kafka-read-{self.peer}")
        write_task = asyncio.create_task(self._write_loop(), name=f"kafka-write-{self.peer}")
        self._read_task = read_task
        failure: BaseException | None = None
        try:
            await asyncio.wait({read_task, write_task}, return_when=asyncio.FIRST_EXCEPTION)
            if read_task.done() and not read_task.cancelled() and read_task.exception() is None:
                await asyncio.wait({write_task})  # no more requests: answer those read, then close
            failure = next((t.exception() for t in (read_task, write_task)
                            if t.done() and not t.cancelled() and t.exception() is not None), None)
        finally:
            tasks = [read_task, write_task, *(i.task for i in self.pending if i.task is not None)]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._log_failure(failure)
            if isinstance(failure, AuthenticationFailed):
                await self._linger()
            await self._close()

    def stop_reading(self) -> None:
        """Read no more requests (shutdown); those already read are still answered."""
        self.draining = True
        if self._read_task is not None:
            self._read_task.cancel()

    def _log_failure(self, failure: BaseException | None) -> None:
        if failure is None:
            return
        if isinstance(failure, ConnectionError):  # the peer went away: routine
            logger.debug("Connection from %s ended: %s", self.peer, _describe(failure))
            return
        self.server.metrics.connections_closed_on_error += 1
        if isinstance(failure, AuthenticationFailed):  # Kafka's INFO "Failed authentication with ..."
            logger.info("Failed authentication with %s (%s); connection closed", self.peer, failure)
        elif isinstance(failure, (ProtocolError, ShortReadError)):
            logger.warning("Closing connection from %s: %s", self.peer, _describe(failure))
        else:  # a bug in a handler: the connection goes, the broker stays
            logger.error("Closing connection from %s after an unexpected error", self.peer, exc_info=failure)

    async def _linger(self) -> None:
        """After a failed authentication's answer: send FIN and discard what the client still
        sends until it closes (bounded), so that closing with its unread bytes in our buffer
        does not reset the connection and destroy the answer before the client reads it."""
        try:
            if self.writer.can_write_eof():
                self.writer.write_eof()
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await self.receiver.discard_until_eof()
        except (OSError, TimeoutError):
            pass  # the peer is gone, or keeps the connection open: it is closed now either way

    async def _close(self) -> None:
        self.writer.close()
        try:
            await asyncio.wait_for(self.writer.wait_closed(), CLOSE_TIMEOUT)
        except (OSError, TimeoutError):
            pass  # the peer is gone or stuck: the transport is closed (aborted) either way

    async def _read_loop(self) -> None:
        try:
            await self._read_requests()
        except asyncio.CancelledError:
            if not self.draining:
                raise
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()  # the cancel was stop_reading(): a normal end of requests
        self.reading_done = True  # the writer answers what is pending, then stops
        _wake(self._writer_wakeup)

    async def _read_requests(self) -> None:
        loop = asyncio.get_running_loop()
        gate = self.gate
        if gate is None:  # frames that arrive while this task waits are taken in the receiver's turn
            self._context = contextvars.copy_context()  # this task's (its listener: CLIENT_LISTENER)
            # the context's run itself as the sink, no Python frame around it
            self.receiver.sink = partial(self._context.run, self._take)  # type: ignore[call-arg]  # run(f, *args)
        try:
            await self._read_frames(loop, gate)
        finally:
            self.receiver.sink = None  # reading is over: frames that still arrive wait, unhandled

    async def _read_frames(self, loop: asyncio.AbstractEventLoop, gate: SaslGate | None) -> None:
        while not self.draining:  # until EOF, an error, or stop
            if gate is not None and not gate.authenticated:
                frames = await self._read_unauthenticated(loop)
            else:
                frames = await self.receiver.receive()  # ProtocolError: ends this connection
            if not frames or self._failed:  # EOF, or a request taken in turn failed (`_take`)
                return
            for frame in frames:
                # frames `_take` handed back at the in-flight limit: none taken beyond it
                while len(self.pending) > self.server.max_in_flight:
                    _wake(self._writer_wakeup)
                    self._reader_wakeup = loop.create_future()
                    await self._reader_wakeup
                if gate is None:
                    header, body = parse_request_header(frame)
                    item = self._start(header, body, _monotonic())
                else:
                    item = self._through_gate(frame, _monotonic())
                    if gate.authenticated:
                        self.receiver.decoder.max_request_bytes = self.server.max_request_bytes
                self.pending.append(item)
                if item.error is not None:
                    _wake(self._writer_wakeup)
                    return  # the writer answers the requests before it, then ends the connection
                while len(self.pending) > self.server.max_in_flight:  # stop reading until answered
                    _wake(self._writer_wakeup)
                    self._reader_wakeup = loop.create_future()
                    await self._reader_wakeup
            if self.pending and not self._answer_in_turn(_monotonic()):
                _wake(self._writer_wakeup)

    def _take(self, frames: list[Frame]) -> list[Frame]:
        """The receiver's frames, taken in its own turn while the reader task waits for them
        (FrameReceiver.sink, run in the reader task's context): each started as `_read_frames`
        does, with no wake-up of the reader task, no task step and no loop pass per request. What
        this leaves goes back to the reader task: the frames past the in-flight limit (it waits
        for room first), and a frame whose header does not parse (its ProtocolError ends the
        connection there, as ever)."""
        if self.draining or self._failed:
            return []  # reading is over: what arrives is not handled
        pending, limit = self.pending, self.server.max_in_flight
        now = _monotonic()
        rest: list[Frame] = []
        for i, frame in enumerate(frames):  # bounded by the frames of one read
            if len(pending) > limit:
                rest = frames[i:]
                break
            try:
                header, body = parse_request_header(frame)
            except ProtocolError:
                rest = frames[i:]
                break
            item = self._start(header, body, now)
            pending.append(item)
            if item.error is not None:  # the writer answers the requests before it, then ends the connection
                self._failed = True
                _wake(self._writer_wakeup)
                return []
        if rest:
            _wake(self._writer_wakeup)
        elif pending and not self._answer_in_turn(now):
            _wake(self._writer_wakeup)
        return rest

    async def _read_unauthenticated(self, loop: asyncio.AbstractEventLoop) -> list[Frame]:
        """A read bounded by the connection's authentication deadline (connections.max.idle.ms)."""
        security = self.server.security
        assert security is not None
        left = self.accepted + security.authentication_timeout_ms / SECOND_MS - loop.time()
        try:
            return await asyncio.wait_for(self.receiver.receive(), max(left, 0.0))
        except TimeoutError:
            raise AuthenticationFailed(f"did not authenticate within {security.authentication_timeout_ms} ms "
                                       f"(connections.max.idle.ms)") from None

    def _answer_in_turn(self, now: float) -> bool:
        """Write the answers that are ready from the current turn (the reader's, or the callback
        of an answer that just became ready, `_ready`) while the writer is idle and the socket
        has nothing queued; whether the writer may stay parked. Ready: answered at once (Produce
        acks 0/1, Metadata, a Fetch that found its min_bytes, ...), or its future or task done.
        The first answer not ready stops the walk: it is watched (`_ready` runs when it is
        done), so neither it nor those behind it wake the writer; each wake-up is a task step
        and a call_soon, twice per waiting answer (the request, then its answer: an acks=all
        produce, a long-poll fetch) before this. A segment slice goes by sendfile straight to
        the socket (not on TLS); what the socket does not take, a failed answer, a raw SASL
        token and a slice on TLS are left to the writer, ahead of the answers after them.
        While the writer is parked the queue holds only answers it has not seen, so order is
        kept; the transport's own buffer bounds the write, and a turn that finds a backlog
        leaves it to the writer, which drains it."""
        wakeup = self._writer_wakeup
        if wakeup is None or wakeup.done() or self.transport.get_write_buffer_size():
            return False
        out: list[bytes] = []
        metrics, pending = self.server.metrics, self.pending
        while pending:  # bounded by the in-flight limit
            item = pending[0]
            task = item.task
            if task is not None:
                if not task.done():
                    if task is not self._watched:
                        self._watched = task
                        if isinstance(task, AnswerFuture) and task.listener is None:
                            task.listener = self._ready  # in the setter's turn: no handle, no loop pass
                        else:
                            task.add_done_callback(self._ready)
                    if out:
                        self._send_now(out)
                    return True
                if task.cancelled() or task.exception() is not None:  # the writer ends the connection
                    break
                encoding = item.encoding  # `_InFlight.answer` without its call: every waiting answer comes here
                try:
                    chunks: list[Chunk] | None = task.result()
                    if encoding is not None and chunks is not None:
                        chunks = encoding.encode(chunks, encoding.version)
                except Exception as exc:  # noqa: BLE001 - an encode's failure: the writer raises it, after `out`
                    pending[0] = _InFlight(item.header, item.received, error=exc)
                    break
            elif item.error is not None or item.framed:
                break
            else:  # answered at once (`_InFlight.answer` without its call)
                chunks = item.body
            if chunks is not None and self.tls and not all(isinstance(chunk, bytes) for chunk in chunks):
                pending[0] = _InFlight(item.header, item.received, body=chunks)  # encoded once: the writer's
                break
            pending.popleft()
            if chunks is not None:
                out.append(response_head(item.header, chunks))
                for i, chunk in enumerate(chunks):  # bounded by the answer's chunks
                    if isinstance(chunk, bytes):
                        out.append(chunk)
                    elif chunk.length <= COALESCE_BYTES:
                        out.append(slice_sender.pread_slice(chunk))  # type: ignore[arg-type]
                    else:
                        rest = self._sendfile_in_turn(out, chunk)
                        out = []
                        if rest is not None:  # the writer sends the rest, then the answers after it
                            pending.appendleft(_InFlight(item.header, item.received,
                                                         body=[rest, *chunks[i + 1:]], framed=True))
                            return False
            metrics.observe(item.header.request_api_key, (now - item.received) * 1000)
        else:
            if out:
                self._send_now(out)
            return True
        if out:
            self._send_now(out)
        return False

    def _ready(self, task: asyncio.Future[Any]) -> None:
        """The watched answer is done (`_answer_in_turn`): write it and what is ready behind it,
        or wake the writer for what it must do itself (a no-op while the writer is busy: it
        awaits the answer on its own). Of an AnswerFuture, in the turn that set it (whatever
        connection's that is: this one's queue is consistent between any two of its steps)."""
        if self._watched is task:
            self._watched = None
        now = _monotonic()
        try:
            written = self._answer_in_turn(now)
        except Exception as exc:  # noqa: BLE001 - a slice's file shrank (ShortReadError): the writer ends the connection
            self.pending.appendleft(_InFlight(_UNPARSED, now, error=exc))
            written = False
        if not written:
            _wake(self._writer_wakeup)

    def _sendfile_in_turn(self, out: list[bytes], records: RecordsPlaceholder) -> RecordsPlaceholder | None:
        """`out`, then as much of the slice `records` as the socket takes now (Kafka's
        transferTo from the request's own turn: a Fetch answered at once costs no writer task
        pass); None when all of it went, else the slice of what is left."""
        transport, sock = self.transport, self._sock
        if sock is None or transport.get_write_buffer_size() or transport.is_closing():  # the writer's
            self._write_now(out)
            return records
        if out:
            # MSG_MORE: the head waits for the slice and leaves in its first segment. Sent alone it
            # was a segment of its own that woke the client for a few dozen bytes, then the slice
            # woke it again (bench/answer_send.py, the sender's CPU per 800 KB answer over
            # loopback, 6 alternated rounds, load 5.1-5.7: median 82 us plain, 59 us MSG_MORE).
            # Whatever happens to the slice, the kernel sends the head with the next bytes: the
            # slice's, or the writer's.
            data = out[0] if len(out) == 1 else b"".join(out)
            self._metrics.bytes_out += len(data)
            try:
                sent = sock.send(data, socket.MSG_MORE)
            except OSError:  # full, or failed: the transport queues the bytes, or fails the connection its way
                sent = 0
            if sent < len(data):
                transport.write(data[sent:])
                return records
        rest = slice_sender.send_slice_now(self._sock_fd, records)  # type: ignore[arg-type]
        self._metrics.bytes_out += records.length - (0 if rest is None else rest.length)
        return rest

    def _write_now(self, out: list[bytes]) -> None:
        if out:
            data = out[0] if len(out) == 1 else b"".join(out)
            self.transport.write(data)
            self._metrics.bytes_out += len(data)

    def _send_now(self, out: list[bytes]) -> None:
        """`out` (not empty) from `_answer_in_turn`, whose transport holds nothing: straight to the
        socket, as the transport's write would send it, without its ~40 bytecodes of checks per
        answer (a Fetch's bytes after its records, a Produce's whole answer). What the socket does
        not take, or a failure, goes to the transport's write: it queues the rest, or fails the
        connection its way (a socket asyncio has closed raises EBADF here, never another's fd)."""
        data = out[0] if len(out) == 1 else b"".join(out)
        self._metrics.bytes_out += len(data)
        sock = self._sock
        if sock is not None:
            try:
                sent = sock.send(data)
            except OSError:  # full, interrupted, or failed: the transport's write tries again
                sent = 0
            if sent == len(data):
                return
            data = data[sent:]
        self.transport.write(data)

    def _through_gate(self, frame: Frame, received: float) -> _InFlight:
        """A frame of a SASL connection: answered by its authenticator, or served as its principal."""
        gate = self.gate
        assert gate is not None
        try:
            verdict = gate.frame(bytes(frame), int(received * 1000))  # a copy only of a large (rare) frame
        except Exception as exc:  # noqa: BLE001 - ProtocolError / AuthenticationFailed: ends this connection
            return _InFlight(_UNPARSED, received, error=exc)
        if not isinstance(verdict, Answer):
            self.principal = verdict.principal
            return self._start(verdict.header, verdict.body, received)
        if verdict.close is None:
            return _InFlight(verdict.header, received, body=verdict.chunks, framed=verdict.framed)
        # The answer goes out (after Kafka's delay for a failed authentication), then the
        # connection ends: the next item in the queue is the failure.
        security = self.server.security
        assert security is not None
        delay = security.failed_authentication_delay_ms / SECOND_MS if verdict.failed else 0.0
        item = _InFlight(verdict.header, received, task=asyncio.create_task(_after(delay, verdict.chunks)))
        self.pending.append(item)
        failure = AuthenticationFailed(verdict.close) if verdict.failed else ProtocolError(verdict.close)
        return _InFlight(verdict.header, received, error=failure)

    def _start(self, header: RequestHeader, body: memoryview, received: float) -> _InFlight:
        """Handle a request at once when its handler can (no task per request); else in a task.

        Every handler's synchronous prefix runs in request order: while a task created for
        an earlier request has not taken its first step, later requests go to tasks too
        (tasks start in creation order)."""
        handler = self.server.handler
        newest = self._newest  # while this task has not started, later requests go to tasks too
        if newest is not None and (newest.cr_frame is None or newest.cr_suspended or newest.cr_running):
            newest = self._newest = None  # started (suspended, running or finished): so has every earlier one
        unstarted = newest is not None
        try:
            principal = self.principal
            if principal != ANONYMOUS:  # a listener with authentication: the handler takes the principal
                if unstarted:
                    answer: list[Chunk] | None | Later[list[Chunk] | None] = Later(
                        handler.handle(header, body, self.peer_host, principal=principal))  # type: ignore[call-arg]
                else:
                    answer = handler.start(header, body, self.peer_host, principal=principal)  # type: ignore[call-arg]
            elif unstarted:
                answer = Later(handler.handle(header, body, self.peer_host))
            else:
                answer = handler.start(header, body, self.peer_host)
        except Exception as exc:  # noqa: BLE001 - ends this connection once earlier answers are out
            return _InFlight(header, received, error=exc)
        if not isinstance(answer, Later):
            return _InFlight(header, received, body=answer)
        pending: Awaitable[Any] = answer.answer
        encoding = None
        if isinstance(pending, Encoding):
            encoding = pending
            pending = pending.pending
        if isinstance(pending, asyncio.Future):  # set elsewhere (an acks=all Produce's): nothing to run
            return _InFlight(header, received, task=pending, encoding=encoding)
        # an async def's coroutine (the usual) runs as the task itself; any other awaitable in one
        coroutine = pending if isinstance(pending, CoroutineType) else cast(CoroutineType[Any, Any, Any],
                                                                             _awaited(pending))
        self._newest = coroutine
        return _InFlight(header, received, task=asyncio.create_task(coroutine), encoding=encoding)

    async def _write_loop(self) -> None:
        """Answers in request order; every answer ready by then goes out in one write."""
        metrics, pending = self.server.metrics, self.pending
        loop = asyncio.get_running_loop()
        while True:  # one batch of ready answers per pass, until the reader is done and all answered
            if not pending:
                if self.reading_done:
                    return
                self._writer_wakeup = loop.create_future()
                await self._writer_wakeup
                continue
            first = pending[0]
            if first.task is not None and not first.task.done():
                try:  # awaited directly: woken one loop pass sooner than through asyncio.wait
                    await first.task
                except Exception:  # noqa: BLE001, S110 - raised again below, after the answers before it
                    pass
            out: list[bytes] = []
            size = 0
            # each answer ready (no task, or its task done), in order; bounded by the in-flight limit
            while pending and (pending[0].task is None or pending[0].task.done()):
                item = pending.popleft()
                if self._reader_wakeup is not None:  # the reader waits for room
                    _wake(self._reader_wakeup)
                    self._reader_wakeup = None
                try:
                    body = item.answer()
                except Exception:
                    await self._flush(out, size)  # the answers before a failing request go out first
                    raise
                if body is not None:
                    if not item.framed:
                        head = response_head(item.header, body)
                        out.append(head)
                        size += len(head)
                    for chunk in body:  # bounded by the answer's chunks
                        if isinstance(chunk, bytes):
                            out.append(chunk)
                            size += len(chunk)
                        elif chunk.length <= COALESCE_BYTES:
                            out.append(slice_sender.pread_slice(chunk))  # type: ignore[arg-type]
                            size += chunk.length
                        else:
                            await self._flush(out, size)
                            out, size = [], 0
                            await self._send_slice(chunk)
                    if size >= COALESCE_BYTES:
                        await self._flush(out, size)
                        out, size = [], 0
                metrics.observe(item.header.request_api_key, (_monotonic() - item.received) * 1000)
            if out and self._write(out, size):
                await self.writer.drain()

    async def _flush(self, out: list[bytes], size: int) -> None:
        if out and self._write(out, size):
            await self.writer.drain()

    def _write(self, out: list[bytes], size: int) -> bool:
        """`out` in one transport write; whether to drain. When the socket took it whole (the
        usual answer) drain would only find that out, in a coroutine per write; else it waits
        for room, or raises the connection's error."""
        transport = self.transport
        transport.write(out[0] if len(out) == 1 else b"".join(out))
        self.server.metrics.bytes_out += size
        return bool(transport.get_write_buffer_size()) or transport.is_closing()

    async def _send_slice(self, chunk: Chunk) -> None:
        """A segment slice (fd, position, length), sent with sendfile (broker.slice_sender).

        A short read means the file shrank after the response promised `length` bytes: the
        connection is ended (ShortReadError) rather than sending a frame of the wrong size.
        On a TLS connection the bytes must go through the TLS layer, so they are read and written
        instead (sendfile would put plaintext on the socket): one copy of the slice, bounded by
        the fetch's response size.
        """
        if self.tls:
            data = slice_sender.pread_slice(chunk)  # type: ignore[arg-type]
            self.writer.write(data)
            self.server.metrics.bytes_out += len(data)
            await self.writer.drain()
            return
        self.server.metrics.bytes_out += await send_slice(self.writer, chunk)  # type: ignore[arg-type]



def _address(peer: object) -> str:
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)


_UNPARSED: Final = RequestHeader(-1, -1, -1, None)  # a frame refused before its header was known


async def _awaited(answer: Awaitable[T]) -> T:
    """An awaitable that is not a coroutine, as one (a task runs coroutines only)."""
    return await answer


async def _after(delay: float, chunks: list[Chunk]) -> list[Chunk]:
    """`chunks`, `delay` seconds from now (Kafka's connection.failed.authentication.delay.ms)."""
    await asyncio.sleep(delay)
    return chunks


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ProtocolError):
        return f"protocol error: {exc.reason}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class KafkaServer:
    """Accepts Kafka connections on one address and serves them with `handler`."""

    def __init__(self, handler: RequestHandler, *, host: str, port: int,
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES, max_in_flight: int = MAX_IN_FLIGHT,
                 shutdown_grace: float = SHUTDOWN_GRACE, security: ListenerSecurity | None = None) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self.handler, self.host, self.port = handler, host, port
        self.max_request_bytes, self.max_in_flight = max_request_bytes, max_in_flight
        self.shutdown_grace = shutdown_grace
        self.security = security  # None: PLAINTEXT (nothing checked before requests)
        self.metrics = ServerMetrics()
        self._server: asyncio.Server | None = None
        self._listen_socket: socket.socket | None = None  # a TLS listener's (its own accept loop)
        self._accept_task: asyncio.Task[None] | None = None
        self._connections: dict[asyncio.Task[None], Connection] = {}

    async def start(self) -> None:
        """Bind and listen; `self.port` is the bound port afterwards (useful with port 0)."""
        context = self.security.ssl_context if self.security is not None else None
        if context is None:
            loop = asyncio.get_running_loop()
            self._server = await loop.create_server(lambda: self._receiver(on_connect=self._accept),
                                                    self.host, self.port, reuse_address=True)
            self.port = self._server.sockets[0].getsockname()[1]
        else:  # our own accept loop: a failed TLS handshake gets our log line (asyncio's server drops it)
            family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
            self._listen_socket = socket.create_server((self.host, self.port), family=family, backlog=TLS_BACKLOG)
            self._listen_socket.setblocking(False)
            self.port = self._listen_socket.getsockname()[1]
            self._accept_task = asyncio.create_task(self._accept_tls(self._listen_socket, context),
                                                    name=f"kafka-accept-{self.host}:{self.port}")
        name = f"{self.security.name} ({self.security.protocol})" if self.security is not None else "PLAINTEXT"
        logger.info("Kafka listener %s on %s:%d", name, self.host, self.port)

    async def _accept_tls(self, listening: socket.socket, context: ssl.SSLContext) -> None:
        """Accept until cancelled (stop); each connection's TLS handshake runs in its own task."""
        loop = asyncio.get_running_loop()
        handshakes: set[asyncio.Task[None]] = set()
        try:
            while True:  # until stop() cancels it
                raw, peer = await loop.sock_accept(listening)
                task = asyncio.create_task(self._handshake(raw, peer, context))
                handshakes.add(task)
                task.add_done_callback(handshakes.discard)
        finally:
            for task in list(handshakes):
                task.cancel()

    async def _handshake(self, raw: socket.socket, peer: object, context: ssl.SSLContext) -> None:
        """The server side of one TLS handshake, then the connection; a failure is one INFO line."""
        loop = asyncio.get_running_loop()
        protocol = self._receiver()
        try:
            transport, _ = await loop.connect_accepted_socket(lambda: protocol, raw, ssl=context,
                                                              ssl_handshake_timeout=SSL_HANDSHAKE_TIMEOUT)
        except (ssl.SSLError, OSError, TimeoutError, ConnectionError) as exc:
            reason = "no handshake within the timeout" if isinstance(exc, TimeoutError) else _describe(exc)
            # A peer that hung up before the handshake ended without a TLS alert (asyncio reports
            # the lost connection as ConnectionResetError) is a probe, not a failed login: the
            # controllers' listener watch, a load balancer's health check. Refused certificates,
            # bytes that are not TLS and timeouts stay one INFO line each.
            level = logging.DEBUG if isinstance(exc, ConnectionResetError) else logging.INFO
            logger.log(level, "TLS handshake with %s failed (%s); connection closed", _address(peer), reason)
            raw.close()
            return
        if self.security is not None and self.security.protocol == "SSL":
            try:  # the principal from the certificate (ssl.principal.mapping.rules): no rule fails it
                self.security.certificate_principal(transport.get_extra_info("peercert"))
            except NoMatchingRule as exc:
                logger.info("Failed authentication with %s (%s); connection closed", _address(peer), exc)
                transport.close()
                return
        await self._accept(protocol, asyncio.StreamWriter(transport, protocol, protocol.reader, loop))

    def _receiver(self, on_connect: Callable[[FrameReceiver, asyncio.StreamWriter], Awaitable[None]] | None = None
                  ) -> FrameReceiver:
        """A new connection's receiver. On a SASL listener its frames are bounded by Kafka's
        sasl.server.max.receive.size until it authenticates (the connection then lifts it)."""
        limit = self.max_request_bytes
        if self.security is not None and self.security.sasl is not None:
            limit = min(limit, SASL_MAX_RECEIVE_BYTES)
        return FrameReceiver(FrameDecoder(limit), self.metrics, on_connect)

    async def _accept(self, receiver: FrameReceiver, writer: asyncio.StreamWriter) -> None:
        if self.security is not None:  # this connection's task and the tasks it starts: its listener
            CLIENT_LISTENER.set(self.security.name)
        connection = Connection(self, receiver, writer)
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = connection
        self.metrics.connections_total += 1
        self.metrics.connections_active += 1
        try:
            await connection.run()
        finally:
            self.metrics.connections_active -= 1
            self._connections.pop(task, None)

    async def stop(self) -> None:
        """Stop accepting; give in-flight requests `shutdown_grace` to be answered; close all."""
        if self._server is None and self._accept_task is None:
            return
        if self._server is not None:
            self._server.close()
        if self._accept_task is not None:  # a TLS listener: stop accepting, close the socket
            self._accept_task.cancel()
            await asyncio.gather(self._accept_task, return_exceptions=True)
            self._accept_task = None
        if self._listen_socket is not None:
            self._listen_socket.close()
            self._listen_socket = None
        for connection in list(self._connections.values()):
            connection.stop_reading()
        tasks = list(self._connections)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self.shutdown_grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        logger.info("Kafka listener on %s:%d stopped", self.host, self.port)
