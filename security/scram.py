"""SASL/SCRAM (RFC 5802, RFC 7677) as Kafka does it, pure: credentials, messages, the server's
exchange and a client for tests and tools.

    credential = ScramCredential.from_password(SCRAM_SHA_512, "alice-secret", salt=s, iterations=4096)
    server = ScramServer(SCRAM_SHA_512, lookup=credentials.get, server_nonce=nonce)
    server_first = server.evaluate(client_first)     # ScramError: the exchange failed
    server_final = server.evaluate(client_final)     # server.username once complete

Kafka's ScramSaslServer in its details: only the gs2 header `n` (no channel binding), an
authorization id must equal the user name, the `tokenauth` extension (delegation tokens, which
tidelog does not have) is refused as Kafka refuses an unknown token id, other extensions are
ignored, a credential of fewer iterations than the mechanism's minimum is refused, the client's
final nonce must end with the server-first nonce (Kafka 3.9's check), and the proof is compared
in constant time. The
nonce is given by the caller (the shell draws it from `secrets`), so the exchange is a function
of its inputs. Error messages name no credential: a client only ever learns "failed".
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)


class ScramError(Exception):
    """The exchange failed; `message` is what the client is told (Kafka's SaslAuthenticate
    error_message), `reason` what the broker logs."""

    def __init__(self, reason: str, message: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.message = message


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    """One of Kafka's ScramMechanism values: its SASL name, hash, and KIP-554 type code."""

    name: str  # "SCRAM-SHA-512"
    hash_name: str  # hashlib's name
    type_code: int  # Kafka's ScramMechanism.type(): 1 SHA-256, 2 SHA-512 (UserScramCredentialRecord)
    min_iterations: int = 4096  # Kafka's ScramMechanism.minIterations (RFC 7677)

    def digest(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()


SCRAM_SHA_256: Final = ScramMechanism("SCRAM-SHA-256", "sha256", 1)
SCRAM_SHA_512: Final = ScramMechanism("SCRAM-SHA-512", "sha512", 2)
MECHANISMS: Final = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
MECHANISMS_BY_TYPE: Final = {m.type_code: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
MAX_ITERATIONS: Final = 16384  # KIP-554: AlterUserScramCredentials refuses more (Kafka's MAX_ITERATIONS)
DEFAULT_ITERATIONS: Final = 4096  # kafka-configs.sh's default for a new credential
SALT_BYTES: Final = 32  # random salt bytes `tidelog users create` draws for a new credential
# Random bytes of a nonce, the broker's (server) or a broker's own login (client); Kafka draws
# 130 bits (ScramFormatter.secureRandomString), 24 bytes is 192
NONCE_BYTES: Final = 24
MAX_SCRAM_MESSAGE_CHARS: Final = 4096  # a client message longer than this is not SCRAM (user names and nonces are short)


def normalize(password: str) -> bytes:
    """Kafka's ScramFormatter.normalize: the password's UTF-8 bytes. Kafka applies no SASLprep,
    and neither do we: a client that does would only differ on non-ASCII passwords."""
    return password.encode("utf-8")


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(Normalize(password), salt, i) of RFC 5802: PBKDF2 with the mechanism's HMAC."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, normalize(password), salt, iterations)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the broker keeps of a password (Kafka's ScramCredential): never the password."""

    mechanism: ScramMechanism
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(cls, mechanism: ScramMechanism, salted: bytes, salt: bytes,
                             iterations: int) -> ScramCredential:
        """KIP-554's upsertion carries the salted password; the controller keeps the keys."""
        client_key = mechanism.hmac(salted, b"Client Key")
        return cls(mechanism, salt, mechanism.digest(client_key), mechanism.hmac(salted, b"Server Key"), iterations)

    @classmethod
    def from_password(cls, mechanism: ScramMechanism, password: str, *, salt: bytes,
                      iterations: int) -> ScramCredential:
        return cls.from_salted_password(mechanism, salted_password(mechanism, password, salt, iterations),
                                        salt, iterations)


# --- messages: Kafka's ScramMessages patterns ------------------------------------------------
_SASLNAME = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"
_PRINTABLE = r"[\x21-\x2B\x2D-\x7E]+"
_VALUE = r"[\x01-\x2B\x2D-\x7F]+"
_BASE64 = r"(?:[a-zA-Z0-9/+]{4})*(?:[a-zA-Z0-9/+]{3}=|[a-zA-Z0-9/+]{2}==)?"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,(?:m={_VALUE},)?"
    rf"(?P<bare>n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS}))")
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS}),p=(?P<proof>{_BASE64})")
TOKEN_AUTH: Final = "tokenauth"  # Kafka's ScramLoginModule.TOKEN_AUTH_CONFIG extension


def username(sasl_name: str) -> str:
    """RFC 5802's saslname decoding (Kafka's ScramFormatter.username): =2C is ',', =3D is '='."""
    return sasl_name.replace("=2C", ",").replace("=3D", "=")


def sasl_name(user: str) -> str:
    return user.replace("=", "=3D").replace(",", "=2C")


