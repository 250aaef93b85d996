"""SASL and TLS listeners (broker/server.py with broker.listener_security) over real loopback
sockets: the exchanges as a client sees them, byte for byte, with a handler that echoes the
principal (certificates from security.tls's throwaway CA).

Every server is stopped and every socket closed, whatever happened."""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import struct
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from broker.listener_security import ListenerSecurity, listener_security
from broker.log.segment import FileSlice
from broker.server import COALESCE_BYTES, KafkaServer, Later
from common.protocol import messages
from common.protocol.frame import RequestHeader, encode_request_header
from common.protocol.primitives import Chunk
from security.sasl_server import SaslSettings
from security.scram import SCRAM_SHA_512, ScramClient, ScramCredential, ScramMechanism
from security.tls import issue, new_ca

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


# --- TLS: SSL (principal from the client certificate) and SASL_SSL ------------------------------

NOW = datetime.now(timezone.utc)
CA = new_ca("test CA", now=NOW)
BROKER_CERT = issue(CA, "broker", hosts=[HOST], now=NOW)
ALICE_CERT = issue(CA, "alice", hosts=[], now=NOW, organizational_unit="eng")


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    files = {"keystore": BROKER_CERT.chain_and_key_pem, "ca": CA.certificate_pem,
             "client": ALICE_CERT.chain_and_key_pem}
    paths = {}
    for name, data in files.items():
        paths[name] = tmp_path / f"{name}.pem"
        paths[name].write_bytes(data)
    return paths


