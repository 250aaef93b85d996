"""security.sasl_server: Kafka's SaslServerAuthenticator states, PLAIN's messages, KIP-368."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from security.scram import SCRAM_SHA_512, ScramClient, ScramCredential, ScramError, ScramMechanism, ScramServer
from security.sasl_server import (
    API_VERSIONS,
    ILLEGAL_SASL_STATE,
    SASL_AUTHENTICATE,
    SASL_AUTHENTICATION_FAILED,
    SASL_HANDSHAKE,
    UNSUPPORTED_SASL_MECHANISM,
    SaslAuthenticator,
    SaslError,
    SaslSettings,
    SaslState,
)

PRODUCE, METADATA = 0, 3
ALICE = ScramCredential.from_password(SCRAM_SHA_512, "alice-secret", salt=b"s" * 32, iterations=4096)


def scram_credentials(user: str, mechanism: ScramMechanism) -> ScramCredential | None:
    return ALICE if user == "alice" and mechanism == SCRAM_SHA_512 else None


SETTINGS = SaslSettings(("PLAIN", "SCRAM-SHA-512"), {"admin": "admin-secret", "bob": "bob-secret"},
                        scram_credentials)


def auth(settings: SaslSettings = SETTINGS) -> SaslAuthenticator:
    return SaslAuthenticator(settings, nonce=lambda: "servernonce")


def plain(authzid: str, user: str, password: str) -> bytes:
    return f"{authzid}\0{user}\0{password}".encode()


def test_plain_success() -> None:
    a = auth()
    assert a.check_request(API_VERSIONS, 0) is None
    assert a.handshake("PLAIN", 1).mechanisms == ("PLAIN", "SCRAM-SHA-512")
    step = a.authenticate(plain("", "bob", "bob-secret"), now_ms=0)
    assert (step.error_code, step.close) == (0, False)
    assert a.principal == "User:bob" and a.state is SaslState.COMPLETE
    assert a.check_request(PRODUCE, 10) is None


PLAIN_FAILURES = [
    (plain("", "bob", "wrong"), "Authentication failed: Invalid username or password"),
    (plain("", "nobody", "x"), "Authentication failed: Invalid username or password"),
    (plain("", "", "x"), "Authentication failed: username not specified"),
    (plain("", "bob", ""), "Authentication failed: password not specified"),
    (b"bob\0bob-secret", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
    (plain("admin", "bob", "bob-secret"),
     "Authentication failed: Client requested an authorization id that is different from username"),
    (b"\0bob\0" + b"x" * 5000, "longer than"),
]


@pytest.mark.parametrize("token, message", PLAIN_FAILURES)
def test_plain_failures(token: bytes, message: str) -> None:
    a = auth()
    a.handshake("PLAIN", 1)
    step = a.authenticate(token, now_ms=0)
    assert step.error_code == SASL_AUTHENTICATION_FAILED and step.failed and step.close
    assert message in (step.error_message or "") + step.reason
    assert a.state is SaslState.FAILED and a.principal is None
    assert a.check_request(METADATA, 0) is not None


def test_a_wrong_password_is_not_told_apart_from_an_unknown_user() -> None:
    steps = []
    for token in (plain("", "bob", "wrong"), plain("", "nobody", "x")):
        a = auth()
        a.handshake("PLAIN", 1)
        steps.append(a.authenticate(token, 0).error_message)
    assert steps[0] == steps[1]


def test_scram_exchange() -> None:
    a = auth()
    a.handshake("SCRAM-SHA-512", 1)
    client = ScramClient(SCRAM_SHA_512, "alice", "alice-secret", "clientnonce")
    first = a.authenticate(client.first(), now_ms=0)
    assert first.error_code == 0 and not a.authenticated
    assert a.check_request(SASL_AUTHENTICATE, 0) is None and a.check_request(METADATA, 0) is not None
    final = a.authenticate(client.final(first.auth_bytes), now_ms=0)
    assert client.verify(final.auth_bytes) and a.principal == "User:alice"


def test_scram_wrong_password_gets_kafkas_message() -> None:
    a = auth()
    a.handshake("SCRAM-SHA-512", 1)
    client = ScramClient(SCRAM_SHA_512, "alice", "wrong", "clientnonce")
    first = a.authenticate(client.first(), 0)
    step = a.authenticate(client.final(first.auth_bytes), 0)
    assert step.error_message == ("Authentication failed during authentication due to invalid credentials "
                                  "with SASL mechanism SCRAM-SHA-512")
    assert step.failed


def test_unsupported_mechanism() -> None:
    step = auth().handshake("GSSAPI", 1)
    assert step.error_code == UNSUPPORTED_SASL_MECHANISM and step.close
    assert step.mechanisms == ("PLAIN", "SCRAM-SHA-512")


@pytest.mark.parametrize("api_key", [PRODUCE, METADATA, SASL_AUTHENTICATE])
def test_nothing_but_versions_and_handshake_first(api_key: int) -> None:
    assert "unexpected Kafka request" in (auth().check_request(api_key, 0) or "")


def test_authenticate_before_handshake_is_a_state_error() -> None:
    with pytest.raises(SaslError):
        auth().authenticate(b"x", 0)


def test_second_handshake_during_authentication_is_a_state_error() -> None:
    a = auth()
    a.handshake("PLAIN", 1)
    assert a.check_request(SASL_HANDSHAKE, 0) is not None
    with pytest.raises(SaslError):
        a.handshake("PLAIN", 1)


def test_v0_handshake_takes_raw_tokens() -> None:
    a = auth()
    a.handshake("PLAIN", 0)
    assert a.raw_tokens
    assert a.check_request(SASL_AUTHENTICATE, 0) is not None  # raw frames, not SaslAuthenticate
    a.authenticate(plain("", "bob", "bob-secret"), 0, version=0)
    assert a.authenticated and a.session_expires_ms is None


REAUTH = SaslSettings(("PLAIN",), {"bob": "bob-secret", "admin": "admin-secret"}, max_reauth_ms=1000)


def test_session_lifetime_and_expiry() -> None:
    a = auth(REAUTH)
    a.handshake("PLAIN", 1)
    step = a.authenticate(plain("", "bob", "bob-secret"), now_ms=5000, version=1)
    assert step.session_lifetime_ms == 1000 and a.session_expires_ms == 6000
    assert a.check_request(PRODUCE, 5999) is None
    assert "expired" in (a.check_request(PRODUCE, 6000) or "")


def test_v0_authenticate_gets_no_lifetime() -> None:
    a = auth(REAUTH)
    a.handshake("PLAIN", 1)
    assert a.authenticate(plain("", "bob", "bob-secret"), 0, version=0).session_lifetime_ms == 0
    assert a.check_request(PRODUCE, 10**9) is None


def test_reauthentication_extends_the_session() -> None:
    a = auth(REAUTH)
    a.handshake("PLAIN", 1)
    a.authenticate(plain("", "bob", "bob-secret"), now_ms=0)
    assert a.check_request(SASL_HANDSHAKE, 5000) is None  # re-authentication, even after expiry
    assert a.handshake("PLAIN", 1).error_code == 0 and a.state is SaslState.REAUTHENTICATE
    assert a.check_request(PRODUCE, 900) is None  # the old session serves meanwhile
    a.authenticate(plain("", "bob", "bob-secret"), now_ms=900)
    assert a.session_expires_ms == 1900 and a.state is SaslState.COMPLETE


def test_reauthentication_cannot_change_principal() -> None:
    a = auth(REAUTH)
    a.handshake("PLAIN", 1)
    a.authenticate(plain("", "bob", "bob-secret"), now_ms=0)
    a.handshake("PLAIN", 1)
    step = a.authenticate(plain("", "admin", "admin-secret"), now_ms=10)
    assert step.failed and "Cannot change principals during re-authentication from User:bob" in (step.error_message or "")


def test_reauthentication_cannot_change_mechanism() -> None:
    a = auth()
    a.handshake("PLAIN", 1)
    a.authenticate(plain("", "bob", "bob-secret"), 0)
    assert a.handshake("SCRAM-SHA-512", 1).error_code == UNSUPPORTED_SASL_MECHANISM


def test_settings_refuse_unknown_mechanisms() -> None:
    with pytest.raises(ValueError, match="GSSAPI"):
        SaslSettings(("GSSAPI",))


def test_illegal_state_code_is_kafkas() -> None:
    assert ILLEGAL_SASL_STATE == 34


# --- fuzz: any token either advances the exchange or fails it as a step, never anything else ------

TOKENS = st.one_of(st.binary(max_size=600), st.text(max_size=300).map(str.encode),
                   st.sampled_from([b"n,,n=alice,r=abc", b"c=biws,r=abc,p=AAAA", b"\0bob\0bob-secret"]))


@settings(max_examples=300, deadline=None)
@given(mechanism=st.sampled_from(["PLAIN", "SCRAM-SHA-512"]), tokens=st.lists(TOKENS, min_size=1, max_size=3))
def test_fuzz_authenticate_answers_steps_only(mechanism: str, tokens: list[bytes]) -> None:
    a = auth()
    a.handshake(mechanism, 1)
    for token in tokens:
        if a.state not in (SaslState.AUTHENTICATE, SaslState.REAUTHENTICATE):
            with pytest.raises(SaslError):  # the one error a state machine raises: the shell closes
                a.authenticate(token, 0)
            return
        step = a.authenticate(token, 0)
        assert step.error_code in (0, SASL_AUTHENTICATION_FAILED)
        assert step.failed == (step.error_code == SASL_AUTHENTICATION_FAILED) == (a.state is SaslState.FAILED)


@settings(max_examples=300, deadline=None)
@given(first=TOKENS, final=TOKENS)
def test_fuzz_scram_server_raises_scram_error_only(first: bytes, final: bytes) -> None:
    server = ScramServer(SCRAM_SHA_512, {"alice": ALICE}.get, "srv")
    try:
        server.evaluate(first)
        server.evaluate(final)
    except ScramError:
        return
    assert server.complete  # only a real proof gets here
