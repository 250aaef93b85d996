"""A client connection to another broker's Kafka listener (the follower's fetcher uses it).

    conn = await KafkaConnection.open("127.0.0.5", 9092, client_id="broker-4-fetcher-5",
                                      timeout_s=30.0)
    response = await conn.request(ApiKey.FETCH, 11, encode_fetch_request(req, 11),
                                  decode_fetch_response)
    await conn.close()

One request at a time, answered in order (the fetcher has nothing to pipeline). Every read
is bounded by the timeout; any failure closes the connection and raises
`BrokerConnectionError`, and the caller opens a new one after its backoff.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from typing import Final, TypeVar

from broker.client_security import INTER_BROKER_SECURITY, ClientSecurity
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol.frame import ClientFraming, strip_response_header
from common.protocol.primitives import Chunk, ProtocolError
from common.units import MIB
from security.scram import MECHANISMS as SCRAM_MECHANISMS
from security.scram import NONCE_BYTES, ScramClient

MAX_RESPONSE_BYTES: Final = 512 * MIB  # far above replica.fetch.response.max.bytes

T = TypeVar("T")


class BrokerConnectionError(ConnectionError):
    """The connection failed, timed out or got an answer it could not read; it is closed."""


class KafkaConnection:
    """A connected socket to one broker, with its own correlation ids."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 address: str, client_id: str, timeout_s: float) -> None:
        self._reader, self._writer = reader, writer
        self.address, self.timeout_s = address, timeout_s
        self._framing = ClientFraming(client_id, MAX_RESPONSE_BYTES)
        self.closed = False

    @classmethod
    async def open(cls, host: str, port: int, *, client_id: str, timeout_s: float,
                   local_host: str | None = None) -> KafkaConnection:
        """Connect (bounded by `timeout_s`) from `local_host` when given (the broker's own address,
        so chaos can cut this broker's links), with the inter-broker listener's TLS and SASL
        (INTER_BROKER_SECURITY); BrokerConnectionError when it cannot."""
        address = f"{host}:{port}"
        security = INTER_BROKER_SECURITY.get()
        context = None if security is None else security.ssl_context
        try:
            async with asyncio.timeout(timeout_s):
                reader, writer = await asyncio.open_connection(
                    host, port, local_addr=None if local_host is None else (local_host, 0),
                    ssl=context, server_hostname=host if context is not None else None)
        except (OSError, TimeoutError) as e:
            raise BrokerConnectionError(f"cannot connect to {address}: {e or type(e).__name__}") from e
        connection = cls(reader, writer, address=address, client_id=client_id, timeout_s=timeout_s)
        if security is not None and security.mechanism is not None:
            await connection._authenticate(security)
        return connection

    async def _authenticate(self, security: ClientSecurity) -> None:
        """SaslHandshake v1 and SaslAuthenticate v2 as a client (PLAIN or SCRAM); on a refusal the
        connection is closed and BrokerConnectionError names the user and Kafka's message."""
        mechanism = str(security.mechanism)
        handshake = await self.request(ApiKey.SASL_HANDSHAKE, 1, messages.encode_request(messages.build(
            messages.request_type(ApiKey.SASL_HANDSHAKE, 1), mechanism=mechanism), 1),
            messages.response_decoder(ApiKey.SASL_HANDSHAKE))
        if int(handshake.error_code):
            self.abort()
            raise BrokerConnectionError(f"{self.address} does not enable SASL mechanism {mechanism} "
                                        f"(it enables {', '.join(handshake.mechanisms)})")

        async def exchange(token: bytes) -> bytes:
            answer = await self.request(ApiKey.SASL_AUTHENTICATE, 2, messages.encode_request(messages.build(
                messages.request_type(ApiKey.SASL_AUTHENTICATE, 2), auth_bytes=token), 2),
                messages.response_decoder(ApiKey.SASL_AUTHENTICATE))
            if int(answer.error_code):
                self.abort()
                raise BrokerConnectionError(f"SASL authentication as {security.username} to {self.address} "
                                            f"failed: {answer.error_message}")
            return bytes(answer.auth_bytes)

        if mechanism == "PLAIN":
            await exchange(f"\0{security.username}\0{security.password}".encode())
            return
        client = ScramClient(SCRAM_MECHANISMS[mechanism], security.username, security.password,
                             secrets.token_urlsafe(NONCE_BYTES))
        final = await exchange(client.final(await exchange(client.first())))
        if not client.verify(final):
            self.abort()
            raise BrokerConnectionError(f"{self.address} answered a wrong SCRAM server signature")

    async def request(self, api_key: ApiKey, version: int, body: list[Chunk],
                      decode: Callable[[memoryview, int], T], *, extra_timeout_s: float = 0.0) -> T:
        """Send one request and return its decoded response (a long poll adds `extra_timeout_s`)."""
        if self.closed:
            raise BrokerConnectionError(f"connection to {self.address} is closed")
        frame = self._framing.request(int(api_key), version, body)
        try:
            async with asyncio.timeout(self.timeout_s + extra_timeout_s):
                self._writer.write(frame)
                await self._writer.drain()
                head = await self._reader.readexactly(ClientFraming.HEAD_BYTES)
                payload = await self._reader.readexactly(self._framing.body_size(head))
            # A flexible version's response header v1 ends in tagged fields, skipped here.
            return decode(strip_response_header(int(api_key), version, memoryview(payload)), version)
        except (OSError, EOFError, TimeoutError, ProtocolError, asyncio.IncompleteReadError) as e:
            self.abort()
            raise BrokerConnectionError(
                f"{api_key.name} v{version} to {self.address} failed: {e or type(e).__name__}") from e
        except BaseException:
            self.abort()  # cancelled mid-request: the stream is out of step now
            raise

    def abort(self) -> None:
        """Close at once, without waiting (cancellation paths)."""
        self.closed = True
        self._writer.close()

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._writer.close()
        try:
            async with asyncio.timeout(1.0):
                await self._writer.wait_closed()
        except (OSError, TimeoutError):
            pass
