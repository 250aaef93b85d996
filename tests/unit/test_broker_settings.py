"""broker.broker_settings: what a broker reads from server.properties, and what it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.broker_settings import BrokerSettings, parse_listener
from common.config import parse_config
from common.config_schema import ConfigError
from metadata.codec import Listener

MINIMAL = {"node.id": "3", "process.roles": "broker", "listeners": "PLAINTEXT://127.0.0.1:9092",
           "controller.api.voters": "1@127.0.0.1:9080,2@[::1]:9081", "log.dirs": "/tmp/a,/tmp/b"}


@pytest.mark.parametrize(("text", "expected"), [
    ("PLAINTEXT://127.0.0.1:9092", Listener("PLAINTEXT", "127.0.0.1", 9092)),
    ("plaintext://:0", Listener("PLAINTEXT", "", 0)),  # every address, a port the OS picks
    ("PLAINTEXT://[::1]:9092", Listener("PLAINTEXT", "::1", 9092)),
    ("PLAINTEXT://broker-1.example:65535", Listener("PLAINTEXT", "broker-1.example", 65535)),
])
def test_parse_listener(text: str, expected: Listener) -> None:
    assert parse_listener(text, "listeners") == expected


@pytest.mark.parametrize(("text", "message"), [
    ("127.0.0.1:9092", "is not NAME://host:port"),
    ("PLAINTEXT://127.0.0.1", "is not NAME://host:port"),
    ("PLAINTEXT://127.0.0.1:65536", "is not NAME://host:port"),
    ("PLAINTEXT://127.0.0.1:-1", "is not NAME://host:port"),
    ("PLAINTEXT://127.0.0.1:http", "is not NAME://host:port"),
    ("PLAIN TEXT://127.0.0.1:9093", "is not a listener name"),
])
def test_parse_listener_refuses(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        parse_listener(text, "advertised.listeners")
    assert "'advertised.listeners'" in str(error.value)  # names the key it came from


def settings(**overrides: str) -> BrokerSettings:
    return BrokerSettings.from_config(parse_config({**MINIMAL, **overrides}))


def test_minimal_config() -> None:
    got = settings()
    assert (got.node_id, got.listener, got.advertised) == (3, Listener("PLAINTEXT", "127.0.0.1", 9092), None)
    assert got.controller_addresses == ("127.0.0.1:9080", "[::1]:9081")  # as written: the client brackets v6
    assert got.log_dirs == (Path("/tmp/a"), Path("/tmp/b"))
    assert (got.metrics_address, got.cluster_id) == (None, None)


def test_advertised_metrics_and_timings() -> None:
    got = settings(**{"listeners": "PLAINTEXT://0.0.0.0:9092", "advertised.listeners": "PLAINTEXT://b3:19092",
                      "metrics.listener": "[::1]:9101", "broker.session.timeout.ms": "12000",
                      "controlled.shutdown.timeout.ms": "5000", "cluster.id": "c1"})
    assert got.advertised == Listener("PLAINTEXT", "b3", 19092)
    assert got.metrics_address == ("::1", 9101)
    assert (got.session_timeout_ms, got.controlled_shutdown_timeout_ms, got.cluster_id) == (12000, 5000, "c1")


@pytest.mark.parametrize(("overrides", "message"), [
    ({"listeners": "PLAINTEXT://0.0.0.0:9092"}, "'advertised.listeners' must be set"),
    ({"listeners": "PLAINTEXT://:9092"}, "'advertised.listeners' must be set"),
    ({"controller.api.voters": "127.0.0.1:9080"}, "is not id@host:port"),
    ({"controller.api.voters": "1@127.0.0.1"}, "must be host:port"),
    ({"metrics.listener": "127.0.0.1"}, "'metrics.listener' must be host:port"),
])
def test_refused(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        settings(**overrides)


def test_needs_controller_voters() -> None:
    raw = {k: v for k, v in MINIMAL.items() if k != "controller.api.voters"}
    with pytest.raises(ConfigError, match="'controller.api.voters'"):
        BrokerSettings.from_config(parse_config(raw))


# --- several listeners (issue 29) ------------------------------------------------------------------

TWO = "PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9094"


def test_several_listeners_and_their_protocols() -> None:
    got = settings(listeners=TWO, **{"advertised.listeners": "SASL_SSL://b1:19094"})
    assert got.listeners == (Listener("PLAINTEXT", "127.0.0.1", 9092), Listener("SASL_SSL", "127.0.0.1", 9094))
    assert got.advertised_listeners == (Listener("SASL_SSL", "b1", 19094),)
    assert got.advertised is None  # the first listener is advertised as it binds
    assert dict(got.security_protocols) == {"PLAINTEXT": "PLAINTEXT", "SASL_SSL": "SASL_SSL"}
    assert got.inter_broker_listener == "PLAINTEXT"


def test_custom_listener_names() -> None:
    got = settings(listeners="INTERNAL://127.0.0.1:9091,EXTERNAL://127.0.0.1:9092",
                   **{"listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,EXTERNAL:SSL",
                      "inter.broker.listener.name": "internal"})
    assert dict(got.security_protocols) == {"INTERNAL": "SASL_PLAINTEXT", "EXTERNAL": "SSL"}
    assert got.inter_broker_listener == "INTERNAL"


@pytest.mark.parametrize(("overrides", "message"), [
    ({"listeners": "INTERNAL://127.0.0.1:9091"}, "listener INTERNAL has no security protocol"),
    ({"listeners": "PLAINTEXT://127.0.0.1:9092,PLAINTEXT://127.0.0.1:9093"}, "names a listener twice"),
    ({"listeners": TWO, "advertised.listeners": "SSL://b:1"}, "names SSL, which is not among 'listeners'"),
    ({"listeners": TWO, "inter.broker.listener.name": "SSL"}, "SSL is not among 'listeners'"),
    ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "is not LISTENER:PROTOCOL"),
    ({"listeners": "PLAINTEXT://127.0.0.1:9092,SASL_SSL://:9094"}, "must be set when 'listeners' binds every "
                                                                  "address \\(listener SASL_SSL\\)"),
])
def test_listener_refusals(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        settings(**overrides)
