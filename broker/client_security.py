"""How this broker connects to the other brokers' inter-broker listener (followers' fetches,
transaction markers, KIP-890 verification): TLS and SASL as a client, with its own credentials.

    security = inter_broker_security("SASL_SSL", config)    # None for PLAINTEXT
    INTER_BROKER_SECURITY.set(security)                      # at the broker's start: its tasks inherit it
    conn = await KafkaConnection.open(host, port, ...)       # TLS, then SaslHandshake + SaslAuthenticate

The credentials are the login module's `username` and `password` of the inter-broker listener's
JAAS line for the mechanism `sasl.mechanism.inter.broker.protocol`
(`listener.name.<listener>.<mechanism>.sasl.jaas.config`, else `sasl.jaas.config`), as a Kafka
broker takes them: PLAIN or SCRAM-SHA-256/512, whose credential must then exist in the metadata
log (`tidelog users create --user broker ...`; until then followers retry their logins); the
TLS client trusts the listener's `ssl.truststore.location` and presents its
`ssl.keystore.location` (for a listener with ssl.client.auth=required). The principal brokers authenticate as belongs in super.users when an
authorizer runs.
"""

from __future__ import annotations

import ssl
from contextvars import ContextVar

from common.client_security import ClientSecurity
from common.config_schema import Config, ConfigError, Password
from common.listener_prefix import jaas_value, listener_value
from security.sasl_client import SaslCredentials
from security.sasl_jaas import JaasError, parse_jaas
from security.sasl_server import SUPPORTED_MECHANISMS


# Set once by the broker process (broker.node); every task it starts afterwards inherits it.
INTER_BROKER_SECURITY: ContextVar[ClientSecurity | None] = ContextVar("inter_broker_security", default=None)


def inter_broker_security(protocol: str, config: Config, listener: str = "") -> ClientSecurity | None:
    """The client side of the inter-broker listener's protocol (`listener`: its name, whose
    prefixed keys come first); ConfigError when it lacks what it needs."""
    if protocol == "PLAINTEXT":
        return None
    context = None
    if protocol.endswith("SSL"):
        truststore = listener_value(config, listener, "ssl.truststore.location")
        keystore = listener_value(config, listener, "ssl.keystore.location")
        if truststore is None:
            raise ConfigError("config 'ssl.truststore.location' must be set for an SSL inter-broker listener "
                              "(the CA the other brokers' certificates are checked against)")
        context = ssl.create_default_context(cafile=str(truststore))
        if keystore is not None:
            password = listener_value(config, listener, "ssl.key.password")
            context.load_cert_chain(str(keystore), password=password.value if isinstance(password, Password) else None)
    if not protocol.startswith("SASL_"):
        return ClientSecurity(protocol, context)
    mechanism = str(config["sasl.mechanism.inter.broker.protocol"]).upper()
    if mechanism not in SUPPORTED_MECHANISMS:
        raise ConfigError(f"config 'sasl.mechanism.inter.broker.protocol': {mechanism} is not supported; "
                          f"tidelog supports {', '.join(SUPPORTED_MECHANISMS)}")
    raw = jaas_value(config, listener, mechanism)
    try:
        jaas = None if raw is None else parse_jaas(raw.value if isinstance(raw, Password) else str(raw))
    except JaasError as exc:
        raise ConfigError(str(exc)) from None
    credentials = None if jaas is None else jaas.credentials
    if credentials is None:
        raise ConfigError(f"config 'sasl.jaas.config' (or listener.name.{listener.lower() or '<listener>'}."
                          f"{mechanism.lower()}.sasl.jaas.config) must name the broker's own username and "
                          "password for a SASL inter-broker listener")
    # the same login the CLI's and Spark's client use (security.sasl_client): one SCRAM client
    return ClientSecurity(protocol, context, SaslCredentials(mechanism, *credentials))
