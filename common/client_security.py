"""A Kafka client's side of a listener's security protocol, and the SASL exchange as Kafka's
clients send it, for both of tidelog's own clients: the blocking one of the CLI, chaos and Spark
(`common.broker_connection`) and the broker's asyncio one to other brokers
(`broker.replication.kafka_connection`).

    security = ClientSecurity("SASL_SSL", ssl_context, login)   # security.sasl_client builds these
    body = handshake_request(login.mechanism)                   # SaslHandshake v1
    check_handshake(answer, login.mechanism, "host:9094")       # SaslRefused unless enabled
    steps = login.steps()                                       # the mechanism's tokens
    token = next(steps)                                         # SaslAuthenticate v2 per token:
    token = steps.send(check_authenticate(answer, login.username, "host:9094"))  # StopIteration: done

The mechanism's tokens come from a `SaslLogin` (PLAIN, SCRAM: `security.sasl_client`), so this
package, which imports no other, drives the exchange without knowing SCRAM. Nothing here does I/O:
each client sends the requests over its own socket.
"""

from __future__ import annotations

import ssl
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, Final, Protocol

from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.protocol.primitives import Chunk

# What Java's and librdkafka's clients send since Kafka 1.0 (KIP-152): SaslHandshake v1, then the
# mechanism's tokens framed as SaslAuthenticate requests (v2: flexible, with a session lifetime).
SASL_HANDSHAKE_VERSION: Final = 1
SASL_AUTHENTICATE_VERSION: Final = 2
SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

# The client's tokens: each `send` takes the broker's answer to the last one; StopIteration when
# the mechanism is done (a SCRAM client checks the server's signature before it stops).
SaslSteps = Generator[bytes, bytes, None]


class SaslLogin(Protocol):
    """A SASL mechanism's client with its credentials."""

    @property
    def mechanism(self) -> str: ...

    @property
    def username(self) -> str: ...

    def steps(self) -> SaslSteps: ...


class SaslRefused(Exception):
    """The broker refused the login (wrong credentials, mechanism not enabled) or proved itself
    wrongly: not retriable, as Kafka's SaslAuthenticationException (retrying cannot help)."""


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """A client's side of a listener's security protocol: TLS when `ssl_context` is set (its
    check_hostname is ssl.endpoint.identification.algorithm), SASL when `sasl` is."""

    protocol: str
    ssl_context: ssl.SSLContext | None = None
    sasl: SaslLogin | None = None

    def __post_init__(self) -> None:
        if self.protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"security.protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, "
                             f"got {self.protocol!r}")
        if (self.ssl_context is not None) != self.protocol.endswith("SSL"):
            raise ValueError(f"{self.protocol} {'needs' if self.ssl_context is None else 'takes no'} TLS context")
        if (self.sasl is not None) != self.protocol.startswith("SASL_"):
            raise ValueError(f"{self.protocol} {'needs' if self.sasl is None else 'takes no'} SASL login")


def handshake_request(mechanism: str) -> list[Chunk]:
    """SaslHandshake v1 naming the mechanism."""
    return messages.encode_request(messages.build(messages.request_type(
        ApiKey.SASL_HANDSHAKE, SASL_HANDSHAKE_VERSION), mechanism=mechanism), SASL_HANDSHAKE_VERSION)


def check_handshake(answer: Any, mechanism: str, address: str) -> None:
    """SaslRefused unless the broker enables `mechanism` (its answer lists the ones it does)."""
    if int(answer.error_code):
        raise SaslRefused(f"{address} does not enable SASL mechanism {mechanism} "
                          f"(it enables {', '.join(answer.mechanisms) or 'none'})")


def authenticate_request(token: bytes) -> list[Chunk]:
    """One of the mechanism's tokens as SaslAuthenticate v2."""
    return messages.encode_request(messages.build(messages.request_type(
        ApiKey.SASL_AUTHENTICATE, SASL_AUTHENTICATE_VERSION), auth_bytes=token), SASL_AUTHENTICATE_VERSION)


def check_authenticate(answer: Any, username: str, address: str) -> bytes:
    """The broker's token; SaslRefused with Kafka's message when it refused the login."""
    if int(answer.error_code):
        raise SaslRefused(f"SASL authentication as {username} to {address} failed: {answer.error_message}")
    return bytes(answer.auth_bytes)


def next_token(steps: SaslSteps, answer: bytes) -> bytes | None:
    """The token after the broker's `answer`, None when the mechanism is done; the mechanism
    raises SaslRefused for a malformed or forged answer (a SCRAM signature that does not verify)."""
    try:
        return steps.send(answer)
    except StopIteration:
        return None
