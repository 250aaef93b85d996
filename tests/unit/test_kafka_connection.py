"""broker/replication/kafka_connection.py: one request at a time to a broker on loopback, its
response read in place (FrameReceiver), every failure a BrokerConnectionError that closes it."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from broker.replication import kafka_connection
from broker.replication.kafka_connection import BrokerConnectionError, KafkaConnection
from common.protocol.api_keys import ApiKey

API = ApiKey.API_VERSIONS  # header v0 responses: the body follows the correlation id directly
HOST = "127.0.0.1"
LARGE = 300 * 1024  # above the receive buffer: a frame of its own, received in place

# (the request's correlation id, the request's body after its header) -> bytes to write back
Answer = Callable[[int, bytes], bytes]


def response(correlation_id: int, body: bytes) -> bytes:
    return struct.pack(">ii", 4 + len(body), correlation_id) + body


def echo(correlation_id: int, body: bytes) -> bytes:
    return response(correlation_id, b"re:" + body)


@asynccontextmanager
async def broker(answer: Answer | None) -> AsyncIterator[int]:
    """A listener that answers each request with `answer(...)` (None: reads and never answers);
    its port. Closed, with its connections, on exit."""
    writers: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        try:
            while True:  # until the client closes
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                correlation_id = struct.unpack_from(">i", frame, 4)[0]
                client_id_len = struct.unpack_from(">h", frame, 8)[0]
                if answer is not None:
                    writer.write(answer(correlation_id, frame[10 + max(client_id_len, 0):]))
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, HOST, 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for writer in writers:
            writer.close()
        await server.wait_closed()


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 10))


def call(conn: KafkaConnection, body: bytes) -> Awaitable[bytes]:
    return conn.request(API, 0, [body], lambda payload, _version: bytes(payload))


@pytest.mark.parametrize("size", [0, 10, 16 * 1024 - 12, 16 * 1024, LARGE])
def test_answers_are_read_whole_whatever_their_size(size: int) -> None:
    body = bytes(range(256)) * (size // 256) + bytes(size % 256)

    async def scenario() -> None:
        async with broker(echo) as port:
            conn = await KafkaConnection.open(HOST, port, client_id="t", timeout_s=5)
            try:
                for _ in range(3):  # one connection, answers in order, a new correlation id each
                    assert await call(conn, body) == b"re:" + body
            finally:
                await conn.close()
            assert conn.closed

    run(scenario)


def test_a_large_answer_split_over_many_writes_is_joined() -> None:
    async def scenario() -> None:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            frame = await reader.readexactly(size)
            data = response(struct.unpack_from(">i", frame, 4)[0], b"x" * LARGE)
            for start in range(0, len(data), 1000):  # bounded by the answer's size
                writer.write(data[start:start + 1000])
                await writer.drain()
            await reader.read()  # until the client closes
            writer.close()

        server = await asyncio.start_server(serve, HOST, 0)
        try:
            conn = await KafkaConnection.open(HOST, server.sockets[0].getsockname()[1], client_id="t", timeout_s=5)
            assert await call(conn, b"") == b"x" * LARGE
            await conn.close()
        finally:
            server.close()
            await server.wait_closed()

    run(scenario)


def wrong_id(correlation_id: int, body: bytes) -> bytes:
    return response(correlation_id + 1, body)


def close_instead(correlation_id: int, body: bytes) -> bytes:
    raise ConnectionResetError("the broker went away")


def half_an_answer(correlation_id: int, body: bytes) -> bytes:
    return response(correlation_id, b"y" * 100)[:50]


def too_large(correlation_id: int, body: bytes) -> bytes:
    return struct.pack(">ii", 1 << 20, correlation_id) + b"z" * 100


@pytest.mark.parametrize("answer", [wrong_id, close_instead, half_an_answer, too_large, None],
                         ids=["another correlation id", "closed", "cut mid-answer", "over the size bound",
                              "never answered"])
def test_a_bad_or_missing_answer_fails_and_closes_the_connection(
        answer: Answer | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_connection, "MAX_RESPONSE_BYTES", 64 * 1024)

    async def scenario() -> None:
        async with broker(answer) as port:
            conn = await KafkaConnection.open(HOST, port, client_id="t", timeout_s=0.3)
            with pytest.raises(BrokerConnectionError, match="API_VERSIONS v0 to 127.0.0.1"):
                await call(conn, b"ask")
            assert conn.closed
            with pytest.raises(BrokerConnectionError, match="is closed"):
                await call(conn, b"again")

    run(scenario)


def test_nothing_listening_is_a_connection_error() -> None:
    async def scenario() -> None:
        async with broker(echo) as port:
            pass
        with pytest.raises(BrokerConnectionError, match="cannot connect"):
            await KafkaConnection.open(HOST, port, client_id="t", timeout_s=2)

    run(scenario)


def answer_first(count: int) -> Answer:
    """Answers the first `count` requests (echo), then reads and never answers."""
    answered = [0]

    def answer(correlation_id: int, body: bytes) -> bytes:
        answered[0] += 1
        return echo(correlation_id, body) if answered[0] <= count else b""
    return answer


def test_requests_in_a_row_schedule_one_timer_not_one_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """A follower sends a Fetch per produce: its deadline is a watchdog armed once per timeout,
    not a timer scheduled and cancelled per request."""
    async def scenario() -> None:
        async with broker(echo) as port:
            conn = await KafkaConnection.open(HOST, port, client_id="t", timeout_s=5)
            loop = asyncio.get_running_loop()
            timers: list[float] = []
            call_at = loop.call_at

            def counted(when: float, *args: Any, **kw: Any) -> asyncio.TimerHandle:
                timers.append(when)
                return call_at(when, *args, **kw)
            monkeypatch.setattr(loop, "call_at", counted)
            for _ in range(5):
                assert await call(conn, b"x") == b"re:x"
            assert len(timers) == 1
            await conn.close()

    run(scenario)


def test_a_request_unanswered_after_answered_ones_times_out_from_its_own_start() -> None:
    """The watchdog armed for the first request's deadline waits on for the last request's."""
    async def scenario() -> None:
        async with broker(answer_first(2)) as port:
            conn = await KafkaConnection.open(HOST, port, client_id="t", timeout_s=0.3)
            loop = asyncio.get_running_loop()
            assert await call(conn, b"a") == b"re:a"
            await asyncio.sleep(0.2)
            assert await call(conn, b"b") == b"re:b"
            asked = loop.time()
            with pytest.raises(BrokerConnectionError, match="API_VERSIONS v0 to 127.0.0.1.*failed"):
                await call(conn, b"never")
            assert loop.time() - asked >= 0.3
            assert conn.closed

    run(scenario)
