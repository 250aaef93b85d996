"""common.broker_connection against a real loopback socket that answers as told: a good answer,
no answer, a cut-off one, an oversized one, a wrong correlation id, a malformed body. Every
failure closes the connection and raises BrokerUnavailable."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterator

import pytest

from common.broker_connection import BrokerConnection, BrokerUnavailable
from common.protocol.api_keys import ApiKey
from common.protocol.primitives import ProtocolError

HEAD = struct.Struct(">ii")  # size, correlation id
TIMEOUT = 2.0


def read_request(conn: socket.socket) -> int:
    """One request read whole; its correlation id."""
    size = struct.unpack(">i", conn.recv(4, socket.MSG_WAITALL))[0]
    body = conn.recv(size, socket.MSG_WAITALL)
    return int(struct.unpack_from(">i", body, 4)[0])


@pytest.fixture
def broker() -> Iterator[Callable[[Callable[[socket.socket], None]], tuple[str, int]]]:
    """A one-connection server on loopback that runs `answer` on the accepted socket."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(TIMEOUT)
    threads: list[threading.Thread] = []

    def start(answer: Callable[[socket.socket], None]) -> tuple[str, int]:
        def serve() -> None:
            conn, _ = server.accept()
            with conn:
                answer(conn)
        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        threads.append(thread)
        return server.getsockname()[:2]

    yield start
    for thread in threads:  # each accepts its connection (already queued) before the server closes
        thread.join(TIMEOUT)
    server.close()


def connect(address: tuple[str, int], max_response_bytes: int = 1024) -> BrokerConnection:
    return BrokerConnection(address, "t", connect_timeout=TIMEOUT, max_response_bytes=max_response_bytes)


def test_a_response_body_arrives_after_its_head(broker) -> None:  # type: ignore[no-untyped-def]
    def answer(conn: socket.socket) -> None:
        for _ in range(2):
            correlation_id = read_request(conn)
            body = b"x" * 5000
            conn.sendall(HEAD.pack(4 + len(body), correlation_id) + body[:10])
            conn.sendall(body[10:])  # split: the reader waits for the rest
    connection = connect(broker(answer), max_response_bytes=10_000)
    assert bytes(connection.request(ApiKey.METADATA, 8, [b""], timeout=TIMEOUT) or b"") == b"x" * 5000
    assert bytes(connection.request(ApiKey.METADATA, 8, [b""], timeout=TIMEOUT) or b"") == b"x" * 5000
    assert connection.decode(lambda raw, version: (len(raw), version), memoryview(b"abc"), 8) == (3, 8)
    connection.close()
    assert connection.closed


def test_no_response_is_read_when_none_is_expected(broker) -> None:  # type: ignore[no-untyped-def]
    seen: list[int] = []
    connection = connect(broker(lambda conn: seen.append(read_request(conn))))
    assert connection.request(ApiKey.PRODUCE, 8, [b""], timeout=TIMEOUT, expect_response=False) is None
    connection.close()


@pytest.mark.parametrize("answer, message", [
    (lambda conn: read_request(conn), "closed the connection"),  # hangs up without answering
    (lambda conn: conn.sendall(HEAD.pack(100, read_request(conn)) + b"short"), "closed the connection"),
    (lambda conn: conn.sendall(HEAD.pack(1 << 20, read_request(conn))), "outside 4..1024"),
    (lambda conn: conn.sendall(HEAD.pack(8, read_request(conn) + 1) + b"body"), "expected"),
])
def test_a_broken_answer_closes_the_connection(broker, answer, message: str) -> None:  # type: ignore[no-untyped-def]
    connection = connect(broker(answer))
    with pytest.raises(BrokerUnavailable, match=message):
        connection.request(ApiKey.FETCH, 11, [b""], timeout=TIMEOUT)
    assert connection.closed
    with pytest.raises(BrokerUnavailable, match="is closed"):
        connection.request(ApiKey.FETCH, 11, [b""], timeout=TIMEOUT)


def test_a_silent_broker_times_out(broker) -> None:  # type: ignore[no-untyped-def]
    done = threading.Event()
    connection = connect(broker(lambda conn: (read_request(conn), done.wait(TIMEOUT))))
    with pytest.raises(BrokerUnavailable, match="timed out"):
        connection.request(ApiKey.FETCH, 11, [b""], timeout=0.2)
    done.set()
    assert connection.closed


def test_a_malformed_body_closes_the_connection(broker) -> None:  # type: ignore[no-untyped-def]
    connection = connect(broker(lambda conn: None))

    def decode(raw: memoryview, version: int) -> None:
        raise ProtocolError("truncated")
    with pytest.raises(BrokerUnavailable, match="malformed response: truncated"):
        connection.decode(decode, memoryview(b""), 11)
    assert connection.closed


def test_nobody_listening_is_unavailable() -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        address = probe.getsockname()[:2]
    with pytest.raises(BrokerUnavailable, match="cannot connect"):
        connect(address)
