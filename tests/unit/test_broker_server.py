"""broker/server.py over real loopback sockets, with a fake handler scripted by the request body.

Body commands (ASCII): `sleep <ms> <tag>` answers `tag` after a delay; `now <tag>` answers
`tag` at once (no task, as a Produce with acks 0 or 1); `none` answers nothing
(acks=0); `bad` raises ProtocolError; `file <position> <length>` answers b"F" then a FileSlice
of the test's file (`now-file`: at once, as a Fetch that found its data); `boom` raises a bug. `now-bad` and `now-boom` fail at once. Pipelined requests come back in request order even
when handled out of order; a malformed or oversized frame closes only its own connection;
a file truncated under a slice ends the connection instead of sending a wrong length.
Every server is stopped and every socket closed, whatever happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from broker.log.segment import FileSlice
from broker.server import COALESCE_BYTES, PREAD_CHUNK, Connection, KafkaServer, Later
from common.protocol.frame import RequestHeader, encode_request_header
from common.protocol.primitives import Chunk, ProtocolError

HOST = "127.0.0.1"
MAX_REQUEST_BYTES = 1024
IO_TIMEOUT_S = 5.0
SMALL_RECEIVE_BUFFER = 4096  # bytes: a client window far smaller than a slice


class FakeHandler:
    def __init__(self, fd: int = -1) -> None:
        self.fd = fd
        self.started: list[int] = []  # correlation ids in the order handling started

    def start(self, header: RequestHeader, body: memoryview,
              client_host: str = "") -> list[Chunk] | None | Later[list[Chunk] | None]:
        words = bytes(body).decode().split()
        if words[0] == "now":
            self.started.append(header.correlation_id)
            return [words[1].encode()]
        if words[0] == "now-bad":
            raise ProtocolError("cannot decode this either")
        if words[0] == "now-boom":
            raise RuntimeError("a bug before any await")
        if words[0] == "now-file":
            return [b"F", FileSlice(self.fd, int(words[1]), int(words[2]))]
        return Later(self.handle(header, body, client_host))

    async def handle(self, header: RequestHeader, body: memoryview, client_host: str = "") -> list[Chunk] | None:
        self.started.append(header.correlation_id)
        words = bytes(body).decode().split()
        if words[0] == "now":
            return [words[1].encode()]
        if words[0] == "sleep":
            await asyncio.sleep(int(words[1]) / 1000)
            return [words[2].encode()]
        if words[0] == "none":
            return None
        if words[0] == "bad":
            raise ProtocolError("cannot decode this")
        if words[0] == "boom":
            raise RuntimeError("a bug in a handler")
        if words[0] == "file":
            return [b"F", FileSlice(self.fd, int(words[1]), int(words[2]))]
        raise AssertionError(words)


def request(correlation_id: int, body: bytes, api_key: int = 3) -> bytes:
    frame = encode_request_header(RequestHeader(api_key, 5, correlation_id, "test")) + body
    return struct.pack(">i", len(frame)) + frame


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), IO_TIMEOUT_S))[0]
    data = await asyncio.wait_for(reader.readexactly(size), IO_TIMEOUT_S)
    return struct.unpack(">i", data[:4])[0], data[4:]


async def closed(reader: asyncio.StreamReader) -> bool:
    """True once the server closed the connection (EOF or reset) without sending anything."""
    try:
        return await asyncio.wait_for(reader.read(1), IO_TIMEOUT_S) == b""
    except ConnectionError:
        return True


@pytest.fixture
def data_file(tmp_path: Path) -> tuple[int, bytes]:
    content = os.urandom(3 * PREAD_CHUNK + 123)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(content)
    fd = os.open(path, os.O_RDWR)
    yield fd, content
    os.close(fd)


@contextlib.asynccontextmanager
async def serving(fd: int, max_request_bytes: int) -> AsyncIterator[KafkaServer]:
    """A started server; stopped, and every client writer `connect` made closed, at the end."""
    started = KafkaServer(FakeHandler(fd), host=HOST, port=0, max_request_bytes=max_request_bytes,
                          max_in_flight=4, shutdown_grace=1.0)
    await started.start()
    writers: list[asyncio.StreamWriter] = []
    started.test_writers = writers  # type: ignore[attr-defined]
    try:
        yield started
    finally:
        await started.stop()
        for writer in writers:
            writer.close()


@pytest.fixture
async def server(data_file: tuple[int, bytes]) -> AsyncIterator[KafkaServer]:
    async with serving(data_file[0], MAX_REQUEST_BYTES) as started:
        yield started


async def connect(server: KafkaServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, server.port), IO_TIMEOUT_S)
    server.test_writers.append(writer)  # type: ignore[attr-defined]
    return reader, writer


async def test_pipelined_requests_are_answered_in_request_order(server: KafkaServer) -> None:
    reader, writer = await connect(server)
    delays = [80, 5, 40, 0, 20, 60, 1, 30]  # later requests finish first
    writer.write(b"".join(request(i, f"sleep {d} r{i}".encode()) for i, d in enumerate(delays)))
    answers = [await read_response(reader) for _ in delays]
    assert answers == [(i, f"r{i}".encode()) for i in range(len(delays))]
    assert server.handler.started[:4] == [0, 1, 2, 3]  # type: ignore[attr-defined]
    assert server.metrics.requests_by_api == {3: len(delays)}
    assert server.metrics.latency_count == len(delays)


async def test_no_response_for_acks_zero_and_order_kept(server: KafkaServer) -> None:
    reader, writer = await connect(server)
    writer.write(request(1, b"none") + request(2, b"sleep 0 two") + request(3, b"none") + request(4, b"sleep 0 x"))
    assert await read_response(reader) == (2, b"two")
    assert await read_response(reader) == (4, b"x")


async def test_answers_at_once_and_later_keep_request_order(server: KafkaServer) -> None:
    reader, writer = await connect(server)
    bodies = [b"now a", b"sleep 30 b", b"now c", b"none", b"sleep 0 e", b"now f", b"now g"]
    writer.write(b"".join(request(i, body) for i, body in enumerate(bodies)))
    expected = [(i, body.split()[-1]) for i, body in enumerate(bodies) if body != b"none"]
    assert [await read_response(reader) for _ in expected] == expected
    # request order of the handlers' starts: "now c" waits for the task of "sleep 30 b" to start
    assert server.handler.started == list(range(len(bodies)))  # type: ignore[attr-defined]


async def test_a_failure_at_once_answers_the_requests_before_it(server: KafkaServer) -> None:
    reader, writer = await connect(server)
    writer.write(request(1, b"sleep 20 one") + request(2, b"now two") + request(3, b"now-bad")
                 + request(4, b"now never"))
    assert await read_response(reader) == (1, b"one")
    assert await read_response(reader) == (2, b"two")
    assert await closed(reader)


async def test_many_ready_answers_go_out_together_and_complete(server: KafkaServer) -> None:
    reader, writer = await connect(server)
    tag = "x" * 1000
    count = 3 * COALESCE_BYTES // len(tag)  # several flushes' worth, pipelined at once
    writer.write(b"".join(request(i, f"now {tag}{i}".encode()) for i in range(count)))
    answers = [await read_response(reader) for _ in range(count)]
    assert answers == [(i, f"{tag}{i}".encode()) for i in range(count)]
    assert server.metrics.latency_count == count


def spy_in_turn(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each call of Connection._answer_in_turn wrote the answers from the reader's turn."""
    in_turn: list[bool] = []
    answer_in_turn = Connection._answer_in_turn

    def spy(self: Connection, now: float) -> bool:
        in_turn.append(answer_in_turn(self, now))
        return in_turn[-1]
    monkeypatch.setattr(Connection, "_answer_in_turn", spy)
    return in_turn


