"""security.controller_tls: the controllers' listener is https only when its keys are set, and its
contexts verify as a client of the throwaway CA must (issue 29)."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from common.config import parse_config
from common.config_schema import ConfigError
from security.controller_tls import (
    CLIENT_AUTH_KEY,
    KEYSTORE_KEY,
    TRUSTSTORE_KEY,
    ControllerTls,
    controller_url,
)
from security.controller_tls_context import client_context_of, controller_client_context, server_context
from security.tls import issue, new_ca

BASE = {"node.id": "1", "process.roles": "controller", "controller.quorum.voters": "1@127.0.0.1:9090",
        "controller.listener": "127.0.0.1:9080"}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("controller-tls")
    now = datetime.now(timezone.utc)
    ca, other_ca = new_ca("test CA", now=now), new_ca("another CA", now=now)
    (root / "ca.pem").write_bytes(ca.certificate_pem)
    (root / "other-ca.pem").write_bytes(other_ca.certificate_pem)
    (root / "controller.pem").write_bytes(issue(ca, "controller-1", hosts=["127.0.0.1"], now=now).chain_and_key_pem)
    return {name: str(root / f"{name}.pem") for name in ("ca", "other-ca", "controller")}


def config(**entries: str) -> ControllerTls | None:
    return ControllerTls.from_config(parse_config({**BASE, **entries}))


def test_nothing_configured_is_plain_http() -> None:
    assert config() is None
    assert controller_client_context(parse_config(BASE)) is None
    assert controller_url("127.0.0.1:9080", None) == "http://127.0.0.1:9080"


def test_the_plain_ssl_keys_of_a_kafka_listener_do_not_turn_it_on(files: dict[str, str]) -> None:
    # a combined node's SSL Kafka listener keeps its controller listener plain unless told otherwise
    assert config(**{"ssl.keystore.location": files["controller"], "ssl.truststore.location": files["ca"]}) is None


def test_configured_keys_give_https(files: dict[str, str]) -> None:
    tls = config(**{KEYSTORE_KEY: files["controller"], TRUSTSTORE_KEY: files["ca"]})
    assert tls is not None
    server, client = server_context(tls), client_context_of(tls)
    assert server is not None and server.verify_mode == ssl.CERT_NONE
    assert client is not None and client.check_hostname and client.verify_mode == ssl.CERT_REQUIRED
    assert controller_url("127.0.0.1:9080", client) == "https://127.0.0.1:9080"


@pytest.mark.parametrize("entries, problem", [
    ({CLIENT_AUTH_KEY: "required"}, "neither"),
    ({KEYSTORE_KEY: "/k.pem", CLIENT_AUTH_KEY: "sometimes"}, "must be one of"),
    ({KEYSTORE_KEY: "/k.pem", CLIENT_AUTH_KEY: "required"}, "must be set when"),
])
def test_bad_settings_are_refused_by_name(entries: dict[str, str], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        config(**entries)


def test_files_that_cannot_be_loaded_are_a_config_error(tmp_path: Path, files: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="cannot be loaded"):
        server_context(ControllerTls(str(tmp_path / "missing.pem"), None))
    with pytest.raises(ConfigError, match="cannot be loaded"):
        client_context_of(ControllerTls(None, str(tmp_path / "missing.pem")))


@pytest.fixture()
def tls_server(files: dict[str, str]) -> Iterator[int]:
    """A TLS server on 127.0.0.1 with the controller's certificate; finishes each handshake."""
    import socket

    tls = ControllerTls(files["controller"], files["ca"])
    server_context_ = server_context(tls)
    assert server_context_ is not None
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10.0)

    def serve() -> None:
        for _ in range(2):  # one handshake per test case below; bounded
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            try:
                with server_context_.wrap_socket(connection, server_side=True):
                    pass
            except (OSError, ssl.SSLError):
                pass  # the client refused our certificate: expected in one case
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()
        thread.join(timeout=10.0)


def test_a_client_verifies_the_controller_against_the_ca_and_its_address(files: dict[str, str],
                                                                        tls_server: int) -> None:
    import socket

    trusting = client_context_of(ControllerTls(None, files["ca"]))
    stranger = client_context_of(ControllerTls(None, files["other-ca"]))
    assert trusting is not None and stranger is not None
    with socket.create_connection(("127.0.0.1", tls_server), timeout=10.0) as raw:
        with trusting.wrap_socket(raw, server_hostname="127.0.0.1") as wrapped:
            assert wrapped.getpeercert() is not None  # verified: the CA signed it for 127.0.0.1
    with socket.create_connection(("127.0.0.1", tls_server), timeout=10.0) as raw:
        with pytest.raises(ssl.SSLCertVerificationError):
            stranger.wrap_socket(raw, server_hostname="127.0.0.1")
