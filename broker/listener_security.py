"""A listener's security (Kafka's SecurityProtocol) and each connection's gate in front of the
request handler: SASL authentication before any other request, the session's expiry after.

    security = ListenerSecurity("SASL_PLAINTEXT", "SASL_PLAINTEXT", sasl=SaslSettings(("PLAIN",), users))
    gate = security.gate()                      # per connection; None: nothing to check (PLAINTEXT)
    verdict = gate.frame(frame, now_ms)         # Serve(header, body) | Answer(...) ; ProtocolError

The rules are `security.sasl_server`'s; this module is the shell's half: it parses frames,
encodes the SASL responses (broker.handlers.sasl), draws nonces from `secrets`, and says when
a connection must close. A SaslHandshake v0 client sends its tokens as raw frames (no Kafka
header) and gets raw frames back, as Kafka's SaslServerAuthenticator does for such clients.
"""

from __future__ import annotations

import base64
import secrets
import ssl
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from common.protocol.api_keys import ApiKey
from common.protocol.frame import RequestHeader, parse_request_header
from common.errors import ErrorCode
from common.protocol.messages import build, decode_request, encode, error_code, response_module
from common.protocol.primitives import Chunk, ProtocolError
from common.config_schema import Config, ConfigError, Password, Value
from common.listener_prefix import jaas_value, listener_value
from common.units import KIB
from metadata.image import MetadataImage
from security.authorizer import ANONYMOUS
from security.scram import NONCE_BYTES, ScramCredential, ScramMechanism
from security.sasl_jaas import JaasConfig, JaasError, parse_jaas
from security.sasl_server import SaslAuthenticator, SaslError, SaslSettings, SaslStep, ScramCredentials
from security.ssl_principal import DEFAULT_MAPPER, PrincipalMapper, RulesError

# The listener the request being handled came on (broker.server sets it for each connection's
# tasks): Metadata, FindCoordinator and leader hints answer that listener's addresses, as Kafka
# does. None (no server, tests): the broker's own listener_name. Brokers' requests to each other
# name the inter-broker listener explicitly instead (broker_endpoint's `listener`).
CLIENT_LISTENER: ContextVar[str | None] = ContextVar("client_listener", default=None)


def handshake_response(step: SaslStep, version: int) -> Any:
    """SaslHandshake's answer from one of the authenticator's steps."""
    m = response_module(ApiKey.SASL_HANDSHAKE, version)
    return build(m.SaslHandshakeResponse, error_code=error_code(step.error_code), mechanisms=step.mechanisms)


def authenticate_response(step: SaslStep, version: int) -> Any:
    """SaslAuthenticate's answer from one of the authenticator's steps."""
    m = response_module(ApiKey.SASL_AUTHENTICATE, version)
    return build(m.SaslAuthenticateResponse, error_code=error_code(step.error_code),
                 error_message=step.error_message, auth_bytes=step.auth_bytes,
                 session_lifetime=timedelta(milliseconds=step.session_lifetime_ms))

# Kafka's sasl.server.max.receive.size (an internal broker config): no frame of an
# unauthenticated SASL connection may be larger, whatever socket.request.max.bytes says.
SASL_MAX_RECEIVE_BYTES: Final = 512 * KIB
SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# A raw (handshake v0) token answer is framed without a correlation id: the header stands in
# for it in the server's bookkeeping and is never written.
_RAW_HEADER: Final = RequestHeader(int(ApiKey.SASL_AUTHENTICATE), 0, 0, None)


class AuthenticationFailed(Exception):
    """The connection failed to authenticate: it closes after the answer, with one INFO line."""


@dataclass(frozen=True, slots=True)
class Serve:
    """Hand this request to the request handler, as `principal`."""

    header: RequestHeader
    body: memoryview
    principal: str


