"""broker/replication/kafka_connection.py, `requests`: one request after another, each answer
handed on in the receiver's turn (not by waking the awaiting task), the next request written
there; a failing request fails the chain as `request` fails, and what the handler raises comes
back as it was raised."""

from __future__ import annotations

import asyncio
import struct

import pytest

from broker.replication.kafka_connection import BrokerConnectionError, KafkaConnection
from common.protocol.primitives import Chunk
from tests.unit.test_kafka_connection import API, HOST, answer_first, broker, echo, response, run


def decode(payload: memoryview, _version: int) -> bytes:
    return bytes(payload)


class Asker:
    """Asks `count` requests (b"0", b"1", ...), noting each answer and the task it was handed to."""

    def __init__(self, count: int, fail_at: int | None = None) -> None:
        self.count, self.fail_at = count, fail_at
        self.answers: list[bytes] = []
        self.tasks: list[asyncio.Task[object] | None] = []

    def __call__(self, answer: bytes) -> list[Chunk] | None:
        self.answers.append(answer)
        self.tasks.append(asyncio.current_task())
        if len(self.answers) == self.fail_at:
            raise LookupError("the handler's own error")
        return [str(len(self.answers)).encode()] if len(self.answers) < self.count else None


def test_answers_are_handed_on_in_the_receivers_turn_and_the_next_request_sent_there() -> None:
    async def scenario() -> None:
        async with broker(echo) as port:
            conn = await KafkaConnection.open(HOST, port, client_id="t", timeout_s=5)
            asker = Asker(5)
            await conn.requests(API, 0, [b"0"], decode, asker)
            assert asker.answers == [b"re:0", b"re:1", b"re:2", b"re:3", b"re:4"]
            assert asker.tasks == [None] * 5  # the read callback's, no task woken per answer
            assert await conn.request(API, 0, [b"after"], decode) == b"re:after"  # in step
            await conn.close()

    run(scenario)


def test_what_the_handler_raises_comes_back_as_raised_the_connection_in_step() -> None:
    async def scenario() -> None:
        async with broker(echo) as port:
            conn = await KafkaConnection.open(HOST, port, client_id="t", timeout_s=5)
            asker = Asker(5, fail_at=3)
            with pytest.raises(LookupError, match="the handler's own error"):
                await conn.requests(API, 0, [b"0"], decode, asker)
            assert asker.answers == [b"re:0", b"re:1", b"re:2"]
            assert not conn.closed
            assert await conn.request(API, 0, [b"after"], decode) == b"re:after"
            await conn.close()

    run(scenario)


def wrong_id_third(correlation_id: int, body: bytes) -> bytes:
    return response(correlation_id + (body == b"2"), b"re:" + body)


def close_at_third(correlation_id: int, body: bytes) -> bytes:
    if body == b"2":
        raise ConnectionResetError("the broker went away")
    return echo(correlation_id, body)


@pytest.mark.parametrize("answer", [answer_first(2), wrong_id_third, close_at_third],
                         ids=["never answered", "another correlation id", "closed"])
def test_a_request_of_the_chain_that_fails_fails_it_and_closes_the_connection(answer: object) -> None:
    async def scenario() -> None:
        async with broker(answer) as port:  # type: ignore[arg-type]
            conn = await KafkaConnection.open(HOST, port, client_id="t", timeout_s=0.3)
            asker = Asker(5)
            with pytest.raises(BrokerConnectionError, match="API_VERSIONS v0 to 127.0.0.1.*failed"):
                await conn.requests(API, 0, [b"0"], decode, asker)
            assert asker.answers == [b"re:0", b"re:1"]
            assert conn.closed
            assert conn._receiver.sink is None and conn._watchdog is None

    run(scenario)


def test_each_request_of_the_chain_times_out_from_its_own_start() -> None:
    """Answers 0.15 s late, then none: the third request fails 0.3 s after it was sent, not 0.3 s
    after the chain began (its watchdog, armed then, waits on)."""
    async def scenario() -> None:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            for _ in range(2):  # then reads and never answers
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                await asyncio.sleep(0.15)
                writer.write(response(struct.unpack_from(">i", frame, 4)[0], b"late"))
            await reader.read()  # until the client closes
            writer.close()

        server = await asyncio.start_server(serve, HOST, 0)
        try:
            conn = await KafkaConnection.open(HOST, server.sockets[0].getsockname()[1], client_id="t", timeout_s=0.3)
            loop = asyncio.get_running_loop()
            asked: list[float] = []

            def next_request(answer: bytes) -> list[Chunk] | None:
                asked.append(loop.time())
                return [b"next"]
            started = loop.time()
            with pytest.raises(BrokerConnectionError, match="no answer in 0.3 s"):
                await conn.requests(API, 0, [b"0"], decode, next_request)
            assert len(asked) == 2 and asked[-1] - started >= 0.3
            assert loop.time() - asked[-1] >= 0.3
        finally:
            server.close()
            await server.wait_closed()

    run(scenario)


def test_an_answer_that_arrives_while_the_request_drains_is_handed_on_by_the_task() -> None:
    """A request larger than the socket takes at once: the task drains it, and an answer that
    comes meanwhile waits for it (nobody takes it in turn yet); the chain goes on after."""
    big = b"b" * (32 << 20)

    async def scenario() -> None:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:  # until the client closes: each request answered once its head is read
                try:
                    size, _, correlation_id = struct.unpack(">iii", await reader.readexactly(12))
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                writer.write(response(correlation_id, b"early"))
                await reader.readexactly(size - 8)  # the rest of the request, after the answer
            writer.close()

        server = await asyncio.start_server(serve, HOST, 0)
        try:
            conn = await KafkaConnection.open(HOST, server.sockets[0].getsockname()[1], client_id="t", timeout_s=30)
            tasks: list[asyncio.Task[object] | None] = []

            def next_request(answer: bytes) -> list[Chunk] | None:
                assert answer == b"early"
                tasks.append(asyncio.current_task())
                return [b"small"] if len(tasks) < 3 else None
            await conn.requests(API, 0, [big], decode, next_request)
            assert tasks[0] is not None and tasks[1:] == [None, None]  # the task's, then the read callback's
            await conn.close()
        finally:
            server.close()
            await server.wait_closed()

    run(scenario)


def test_a_cancelled_chain_closes_the_connection_and_takes_nothing_more() -> None:
    async def scenario() -> None:
        async with broker(answer_first(2)) as port:
            conn = await KafkaConnection.open(HOST, port, client_id="t", timeout_s=5)
            asker = Asker(5)
            task = asyncio.create_task(conn.requests(API, 0, [b"0"], decode, asker))
            while len(asker.answers) < 2:  # the third request waits for ever
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert conn.closed
            assert conn._receiver.sink is None

    run(scenario)