def _text(token: bytes, what: str) -> str:
    if len(token) > MAX_SCRAM_MESSAGE_CHARS:
        raise ScramError(f"SCRAM {what} of {len(token)} bytes is longer than {MAX_SCRAM_MESSAGE_CHARS}")
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError(f"SCRAM {what} is not UTF-8") from None


def _extensions(text: str) -> dict[str, str]:
    pairs = (item.partition("=") for item in text.split(",") if item)
    return {key: value for key, _, value in pairs}


class ScramServer:
    """The server side of one SCRAM exchange: two client messages in, two server messages out.

    `lookup(user)` answers the user's credential for this mechanism, None when there is none."""

    def __init__(self, mechanism: ScramMechanism, lookup: Callable[[str], ScramCredential | None],
                 server_nonce: str) -> None:
        self.mechanism, self._lookup, self._server_nonce = mechanism, lookup, server_nonce
        self.username: str | None = None  # set once complete
        self.complete = False
        self._state = "client-first"
        self._credential: ScramCredential | None = None
        self._auth_prefix = ""  # client-first-bare "," server-first
        self._nonce = ""

    def evaluate(self, token: bytes) -> bytes:
        """The server's answer to the client's next message; ScramError ends the exchange."""
        try:
            if self._state == "client-first":
                return self._client_first(_text(token, "client first message"))
            if self._state == "client-final":
                return self._client_final(_text(token, "client final message"))
            raise ScramError(f"unexpected SCRAM message in state {self._state}")
        except ScramError:
            self._state, self._credential = "failed", None
            raise

    def _client_first(self, message: str) -> bytes:
        match = _CLIENT_FIRST.fullmatch(message)
        if match is None:
            raise ScramError("invalid SCRAM client first message format")
        user = username(match["saslname"])
        if TOKEN_AUTH in _extensions(match["extensions"]):  # delegation tokens: tidelog has none
            raise ScramError(f"token authentication failed: invalid token id {user!r}")
        credential = self._lookup(user)
        if credential is None or credential.mechanism != self.mechanism:
            raise ScramError(f"authentication failed: no {self.mechanism.name} credential for user {user!r}")
        authzid = match["authzid"]
        if authzid is not None and username(authzid) != user:
            message_ = "Authentication failed: Client requested an authorization id that is different from username"
            raise ScramError(f"user {user!r} asked for authorization id {authzid!r}", message_)
        if credential.iterations < self.mechanism.min_iterations:
            raise ScramError(f"iterations {credential.iterations} is less than the minimum "
                             f"{self.mechanism.min_iterations} for {self.mechanism.name}")
        self._nonce = match["nonce"] + self._server_nonce
        server_first = f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},i={credential.iterations}"
        self._auth_prefix = f"{match['bare']},{server_first}"
        self._credential, self.username, self._state = credential, user, "client-final"
        return server_first.encode()

    def _client_final(self, message: str) -> bytes:
        match = _CLIENT_FINAL.fullmatch(message)
        if match is None:
            raise ScramError("invalid SCRAM client final message format")
        # Kafka 3.9's check (CVE-2024-56128): the final nonce must end with the server-first nonce.
        # librdkafka before 2.6.1 (kcat's 2.0.2 among them) repeats its client nonce in front of it,
        # which Kafka 3.x accepts and Kafka 4 refuses; the server nonce, the part that defeats a
        # replay, is checked whole either way.
        if not match["nonce"].endswith(self._nonce):
            raise ScramError("invalid client nonce in the final client message")
        credential = self._credential
        assert credential is not None  # set with the state
        auth_message = f"{self._auth_prefix},{match['without_proof']}".encode()
        try:
            proof = base64.b64decode(match["proof"], validate=True)
        except binascii.Error:
            raise ScramError("invalid SCRAM client proof") from None
        signature = self.mechanism.hmac(credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramError("invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(self.mechanism.digest(client_key), credential.stored_key):
            raise ScramError("invalid client credentials")
        server_signature = self.mechanism.hmac(credential.server_key, auth_message)
        self._state, self._credential, self.complete = "complete", None, True
        return b"v=" + base64.b64encode(server_signature)


class ScramClient:
    """The client side (Kafka's ScramSaslClient), for tests, tools and the benchmark."""

    def __init__(self, mechanism: ScramMechanism, user: str, password: str, client_nonce: str,
                 *, extensions: str = "", final_nonce_prefix: str = "") -> None:
        self.mechanism, self.user, self.password = mechanism, user, password
        self._final_nonce_prefix = final_nonce_prefix  # librdkafka < 2.6.1 repeats its client nonce here
        self._bare = f"n={sasl_name(user)},r={client_nonce}{extensions}"
        self._client_nonce = client_nonce
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        fields = dict(item.split("=", 1) for item in text.split(","))
        if not fields["r"].startswith(self._client_nonce):
            raise ScramError("server nonce does not extend the client nonce")
        salted = salted_password(self.mechanism, self.password, base64.b64decode(fields["s"]), int(fields["i"]))
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={self._final_nonce_prefix}{fields['r']}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        client_key = self.mechanism.hmac(salted, b"Client Key")
        signature = self.mechanism.hmac(self.mechanism.digest(client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = self.mechanism.hmac(self.mechanism.hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> bool:
        return server_final == b"v=" + base64.b64encode(self._server_signature)