@dataclass(frozen=True, slots=True)
class Answer:
    """Answer with `chunks` (already a whole frame when `framed`); then close when `close`
    says why (after the failed-authentication delay when `failed`)."""

    header: RequestHeader
    chunks: list[Chunk]
    framed: bool = False
    close: str | None = None
    failed: bool = False


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """One listener's security protocol and what it needs."""

    name: str  # the listener name (PLAINTEXT, SASL_SSL, INTERNAL, ...)
    protocol: str  # Kafka's SecurityProtocol
    sasl: SaslSettings | None = None  # SASL_PLAINTEXT / SASL_SSL
    ssl_context: ssl.SSLContext | None = None  # SSL / SASL_SSL
    failed_authentication_delay_ms: int = 100  # connection.failed.authentication.delay.ms
    authentication_timeout_ms: int = 600_000  # connections.max.idle.ms bounds an unauthenticated connection
    principal_mapper: PrincipalMapper = DEFAULT_MAPPER  # ssl.principal.mapping.rules (SSL listeners)

    def __post_init__(self) -> None:
        if self.protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"unknown security protocol {self.protocol!r}")
        if self.protocol.startswith("SASL_") != (self.sasl is not None):
            raise ValueError(f"listener {self.name}: SASL settings go with a SASL protocol")
        if self.protocol.endswith("SSL") != (self.ssl_context is not None):
            raise ValueError(f"listener {self.name}: a TLS context goes with an SSL protocol")

    def certificate_principal(self, peercert: dict[str, object] | None) -> str:
        """An SSL listener's principal for a client certificate: `User:` and the subject's name
        through ssl.principal.mapping.rules (ANONYMOUS without a certificate); NoMatchingRule
        when no rule applies (the connection fails authentication, as Kafka's)."""
        name = certificate_name(peercert)
        return ANONYMOUS if name is None else "User:" + self.principal_mapper.name(name)

    def gate(self) -> SaslGate | None:
        """A new connection's gate; None when nothing is checked before requests (no SASL)."""
        return None if self.sasl is None else SaslGate(SaslAuthenticator(self.sasl, _nonce))


def _nonce() -> str:
    return secrets.token_urlsafe(NONCE_BYTES)


class SaslGate:
    """One SASL connection: every frame goes through `frame` (see the module docstring)."""

    def __init__(self, authenticator: SaslAuthenticator) -> None:
        self.auth = authenticator

    @property
    def authenticated(self) -> bool:
        return self.auth.authenticated

    @property
    def principal(self) -> str:
        return self.auth.principal or ANONYMOUS

    def frame(self, frame: bytes, now_ms: int) -> Serve | Answer:
        """What to do with one frame; ProtocolError (the connection closes) when it is not
        allowed here."""
        if self.auth.raw_tokens and not self.auth.authenticated:
            return self._raw_token(frame, now_ms)
        header, body = parse_request_header(frame)
        refusal = self.auth.check_request(header.request_api_key, now_ms)
        if refusal is not None:
            raise ProtocolError(refusal)
        try:
            if header.request_api_key == ApiKey.SASL_HANDSHAKE:
                request = decode_request(ApiKey.SASL_HANDSHAKE, header.request_api_version, body)
                step = self.auth.handshake(request.mechanism, header.request_api_version)
                return self._answer(header, encode(handshake_response(step, header.request_api_version)), step)
            if header.request_api_key == ApiKey.SASL_AUTHENTICATE:
                version = header.request_api_version
                request = decode_request(ApiKey.SASL_AUTHENTICATE, version, body)
                step = self.auth.authenticate(bytes(request.auth_bytes), now_ms, version)
                return self._answer(header, encode(authenticate_response(step, version)), step)
        except SaslError as exc:
            raise ProtocolError(str(exc)) from None
        except KeyError:  # a version kio has no schema for: row_for refused it earlier in the handler
            raise ProtocolError(f"unsupported SASL request version {header.request_api_version}") from None
        return Serve(header, body, self.principal)

    def _raw_token(self, frame: bytes, now_ms: int) -> Answer:
        try:
            step = self.auth.authenticate(frame, now_ms, version=0)
        except SaslError as exc:
            raise ProtocolError(str(exc)) from None
        if step.failed:  # a v0 client gets no error message: the connection just closes
            raise AuthenticationFailed(step.reason)
        size = len(step.auth_bytes).to_bytes(4, "big")
        return Answer(_RAW_HEADER, [size + step.auth_bytes], framed=True)

    def _answer(self, header: RequestHeader, body: bytes, step: SaslStep) -> Answer:
        return Answer(header, [body], close=step.reason if step.close else None, failed=step.failed)


def principal_from_certificate(peercert: dict[str, object] | None) -> str:
    """Kafka's DefaultKafkaPrincipalBuilder for SSL with the DEFAULT mapping rule: `User:` and
    the subject's distinguished name; User:ANONYMOUS without a client certificate."""
    name = certificate_name(peercert)
    return ANONYMOUS if name is None else "User:" + name


def certificate_name(peercert: dict[str, object] | None) -> str | None:
    """A client certificate's subject as X500Principal.getName() writes it (RFC 2253: the last
    RDN first, comma-separated); None without a certificate."""
    if not peercert:
        return None
    subject = peercert.get("subject")
    if not isinstance(subject, tuple) or not subject:
        return None
    short = {"commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O",
             "localityName": "L", "stateOrProvinceName": "ST", "countryName": "C",
             "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID"}
    rdns = []
    for rdn in reversed(subject):
        parts = [f"{short.get(str(key), str(key))}={_escape_dn(str(value))}" for key, value in rdn]
        rdns.append("+".join(parts))
    return ",".join(rdns)


