"""security.rpc_auth (issue 29): the proofs brokers sign their /rpc/ requests with, and the
controller's check of them; security.rpc_secret's file; the admin API's loopback rule."""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

import pytest

from common.config import parse_config
from common.config_schema import ConfigError
from quorum.admin_api import ApiSettings
from quorum.quorum_settings import QuorumSettings
from security.rpc_auth import (
    FORBIDDEN,
    REPLAY_WINDOW_MS,
    UNAUTHENTICATED,
    RpcAuthError,
    RpcSigner,
    RpcVerifier,
    broker_key,
    check_speaks_for,
    is_loopback,
)
from security.rpc_secret import (
    broker_key_text,
    load_node_key,
    load_or_create_secret,
    load_secret,
    signer_from_config,
)

SECRET = bytes(range(32))
OTHER_SECRET = bytes(range(1, 33))
NOW = 1_700_000_000_000
HOST, PATH, BODY = "127.0.0.1:9094", "/rpc/broker-heartbeat", b"\x83\xa9broker_id\x01"
NONCE = "0123456789abcdef0123456789abcdef"
BROKER_1 = RpcSigner.from_master(1, SECRET)


def header(signer: RpcSigner = BROKER_1, *, now_ms: int = NOW, nonce: str = NONCE, host: str = HOST,
           path: str = PATH, body: bytes = BODY) -> str:
    return signer.authorization("POST", host, path, body, now_ms=now_ms, nonce=nonce)


def test_a_valid_proof_names_its_node() -> None:
    assert RpcVerifier(SECRET).verify(header(), "POST", HOST, PATH, BODY, now_ms=NOW) == 1
    assert RpcVerifier(SECRET).verify(header(RpcSigner(7, broker_key(SECRET, 7))), "POST", HOST, PATH, BODY,
                                      now_ms=NOW) == 7


# --- per-broker keys ------------------------------------------------------------------------------


def test_a_broker_key_is_hmac_of_the_label_and_the_node_id() -> None:
    expected = hmac.new(SECRET, b"tidelog-broker-rpc-key-v1\x004", hashlib.sha256).digest()
    assert broker_key(SECRET, 4) == expected
    keys = {broker_key(SECRET, node_id) for node_id in (0, 1, 4, 5, 14, 41)}
    assert len(keys) == 6 and SECRET not in keys  # one key per node, none of them the master
    assert broker_key(OTHER_SECRET, 4) != expected


def test_a_key_of_one_broker_cannot_speak_for_another() -> None:
    broker_4 = RpcSigner(4, broker_key(SECRET, 4))  # what broker 4's own key file gives it
    proven = RpcVerifier(SECRET).verify(header(broker_4), "POST", HOST, PATH, BODY, now_ms=NOW)
    assert proven == 4
    with pytest.raises(RpcAuthError, match="speaks for broker 5 but was signed as node 4") as refused:
        check_speaks_for(proven, 5, PATH)  # a heartbeat for broker 5, proven by broker 4's key
    assert refused.value.status == FORBIDDEN
    # nor can it name node 5 in the header: the controller checks it with K_5, which it lacks
    forged = RpcSigner(5, broker_key(SECRET, 4))
    with pytest.raises(RpcAuthError, match="not signed with node 5's RPC key") as refused:
        RpcVerifier(SECRET).verify(header(forged), "POST", HOST, PATH, BODY, now_ms=NOW)
    assert refused.value.status == UNAUTHENTICATED
    # and the master itself is no node's key
    with pytest.raises(RpcAuthError, match="does not match"):
        RpcVerifier(SECRET).verify(header(RpcSigner(4, SECRET)), "POST", HOST, PATH, BODY, now_ms=NOW)


# (the Authorization header, what the controller sees of the request, a word of the refusal)
REFUSED = [
    (None, {}, "needs an 'Authorization"),
    ("", {}, "needs an 'Authorization"),
    ("Bearer abc", {}, "is not 'TIDELOG-HMAC-SHA256"),
    (header() + " ", {}, "is not"),
    (header().replace("node=1", "node=99999999999"), {}, "is not"),  # 11 digits: not a node id
    (header() + "0" * 300, {}, "is not"),  # longer than MAX_AUTHORIZATION_CHARS
    (header(RpcSigner.from_master(1, OTHER_SECRET)), {}, "does not match"),  # another cluster's
    (header().replace("node=1", "node=2"), {}, "does not match"),  # broker 1's proof claiming node 2
    (header(), {"body": BODY + b"\x00"}, "does not match"),  # the body changed on the way
    (header(), {"path": "/rpc/alter-partition"}, "does not match"),  # another RPC
    (header(), {"host": "127.0.0.2:9094"}, "does not match"),  # sent to another controller
    (header(), {"method": "PUT"}, "does not match"),
    (header(now_ms=NOW - REPLAY_WINDOW_MS - 1), {}, "outside the"),  # replayed after the window
    (header(now_ms=NOW + REPLAY_WINDOW_MS + 1), {}, "outside the"),  # from a clock far ahead
]


