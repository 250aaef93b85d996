"""One connection's SASL authentication, pure: Kafka's SaslServerAuthenticator as a state machine.

    auth = SaslAuthenticator(settings, nonce=lambda: secrets.token_hex(16))
    auth.handshake("SCRAM-SHA-512", version=1)         # -> SaslStep
    step = auth.authenticate(token, now_ms)            # -> SaslStep: answer, and close or not
    auth.check_request(api_key, now_ms)                # None: serve it; else why to close

States (Kafka's SaslState): HANDSHAKE_OR_VERSIONS_REQUEST until a SaslHandshake names an
enabled mechanism; then AUTHENTICATE, where tokens come in SaslAuthenticate requests (handshake
v1+) or as raw frames without a Kafka header (handshake v0, as Kafka 0.10 clients send them);
COMPLETE once the mechanism is done, with the principal `User:<name>`; FAILED after a refusal.
Before COMPLETE only ApiVersions, SaslHandshake and SaslAuthenticate are served (api_table's
`before_authentication`); anything else closes the connection. KIP-368: with
`connections.max.reauth.ms` the session has a lifetime, answered in SaslAuthenticate v1+; the
client re-authenticates with a new SaslHandshake (same mechanism, same principal) and a request
after the session expired closes the connection.

Mechanisms: PLAIN (RFC 4616, Kafka's PlainSaslServer and its messages) against a user table,
and SCRAM-SHA-256/512 (security.scram) against credentials looked up per user.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Final, Protocol

from security.scram import MECHANISMS as SCRAM_MECHANISMS
from security.scram import ScramCredential, ScramError, ScramMechanism, ScramServer

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)


PLAIN: Final = "PLAIN"
SUPPORTED_MECHANISMS: Final = (PLAIN, *SCRAM_MECHANISMS)
# Kafka's error codes, as ints: this core does not import the broker's enum
NONE: Final = 0
UNSUPPORTED_SASL_MECHANISM: Final = 33
ILLEGAL_SASL_STATE: Final = 34
SASL_AUTHENTICATION_FAILED: Final = 58
# API keys this machine answers or lets through before authentication (api_table's rows)
API_VERSIONS: Final = 18
SASL_HANDSHAKE: Final = 17
SASL_AUTHENTICATE: Final = 36
MAX_PLAIN_TOKEN_BYTES: Final = 4096  # authzid, user and password: no real PLAIN token is longer


class SaslState(Enum):
    HANDSHAKE_OR_VERSIONS_REQUEST = "handshake-or-versions"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"
    REAUTHENTICATE = "reauthenticate"  # COMPLETE, with a new exchange under way (KIP-368)
    FAILED = "failed"


class ScramCredentials(Protocol):
    def __call__(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None: ...


@dataclass(frozen=True, slots=True)
class SaslSettings:
    """A SASL listener's settings: what it enables and where credentials come from."""

    enabled_mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str] = field(default_factory=dict)  # user -> password (JAAS user_<name>)
    scram_credentials: ScramCredentials | None = None  # the metadata image's credentials
    max_reauth_ms: int = 0  # connections.max.reauth.ms; 0: sessions never expire

    def __post_init__(self) -> None:
        unknown = [m for m in self.enabled_mechanisms if m not in SUPPORTED_MECHANISMS]
        if unknown or not self.enabled_mechanisms:
            raise ValueError(f"SASL mechanisms {unknown or '(none)'} are not supported; "
                             f"tidelog supports {', '.join(SUPPORTED_MECHANISMS)}")


@dataclass(frozen=True, slots=True)
class SaslStep:
    """The answer to one SASL request: the fields of the response, and whether the connection
    then closes (after Kafka's failed-authentication delay when `failed`)."""

    error_code: int = NONE
    error_message: str | None = None
    auth_bytes: bytes = b""
    session_lifetime_ms: int = 0
    mechanisms: tuple[str, ...] = ()
    close: bool = False
    failed: bool = False  # an authentication failure: answered after the delay, then closed
    reason: str = ""  # the log line's reason when closing


class SaslError(Exception):
    """A request the machine cannot take in its state: the connection closes (no answer)."""


class _Mechanism(Protocol):
    complete: bool
    username: str | None

    def evaluate(self, token: bytes) -> bytes: ...