def _escape_dn(value: str) -> str:
    escaped = "".join("\\" + c if c in ',+"\\<>;' else c for c in value)
    if escaped.startswith(("#", " ")):
        escaped = "\\" + escaped
    return escaped[:-1] + "\\ " if escaped.endswith(" ") else escaped


# --- from the broker's config -------------------------------------------------------------------
SSL_CLIENT_AUTH: Final = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def server_ssl_context(config: Config, listener: str = "") -> ssl.SSLContext:
    """The TLS server context of an SSL listener: ssl.keystore.location (PEM: chain and key),
    ssl.truststore.location (PEM CAs for client certificates), ssl.client.auth, each the
    listener's own `listener.name.<listener>.` key when set (Kafka's per-listener SSL configs)."""
    keystore = listener_value(config, listener, "ssl.keystore.location")
    if keystore is None:
        raise ConfigError(f"config 'ssl.keystore.location' must be set for SSL listener {listener or '(any)'}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2  # Kafka's ssl.enabled.protocols: TLSv1.2,TLSv1.3
    password = listener_value(config, listener, "ssl.key.password")
    truststore = listener_value(config, listener, "ssl.truststore.location")
    try:
        context.load_cert_chain(str(keystore), password=password.value if isinstance(password, Password) else None)
        if truststore is not None:
            context.load_verify_locations(cafile=str(truststore))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"the SSL keystore or truststore cannot be loaded: {exc}") from None
    context.verify_mode = SSL_CLIENT_AUTH[str(listener_value(config, listener, "ssl.client.auth"))]
    if context.verify_mode != ssl.CERT_NONE and truststore is None:
        raise ConfigError("config 'ssl.truststore.location' must be set when 'ssl.client.auth' is not none")
    return context


def jaas_of(raw: Value) -> JaasConfig | None:
    """A sasl.jaas.config value read (None when unset); ConfigError naming what is wrong."""
    if raw is None:
        return None
    try:
        return parse_jaas(raw.value if isinstance(raw, Password) else str(raw))
    except JaasError as exc:
        raise ConfigError(str(exc)) from None


def jaas_config(config: Config, listener: str = "", mechanism: str = "PLAIN") -> JaasConfig | None:
    """The JAAS line `mechanism` reads on `listener` (its prefixed key, else sasl.jaas.config)."""
    return jaas_of(jaas_value(config, listener, mechanism))


def listener_security(name: str, protocol: str, config: Config,
                      scram_credentials: ScramCredentials | None) -> ListenerSecurity:
    """One listener's security from the broker's config; ConfigError when it cannot be served."""
    sasl = None
    if protocol.startswith("SASL_"):
        enabled = listener_value(config, name, "sasl.enabled.mechanisms")
        mechanisms = tuple(m.upper() for m in (enabled if isinstance(enabled, tuple) else ()))
        jaas = jaas_config(config, name, "PLAIN")  # PLAIN's users: the listener's PLAIN login module
        reauth = listener_value(config, name, "connections.max.reauth.ms")
        try:
            sasl = SaslSettings(mechanisms, jaas.plain_users if jaas is not None else {}, scram_credentials,
                                max_reauth_ms=int(reauth) if isinstance(reauth, int) else 0)
        except ValueError as exc:
            raise ConfigError(f"config 'sasl.enabled.mechanisms' of listener {name}: {exc}") from None
    context = server_ssl_context(config, name) if protocol.endswith("SSL") else None
    try:
        mapper = PrincipalMapper.parse(str(listener_value(config, name, "ssl.principal.mapping.rules")))
    except RulesError as exc:
        raise ConfigError(f"listener {name}: {exc}") from None
    return ListenerSecurity(name, protocol, sasl, context,
                            failed_authentication_delay_ms=config.get_int("connection.failed.authentication.delay.ms"),
                            authentication_timeout_ms=config.get_int("connections.max.idle.ms"),
                            principal_mapper=mapper)


def scram_credentials_of(image: Callable[[], MetadataImage | None]) -> ScramCredentials:
    """The SCRAM credentials of the broker's current metadata image (UserScramCredential
    records), looked up per exchange so that a credential changed by AlterUserScramCredentials
    applies to the next login."""
    def lookup(user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        current = image()
        record = None if current is None else current.scram.credentials.get((user, mechanism.type_code))
        if record is None:
            return None
        return ScramCredential(mechanism, base64.b64decode(record.salt), base64.b64decode(record.stored_key),
                               base64.b64decode(record.server_key), record.iterations)
    return lookup
