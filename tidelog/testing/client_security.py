"""The client side of a secured test cluster (issue 29): what an application's client needs to talk
to the listener `Cluster(security="SASL_SSL")` (or SSL, SASL_PLAINTEXT) adds to every broker.

The cluster is secured by the launcher's own path (`tidelog up --security`,
localcluster.security_setup): a throwaway CA, a certificate per broker, users with random
passwords, all in the cluster's data dir, and the client settings written to
`<data dir>/client.properties` in librdkafka's names. Those settings are read back from that file,
never rebuilt here, so a test talks to the cluster exactly as a newcomer following `tidelog up`'s
printout would.

    confluent_config(root)   {"bootstrap.servers": ..., "security.protocol": "SASL_SSL", ...}
    python_config(root)      the same for kafka-python and aiokafka (same keyword names in both):
                             bootstrap_servers, security_protocol, ssl_context, sasl_mechanism,
                             sasl_plain_username, sasl_plain_password
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any, Final

from localcluster.security_setup import CLIENT_PROPERTIES, SECURITY_PROTOCOLS, read_client_config

__all__ = ["SECURITY_PROTOCOLS", "check_security", "confluent_config", "python_config"]

# librdkafka's name -> kafka-python's / aiokafka's keyword, for the settings that map one to one
_PYTHON_NAMES: Final = {
    "bootstrap.servers": "bootstrap_servers",
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
}
_TLS_FILES: Final = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location")


def check_security(security: str | None) -> None:
    """ValueError unless `security` is None (PLAINTEXT only) or a protocol the launcher can set up."""
    if security is not None and security not in SECURITY_PROTOCOLS:
        raise ValueError(f"security must be one of {', '.join(SECURITY_PROTOCOLS)} (or None for PLAINTEXT "
                         f"only), got {security!r}")


def confluent_config(root: Path) -> dict[str, str]:
    """The launcher's client settings of the cluster in `root`, as a confluent-kafka config."""
    return read_client_config(root)


def python_config(root: Path) -> dict[str, Any]:
    """The same settings as keyword arguments of kafka-python's and aiokafka's clients (both take
    these names); TLS files become an `ssl_context` (the only TLS input both accept)."""
    config = confluent_config(root)
    unknown = set(config) - set(_PYTHON_NAMES) - set(_TLS_FILES)
    if unknown:  # a setting the launcher learnt since: say so rather than drop it silently
        raise ValueError(f"no kafka-python mapping for {sorted(unknown)} of {root / CLIENT_PROPERTIES}")
    kwargs: dict[str, Any] = {_PYTHON_NAMES[k]: v for k, v in config.items() if k in _PYTHON_NAMES}
    if "ssl.ca.location" in config:
        # create_default_context checks the broker's name: its certificate names its address
        context = ssl.create_default_context(cafile=config["ssl.ca.location"])
        if "ssl.certificate.location" in config:  # SSL: the client's own certificate is its principal
            context.load_cert_chain(config["ssl.certificate.location"], config.get("ssl.key.location"))
        kwargs["ssl_context"] = context
    return kwargs
