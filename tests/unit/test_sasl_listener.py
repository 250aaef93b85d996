"""A SASL listener (broker/server.py with broker.listener_security) over real loopback sockets:
the exchanges as a client sees them, byte for byte, with a handler that echoes the principal.

Every server is stopped and every socket closed, whatever happened."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from typing import Any

import pytest

from broker.listener_security import ListenerSecurity
from broker.server import KafkaServer, Later
from common.protocol import messages
from common.protocol.frame import RequestHeader, encode_request_header
from common.protocol.primitives import Chunk
from security.sasl_server import SaslSettings
from security.scram import SCRAM_SHA_512, ScramClient, ScramCredential, ScramMechanism

HOST = "127.0.0.1"
IO_TIMEOUT_S = 5.0
ALICE = ScramCredential.from_password(SCRAM_SHA_512, "alice-secret", salt=b"s" * 32, iterations=4096)


def scram(user: str, mechanism: ScramMechanism) -> ScramCredential | None:
    return ALICE if user == "alice" else None


class EchoPrincipal:
    """Answers any request with the principal it was given."""

    def start(self, header: RequestHeader, body: memoryview, client_host: str = "",
              principal: str = "User:ANONYMOUS") -> list[Chunk] | None | Later[list[Chunk] | None]:
        return [principal.encode()]

    async def handle(self, header: RequestHeader, body: memoryview, client_host: str = "",
                     principal: str = "User:ANONYMOUS") -> list[Chunk] | None:
        return [principal.encode()]


def security(**overrides: Any) -> ListenerSecurity:
    settings = SaslSettings(("PLAIN", "SCRAM-SHA-512"), {"bob": "bob-secret"}, scram,
                            max_reauth_ms=overrides.pop("max_reauth_ms", 0))
    return ListenerSecurity("SASL_PLAINTEXT", "SASL_PLAINTEXT", settings,
                            failed_authentication_delay_ms=overrides.pop("delay_ms", 10),
                            authentication_timeout_ms=overrides.pop("timeout_ms", 2000))


@pytest.fixture
async def server(request: pytest.FixtureRequest) -> AsyncIterator[KafkaServer]:
    overrides = dict(getattr(request, "param", {}))  # indirect parametrization: the listener's settings
    srv = KafkaServer(EchoPrincipal(), host=HOST, port=0, security=security(**overrides))
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


def frame(api_key: int, version: int, correlation: int, body: bytes) -> bytes:
    data = encode_request_header(RequestHeader(api_key, version, correlation, "test")) + body
    return struct.pack(">i", len(data)) + data


def sasl_request(api_key: int, version: int, correlation: int, **fields: Any) -> bytes:
    entity = messages.build(messages.request_type(api_key, version), **fields)
    header = RequestHeader(api_key, version, correlation, "test")
    body = b"".join(bytes(c) for c in messages.encode_request(entity, version))  # type: ignore[arg-type]
    data = encode_request_header(header) + body
    return struct.pack(">i", len(data)) + data


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), IO_TIMEOUT_S))[0]
    return await asyncio.wait_for(reader.readexactly(size), IO_TIMEOUT_S)


async def response(reader: asyncio.StreamReader, api_key: int, version: int) -> Any:
    from common.protocol.frame import strip_response_header
    data = await read_frame(reader)
    return messages.decode_response(api_key, version, strip_response_header(api_key, version, memoryview(data)[4:]))


async def eof(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), IO_TIMEOUT_S) == b""
    except ConnectionResetError:
        return True


async def connect(srv: KafkaServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(HOST, srv.port)


async def handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, mechanism: str,
                    version: int = 1) -> Any:
    writer.write(sasl_request(17, version, 1, mechanism=mechanism))
    return await response(reader, 17, version)


async def authenticate(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, token: bytes,
                       version: int = 2, correlation: int = 2) -> Any:
    writer.write(sasl_request(36, version, correlation, auth_bytes=token))
    return await response(reader, 36, version)


async def test_plain_then_requests_carry_the_principal(server: KafkaServer) -> None:
    reader, writer = await connect(server)
    try:
        answer = await handshake(reader, writer, "PLAIN")
        assert (int(answer.error_code), answer.mechanisms) == (0, ("PLAIN", "SCRAM-SHA-512"))
        assert int((await authenticate(reader, writer, b"\0bob\0bob-secret")).error_code) == 0
        writer.write(frame(3, 1, 9, b""))
        assert (await read_frame(reader))[4:] == b"User:bob"
    finally:
        writer.close()


@pytest.mark.parametrize("token", [b"\0bob\0wrong", b"\0nobody\0x"])
async def test_failed_plain_answers_then_closes(server: KafkaServer, token: bytes) -> None:
    reader, writer = await connect(server)
    try:
        await handshake(reader, writer, "PLAIN")
        answer = await authenticate(reader, writer, token)
        assert int(answer.error_code) == 58
        assert answer.error_message == "Authentication failed: Invalid username or password"
        assert await eof(reader)
    finally:
        writer.close()


async def test_scram_exchange_and_wrong_proof(server: KafkaServer) -> None:
    for password, ok in (("alice-secret", True), ("wrong", False)):
        reader, writer = await connect(server)
        try:
            await handshake(reader, writer, "SCRAM-SHA-512")
            client = ScramClient(SCRAM_SHA_512, "alice", password, "clientnonce")
            first = await authenticate(reader, writer, client.first())
            final = await authenticate(reader, writer, client.final(bytes(first.auth_bytes)), correlation=3)
            if ok:
                assert int(final.error_code) == 0 and client.verify(bytes(final.auth_bytes))
            else:
                assert int(final.error_code) == 58 and await eof(reader)
        finally:
            writer.close()


async def test_v0_handshake_takes_raw_tokens(server: KafkaServer) -> None:
    reader, writer = await connect(server)
    try:
        assert int((await handshake(reader, writer, "PLAIN", version=0)).error_code) == 0
        token = b"\0bob\0bob-secret"
        writer.write(struct.pack(">i", len(token)) + token)
        assert await read_frame(reader) == b""  # PLAIN's empty challenge, as a raw frame
        writer.write(frame(3, 1, 9, b""))
        assert (await read_frame(reader))[4:] == b"User:bob"
    finally:
        writer.close()


async def test_unsupported_mechanism_answers_the_enabled_ones_then_closes(server: KafkaServer) -> None:
    reader, writer = await connect(server)
    try:
        answer = await handshake(reader, writer, "GSSAPI")
        assert (int(answer.error_code), answer.mechanisms) == (33, ("PLAIN", "SCRAM-SHA-512"))
        assert await eof(reader)
    finally:
        writer.close()


@pytest.mark.parametrize("data", [
    frame(3, 1, 1, b""),  # Metadata before authentication
    frame(36, 1, 1, struct.pack(">i", 1) + b"x"),  # SaslAuthenticate before the handshake
    struct.pack(">i", 600 * 1024),  # larger than sasl.server.max.receive.size
    struct.pack(">i", 2) + b"\xff\xff",  # no Kafka header
])
async def test_refused_before_authentication(server: KafkaServer, data: bytes) -> None:
    reader, writer = await connect(server)
    try:
        writer.write(data)
        assert await eof(reader)
    finally:
        writer.close()
    reader, writer = await connect(server)  # the listener carries on
    try:
        assert int((await handshake(reader, writer, "PLAIN")).error_code) == 0
    finally:
        writer.close()


@pytest.mark.parametrize("server", [{"timeout_ms": 200}], indirect=True)
async def test_a_client_that_never_authenticates_is_closed(server: KafkaServer) -> None:
    reader, writer = await connect(server)
    try:
        started = asyncio.get_running_loop().time()
        assert await eof(reader)
        assert asyncio.get_running_loop().time() - started >= 0.15
    finally:
        writer.close()


@pytest.mark.parametrize("server", [{"max_reauth_ms": 300}], indirect=True)
async def test_session_lifetime_and_expiry(server: KafkaServer) -> None:
    reader, writer = await connect(server)
    try:
        await handshake(reader, writer, "PLAIN")
        answer = await authenticate(reader, writer, b"\0bob\0bob-secret", version=1)
        assert messages.milliseconds(answer.session_lifetime) == 300
        await asyncio.sleep(0.35)  # past the session's lifetime, on the server's clock
        writer.write(frame(3, 1, 9, b""))
        assert await eof(reader)
    finally:
        writer.close()


@pytest.mark.parametrize("server", [{"max_reauth_ms": 300}], indirect=True)
async def test_reauthentication_keeps_the_connection(server: KafkaServer) -> None:
    reader, writer = await connect(server)
    try:
        await handshake(reader, writer, "PLAIN")
        await authenticate(reader, writer, b"\0bob\0bob-secret", version=1)
        await handshake(reader, writer, "PLAIN")
        assert int((await authenticate(reader, writer, b"\0bob\0bob-secret", version=1, correlation=5)).error_code) == 0
        writer.write(frame(3, 1, 9, b""))
        assert (await read_frame(reader))[4:] == b"User:bob"
    finally:
        writer.close()
