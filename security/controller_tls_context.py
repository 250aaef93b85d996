"""The ssl contexts of the controllers' HTTP listener (issue 29) from `security.controller_tls`'s
settings: the shell's half (it loads certificate files).

    server_context(settings.tls)        # a controller's listener; None: plain http
    client_context_of(settings.tls)     # a controller forwarding to another; None: plain http
    controller_client_context(config)   # a broker's client of the controllers; None: plain http
"""

from __future__ import annotations

import ssl
from typing import Final

from common.config_schema import Config, ConfigError
from security.controller_tls import ControllerTls

# Kafka's ssl.client.auth values and what Python's ssl makes of them
CLIENT_AUTH: Final = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def server_context(tls: ControllerTls | None) -> ssl.SSLContext | None:
    """The listener's TLS server context (None without a keystore: it serves plain http);
    ConfigError when the files cannot be loaded."""
    if tls is None or tls.keystore is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2  # Kafka's ssl.enabled.protocols: TLSv1.2,TLSv1.3
    try:
        context.load_cert_chain(tls.keystore, password=tls.key_password)
        if tls.truststore is not None and tls.client_auth != "none":
            context.load_verify_locations(cafile=tls.truststore)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"the controller listener's keystore {tls.keystore} or truststore "
                          f"{tls.truststore} cannot be loaded: {exc}") from None
    context.verify_mode = CLIENT_AUTH[tls.client_auth]
    return context


def client_context_of(tls: ControllerTls | None) -> ssl.SSLContext | None:
    """The context a client of the controllers verifies their certificates with (None without a
    truststore: it speaks plain http); a controller's own chain and key go along as the client
    certificate when it has one (forwarding to a controller that asks for one)."""
    if tls is None or tls.truststore is None:
        return None
    return client_context(tls.truststore, certificate=tls.keystore, password=tls.key_password)


def client_context(cafile: str, certificate: str | None = None, password: str | None = None) -> ssl.SSLContext:
    """A client context trusting `cafile` only, checking the server's name or address against its
    certificate; with `certificate` (PEM chain and key) presented when the server asks.
    ConfigError when a file cannot be loaded."""
    try:
        context = ssl.create_default_context(cafile=cafile)
        if certificate is not None:
            context.load_cert_chain(certificate, password=password)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"the controllers' CA {cafile} or certificate {certificate} cannot be loaded: {exc}") \
            from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def controller_client_context(config: Config) -> ssl.SSLContext | None:
    """A node's client context for the controllers from its config (None: plain http)."""
    return client_context_of(ControllerTls.from_config(config))