@pytest.mark.parametrize(("authorization", "seen", "why"), REFUSED)
def test_refused_proofs_answer_401(authorization: str | None, seen: dict[str, object], why: str) -> None:
    request: dict[str, object] = {"method": "POST", "host": HOST, "path": PATH, "body": BODY, **seen}
    with pytest.raises(RpcAuthError, match=why) as refused:
        RpcVerifier(SECRET).verify(authorization, str(request["method"]), str(request["host"]),
                                   str(request["path"]), request["body"], now_ms=NOW)  # type: ignore[arg-type]
    assert refused.value.status == UNAUTHENTICATED


def test_the_default_port_and_the_case_of_the_host_do_not_matter() -> None:
    signed = header(host="Controller-1:80")  # aiohttp sends Host: controller-1 for port 80
    assert RpcVerifier(SECRET).verify(signed, "POST", "controller-1", PATH, BODY, now_ms=NOW) == 1


def test_the_window_edges_are_accepted() -> None:
    verifier = RpcVerifier(SECRET)
    assert verifier.verify(header(now_ms=NOW - REPLAY_WINDOW_MS), "POST", HOST, PATH, BODY, now_ms=NOW) == 1
    assert verifier.verify(header(now_ms=NOW + REPLAY_WINDOW_MS, nonce="f" * 32), "POST", HOST, PATH, BODY,
                           now_ms=NOW) == 1


def test_a_nonce_is_accepted_once_within_the_window() -> None:
    verifier = RpcVerifier(SECRET)
    verifier.verify(header(), "POST", HOST, PATH, BODY, now_ms=NOW)
    with pytest.raises(RpcAuthError, match="replayed"):
        verifier.verify(header(), "POST", HOST, PATH, BODY, now_ms=NOW + 1000)
    # after the window the nonce is forgotten, and its request refused by its timestamp instead
    later = NOW + REPLAY_WINDOW_MS + 1
    with pytest.raises(RpcAuthError, match="outside the"):
        verifier.verify(header(), "POST", HOST, PATH, BODY, now_ms=later)
    assert verifier.verify(header(now_ms=later), "POST", HOST, PATH, BODY, now_ms=later) == 1
    assert verifier.remembered == 1  # the first nonce left with its window


def test_forgotten_nonces_beyond_the_bound_cannot_be_replayed() -> None:
    verifier = RpcVerifier(SECRET, max_nonces=3)
    nonces = [f"{i:032x}" for i in range(5)]
    for i, nonce in enumerate(nonces):
        verifier.verify(header(now_ms=NOW + i, nonce=nonce), "POST", HOST, PATH, BODY, now_ms=NOW + 10)
    assert verifier.remembered == 3
    for i, nonce in enumerate(nonces[:2]):  # forgotten: the floor refuses them
        with pytest.raises(RpcAuthError, match="replayed"):
            verifier.verify(header(now_ms=NOW + i, nonce=nonce), "POST", HOST, PATH, BODY, now_ms=NOW + 10)
    assert verifier.verify(header(now_ms=NOW + 11, nonce="a" * 32), "POST", HOST, PATH, BODY, now_ms=NOW + 11) == 1


def test_a_signature_that_does_not_match_is_not_remembered() -> None:
    verifier = RpcVerifier(SECRET)
    with pytest.raises(RpcAuthError):
        verifier.verify(header(RpcSigner(1, OTHER_SECRET)), "POST", HOST, PATH, BODY, now_ms=NOW)
    assert verifier.remembered == 0
    assert verifier.verify(header(), "POST", HOST, PATH, BODY, now_ms=NOW) == 1  # the same nonce, now signed


def test_one_broker_cannot_speak_for_another() -> None:
    check_speaks_for(3, 3, PATH)
    with pytest.raises(RpcAuthError, match="speaks for broker 2 but was signed as node 1") as refused:
        check_speaks_for(1, 2, PATH)
    assert refused.value.status == FORBIDDEN


@pytest.mark.parametrize(("secret", "nonce", "node_id"), [(b"short", NONCE, 1), (SECRET, "xyz", 1),
                                                          (SECRET, NONCE.upper(), 1), (SECRET, NONCE, -1)])
def test_signer_refuses_bad_arguments(secret: bytes, nonce: str, node_id: int) -> None:
    with pytest.raises(ValueError):
        RpcSigner(node_id, secret).authorization("POST", HOST, PATH, BODY, now_ms=NOW, nonce=nonce)


def test_the_signer_hides_its_secret() -> None:
    for secret in (SECRET, BROKER_1.secret):
        assert secret.hex() not in repr(BROKER_1) and str(secret) not in repr(BROKER_1)


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.0.0.9", True), ("localhost", True), ("::1", True), ("[::1]", True),
    ("0.0.0.0", False), ("::", False), ("", False), ("10.0.0.5", False), ("controller-1.internal", False),
])
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


