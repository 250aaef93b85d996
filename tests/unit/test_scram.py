"""security.scram: RFC 7677's SCRAM-SHA-256 example byte for byte, Kafka's refusals, and the
server against our client for both mechanisms."""

from __future__ import annotations

import base64

import pytest

from security.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramClient,
    ScramCredential,
    ScramError,
    ScramMechanism,
    ScramServer,
    sasl_name,
    username,
)

# RFC 7677 section 3
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CREDENTIAL = ScramCredential.from_password(SCRAM_SHA_256, "pencil", salt=RFC_SALT, iterations=4096)
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_server(credential: ScramCredential | None = RFC_CREDENTIAL) -> ScramServer:
    return ScramServer(SCRAM_SHA_256, {"user": credential}.get, RFC_SERVER_NONCE)


def test_rfc7677_exchange() -> None:
    server = rfc_server()
    assert server.evaluate(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert server.evaluate(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete and server.username == "user"


def test_rfc7677_client() -> None:
    client = ScramClient(SCRAM_SHA_256, "user", "pencil", "rOprNGfwEbeRWgbNEkqO")
    assert client.first() == RFC_CLIENT_FIRST
    assert client.final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    assert client.verify(RFC_SERVER_FINAL)


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
@pytest.mark.parametrize("user", ["alice", "a=b,c", "~x.y@z"])
def test_our_client_against_our_server(mechanism: ScramMechanism, user: str) -> None:
    credential = ScramCredential.from_password(mechanism, "secret", salt=b"salt" * 8, iterations=4096)
    server = ScramServer(mechanism, {user: credential}.get, "servernonce")
    client = ScramClient(mechanism, user, "secret", "clientnonce")
    final = server.evaluate(client.final(server.evaluate(client.first())))
    assert client.verify(final) and server.username == user


@pytest.mark.parametrize("name, sasl", [("a", "a"), ("a,b=c", "a=2Cb=3Dc")])
def test_saslname_round_trip(name: str, sasl: str) -> None:
    assert sasl_name(name) == sasl and username(sasl) == name


WRONG_PROOF = RFC_CLIENT_FINAL.replace(b"p=dHzb", b"p=eHzb")
FIRST_REFUSALS = [
    (b"y,,n=user,r=abc", "invalid SCRAM client first message format"),  # channel binding flag
    (b"p=tls-unique,,n=user,r=abc", "invalid SCRAM client first message format"),
    (b"n,,n=user", "invalid SCRAM client first message format"),  # no nonce
    (b"n,,n=nobody,r=abc", "no SCRAM-SHA-256 credential for user 'nobody'"),
    (b"n,,n=user,r=abc,tokenauth=true", "token authentication failed"),
    (b"n,a=admin,n=user,r=abc", "asked for authorization id"),
    (b"\xff\xfe", "not UTF-8"),
    (b"n,,n=user,r=" + b"x" * 5000, "longer than"),
    (b"", "invalid SCRAM client first message format"),
    ("n,,n=ünï,r=abc".encode(), "invalid SCRAM client first message format"),  # Kafka's saslname is ASCII
]


@pytest.mark.parametrize("token, reason", FIRST_REFUSALS)
def test_client_first_refusals(token: bytes, reason: str) -> None:
    server = rfc_server()
    with pytest.raises(ScramError, match=reason):
        server.evaluate(token)
    with pytest.raises(ScramError, match="state failed"):  # a failed exchange takes nothing more
        server.evaluate(RFC_CLIENT_FIRST)


def test_authorization_id_equal_to_user_is_accepted() -> None:
    server = rfc_server()
    server.evaluate(b"n,a=user,n=user,r=rOprNGfwEbeRWgbNEkqO")


def test_authorization_id_refusal_tells_the_client_why() -> None:
    with pytest.raises(ScramError) as info:
        rfc_server().evaluate(b"n,a=admin,n=user,r=abc")
    assert info.value.message == ("Authentication failed: Client requested an authorization id "
                                  "that is different from username")


def test_unknown_extensions_are_ignored() -> None:
    server = rfc_server()
    assert server.evaluate(RFC_CLIENT_FIRST + b",foo=bar").startswith(b"r=rOprNGfwEbeRWgbNEkqO")


def test_too_few_iterations_refused() -> None:
    weak = ScramCredential.from_password(SCRAM_SHA_256, "pencil", salt=RFC_SALT, iterations=1024)
    with pytest.raises(ScramError, match="less than the minimum 4096"):
        rfc_server(weak).evaluate(RFC_CLIENT_FIRST)


def test_credential_of_another_mechanism_refused() -> None:
    other = ScramCredential.from_password(SCRAM_SHA_512, "pencil", salt=RFC_SALT, iterations=4096)
    with pytest.raises(ScramError, match="no SCRAM-SHA-256 credential"):
        rfc_server(other).evaluate(RFC_CLIENT_FIRST)


FINAL_REFUSALS = [
    (WRONG_PROOF, "invalid client credentials"),
    (RFC_CLIENT_FINAL.replace(b"k0,p=", b"k1,p="), "invalid client nonce"),
    (b"c=biws,r=rOprNGfwEbeRWgbNEkqO,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=", "invalid client nonce"),
    (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0", "format"),  # no proof
    (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAA", "invalid client credentials"),
    (b"garbage", "format"),
]


@pytest.mark.parametrize("token, reason", FINAL_REFUSALS)
def test_client_final_refusals(token: bytes, reason: str) -> None:
    server = rfc_server()
    server.evaluate(RFC_CLIENT_FIRST)
    with pytest.raises(ScramError, match=reason):
        server.evaluate(token)
    assert not server.complete


ALICE_512 = ScramCredential.from_password(SCRAM_SHA_512, "secret", salt=b"salt" * 8, iterations=4096)


# librdkafka < 2.6.1 sends r=<client nonce><server-first nonce>; Kafka 3.9 checks endsWith
@pytest.mark.parametrize("prefix", ["", "CLI", "anything"])
def test_final_nonce_ending_with_the_server_first_nonce_is_accepted(prefix: str) -> None:
    server = ScramServer(SCRAM_SHA_512, {"alice": ALICE_512}.get, "SRV")
    client = ScramClient(SCRAM_SHA_512, "alice", "secret", "CLI", final_nonce_prefix=prefix)
    assert client.verify(server.evaluate(client.final(server.evaluate(client.first()))))


def test_final_nonce_without_the_whole_server_nonce_is_refused() -> None:
    server = rfc_server()
    server.evaluate(RFC_CLIENT_FIRST)
    with pytest.raises(ScramError, match="invalid client nonce"):  # the server part, cut short
        server.evaluate(RFC_CLIENT_FINAL.replace(b"hNlF$k0,p=", b"hNlF$k,p="))


def test_nothing_after_completion() -> None:
    server = rfc_server()
    server.evaluate(RFC_CLIENT_FIRST)
    server.evaluate(RFC_CLIENT_FINAL)
    with pytest.raises(ScramError, match="state complete"):
        server.evaluate(RFC_CLIENT_FINAL)


@pytest.mark.parametrize("cut", [1, 10, len(RFC_CLIENT_FINAL) - 3])
def test_truncated_final_message(cut: int) -> None:
    server = rfc_server()
    server.evaluate(RFC_CLIENT_FIRST)
    with pytest.raises(ScramError):
        server.evaluate(RFC_CLIENT_FINAL[:cut])
