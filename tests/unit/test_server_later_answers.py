"""broker/server.py: requests started and answered with no task or coroutine of the server's own.

A request that arrives while its connection waits for one is started in the receiver's own
turn (FrameReceiver.sink), not by waking the reader task a loop pass later; in the listener's
context all the same. A handler's `Later` may hold a future set elsewhere (an acks=all
Produce's, set where the high watermark moves): the server keeps that future as the request's
awaitable, with no task, and the write loop wakes on it directly, one loop pass after it is
set. `Encoding(pending, encode, version)` is applied by the write loop; awaited by anyone else
it is `encode(await pending, version)` (None stays None). Request order holds either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator

import pytest

from broker.listener_security import CLIENT_LISTENER, ListenerSecurity
from broker.purgatory import AnswerFuture
from broker.server import Encoding, KafkaServer, Later
from common.protocol.frame import RequestHeader, encode_request_header
from common.protocol.primitives import Chunk

HOST = "127.0.0.1"
IO_TIMEOUT_S = 5.0
MAX_IN_FLIGHT = 4


class FutureHandler:
    """`now <tag>` answers at once; `future` and `encoded` answer what the test sets on
    `futures[correlation id]` (`encoded`: through an Encoding that upper-cases it; `answer` the
    same, its future an AnswerFuture, as the purgatory's); `coroutine <tag>` answers an Encoding
    of a coroutine."""

    def __init__(self) -> None:
        self.futures: dict[int, asyncio.Future[bytes]] = {}
        self.started_in: list[tuple[asyncio.Task[object] | None, str | None]] = []  # (task, listener) per start

    def start(self, header: RequestHeader, body: memoryview,
              client_host: str = "") -> list[Chunk] | None | Later[list[Chunk] | None]:
        self.started_in.append((asyncio.current_task(), CLIENT_LISTENER.get()))
        words = bytes(body).decode().split()
        if words[0] == "now":
            return [words[1].encode()]
        if words[0] == "boom":
            raise RuntimeError("a bug before any await")
        if words[0] == "coroutine":
            return Later(Encoding(_soon(words[1].encode()), _upper, 0))
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bytes] = AnswerFuture(loop=loop) if words[0] == "answer" else loop.create_future()
        self.futures[header.correlation_id] = future
        if words[0] == "future":
            return Later(_chunks_of(future))
        return Later(Encoding(future, _upper, 0))

    async def handle(self, header: RequestHeader, body: memoryview, client_host: str = "") -> list[Chunk] | None:
        answer = self.start(header, body, client_host)
        return await answer.answer if isinstance(answer, Later) else answer


def _chunks_of(future: asyncio.Future[bytes]) -> asyncio.Future[list[Chunk] | None]:
    """A future of the answer's chunks, set when `future` is (a bare future, no Encoding)."""
    chunks: asyncio.Future[list[Chunk] | None] = asyncio.get_running_loop().create_future()
    future.add_done_callback(lambda f: chunks.set_result([f.result()]))
    return chunks


async def _soon(tag: bytes | None) -> bytes | None:
    await asyncio.sleep(0)
    return tag


def request(correlation_id: int, body: bytes) -> bytes:
    frame = encode_request_header(RequestHeader(3, 5, correlation_id, "test")) + body
    return struct.pack(">i", len(frame)) + frame


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), IO_TIMEOUT_S))[0]
    data = await asyncio.wait_for(reader.readexactly(size), IO_TIMEOUT_S)
    return struct.unpack(">i", data[:4])[0], data[4:]


@pytest.fixture
async def served(request: pytest.FixtureRequest
                 ) -> AsyncIterator[tuple[KafkaServer, FutureHandler, asyncio.StreamReader, asyncio.StreamWriter]]:
    async with serving(getattr(request, "param", None)) as started:
        yield started


@contextlib.asynccontextmanager
async def serving(security: ListenerSecurity | None
                  ) -> AsyncIterator[tuple[KafkaServer, FutureHandler, asyncio.StreamReader, asyncio.StreamWriter]]:
    handler = FutureHandler()
    server = KafkaServer(handler, host=HOST, port=0, max_in_flight=MAX_IN_FLIGHT, shutdown_grace=1.0,
                         security=security)
    await server.start()
    reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, server.port), IO_TIMEOUT_S)
    try:
        writer.write(request(0, b"now ready"))  # the connection's reader and writer tasks are running
        assert await read_response(reader) == (0, b"ready")
        yield server, handler, reader, writer
    finally:
        writer.close()
        await server.stop()


async def _until_started(handler: FutureHandler, correlation_id: int) -> asyncio.Future[bytes]:
    async with asyncio.timeout(IO_TIMEOUT_S):
        while correlation_id not in handler.futures:  # until the server read the request
            await asyncio.sleep(0.001)
    return handler.futures[correlation_id]


async def test_a_future_answer_is_waited_for_with_no_task(served) -> None:
    server, handler, reader, writer = served
    tasks = asyncio.all_tasks()
    writer.write(request(1, b"future") + request(2, b"now after"))
    future = await _until_started(handler, 1)
    await asyncio.sleep(0.01)
    assert asyncio.all_tasks() - tasks == set()  # the server wraps the future in no task
    future.set_result(b"first")
    assert await read_response(reader) == (1, b"first")
    assert await read_response(reader) == (2, b"after")  # request order: after the future's answer


