"""A blocking connection to one broker's Kafka listener, for tools outside the broker: the CLI's
client (`common.kafka_client`) and the Spark task reader (`spark.fetch_client`).

    connection = BrokerConnection(("127.0.0.4", 9092), "tidelog-cli", connect_timeout=5.0,
                                  max_response_bytes=64 * MIB, security=None)
    raw = connection.request(ApiKey.METADATA, 8, body, timeout=30.0)
    answer = connection.decode(metadata.decode_metadata_response, raw, 8)

One socket, one request in flight, fixed by the caller's API versions. Every wait is bounded
by a socket timeout and every response by a size limit. Whatever goes wrong (refused, reset,
timed out, too large, malformed) closes the socket and raises `BrokerUnavailable`: callers
look the leader up again and retry, as Kafka's clients do.

With `security` (common.client_security) the socket is TLS-wrapped and SASL-authenticated
before it is handed out, within the connect timeout. A refused login raises `SaslRefused`
instead, which is not retriable (Kafka's clients stop on an authentication error too).
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from typing import Any, Final, TypeVar

from common.client_security import (
    SASL_AUTHENTICATE_VERSION,
    SASL_HANDSHAKE_VERSION,
    ClientSecurity,
    SaslLogin,
    SaslRefused,
    authenticate_request,
    check_authenticate,
    check_handshake,
    handshake_request,
    next_token,
)
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol.frame import ClientFraming, strip_response_header
from common.protocol.primitives import Chunk, ProtocolError
from common.units import MIB

RECV_BYTES: Final = 4 * MIB  # one recv at most: a large Fetch answer arrives in a few calls

T = TypeVar("T")


class BrokerUnavailable(ConnectionError):
    """A broker could not be reached or answered something unusable; refresh metadata and retry."""


def shown(address: tuple[str, int]) -> str:
    return f"{address[0]}:{address[1]}"


class BrokerConnection:
    """A connected socket to one broker, with its own correlation ids."""

    def __init__(self, address: tuple[str, int], client_id: str, *, connect_timeout: float,
                 max_response_bytes: int, security: ClientSecurity | None = None) -> None:
        self.address = address
        self._framing = ClientFraming(client_id, max_response_bytes)
        self._sock: socket.socket | None = None
        try:
            sock = socket.create_connection(address, timeout=connect_timeout)
        except OSError as exc:
            raise BrokerUnavailable(f"cannot connect to {shown(address)}: {exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if security is not None and security.ssl_context is not None:
            try:  # the handshake runs here, bounded by the socket's connect timeout
                sock = security.ssl_context.wrap_socket(sock, server_hostname=address[0])
            except (OSError, ssl.SSLError) as exc:  # SSLCertVerificationError included
                sock.close()
                raise BrokerUnavailable(f"TLS handshake with {shown(address)} failed: {exc}") from None
        self._sock = sock
        if security is not None and security.sasl is not None:
            try:
                self._authenticate(security.sasl, connect_timeout)
            except SaslRefused:
                self.close()
                raise

    def _authenticate(self, login: SaslLogin, timeout: float) -> None:
        """SaslHandshake v1 and a SaslAuthenticate v2 per token of the mechanism (Kafka's order)."""
        where = shown(self.address)
        check_handshake(self._sasl_call(ApiKey.SASL_HANDSHAKE, SASL_HANDSHAKE_VERSION,
                                        handshake_request(login.mechanism), timeout), login.mechanism, where)
        steps = login.steps()
        token: bytes | None = next(steps)
        while token is not None:  # bounded: a mechanism sends at most a few tokens, then stops
            answer = self._sasl_call(ApiKey.SASL_AUTHENTICATE, SASL_AUTHENTICATE_VERSION,
                                     authenticate_request(token), timeout)
            token = next_token(steps, check_authenticate(answer, login.username, where))

    def _sasl_call(self, api_key: ApiKey, version: int, body: list[Chunk], timeout: float) -> Any:
        raw = self.request(api_key, version, body, timeout=timeout)
        assert raw is not None
        decoder = messages.response_decoder(api_key)
        return self.decode(lambda view, v: decoder(strip_response_header(api_key, v, view), v), raw, version)

    @property
    def closed(self) -> bool:
        return self._sock is None

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def request(self, api_key: ApiKey, version: int, body: list[Chunk], *, timeout: float,
                expect_response: bool = True) -> memoryview | None:
        """Send one request; its response body (after the correlation id), or None when none is
        expected (Produce with acks=0)."""
        if self._sock is None:
            raise BrokerUnavailable(f"the connection to {shown(self.address)} is closed")
        try:
            self._sock.settimeout(timeout)
            self._sock.sendall(self._framing.request(int(api_key), version, body))
            if not expect_response:
                return None
            return memoryview(self._read(self._framing.body_size(self._read(ClientFraming.HEAD_BYTES))))
        except OSError as exc:  # timeouts included
            self.close()
            raise BrokerUnavailable(f"{api_key.name} to {shown(self.address)} failed: {exc!r}") from None
        except ProtocolError as exc:
            self.close()
            raise BrokerUnavailable(f"{shown(self.address)} answered {api_key.name} wrongly: {exc}") from None

    def decode(self, decode: Callable[[memoryview, int], T], raw: memoryview, version: int) -> T:
        """A response body decoded; a malformed one closes the connection."""
        try:
            return decode(raw, version)
        except ProtocolError as exc:
            self.close()
            raise BrokerUnavailable(f"{shown(self.address)} answered a malformed response: {exc}") from None

    def _read(self, size: int) -> bytearray:
        assert self._sock is not None
        buf = bytearray(size)
        view = memoryview(buf)
        got = 0
        while got < size:  # bounded: each recv waits at most the socket timeout and returns >= 1 byte
            n = self._sock.recv_into(view[got:], min(size - got, RECV_BYTES))
            if not n:
                raise ConnectionResetError("the broker closed the connection")
            got += n
        return buf
