"""The read side of a Kafka connection: the socket reads straight into a `FrameDecoder`.

    receiver = FrameReceiver(FrameDecoder(max_request_bytes), metrics, on_connect)
    frames = await receiver.receive()     # the frames received since the last call; [] at EOF

Why not asyncio's StreamReader: its bytes went through four copies in Python before the log
wrote them (the transport's recv into a new bytes object, the reader's buffer, the bytes a
read returned, the decoder's buffer, the frame copied out of it), a fifth of the broker's CPU
on a bulk produce. As an asyncio BufferedProtocol the receiver lends the transport the
decoder's buffer (`get_buffer`), so a large frame's body is received in place and handed on
without a copy (frame.FrameDecoder says how small and large frames are kept).

Large frames' buffers come from one `FrameBuffers` pool per thread (each event loop's
connections share theirs): a bulk client's next request is received into the buffer an earlier
one left once nothing refers to it, with no allocation and no zero-fill.

It is a StreamReaderProtocol too, so that an asyncio.StreamWriter works over it as over any
stream (drain, wait_closed, loop.sendfile); its StreamReader only carries EOF and the
connection's error for the writer, and is never fed data.

Backpressure: frames the connection has not taken yet are queued here; when they reach
RECEIVE_QUEUE_BYTES while nobody waits for them, reading pauses until they are taken (the
connection stops taking them while its in-flight deque is full), so a client that pipelines
without reading answers is held by TCP. One read can add at most one receive buffer of small
frames, or complete one large frame, beyond that bound.

A ProtocolError from the decoder is delivered after the frames received before it; the
transport then reads no more. After the error (or in `discard_until_eof`) what arrives is
dropped, so the transport never sees a failing get_buffer (asyncio would log that as a
fatal error of its own).
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

from common.limits import READ_SIZE
from common.protocol.frame import FrameBuffers, FrameDecoder
from common.protocol.primitives import ProtocolError

# Frames received and not yet taken by the connection: reading pauses at this many bytes
# (asyncio's StreamReader paused at twice its 64 KiB limit: the same bound).
RECEIVE_QUEUE_BYTES: Final = 2 * READ_SIZE
_DISCARD_BYTES: Final = READ_SIZE  # one read's worth of bytes dropped at a time after an error


class BytesCounter(Protocol):
    bytes_in: int


Frame = bytes | bytearray | memoryview

_thread_state = threading.local()  # .buffers: the thread's FrameBuffers


def thread_frame_buffers() -> FrameBuffers:
    """This thread's pool of large frames' buffers (a pool is not thread-safe: one per loop)."""
    buffers: FrameBuffers | None = getattr(_thread_state, "buffers", None)
    if buffers is None:
        buffers = _thread_state.buffers = FrameBuffers()
    return buffers


class FrameReceiver(asyncio.StreamReaderProtocol, asyncio.BufferedProtocol):
    """One connection's frames, read in place; `on_connect(receiver, writer)` runs as its task."""

    def __init__(self, decoder: FrameDecoder, metrics: BytesCounter,
                 on_connect: Callable[[FrameReceiver, asyncio.StreamWriter], Awaitable[None]] | None = None
                 ) -> None:
        self.reader = asyncio.StreamReader()  # EOF and errors for the StreamWriter; never fed data
        connected = None if on_connect is None else (
            lambda _reader, writer: on_connect(self, writer))
        super().__init__(self.reader, connected)
        self.decoder = decoder
        self._metrics = metrics
        self._frames: deque[Frame] = deque()
        self._queued = 0  # bytes of the frames in _frames
        self._error: BaseException | None = None  # delivered once the frames before it are taken
        self._eof = False
        self._discarding = False
        self._dropping = False  # what arrives is dropped: discarding, or after the decoder's error
        self._discard: bytearray | None = None  # allocated at the first byte dropped
        self._reading_paused = False
        self._read_transport: asyncio.BaseTransport | None = None
        self._waiter: asyncio.Future[None] | None = None
        # Takes frames in this receiver's turn while `receive` waits (the connection's reader
        # task is idle, every earlier frame taken); returns those it leaves, for `receive`.
        self.sink: Callable[[list[Frame]], list[Frame]] | None = None

    # --- the transport's side -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._read_transport = transport
        if self.decoder.buffers is None:  # on the loop's thread, which every later read runs on
            self.decoder.buffers = thread_frame_buffers()
        super().connection_made(transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._dropping:
            if self._discard is None:
                self._discard = bytearray(_DISCARD_BYTES)
            return memoryview(self._discard)
        return self.decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._metrics.bytes_in += nbytes
        if self._dropping:
            return
        sink = self.sink
        if sink is not None and self._waiter is not None and self._error is None:
            # The connection takes them now, not in its reader task a loop pass later (a future,
            # a wake-up and a task step per request). `receive` waits only with none queued: the
            # decoder's frames go to a list of their own and straight to the sink; what the sink
            # leaves (or a bad frame after them) is queued for `receive` as below.
            taken: list[Frame] = []
            try:
                self.decoder.buffer_updated(nbytes, taken)
            except ProtocolError as e:
                self._failed(e)
                self._queue(taken)  # the frames before the error, for `receive`, then the error
                return
            if taken:
                left = sink(taken)
                if left:
                    self._queue(left)
            return
        frames = self._frames
        before = len(frames)
        try:
            self.decoder.buffer_updated(nbytes, frames)  # type: ignore[arg-type]
        except ProtocolError as e:
            self._failed(e)
            self._queued_from(before)
            return
        if len(frames) > before:
            self._queued_from(before)

    def _failed(self, error: ProtocolError) -> None:
        """The decoder's error: what arrives from now on is dropped; `receive` raises it once the
        frames queued before it are taken."""
        self._error = error
        self._dropping = True
        self._pause()

    def _queue(self, frames: list[Frame]) -> None:
        """`frames` for `receive` (those the sink left)."""
        before = len(self._frames)
        self._frames.extend(frames)
        self._queued_from(before)

    def _queued_from(self, before: int) -> None:
        """Frames from index `before` on were queued: count their bytes, wake `receive` or pause
        reading past RECEIVE_QUEUE_BYTES."""
        frames = self._frames
        for i in range(before, len(frames)):  # bounded by the frames this read completed
            self._queued += len(frames[i])
        if self._waiter is not None:
            _wake(self._waiter)
        elif self._queued >= RECEIVE_QUEUE_BYTES:
            self._pause()

    def eof_received(self) -> bool | None:
        self._eof = True
        _wake(self._waiter)
        return super().eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        if exc is not None and self._error is None:
            self._error = exc
        _wake(self._waiter)
        super().connection_lost(exc)

    # --- the connection's side ----------------------------------------------------------------

    async def receive(self) -> list[Frame]:
        """The frames received since the last call, waiting for one; [] at EOF. Raises the
        decoder's ProtocolError (or the connection's error) once the frames before it are taken."""
        while not self._frames and self._error is None and not self._eof:  # until one of them
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if self._frames:
            frames = list(self._frames)
            self._frames.clear()
            self._queued = 0
            if self._error is None:
                self._resume()
            return frames
        if self._error is not None:
            raise self._error
        return []

    async def discard_until_eof(self) -> None:
        """Drop whatever the peer still sends until it closes (the caller bounds the wait)."""
        self._discarding = self._dropping = True
        self._frames.clear()
        self._queued = 0
        self._resume()
        while not self._eof:  # until the peer closes, or the caller's timeout
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def _pause(self) -> None:
        transport = self._read_transport
        if not self._reading_paused and isinstance(transport, asyncio.ReadTransport) and not transport.is_closing():
            transport.pause_reading()
            self._reading_paused = True

    def _resume(self) -> None:
        transport = self._read_transport
        if self._reading_paused and isinstance(transport, asyncio.ReadTransport) and not transport.is_closing():
            transport.resume_reading()
        self._reading_paused = False


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)