async def test_the_writer_wakes_on_the_future_one_loop_pass_after_it_is_set(served) -> None:
    server, handler, reader, writer = served
    writer.write(request(1, b"encoded"))
    future = await _until_started(handler, 1)
    sent = server.metrics.bytes_out
    future.set_result(b"acked")
    await asyncio.sleep(0)  # one loop pass: the write loop's, with no task step before it
    assert server.metrics.bytes_out > sent
    assert await read_response(reader) == (1, b"ACKED")  # the encoding applied


async def test_an_answer_future_is_written_in_the_turn_that_sets_it(served) -> None:
    # an acks=all produce's: the purgatory sets it where the HW moves, in a follower fetch's turn
    server, handler, reader, writer = served
    writer.write(request(1, b"answer") + request(2, b"now after"))
    future = await _until_started(handler, 1)
    await asyncio.sleep(0.01)  # the requests' turn is over: the writer idle, the future watched
    sent = server.metrics.bytes_out
    future.set_result(b"acked")
    assert server.metrics.bytes_out > sent  # no loop pass: written from set_result's own turn
    assert await read_response(reader) == (1, b"ACKED")
    assert await read_response(reader) == (2, b"after")  # and the answer ready behind it, in order


async def test_encoding_of_a_coroutine_runs_as_the_requests_task(served) -> None:
    server, handler, reader, writer = served
    writer.write(request(1, b"coroutine slow") + request(2, b"now then"))
    assert await read_response(reader) == (1, b"SLOW")
    assert await read_response(reader) == (2, b"then")


async def test_a_failed_future_ends_the_connection_after_the_answers_before_it(served) -> None:
    server, handler, reader, writer = served
    writer.write(request(1, b"encoded") + request(2, b"encoded"))
    first = await _until_started(handler, 1)
    second = await _until_started(handler, 2)
    second.set_exception(RuntimeError("a bug where the answer is built"))
    first.set_result(b"fine")
    assert await read_response(reader) == (1, b"FINE")
    assert await asyncio.wait_for(reader.read(1), IO_TIMEOUT_S) == b""


@pytest.mark.parametrize("pending", ["future", "coroutine"])
async def test_encoding_awaited_elsewhere_is_the_encoded_answer(pending: str) -> None:
    # the request fault hook and the authorizer's narrowing await a Later's answer themselves
    if pending == "future":
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        future.set_result(b"x")
        encoding = Encoding(future, _repeat, 2)
    else:
        encoding = Encoding(_soon(b"x"), _repeat, 2)
    assert await encoding == [b"xx"]


async def test_an_encoding_of_no_response_is_no_answer() -> None:
    # a handler's None (no answer) is not given to the codec
    assert await Encoding(_soon(None), _repeat, 2) is None


def _repeat(tag: bytes, version: int) -> list[bytes]:
    return [tag * version]


def _upper(tag: bytes, version: int) -> list[bytes]:
    return [tag.upper()]


@pytest.mark.parametrize("served", [None, ListenerSecurity("EXTERNAL", "PLAINTEXT")], indirect=True,
                         ids=["no-security", "named-listener"])
async def test_a_request_to_an_idle_connection_starts_in_the_receivers_turn(served) -> None:
    server, handler, reader, writer = served
    writer.write(request(1, b"now one"))
    assert await read_response(reader) == (1, b"one")
    listener = None if server.security is None else server.security.name
    # no reader task woken for it (a protocol callback runs no task), in the listener's context
    assert handler.started_in[-1] == (None, listener)


async def test_pipelined_past_the_in_flight_limit_in_one_read_are_answered_in_order(served) -> None:
    server, handler, reader, writer = served
    count = 3 * MAX_IN_FLIGHT
    writer.write(request(1, b"encoded") + b"".join(request(i, f"now r{i}".encode()) for i in range(2, count)))
    future = await _until_started(handler, 1)
    await asyncio.sleep(0.05)
    # the receiver's turn took them up to the limit; the rest wait for room, unstarted
    assert [task for task, _ in handler.started_in[1:]] == [None] * (MAX_IN_FLIGHT + 1)
    future.set_result(b"first")
    assert [await read_response(reader) for _ in range(1, count)] == [
        (1, b"FIRST"), *((i, f"r{i}".encode()) for i in range(2, count))]
    assert None not in [task for task, _ in handler.started_in[2 + MAX_IN_FLIGHT:]]  # by the reader task


async def test_a_request_that_fails_at_once_in_turn_ends_reading(served) -> None:
    server, handler, reader, writer = served
    writer.write(request(1, b"now one") + request(2, b"boom") + request(3, b"now three"))
    assert await read_response(reader) == (1, b"one")
    assert await asyncio.wait_for(reader.read(1), IO_TIMEOUT_S) == b""
    assert [task for task, _ in handler.started_in[1:]] == [None, None]  # in turn; "now three" never started
