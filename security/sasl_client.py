"""A Kafka client's security settings as librdkafka names them, for tidelog's own clients (the
CLI's, chaos', the Spark sink's commit log and EndTxn), and the SASL mechanisms' client side.

    security = client_security({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                "sasl.username": "alice", "sasl.password": "...",
                                "ssl.ca.location": "ca.pem"})     # None for PLAINTEXT
    KafkaClient(bootstrap, security=security)

The settings are the ones `tidelog up --security` prints and writes to `client.properties`, and
the ones Spark's `kafka.*` options become (spark.kafka_security): security.protocol,
sasl.mechanism (librdkafka's sasl.mechanisms too), sasl.username, sasl.password (or Java's
sasl.jaas.config), ssl.ca.location (or ssl.ca.pem), ssl.certificate.location, ssl.key.location,
ssl.key.password, ssl.endpoint.identification.algorithm (https, the default since librdkafka 2.0
and Kafka 2.0, checks the broker's name against its certificate; none turns that off).
Another ssl.* / sasl.* setting is refused by name rather than ignored: a client that silently
skipped, say, a keystore would fail later with a message about something else.
"""

from __future__ import annotations

import secrets
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from common.client_security import SECURITY_PROTOCOLS, ClientSecurity, SaslRefused, SaslSteps
from security.sasl_jaas import JaasError, parse_jaas
from security.sasl_server import PLAIN, SUPPORTED_MECHANISMS
from security.scram import MECHANISMS as SCRAM_MECHANISMS
from security.scram import NONCE_BYTES, ScramClient, ScramError

__all__ = ["ClientSecurityError", "SaslCredentials", "client_security", "read_client_properties"]

DEFAULT_MECHANISM: Final = "GSSAPI"  # Java's and librdkafka's default, which tidelog does not serve
ENDPOINT_CHECKS: Final = {"https": True, "none": False, "": False}  # Java turns the check off with ""
KNOWN_SETTINGS: Final = frozenset({
    "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password", "sasl.jaas.config",
    "ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
})


class ClientSecurityError(ValueError):
    """Security settings this client cannot use; the message names the setting."""


@dataclass(frozen=True, slots=True)
class SaslCredentials:
    """A SASL login (common.client_security.SaslLogin): PLAIN or SCRAM-SHA-256/512."""

    mechanism: str
    username: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if self.mechanism not in SUPPORTED_MECHANISMS:
            raise ClientSecurityError(f"setting 'sasl.mechanism': {self.mechanism} is not supported; tidelog "
                                      f"supports {', '.join(SUPPORTED_MECHANISMS)}")

    def steps(self) -> SaslSteps:
        """PLAIN's one token (RFC 4616: no authorization id), or SCRAM's two (RFC 5802) and the
        check of the server's signature, as Kafka's PlainSaslClient / ScramSaslClient send them."""
        if self.mechanism == PLAIN:
            yield f"\0{self.username}\0{self.password}".encode()
            return
        client = ScramClient(SCRAM_MECHANISMS[self.mechanism], self.username, self.password,
                             secrets.token_urlsafe(NONCE_BYTES))
        server_first = yield client.first()
        try:
            client_final = client.final(server_first)
        except (ScramError, ValueError, KeyError, UnicodeDecodeError) as exc:  # binascii.Error is a ValueError
            raise SaslRefused(f"the broker answered a malformed SCRAM server-first message: {exc!r}") from None
        server_final = yield client_final
        if not client.verify(server_final):  # a broker that does not know the password: not ours
            raise SaslRefused("the broker answered a wrong SCRAM server signature")