# --- the secret file ---------------------------------------------------------------------------


def test_a_missing_secret_is_generated_once_private(tmp_path: Path) -> None:
    path = tmp_path / "rpc.secret"
    secret, created = load_or_create_secret(path)
    assert created and len(secret) == 32 and os.stat(path).st_mode & 0o777 == 0o600
    assert load_or_create_secret(path) == (secret, False)
    assert load_secret(path) == secret


@pytest.mark.parametrize(("content", "why"), [("not hex\n", "does not hold hex"), ("abcd\n", "fewer than 32"),
                                               ("0" * 5000, "larger than")])
def test_a_bad_secret_file_is_a_clear_config_error(tmp_path: Path, content: str, why: str) -> None:
    path = tmp_path / "rpc.secret"
    path.write_text(content)
    with pytest.raises(ConfigError, match=why):
        load_secret(path)


def test_a_broker_without_its_secret_file_refuses_to_start(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    config = parse_config({"node.id": "4", "process.roles": "broker", "controller.rpc.secret.file": str(missing)})
    with pytest.raises(ConfigError, match="controller.rpc.secret.file.*cannot read"):
        signer_from_config(config, 4)
    assert not missing.exists()  # a broker alone never makes the cluster's secret
    assert signer_from_config(parse_config({"node.id": "4", "process.roles": "broker"}), 4) is None


def write_broker_key(master: bytes, node_id: int, path: Path) -> None:
    path.write_text(broker_key_text(master, node_id))
    path.chmod(0o600)


def broker_config(node_id: int, path: Path, roles: str = "broker") -> dict[str, str]:
    return {"node.id": str(node_id), "process.roles": roles, "controller.rpc.secret.file": str(path)}


def test_a_broker_signs_with_its_key_file_and_a_combined_node_derives_it(tmp_path: Path) -> None:
    key_file = tmp_path / "rpc.key"
    write_broker_key(SECRET, 4, key_file)
    assert SECRET.hex() not in key_file.read_text()
    signer = signer_from_config(parse_config(broker_config(4, key_file)), 4)
    assert signer == RpcSigner(4, broker_key(SECRET, 4))
    master = tmp_path / "rpc.secret"
    master.write_text(SECRET.hex() + "\n")
    os.chmod(master, 0o600)
    # a combined node, and a broker of a data dir made before per-broker keys, hold the master
    assert signer_from_config(parse_config(broker_config(1, master, "broker,controller")), 1) == \
        RpcSigner.from_master(1, SECRET)
    assert load_node_key(master, 4) == broker_key(SECRET, 4)


@pytest.mark.parametrize(("node_id", "roles", "why"), [
    (5, "broker", "holds broker 4's RPC key, but this is node 5"),  # a key copied to the wrong broker
    (1, "broker,controller", "not the cluster's master secret"),  # a combined node needs the master
])
def test_a_key_file_in_the_wrong_place_is_a_clear_config_error(tmp_path: Path, node_id: int, roles: str,
                                                               why: str) -> None:
    key_file = tmp_path / "rpc.key"
    write_broker_key(SECRET, 4, key_file)
    with pytest.raises(ConfigError, match=why):
        signer_from_config(parse_config(broker_config(node_id, key_file, roles)), node_id)
    with pytest.raises(ConfigError, match="not the cluster's master secret"):
        load_secret(key_file)  # a controller's verifier: a broker key verifies nothing


# --- the admin API beyond loopback ----------------------------------------------------------------

CONTROLLER = {"node.id": "1", "process.roles": "controller", "controller.quorum.voters": "1@127.0.0.1:9093",
              "controller.cluster.password": "s3cret-quorum-password"}


def api_settings(**extra: str) -> ApiSettings | None:
    config = parse_config({**CONTROLLER, **extra})
    return ApiSettings.from_config(config, QuorumSettings.from_config(config))


@pytest.mark.parametrize("listener", ["0.0.0.0:9094", "10.1.2.3:9094", "controller-1.internal:9094"])
def test_an_admin_api_beyond_loopback_needs_a_token(listener: str) -> None:
    with pytest.raises(ConfigError, match="beyond loopback.*'admin.token' must be set"):
        api_settings(**{"controller.listener": listener})
    settings = api_settings(**{"controller.listener": listener, "admin.token": "t0ken"})
    assert settings is not None and settings.reads_need_token


def test_an_admin_api_on_loopback_stays_open_to_reads() -> None:
    settings = api_settings(**{"controller.listener": "127.0.0.1:9094", "controller.rpc.secret.file": "/x/rpc"})
    assert settings is not None and not settings.reads_need_token and settings.token is None
    assert settings.rpc_secret_file == "/x/rpc"