async def test_answers_go_out_from_the_readers_turn_or_their_own_in_order(
        server: KafkaServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """One request at a time answered at once (a linger.ms=0 producer's acks=1 produce) is written
    by the reader itself; a task's answer (a long-poll fetch; an acks=all produce's future alike)
    from the task's done callback, with the answers ready behind it. The writer never wakes for
    them (two task steps per waiting answer before), and every answer keeps its place."""
    in_turn = spy_in_turn(monkeypatch)
    by_writer: list[int] = []
    write = Connection._write

    def spy_write(self: Connection, out: list[bytes], size: int) -> bool:
        by_writer.append(size)
        return write(self, out, size)
    monkeypatch.setattr(Connection, "_write", spy_write)
    reader, writer = await connect(server)
    for i in range(5):
        writer.write(request(i, f"now p{i}".encode()))
        assert await read_response(reader) == (i, f"p{i}".encode())
    assert in_turn == [True] * 5
    writer.write(request(5, b"sleep 20 slow") + request(6, b"now fast"))
    writer.write(request(7, b"none"))
    assert await read_response(reader) == (5, b"slow")
    assert await read_response(reader) == (6, b"fast")
    writer.write(request(8, b"now last"))
    assert await read_response(reader) == (8, b"last")
    assert False not in in_turn and by_writer == []
    assert server.metrics.requests_by_api == {3: 9}


@pytest.mark.parametrize("garbage", [
    pytest.param(struct.pack(">i", MAX_REQUEST_BYTES + 1), id="oversized-prefix"),
    pytest.param(struct.pack(">i", -5), id="negative-size"),
    pytest.param(struct.pack(">i", 3) + b"\x00\x03\x00", id="truncated-header"),
    pytest.param(request(9, b"bad"), id="undecodable-request"),
    pytest.param(request(9, b"boom"), id="handler-bug"),
    pytest.param(request(9, b"now-bad"), id="undecodable-at-once"),
    pytest.param(request(9, b"now-boom"), id="handler-bug-at-once"),
])
async def test_bad_input_closes_only_that_connection(server: KafkaServer, garbage: bytes,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    good_reader, good_writer = await connect(server)
    bad_reader, bad_writer = await connect(server)
    good_writer.write(request(1, b"sleep 0 before"))
    assert await read_response(good_reader) == (1, b"before")
    bad_writer.write(garbage)
    assert await closed(bad_reader)
    good_writer.write(request(2, b"sleep 0 after"))
    assert await read_response(good_reader) == (2, b"after")
    assert server.metrics.connections_closed_on_error == 1
    assert server.metrics.connections_active == 1
    lines = [r for r in caplog.records if "Closing connection" in r.getMessage()]
    assert len(lines) == 1 and "127.0.0.1:" in lines[0].getMessage()


async def test_requests_answered_at_once_before_a_bad_prefix_in_the_same_read_go_out_then_it_closes(
        server: KafkaServer) -> None:
    # one read: two whole requests, then a prefix over the limit (the receiver's turn hands the
    # two to the connection, then its error); both answers go out, in order, before the close.
    # (A request still in flight at the error is cancelled with the connection, as documented.)
    reader, writer = await connect(server)
    writer.write(request(1, b"now a") + request(2, b"now b") + struct.pack(">i", MAX_REQUEST_BYTES + 1))
    assert await read_response(reader) == (1, b"a")
    assert await read_response(reader) == (2, b"b")
    assert await closed(reader)


async def test_an_oversized_frame_is_refused_before_its_body_arrives(server: KafkaServer) -> None:
    reader, writer = await connect(server)
    writer.write(struct.pack(">i", 50 * 1024 * 1024))  # 50 MiB promised, nothing sent
    assert await closed(reader)


@pytest.mark.parametrize(("position", "length"), [(0, 0), (7, 100), (3, COALESCE_BYTES),
                                                  (9, COALESCE_BYTES + 1), (5, 3 * PREAD_CHUNK + 100)])
async def test_file_slices_are_sent_from_the_file(server: KafkaServer, data_file: tuple[int, bytes],
                                                  position: int, length: int) -> None:
    reader, writer = await connect(server)
    writer.write(request(5, f"file {position} {length}".encode()) + request(6, b"sleep 0 next"))
    assert await read_response(reader) == (5, b"F" + data_file[1][position:position + length])
    assert await read_response(reader) == (6, b"next")
    assert server.metrics.bytes_out >= length


@pytest.mark.parametrize("command", ["file", "now-file"])
@pytest.mark.parametrize("length", [1000, 2 * PREAD_CHUNK])
async def test_a_slice_past_the_end_of_the_file_closes_the_connection(
        server: KafkaServer, data_file: tuple[int, bytes], length: int, command: str) -> None:
    reader, writer = await connect(server)
    os.ftruncate(data_file[0], 1000)  # truncated after the response promised more
    writer.write(request(5, f"{command} 500 {length}".encode()))
    received = b""
    while chunk := await asyncio.wait_for(reader.read(65536), IO_TIMEOUT_S):  # until EOF
        received += chunk
    # never a whole frame of the wrong bytes (a small slice is read before its frame is sent:
    # nothing of it goes out)
    assert len(received) < 4 + 4 + 1 + length


@pytest.mark.parametrize(("position", "length"), [(7, 100), (9, COALESCE_BYTES + 1), (5, 3 * PREAD_CHUNK + 100)])
async def test_file_answers_at_once_are_sent_from_the_readers_turn(
        server: KafkaServer, data_file: tuple[int, bytes], monkeypatch: pytest.MonkeyPatch,
        position: int, length: int) -> None:
    """A slice answered at once (a Fetch that found its data) goes by sendfile from the reader's
    own turn, with no writer wake-up, byte-exact and in order with the answers around it."""
    in_turn = spy_in_turn(monkeypatch)
    reader, writer = await connect(server)
    writer.write(request(4, b"now before"))
    assert await read_response(reader) == (4, b"before")
    writer.write(request(5, f"now-file {position} {length}".encode()))
    assert await read_response(reader) == (5, b"F" + data_file[1][position:position + length])
    writer.write(request(6, b"now after"))
    assert await read_response(reader) == (6, b"after")
    assert in_turn == [True, True, True]


async def test_what_the_socket_does_not_take_in_turn_the_writer_sends_in_order(
        server: KafkaServer, data_file: tuple[int, bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    """A client with a small receive window that has not read yet: the reader's sendfile takes
    what fits, the writer sends the rest of the slice, then the answers pipelined after it."""
    rests: list[object] = []
    sendfile_in_turn = Connection._sendfile_in_turn

    def spy(self: Connection, out: list[bytes], records: FileSlice) -> object:
        rests.append(sendfile_in_turn(self, out, records))
        return rests[-1]
    monkeypatch.setattr(Connection, "_sendfile_in_turn", spy)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_RECEIVE_BUFFER)
    sock.setblocking(False)
    await asyncio.wait_for(asyncio.get_running_loop().sock_connect(sock, (HOST, server.port)), IO_TIMEOUT_S)
    reader, writer = await asyncio.open_connection(sock=sock)
    server.test_writers.append(writer)  # type: ignore[attr-defined]
    length = 3 * PREAD_CHUNK
    writer.write(request(5, f"now-file 3 {length}".encode()) + request(6, b"now next"))
    assert await read_response(reader) == (5, b"F" + data_file[1][3:3 + length])
    assert await read_response(reader) == (6, b"next")
    writer.write(request(7, b"now last"))
    assert await read_response(reader) == (7, b"last")
    assert len(rests) == 1 and isinstance(rests[0], FileSlice) and 0 < rests[0].length < length


class _SendSpy:
    """A connection's socket as `_sendfile_in_turn` uses it, the flags of each send recorded;
    `refuse`: every send fails as a full socket's does."""

    def __init__(self, sock: socket.socket, refuse: bool) -> None:
        self.sock, self.refuse = sock, refuse
        self.flags: list[int] = []

    def send(self, data: bytes, flags: int = 0) -> int:
        self.flags.append(flags)
        if self.refuse:
            raise BlockingIOError
        return self.sock.send(data, flags)


async def spied_connection(server: KafkaServer, refuse: bool
                           ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, Connection, _SendSpy]:
    """A connection whose first answer went out, its socket's sends recorded from then on."""
    reader, writer = await connect(server)
    writer.write(request(4, b"now before"))
    assert await read_response(reader) == (4, b"before")
    (connection,) = server._connections.values()
    spy = _SendSpy(connection._sock, refuse)  # type: ignore[arg-type]
    connection._sock = spy  # type: ignore[assignment]
    return reader, writer, connection, spy


@pytest.mark.parametrize("refuse", [False, True])
async def test_the_head_of_a_slice_answered_in_turn_waits_for_the_slice(
        server: KafkaServer, data_file: tuple[int, bytes], refuse: bool) -> None:
    """The answer's bytes before a slice go with MSG_MORE, so that the kernel sends them in the
    slice's first segment, not in one of their own that wakes the client for a few bytes; a
    socket that takes none of them leaves them to the transport and the slice to the writer,
    the answers still whole and in order."""
    reader, writer, _, spy = await spied_connection(server, refuse)
    length = COALESCE_BYTES + 1
    writer.write(request(5, f"now-file 9 {length}".encode()))
    assert await read_response(reader) == (5, b"F" + data_file[1][9:9 + length])
    writer.write(request(6, b"now after"))
    assert await read_response(reader) == (6, b"after")
    assert spy.flags == [socket.MSG_MORE, 0]  # the head waits for the slice; the next answer goes at once


@pytest.mark.parametrize("refuse", [False, True])
async def test_answers_in_turn_go_to_the_socket_and_what_it_refuses_to_the_transport(
        server: KafkaServer, data_file: tuple[int, bytes], monkeypatch: pytest.MonkeyPatch, refuse: bool) -> None:
    """An answer written from the reader's turn is sent on the socket itself (the transport's
    write would make the same send after its own checks); what the socket refuses goes to the
    transport's write, whole and in order."""
    reader, writer, connection, spy = await spied_connection(server, refuse)
    by_transport: list[bytes] = []
    transport_write = connection.transport.write

    def spy_write(data: bytes) -> None:
        by_transport.append(bytes(data))
        transport_write(data)
    monkeypatch.setattr(connection.transport, "write", spy_write)
    for i in range(5, 8):
        writer.write(request(i, f"now p{i}".encode()))
        assert await read_response(reader) == (i, f"p{i}".encode())
    length = COALESCE_BYTES + 1
    writer.write(request(8, f"now-file 9 {length}".encode()))
    assert await read_response(reader) == (8, b"F" + data_file[1][9:9 + length])
    assert spy.flags == [0, 0, 0, socket.MSG_MORE]
    assert len(by_transport) == (4 if refuse else 0)


async def test_requests_taken_in_turn_do_not_ask_asyncio_for_the_loop(
        server: KafkaServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The receiver's turn uses the loop its connection keeps: in CPython 3.11 each
    asyncio.get_running_loop() is a getpid(2), one syscall per request."""
    reader, writer = await connect(server)
    writer.write(request(1, b"now first"))
    assert await read_response(reader) == (1, b"first")
    asked: list[int] = []
    get_running_loop = asyncio.get_running_loop

    def counted() -> asyncio.AbstractEventLoop:
        asked.append(1)
        return get_running_loop()
    monkeypatch.setattr(asyncio, "get_running_loop", counted)
    for i in range(2, 12):
        writer.write(request(i, f"now p{i}".encode()))
        assert await read_response(reader) == (i, f"p{i}".encode())
    assert asked == []


async def test_in_flight_is_bounded_and_reading_resumes(server: KafkaServer) -> None:
    reader, writer = await connect(server)
    count = 40  # ten times max_in_flight, all written at once
    writer.write(b"".join(request(i, f"sleep 1 r{i}".encode()) for i in range(count)))
    answers = [await read_response(reader) for _ in range(count)]
    assert [a[0] for a in answers] == list(range(count))


async def test_many_connections(server: KafkaServer) -> None:
    pairs = [await connect(server) for _ in range(50)]
    for i, (_, writer) in enumerate(pairs):
        writer.write(request(i, f"sleep 0 c{i}".encode()))
    for i, (reader, _) in enumerate(pairs):
        assert await read_response(reader) == (i, f"c{i}".encode())
    assert server.metrics.connections_active == 50


async def test_stop_answers_in_flight_requests_then_closes(data_file: tuple[int, bytes]) -> None:
    server = KafkaServer(FakeHandler(data_file[0]), host=HOST, port=0, shutdown_grace=2.0)
    await server.start()
    reader, writer = await asyncio.open_connection(HOST, server.port)
    try:
        writer.write(request(1, b"sleep 100 slow"))
        await asyncio.sleep(0.02)
        await asyncio.wait_for(server.stop(), IO_TIMEOUT_S)
        assert await read_response(reader) == (1, b"slow")
        assert await closed(reader)
        with pytest.raises(OSError):
            await asyncio.open_connection(HOST, server.port)
    finally:
        writer.close()
        await server.stop()


async def test_stop_cancels_requests_that_outlive_the_grace(data_file: tuple[int, bytes]) -> None:
    server = KafkaServer(FakeHandler(data_file[0]), host=HOST, port=0, shutdown_grace=0.1)
    await server.start()
    reader, writer = await asyncio.open_connection(HOST, server.port)
    try:
        writer.write(request(1, b"sleep 60000 never"))
        await asyncio.sleep(0.02)
        await asyncio.wait_for(server.stop(), IO_TIMEOUT_S)
        assert await closed(reader)
    finally:
        writer.close()
        await server.stop()


# Frames larger than the receive buffer (common.limits.READ_SIZE) are read into a buffer of their
# own (broker.frame_receiver); the fixture's 1 KiB limit never lets one through.
LARGE_LIMIT = 4 * 1024 * 1024
PAD = b" " * (256 * 1024)  # the handler splits its body on whitespace: padding changes no command


@pytest.fixture
async def large_server(data_file: tuple[int, bytes]) -> AsyncIterator[KafkaServer]:
    async with serving(data_file[0], LARGE_LIMIT) as started:
        yield started


async def test_large_frames_pipelined_are_answered_in_order(large_server: KafkaServer) -> None:
    """Twenty 1 MiB frames at once (the in-flight deque fills, the receiver pauses reading and
    resumes), small ones between them, answered at once and later, in request order."""
    reader, writer = await connect(large_server)
    stream = b"".join(request(i, (f"now r{i}" if i % 3 else f"sleep 1 r{i}").encode() + PAD * 4)
                      + request(100 + i, f"now s{i}".encode()) for i in range(20))
    writer.write(stream)
    answers = [await read_response(reader) for _ in range(40)]
    assert answers == [a for i in range(20) for a in ((i, f"r{i}".encode()), (100 + i, f"s{i}".encode()))]
    assert large_server.metrics.bytes_in == len(stream)


@pytest.mark.parametrize("tail", [
    pytest.param(struct.pack(">i", -1), id="negative-size"),
    pytest.param(struct.pack(">i", LARGE_LIMIT + 1), id="oversized"),
    pytest.param(request(9, b"bad" + PAD), id="undecodable-large"),
])
async def test_bad_input_after_a_large_frame_closes_only_that_connection(large_server: KafkaServer,
                                                                         tail: bytes) -> None:
    good_reader, good_writer = await connect(large_server)
    bad_reader, bad_writer = await connect(large_server)
    bad_writer.write(request(1, b"now big" + PAD * 2) + tail)
    assert await read_response(bad_reader) == (1, b"big")
    assert await closed(bad_reader)
    good_writer.write(request(2, b"now after" + PAD))
    assert await read_response(good_reader) == (2, b"after")
    assert large_server.metrics.connections_closed_on_error == 1


async def test_a_large_frame_cut_short_by_the_client_ends_quietly(large_server: KafkaServer) -> None:
    reader, writer = await connect(large_server)
    whole = request(1, b"now never" + PAD * 8)
    writer.write(whole[:len(whole) // 2])
    writer.write_eof()
    assert await closed(reader)
    assert large_server.metrics.connections_closed_on_error == 0
