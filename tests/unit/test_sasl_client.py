"""security/sasl_client.py: librdkafka's security settings as a ClientSecurity, and the SASL
mechanisms' client tokens checked against the broker's own SASL server (security.sasl_server)."""

from __future__ import annotations

import ssl
from datetime import datetime, timezone

import pytest

from common.client_security import ClientSecurity, SaslRefused, next_token
from security.sasl_client import ClientSecurityError, SaslCredentials, client_security, read_client_properties
from security.scram import SCRAM_SHA_256, ScramCredential, ScramServer
from security.tls import issue, new_ca

NOW = datetime(2026, 11, 29, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def pems(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("pems")
    ca = new_ca("test CA", now=NOW)
    (root / "ca.pem").write_bytes(ca.certificate_pem)
    (root / "client.pem").write_bytes(issue(ca, "client", hosts=[], now=NOW).chain_and_key_pem)
    return {"ca": str(root / "ca.pem"), "client": str(root / "client.pem")}


SASL = {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": "secret"}


def test_plaintext_is_none() -> None:
    assert client_security({}) is None
    assert client_security({"security.protocol": "plaintext", "bootstrap.servers": "x:1"}) is None


@pytest.mark.parametrize("settings, login", [
    ({"security.protocol": "SASL_PLAINTEXT", **SASL}, ("SCRAM-SHA-512", "alice")),
    ({"security.protocol": "sasl_plaintext", "sasl.mechanisms": "plain", "sasl.username": "bob",
      "sasl.password": "p"}, ("PLAIN", "bob")),  # librdkafka's plural name, any case
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config":
      'org.apache.kafka.common.security.plain.PlainLoginModule required username="carol" password="c";'},
     ("PLAIN", "carol")),  # Java's form
])
def test_sasl_settings(settings: dict[str, str], login: tuple[str, str]) -> None:
    security = client_security(settings)
    assert security is not None and security.ssl_context is None and security.sasl is not None
    assert (security.sasl.mechanism, security.sasl.username) == login


def test_tls_settings(pems: dict[str, str]) -> None:
    security = client_security({"security.protocol": "SASL_SSL", "ssl.ca.location": pems["ca"], **SASL})
    assert security is not None and security.ssl_context is not None and security.ssl_context.check_hostname
    assert security.ssl_context.verify_mode == ssl.CERT_REQUIRED
    unchecked = client_security({"security.protocol": "SSL", "ssl.ca.location": pems["ca"],
                                 "ssl.certificate.location": pems["client"], "ssl.key.location": pems["client"],
                                 "ssl.endpoint.identification.algorithm": "none"})
    assert unchecked is not None and unchecked.sasl is None and unchecked.ssl_context is not None
    assert not unchecked.ssl_context.check_hostname


@pytest.mark.parametrize("settings, message", [
    ({"security.protocol": "SASL_WHATEVER"}, "'security.protocol': 'SASL_WHATEVER' is not one of"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.username": "a", "sasl.password": "b"},
     "'sasl.mechanism': GSSAPI is not supported"),  # Kafka's default mechanism
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "a"},
     "'sasl.username' and 'sasl.password' are needed"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config": "nonsense"},
     "'sasl.jaas.config'"),
    ({"security.protocol": "SSL", "ssl.keystore.location": "k.p12"}, "'ssl.keystore.location' not supported"),
    ({"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"}, "'ssl.ca.location': cannot load"),
    ({"security.protocol": "SSL", "ssl.certificate.location": "c.pem"}, "go together"),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "dns"}, "is not https or none"),
])
def test_bad_settings_name_the_setting(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ClientSecurityError, match=message):
        client_security(settings)


@pytest.mark.parametrize("protocol, tls, sasl", [("SSL", False, False), ("PLAINTEXT", True, False),
                                                 ("SASL_SSL", True, False), ("SASL_PLAINTEXT", False, False)])
def test_client_security_is_consistent(protocol: str, tls: bool, sasl: bool) -> None:
    with pytest.raises(ValueError):
        ClientSecurity(protocol, ssl.create_default_context() if tls else None,
                       SaslCredentials("PLAIN", "a", "b") if sasl else None)


def test_plain_token() -> None:
    steps = SaslCredentials("PLAIN", "alice", "secret").steps()
    assert next(steps) == b"\0alice\0secret"
    assert next_token(steps, b"") is None


def test_scram_steps_against_the_broker_server() -> None:
    """The client's tokens log in to tidelog's own ScramServer, and the server's signature checks."""
    credential = ScramCredential.from_password(SCRAM_SHA_256, "secret", salt=b"salt" * 4, iterations=4096)
    server = ScramServer(SCRAM_SHA_256, lambda user: credential if user == "alice" else None, "servernonce")
    steps = SaslCredentials("SCRAM-SHA-256", "alice", "secret").steps()
    final = next_token(steps, server.evaluate(next(steps)))
    assert final is not None
    assert next_token(steps, server.evaluate(final)) is None  # verified, and done


@pytest.mark.parametrize("server_first", [b"garbage", b"r=othernonce,s=c2FsdA==,i=4096", b"\xff"])
def test_malformed_server_first_is_refused(server_first: bytes) -> None:
    steps = SaslCredentials("SCRAM-SHA-512", "alice", "secret").steps()
    next(steps)
    with pytest.raises(SaslRefused, match="malformed SCRAM server-first"):
        next_token(steps, server_first)


def test_forged_server_signature_is_refused() -> None:
    credential = ScramCredential.from_password(SCRAM_SHA_256, "secret", salt=b"salt" * 4, iterations=4096)
    server = ScramServer(SCRAM_SHA_256, lambda user: credential, "servernonce")
    steps = SaslCredentials("SCRAM-SHA-256", "alice", "secret").steps()
    final = next_token(steps, server.evaluate(next(steps)))
    assert final is not None
    server.evaluate(final)
    with pytest.raises(SaslRefused, match="wrong SCRAM server signature"):
        next_token(steps, b"v=AAAA")


def test_credentials_hide_the_password() -> None:
    assert "secret" not in repr(SaslCredentials("PLAIN", "alice", "secret"))


def test_read_client_properties(tmp_path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("# a comment\n! another\n\nsecurity.protocol = SASL_PLAINTEXT\nsasl.password=a=b\nnoequals\n")
    assert read_client_properties(path) == {"security.protocol": "SASL_PLAINTEXT", "sasl.password": "a=b"}
    with pytest.raises(ClientSecurityError, match="cannot read"):
        read_client_properties(tmp_path / "missing.properties")