def tls_config(pki: dict[str, Path], client_auth: str) -> Any:
    from common.config import parse_config
    return parse_config({"node.id": "1", "process.roles": "broker", "ssl.keystore.location": str(pki["keystore"]),
                         "ssl.truststore.location": str(pki["ca"]), "ssl.client.auth": client_auth,
                         "sasl.enabled.mechanisms": "PLAIN",
                         "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                             'user_bob="bob-secret";'})


def client_context(pki: dict[str, Path], *, certificate: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    if certificate:
        context.load_cert_chain(str(pki["client"]))
    return context


@pytest.mark.parametrize("client_auth, certificate, principal", [
    ("required", True, "User:CN=alice,OU=eng"),  # Kafka's DefaultKafkaPrincipalBuilder: the subject, RFC 2253
    ("requested", False, "User:ANONYMOUS"),
    ("none", True, "User:ANONYMOUS"),  # a certificate nobody asked for is not looked at
])
async def test_ssl_principal_from_the_client_certificate(pki: dict[str, Path], client_auth: str,
                                                         certificate: bool, principal: str) -> None:
    security = listener_security("SSL", "SSL", tls_config(pki, client_auth), None)
    srv = KafkaServer(EchoPrincipal(), host=HOST, port=0, security=security)
    await srv.start()
    try:
        reader, writer = await asyncio.open_connection(HOST, srv.port, ssl=client_context(pki, certificate=certificate))
        try:
            writer.write(frame(3, 1, 9, b""))
            assert (await read_frame(reader))[4:] == principal.encode()
        finally:
            writer.close()
    finally:
        await srv.stop()


async def test_ssl_required_refuses_a_client_without_certificate(pki: dict[str, Path]) -> None:
    srv = KafkaServer(EchoPrincipal(), host=HOST, port=0,
                      security=listener_security("SSL", "SSL", tls_config(pki, "required"), None))
    await srv.start()
    try:
        with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
            reader, writer = await asyncio.open_connection(HOST, srv.port, ssl=client_context(pki, certificate=False))
            try:
                writer.write(frame(3, 1, 9, b""))
                await read_frame(reader)
            finally:
                writer.close()
    finally:
        await srv.stop()


async def test_sasl_ssl(pki: dict[str, Path]) -> None:
    srv = KafkaServer(EchoPrincipal(), host=HOST, port=0,
                      security=listener_security("SASL_SSL", "SASL_SSL", tls_config(pki, "none"), None))
    await srv.start()
    try:
        reader, writer = await asyncio.open_connection(HOST, srv.port, ssl=client_context(pki, certificate=False))
        try:
            await handshake(reader, writer, "PLAIN")
            assert int((await authenticate(reader, writer, b"\0bob\0bob-secret")).error_code) == 0
            writer.write(frame(3, 1, 9, b""))
            assert (await read_frame(reader))[4:] == b"User:bob"
        finally:
            writer.close()
    finally:
        await srv.stop()


async def test_a_peer_that_hangs_up_before_the_tls_handshake_is_not_logged_as_a_failure(
        pki: dict[str, Path], caplog: pytest.LogCaptureFixture) -> None:
    # the controllers' listener watch connects to a broker's listener and closes it unused
    caplog.set_level(logging.DEBUG, logger="broker.server")
    srv = KafkaServer(EchoPrincipal(), host=HOST, port=0,
                      security=listener_security("SASL_SSL", "SASL_SSL", tls_config(pki, "none"), None))
    await srv.start()
    try:
        _, writer = await asyncio.open_connection(HOST, srv.port)
        writer.close()
        await writer.wait_closed()
        for _ in range(250):  # bounded: 5 s for the server to see the hang-up
            if any("TLS handshake with" in r.getMessage() for r in caplog.records):
                break
            await asyncio.sleep(0.02)
        lines = [r for r in caplog.records if "TLS handshake with" in r.getMessage()]
        assert [r.levelno for r in lines] == [logging.DEBUG], [r.getMessage() for r in lines]
        reader, writer = await asyncio.open_connection(HOST, srv.port, ssl=client_context(pki, certificate=False))
        try:  # the listener carries on
            assert int((await handshake(reader, writer, "PLAIN")).error_code) == 0
        finally:
            writer.close()
    finally:
        await srv.stop()


async def test_tls_garbage_handshake_closes_one_connection(pki: dict[str, Path],
                                                           caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="broker.server")
    srv = KafkaServer(EchoPrincipal(), host=HOST, port=0,
                      security=listener_security("SASL_SSL", "SASL_SSL", tls_config(pki, "none"), None))
    await srv.start()
    try:
        reader, writer = await asyncio.open_connection(HOST, srv.port)  # no TLS: a Kafka frame instead
        try:
            writer.write(sasl_request(17, 1, 1, mechanism="PLAIN"))
            assert await eof(reader)
        finally:
            writer.close()
        lines = [r.getMessage() for r in caplog.records if "TLS handshake with" in r.getMessage()]
        assert len(lines) == 1 and "failed" in lines[0], lines  # one line for the one connection
        reader, writer = await asyncio.open_connection(HOST, srv.port, ssl=client_context(pki, certificate=False))
        try:  # the listener carries on
            assert int((await handshake(reader, writer, "PLAIN")).error_code) == 0
        finally:
            writer.close()
    finally:
        await srv.stop()


def test_a_tls_listener_without_keystore_is_a_config_error() -> None:
    from common.config import parse_config
    from common.config_schema import ConfigError
    with pytest.raises(ConfigError, match="ssl.keystore.location"):
        listener_security("SSL", "SSL", parse_config({"node.id": "1", "process.roles": "broker"}), None)


class SliceHandler:
    """Answers any request with b"F" and a segment slice larger than the coalescing size."""

    def __init__(self, fd: int, length: int) -> None:
        self.fd, self.length = fd, length

    def start(self, header: RequestHeader, body: memoryview, client_host: str = "") -> list[Chunk]:
        return [b"F", FileSlice(self.fd, 0, self.length)]

    async def handle(self, header: RequestHeader, body: memoryview, client_host: str = "") -> list[Chunk]:
        return self.start(header, body, client_host)


async def test_a_large_record_slice_goes_through_tls(pki: dict[str, Path], tmp_path: Path) -> None:
    """sendfile would write plaintext under TLS: a slice above COALESCE_BYTES must arrive intact."""
    payload = bytes(range(256)) * (3 * COALESCE_BYTES // 256)
    (tmp_path / "segment").write_bytes(payload)
    fd = os.open(tmp_path / "segment", os.O_RDONLY)
    srv = KafkaServer(SliceHandler(fd, len(payload)), host=HOST, port=0,
                      security=listener_security("SSL", "SSL", tls_config(pki, "none"), None))
    await srv.start()
    try:
        reader, writer = await asyncio.open_connection(HOST, srv.port, ssl=client_context(pki, certificate=False))
        try:
            writer.write(frame(1, 4, 9, b""))
            assert (await read_frame(reader))[4:] == b"F" + payload
        finally:
            writer.close()
    finally:
        await srv.stop()
        os.close(fd)