class _PlainServer:
    """Kafka's PlainSaslServer: one message `authzid NUL authcid NUL passwd`."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.complete = False
        self.username: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        if len(token) > MAX_PLAIN_TOKEN_BYTES:
            raise ScramError(f"SASL/PLAIN token of {len(token)} bytes is longer than {MAX_PLAIN_TOKEN_BYTES}")
        try:
            tokens = token.decode("utf-8").split("\x00")
        except UnicodeDecodeError:
            raise ScramError("SASL/PLAIN token is not UTF-8") from None
        if len(tokens) != 3:
            raise ScramError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
        authzid, user, password = tokens
        if not user:
            raise ScramError("Authentication failed: username not specified")
        if not password:
            raise ScramError("Authentication failed: password not specified")
        expected = self._users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise ScramError(f"invalid password for user {user!r}" if expected is not None
                             else f"unknown user {user!r}",
                             "Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            message = "Authentication failed: Client requested an authorization id that is different from username"
            raise ScramError(f"user {user!r} asked for authorization id {authzid!r}", message)
        self.complete, self.username = True, user
        return b""


class SaslAuthenticator:
    """One connection's authentication state (see the module docstring)."""

    def __init__(self, settings: SaslSettings, nonce: Callable[[], str]) -> None:
        self.settings, self._nonce = settings, nonce
        self.state = SaslState.HANDSHAKE_OR_VERSIONS_REQUEST
        self.raw_tokens = False  # handshake v0: the tokens come as raw frames
        self.principal: str | None = None  # "User:<name>" once authenticated
        self.mechanism: str | None = None
        self.session_expires_ms: int | None = None  # KIP-368; None: never
        self._server: _Mechanism | None = None

    @property
    def authenticated(self) -> bool:
        return self.state in (SaslState.COMPLETE, SaslState.REAUTHENTICATE)

    def check_request(self, api_key: int, now_ms: int) -> str | None:
        """None when a request of `api_key` may be served now; else why the connection closes."""
        if self.authenticated:
            if api_key == SASL_HANDSHAKE or (api_key == SASL_AUTHENTICATE and self.state is SaslState.REAUTHENTICATE):
                return None
            if self.session_expires_ms is not None and now_ms >= self.session_expires_ms:
                return (f"the SASL session of {self.principal} expired {now_ms - self.session_expires_ms} ms ago "
                        f"without re-authentication (connections.max.reauth.ms)")
            return None
        if self.state is SaslState.HANDSHAKE_OR_VERSIONS_REQUEST and api_key in (API_VERSIONS, SASL_HANDSHAKE):
            return None
        if self.state is SaslState.AUTHENTICATE and api_key == SASL_AUTHENTICATE and not self.raw_tokens:
            return None
        return f"unexpected Kafka request of API key {api_key} during SASL authentication (state {self.state.value})"

    def handshake(self, mechanism: str, version: int) -> SaslStep:
        enabled = self.settings.enabled_mechanisms
        reauth = self.state is SaslState.COMPLETE
        if self.state is not SaslState.HANDSHAKE_OR_VERSIONS_REQUEST and not reauth:
            raise SaslError(f"SaslHandshake in SASL state {self.state.value}")
        if mechanism not in enabled or (reauth and mechanism != self.mechanism):
            self.state = SaslState.FAILED
            why = (f"SASL mechanism {mechanism!r} requested for re-authentication of {self.mechanism}"
                   if reauth and mechanism in enabled else f"unsupported SASL mechanism {mechanism!r}")
            return SaslStep(UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled, close=True, reason=why)
        if reauth and version == 0:
            raise SaslError("re-authentication needs SaslHandshake v1 or later")
        self.mechanism, self.raw_tokens = mechanism, version == 0
        self._server = self._new_server(mechanism)
        self.state = SaslState.REAUTHENTICATE if reauth else SaslState.AUTHENTICATE
        return SaslStep(mechanisms=enabled)

    def _new_server(self, mechanism: str) -> _Mechanism:
        if mechanism == PLAIN:
            return _PlainServer(self.settings.plain_users)
        scram = SCRAM_MECHANISMS[mechanism]
        credentials = self.settings.scram_credentials

        def lookup(user: str) -> ScramCredential | None:
            return None if credentials is None else credentials(user, scram)
        return ScramServer(scram, lookup, self._nonce())

    def authenticate(self, token: bytes, now_ms: int, version: int = 1) -> SaslStep:
        """One token of the exchange; the step to answer (a failure: SASL_AUTHENTICATION_FAILED,
        then the connection closes)."""
        server = self._server
        if self.state not in (SaslState.AUTHENTICATE, SaslState.REAUTHENTICATE) or server is None:
            raise SaslError(f"SaslAuthenticate in SASL state {self.state.value}")
        try:
            challenge = server.evaluate(token)
        except ScramError as exc:
            self.state, self._server = SaslState.FAILED, None
            message = exc.message or (f"Authentication failed during authentication due to invalid "
                                      f"credentials with SASL mechanism {self.mechanism}")
            return SaslStep(SASL_AUTHENTICATION_FAILED, message, close=True, failed=True, reason=exc.reason)
        if not server.complete:
            return SaslStep(auth_bytes=challenge)
        principal = f"User:{server.username}"
        if self.state is SaslState.REAUTHENTICATE and principal != self.principal:
            self.state, self._server = SaslState.FAILED, None
            message = f"Cannot change principals during re-authentication from {self.principal}: {principal}"
            return SaslStep(SASL_AUTHENTICATION_FAILED, message, close=True, failed=True, reason=message)
        self.principal, self.state, self._server = principal, SaslState.COMPLETE, None
        lifetime = self.settings.max_reauth_ms
        # KIP-368: only a v1+ client learns the lifetime, so only its session expires
        self.session_expires_ms = now_ms + lifetime if lifetime > 0 and version >= 1 and not self.raw_tokens else None
        return SaslStep(auth_bytes=challenge,
                        session_lifetime_ms=lifetime if self.session_expires_ms is not None else 0)
