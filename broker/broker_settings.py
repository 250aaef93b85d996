"""What a broker process reads from its node config (`server.properties`), checked once.

    settings = BrokerSettings.from_config(parse_config(load_properties(path)))   # ConfigError if wrong

`listeners` and `advertised.listeners` are Kafka's `NAME://host:port` lists, each name's
security protocol from `listener.security.protocol.map` (PLAINTEXT, SSL, SASL_PLAINTEXT,
SASL_SSL), one of them `inter.broker.listener.name`; `controller.api.voters` names each
controller's HTTP API as `id@host:port`.
The process that runs on these settings is `broker.node`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from common.config import log_dirs
from common.config_schema import Config, ConfigError
from common.rpc import DEFAULT_BROKER_SESSION_TIMEOUT_MS
from metadata.codec import Listener
from shutdown.broker_lifecycle import DEFAULT_CONTROLLED_SHUTDOWN_TIMEOUT_MS

SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")  # Kafka's SecurityProtocol
_LISTENER_NAME: Final = re.compile(r"[A-Za-z0-9_.-]+")


def parse_listener(text: str, key: str) -> Listener:
    """`NAME://host:port` (host may be empty or [v6]) as a Listener, the name upper-cased as
    Kafka's ListenerName.normalised; ConfigError otherwise."""
    name, sep, rest = text.partition("://")
    host, colon, port_text = rest.rpartition(":")
    if not sep or not colon or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConfigError(f"config {key!r}: {text!r} is not NAME://host:port")
    if not _LISTENER_NAME.fullmatch(name):
        raise ConfigError(f"config {key!r}: {name!r} is not a listener name")
    return Listener(name.upper(), host.strip("[]"), int(port_text))


def parse_protocol_map(entries: tuple[str, ...]) -> dict[str, str]:
    """listener.security.protocol.map as {LISTENER: PROTOCOL}; ConfigError for a bad entry."""
    protocols: dict[str, str] = {}
    for entry in entries:
        name, colon, protocol = entry.partition(":")
        if not colon or not _LISTENER_NAME.fullmatch(name) or protocol.upper() not in SECURITY_PROTOCOLS:
            raise ConfigError(f"config 'listener.security.protocol.map': {entry!r} is not LISTENER:PROTOCOL "
                              f"with a protocol of {', '.join(SECURITY_PROTOCOLS)}")
        protocols[name.upper()] = protocol.upper()
    return protocols


def _listeners(config: Config, protocols: Mapping[str, str]) -> tuple[tuple[Listener, ...], tuple[Listener, ...]]:
    listeners = tuple(parse_listener(item, "listeners") for item in config.get_list("listeners"))
    advertised = tuple(parse_listener(item, "advertised.listeners")
                       for item in config.get_optional_list("advertised.listeners") or ())
    for key, entries in (("listeners", listeners), ("advertised.listeners", advertised)):
        names = [listener.name for listener in entries]
        if len(set(names)) != len(names):
            raise ConfigError(f"config {key!r} names a listener twice: {', '.join(names)}")
        unmapped = [name for name in names if name not in protocols]
        if unmapped:
            raise ConfigError(f"config {key!r}: listener {unmapped[0]} has no security protocol in "
                              "'listener.security.protocol.map'")
    stray = sorted({a.name for a in advertised} - {listener.name for listener in listeners})
    if stray:
        raise ConfigError(f"config 'advertised.listeners' names {stray[0]}, which is not among 'listeners'")
    named = {a.name for a in advertised}
    unbound = [listener for listener in listeners if listener.name not in named and listener.host in ("", "0.0.0.0", "::")]
    if unbound:
        raise ConfigError("config 'advertised.listeners' must be set when 'listeners' binds every address "
                          f"(listener {unbound[0].name})")
    return listeners, advertised


def _host_port(text: str, key: str) -> tuple[str, int]:
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"config {key!r} must be host:port, got {text!r}")
    return host.strip("[]"), int(port)


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    """What a broker process needs from its config, checked once."""

    node_id: int
    listener: Listener  # the first of `listeners`
    advertised: Listener | None  # the first listener's advertised address; None: its host and bound port
    max_request_bytes: int
    metrics_address: tuple[str, int] | None
    controller_addresses: tuple[str, ...]
    log_dirs: tuple[Path, ...]
    heartbeat_interval_ms: int
    cluster_id: str | None
    session_timeout_ms: int = DEFAULT_BROKER_SESSION_TIMEOUT_MS
    controlled_shutdown_timeout_ms: int = DEFAULT_CONTROLLED_SHUTDOWN_TIMEOUT_MS
    # Every listener, its advertised address where one is set, its security protocol, and the one
    # the brokers talk to each other on (followers' fetches).
    listeners: tuple[Listener, ...] = ()
    advertised_listeners: tuple[Listener, ...] = ()
    security_protocols: Mapping[str, str] = field(default_factory=dict)
    inter_broker_listener: str = "PLAINTEXT"

    @classmethod
    def from_config(cls, config: Config) -> BrokerSettings:
        roles = config["process.roles"]
        if not isinstance(roles, tuple) or "broker" not in roles:
            raise ConfigError("config 'process.roles' must contain broker to run a broker")
        protocols = parse_protocol_map(config.get_list("listener.security.protocol.map"))
        listeners, advertised = _listeners(config, protocols)
        advertised_listener = next((a for a in advertised if a.name == listeners[0].name), None)
        inter_broker = config["inter.broker.listener.name"]
        inter_broker_name = listeners[0].name if inter_broker is None else str(inter_broker).upper()
        if inter_broker_name not in {listener.name for listener in listeners}:
            raise ConfigError(f"config 'inter.broker.listener.name': {inter_broker_name} is not among 'listeners'")
        voters = config.get_optional_list("controller.api.voters")
        if not voters:
            raise ConfigError("config 'controller.api.voters' (id@host:port of each controller's HTTP API) "
                              "must be set to run a broker")
        addresses = []
        for entry in voters:
            _, at, address = entry.partition("@")
            if not at:
                raise ConfigError(f"config 'controller.api.voters': {entry!r} is not id@host:port")
            _host_port(address, "controller.api.voters")
            addresses.append(address)
        metrics = config["metrics.listener"]
        cluster_id = config["cluster.id"]
        return cls(
            node_id=config.get_int("node.id"),
            listener=listeners[0], advertised=advertised_listener,
            max_request_bytes=config.get_int("socket.request.max.bytes"),
            metrics_address=None if metrics is None else _host_port(str(metrics), "metrics.listener"),
            controller_addresses=tuple(addresses),
            log_dirs=tuple(Path(d) for d in log_dirs(config)),
            heartbeat_interval_ms=config.get_int("broker.heartbeat.interval.ms"),
            cluster_id=None if cluster_id is None else str(cluster_id),
            session_timeout_ms=config.get_int("broker.session.timeout.ms"),
            controlled_shutdown_timeout_ms=config.get_int("controlled.shutdown.timeout.ms"),
            listeners=listeners, advertised_listeners=advertised,
            security_protocols={listener.name: protocols[listener.name] for listener in listeners},
            inter_broker_listener=inter_broker_name)
