"""The broker's Kafka listener: the asyncio shell around `FrameDecoder` and a request handler.

    server = KafkaServer(handler, host="127.0.0.4", port=9092, max_request_bytes=100 * MIB)
    await server.start()          # listening; server.port is the bound port
    ...
    await server.stop()           # stop accepting, let in-flight requests finish (bounded), close

Per connection: a reader task feeds socket bytes to a `FrameDecoder` (sized frames checked
against `socket.request.max.bytes` before a body is kept), parses each header and starts
the handler for it as its own task; a writer task sends the responses strictly in request
order. Both meet in a bounded queue of in-flight requests: when it is full the reader stops
reading, so a client that pipelines without reading answers is held by TCP, not by memory.

Handling may overlap (a long-poll Fetch does not hold up a Produce behind it on the same
connection); tasks are created in arrival order and asyncio starts them in FIFO order, so
each handler's synchronous prefix (e.g. an append) runs in request order.

A `ProtocolError` (malformed or oversized frame, undecodable request) closes that connection
with one log line naming the peer and the reason; in-flight requests of that connection are
cancelled; the broker and every other connection carry on.

Why streams (asyncio.start_server) and not a Protocol: `writer.drain()` is the backpressure
we want on the way out (a slow consumer pauses its own writer task), and a read loop that
awaits a full in-flight queue gives backpressure on the way in, both in a few lines.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from broker import slice_sender
from broker.slice_sender import ShortReadError, send_file_slice
from common.protocol.frame import (
    DEFAULT_MAX_REQUEST_BYTES,
    FrameDecoder,
    RequestHeader,
    frame_response_for,
    parse_request_header,
)
from common.protocol.primitives import Chunk, ProtocolError
from common.units import KIB, SECONDS

logger = logging.getLogger(__name__)

# --- limits, in one place -------------------------------------------------------------------
READ_SIZE: Final = 64 * KIB  # one socket read
MAX_IN_FLIGHT: Final = 100  # requests read but not yet answered, per connection
# Records go out with sendfile (broker.slice_sender); where a loop has none, through os.pread
# and a transport write of this many bytes at a time.
PREAD_CHUNK: Final = slice_sender.PREAD_CHUNK
SHUTDOWN_GRACE: Final = 5 * SECONDS  # in-flight requests may finish this long after stop()
CLOSE_TIMEOUT: Final = 1 * SECONDS  # waiting for a transport to close
LATENCY_BUCKETS_MS: Final = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)


class RequestHandler(Protocol):
    """What the server calls: the response body chunks, or None to send nothing (acks=0).

    Raises ProtocolError for a request it cannot decode (the connection is then closed).
    """

    async def handle(self, header: RequestHeader, body: memoryview,
                     client_host: str = "") -> list[Chunk] | None: ...


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
        index = next((i for i, le in enumerate(LATENCY_BUCKETS_MS) if latency_ms <= le), len(LATENCY_BUCKETS_MS))
        self.latency_buckets[index] += 1
        self.latency_sum_ms += latency_ms
        self.latency_count += 1


@dataclass(slots=True)
class _InFlight:
    header: RequestHeader
    task: asyncio.Task[list[Chunk] | None]
    received: float  # loop time


class Connection:
    """One client connection: a reader task and a writer task joined by a bounded queue."""

    def __init__(self, server: KafkaServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.server, self.reader, self.writer = server, reader, writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.peer_host = str(peer[0]) if isinstance(peer, tuple) else str(peer)  # groups: a member's host
        self.queue: asyncio.Queue[_InFlight | None] = asyncio.Queue(server.max_in_flight)
        self.decoder = FrameDecoder(server.max_request_bytes)
        self.in_flight: list[_InFlight] = []  # started, not yet written (for cancellation)
        self.draining = False
        self._read_task: asyncio.Task[None] | None = None

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
            for task in (read_task, write_task, *(i.task for i in self.in_flight)):
                task.cancel()
            await asyncio.gather(read_task, write_task, *(i.task for i in self.in_flight),
                                 return_exceptions=True)
            self._log_failure(failure)
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
        if isinstance(failure, (ProtocolError, ShortReadError)):
            logger.warning("Closing connection from %s: %s", self.peer, _describe(failure))
        else:  # a bug in a handler: the connection goes, the broker stays
            logger.error("Closing connection from %s after an unexpected error", self.peer, exc_info=failure)

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
        await self.queue.put(None)  # the writer answers what is queued, then stops

    async def _read_requests(self) -> None:
        metrics, handler = self.server.metrics, self.server.handler
        loop = asyncio.get_running_loop()
        while not self.draining:  # until EOF, an error, or stop; each read is at most READ_SIZE
            data = await self.reader.read(READ_SIZE)
            if not data:
                return
            metrics.bytes_in += len(data)
            for frame in self.decoder.feed(data):  # ProtocolError: ends this connection
                header, body = parse_request_header(frame)
                item = _InFlight(header, asyncio.create_task(handler.handle(header, body, self.peer_host)), loop.time())
                self.in_flight.append(item)
                await self.queue.put(item)  # full: stop reading until the writer catches up

    async def _write_loop(self) -> None:
        metrics = self.server.metrics
        loop = asyncio.get_running_loop()
        while True:  # one queued request per pass, until the reader's end marker
            item = await self.queue.get()
            if item is None:
                return
            body = await item.task  # ProtocolError (undecodable request) ends the connection
            self.in_flight.remove(item)
            if body is not None:
                await self._send(frame_response_for(item.header, body))
            metrics.observe(item.header.request_api_key, (loop.time() - item.received) * 1000)

    async def _send(self, chunks: Sequence[Chunk]) -> None:
        writer, metrics = self.writer, self.server.metrics
        for chunk in chunks:
            if isinstance(chunk, bytes):
                writer.write(chunk)
                metrics.bytes_out += len(chunk)
            else:
                await self._send_slice(chunk)
            await writer.drain()

    async def _send_slice(self, chunk: Chunk) -> None:
        """A segment slice (fd, position, length), sent with sendfile (broker.slice_sender).

        A short read means the file shrank after the response promised `length` bytes: the
        connection is ended (ShortReadError) rather than sending a frame of the wrong size.
        """
        fd, position, length = chunk.fd, chunk.position, chunk.length  # type: ignore[union-attr]
        self.server.metrics.bytes_out += await send_file_slice(self.writer, fd, position, length)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ProtocolError):
        return f"protocol error: {exc.reason}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class KafkaServer:
    """Accepts Kafka connections on one address and serves them with `handler`."""

    def __init__(self, handler: RequestHandler, *, host: str, port: int,
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES, max_in_flight: int = MAX_IN_FLIGHT,
                 shutdown_grace: float = SHUTDOWN_GRACE) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self.handler, self.host, self.port = handler, host, port
        self.max_request_bytes, self.max_in_flight = max_request_bytes, max_in_flight
        self.shutdown_grace = shutdown_grace
        self.metrics = ServerMetrics()
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], Connection] = {}

    async def start(self) -> None:
        """Bind and listen; `self.port` is the bound port afterwards (useful with port 0)."""
        self._server = await asyncio.start_server(self._accept, self.host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        logger.info("Kafka listener on %s:%d", self.host, self.port)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = Connection(self, reader, writer)
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
        if self._server is None:
            return
        self._server.close()
        for connection in list(self._connections.values()):
            connection.stop_reading()
        tasks = list(self._connections)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self.shutdown_grace)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None
        logger.info("Kafka listener on %s:%d stopped", self.host, self.port)
