"""What a broker process reads from its node config (`server.properties`), checked once.

    settings = BrokerSettings.from_config(parse_config(load_properties(path)))   # ConfigError if wrong

`listeners` and `advertised.listeners` are Kafka's `NAME://host:port` lists (tidelog speaks
PLAINTEXT only); `controller.api.voters` names each controller's HTTP API as `id@host:port`.
The process that runs on these settings is `broker.node`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from common.config import log_dirs
from common.config_schema import Config, ConfigError
from common.rpc import DEFAULT_BROKER_SESSION_TIMEOUT_MS
from metadata.codec import Listener
from shutdown.broker_lifecycle import DEFAULT_CONTROLLED_SHUTDOWN_TIMEOUT_MS

SUPPORTED_SECURITY: Final = "PLAINTEXT"


def parse_listener(text: str, key: str) -> Listener:
    """`PLAINTEXT://host:port` (host may be empty or [v6]) as a Listener; ConfigError otherwise."""
    name, sep, rest = text.partition("://")
    host, colon, port_text = rest.rpartition(":")
    if not sep or not colon or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConfigError(f"config {key!r}: {text!r} is not NAME://host:port")
    if name.upper() != SUPPORTED_SECURITY:
        raise ConfigError(f"config {key!r}: listener {name!r} is not supported; tidelog speaks PLAINTEXT only")
    return Listener(name.upper(), host.strip("[]"), int(port_text))


def _host_port(text: str, key: str) -> tuple[str, int]:
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"config {key!r} must be host:port, got {text!r}")
    return host.strip("[]"), int(port)


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    """What a broker process needs from its config, checked once."""

    node_id: int
    listener: Listener  # the first of `listeners`: what we bind
    advertised: Listener | None  # None: the listener's host and bound port
    max_request_bytes: int
    metrics_address: tuple[str, int] | None
    controller_addresses: tuple[str, ...]
    log_dirs: tuple[Path, ...]
    heartbeat_interval_ms: int
    cluster_id: str | None
    session_timeout_ms: int = DEFAULT_BROKER_SESSION_TIMEOUT_MS
    controlled_shutdown_timeout_ms: int = DEFAULT_CONTROLLED_SHUTDOWN_TIMEOUT_MS

    @classmethod
    def from_config(cls, config: Config) -> BrokerSettings:
        roles = config["process.roles"]
        if not isinstance(roles, tuple) or "broker" not in roles:
            raise ConfigError("config 'process.roles' must contain broker to run a broker")
        listeners = [parse_listener(item, "listeners") for item in config.get_list("listeners")]
        advertised = config.get_optional_list("advertised.listeners")
        advertised_listener = parse_listener(advertised[0], "advertised.listeners") if advertised else None
        if advertised_listener is None and listeners[0].host in ("", "0.0.0.0", "::"):
            raise ConfigError("config 'advertised.listeners' must be set when 'listeners' binds every address")
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
            controlled_shutdown_timeout_ms=config.get_int("controlled.shutdown.timeout.ms"))