def client_security(settings: Mapping[str, str]) -> ClientSecurity | None:
    """The ClientSecurity the settings describe, None for PLAINTEXT; ClientSecurityError naming
    the setting when they are incomplete, unknown, or name a file that cannot be used."""
    protocol = settings.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ClientSecurityError(f"setting 'security.protocol': {protocol!r} is not one of "
                                  f"{', '.join(SECURITY_PROTOCOLS)}")
    unknown = sorted(k for k in settings if k.startswith(("ssl.", "sasl.")) and k not in KNOWN_SETTINGS)
    if unknown:
        raise ClientSecurityError(f"setting(s) {', '.join(map(repr, unknown))} not supported by tidelog's own "
                                  f"client (it takes {', '.join(sorted(KNOWN_SETTINGS))})")
    if protocol == "PLAINTEXT":
        return None
    context = _tls(settings) if protocol.endswith("SSL") else None
    login = _sasl(settings) if protocol.startswith("SASL_") else None
    return ClientSecurity(protocol, context, login)


def _tls(settings: Mapping[str, str]) -> ssl.SSLContext:
    check = settings.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    if check not in ENDPOINT_CHECKS:
        raise ClientSecurityError(f"setting 'ssl.endpoint.identification.algorithm': {check!r} is not https "
                                  f"or none")
    ca, pem = settings.get("ssl.ca.location"), settings.get("ssl.ca.pem")
    if ca is not None and pem is not None:
        raise ClientSecurityError("settings 'ssl.ca.location' and 'ssl.ca.pem' both name the CA: give one")
    try:  # no CA at all: the system's trust store, as librdkafka does
        context = ssl.create_default_context(cafile=ca, cadata=pem)
    except (OSError, ssl.SSLError) as exc:
        which = "ssl.ca.pem" if pem is not None else "ssl.ca.location"
        raise ClientSecurityError(f"setting '{which}': cannot load {ca or 'the PEM text'}: {exc}") from None
    context.check_hostname = ENDPOINT_CHECKS[check]
    certificate, key = settings.get("ssl.certificate.location"), settings.get("ssl.key.location")
    if (certificate is None) != (key is None):
        raise ClientSecurityError("settings 'ssl.certificate.location' and 'ssl.key.location' go together "
                                  "(the client certificate and its private key)")
    if certificate is not None:
        try:
            context.load_cert_chain(certificate, key, password=settings.get("ssl.key.password"))
        except (OSError, ssl.SSLError) as exc:
            raise ClientSecurityError(f"settings 'ssl.certificate.location' / 'ssl.key.location': cannot load "
                                      f"{certificate} with {key}: {exc}") from None
    return context


def _sasl(settings: Mapping[str, str]) -> SaslCredentials:
    mechanism = settings.get("sasl.mechanism", settings.get("sasl.mechanisms", DEFAULT_MECHANISM)).strip().upper()
    username, password = settings.get("sasl.username"), settings.get("sasl.password")
    if "sasl.jaas.config" in settings:  # Java's form: the login module's username and password
        try:
            credentials = parse_jaas(settings["sasl.jaas.config"]).credentials
        except JaasError as exc:
            raise ClientSecurityError(f"setting 'sasl.jaas.config': {exc}") from None
        if credentials is None or username is not None or password is not None:
            raise ClientSecurityError("setting 'sasl.jaas.config' must name a username and password, and "
                                      "'sasl.username' / 'sasl.password' must then be left out")
        username, password = credentials
    if username is None or password is None:
        raise ClientSecurityError("settings 'sasl.username' and 'sasl.password' are needed for SASL")
    return SaslCredentials(mechanism, username, password)


def read_client_properties(path: Path) -> dict[str, str]:
    """A client properties file (`key=value` lines; `#` and `!` comments), as Kafka's tools take
    with --command-config and `tidelog up --security` writes (client.properties);
    ClientSecurityError when it cannot be read."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ClientSecurityError(f"cannot read {path}: {exc}") from None
    lines = (line.strip() for line in text.splitlines())
    return {key.strip(): value.strip() for key, sep, value in
            (line.partition("=") for line in lines if line and not line.startswith(("#", "!"))) if sep}
