"""TLS on the controllers' HTTP listener (issue 29): the admin API, the brokers' /rpc/ calls and
their metadata fetch (SCRAM's salted credentials ride in it), served over https when configured.

    tls = ControllerTls.from_config(config)     # None: nothing configured, plain http as before
    server_context(tls)                         # a controller's listener (None: it serves http)
    client = client_context_of(tls)             # brokers, controllers forwarding (controller_tls_context)
    controller_url("127.0.0.1:9080", client)    # "https://127.0.0.1:9080" ("http://" for None)

Kafka names the controllers' listener in controller.listener.names and reads its TLS settings
with the listener prefix; tidelog's controller listener is `controller`, so the keys are
`listener.name.controller.ssl.keystore.location` (the controller's certificate chain and key,
PEM), `listener.name.controller.ssl.key.password`, `listener.name.controller.ssl.truststore.location`
(the CA that signs the controllers' certificates: what every client of the listener verifies
against) and `listener.name.controller.ssl.client.auth`. Only the prefixed keys count, never the
plain `ssl.*` a broker's Kafka listeners read: a combined node whose Kafka listener is SSL keeps its
controller listener as configured for it, and a node with none of these keys speaks plain http.
A client checks the controller's certificate against the CA and its address (the throwaway CA of
`tidelog up --security` names each controller's IP address as subjectAltName), as Kafka's
clients do with ssl.endpoint.identification.algorithm=https. The brokers' identity on /rpc/ is
still their per-broker key (security.rpc_auth), so client certificates are optional here.

One place decides the scheme and the context (`controller_url`), so every caller agrees. This
module is pure (settings and URLs); `security.controller_tls_context` makes the ssl contexts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from common.config_schema import Config, ConfigError, Password

if TYPE_CHECKING:
    import ssl

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

CONTROLLER_LISTENER: Final = "controller"
_PREFIX: Final = f"listener.name.{CONTROLLER_LISTENER}."
KEYSTORE_KEY: Final = _PREFIX + "ssl.keystore.location"
KEY_PASSWORD_KEY: Final = _PREFIX + "ssl.key.password"
TRUSTSTORE_KEY: Final = _PREFIX + "ssl.truststore.location"
CLIENT_AUTH_KEY: Final = _PREFIX + "ssl.client.auth"
CLIENT_AUTH_VALUES: Final = ("none", "requested", "required")  # Kafka's ssl.client.auth
HTTP: Final = "http://"
HTTPS: Final = "https://"


def controller_url(address: str, tls: ssl.SSLContext | None) -> str:
    """The base URL of a controller's HTTP listener at host:port: https when the caller holds a
    client TLS context for the controllers, else http."""
    return (HTTP if tls is None else HTTPS) + address


@dataclass(frozen=True, slots=True)
class ControllerTls:
    """The controller listener's TLS settings as configured (paths; controller_tls_context makes the contexts)."""

    keystore: str | None  # serve https with this chain and key (a controller)
    truststore: str | None  # verify the controllers' certificates against these CAs (a client)
    key_password: str | None = None
    client_auth: str = "none"

    @classmethod
    def from_config(cls, config: Config) -> ControllerTls | None:
        """None when none of the controller listener's TLS keys is set; ConfigError for a bad value."""
        def text(key: str) -> str | None:
            value = config.originals.get(key)
            if isinstance(value, Password):
                return value.value or None
            return str(value) if value not in (None, "") else None

        keystore, truststore = text(KEYSTORE_KEY), text(TRUSTSTORE_KEY)
        client_auth = text(CLIENT_AUTH_KEY) or "none"
        if keystore is None and truststore is None:
            if CLIENT_AUTH_KEY in config.originals or KEY_PASSWORD_KEY in config.originals:
                raise ConfigError(f"config {CLIENT_AUTH_KEY!r} or {KEY_PASSWORD_KEY!r} is set but neither "
                                  f"{KEYSTORE_KEY!r} nor {TRUSTSTORE_KEY!r}: the controller listener has no TLS")
            return None
        if client_auth not in CLIENT_AUTH_VALUES:
            raise ConfigError(f"config {CLIENT_AUTH_KEY!r} must be one of {', '.join(CLIENT_AUTH_VALUES)}, "
                              f"got {client_auth!r}")
        if client_auth != "none" and truststore is None:
            raise ConfigError(f"config {TRUSTSTORE_KEY!r} must be set when {CLIENT_AUTH_KEY!r} is not none")
        return cls(keystore, truststore, text(KEY_PASSWORD_KEY), client_auth)
