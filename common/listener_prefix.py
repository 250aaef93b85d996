"""Kafka's per-listener config overrides, pure: `listener.name.<listener>.<key>` for a listener's
TLS and SASL keys, and `listener.name.<listener>.<mechanism>.sasl.jaas.config` for one SASL
mechanism's login module on one listener (KafkaConfig's listener prefix; names lower-case, as
Kafka writes them: `listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config`).

    keys = listener_keys(raw, BROKER_KEYS)          # a ConfigKey per prefixed name set in `raw`
    listener_value(config, "SASL_SSL", "ssl.client.auth")      # the override, else the plain key
    jaas_value(config, "SASL_SSL", "PLAIN")         # the mechanism's JAAS line on that listener

A prefixed name is typed and checked as the key it overrides (so a typo in the key after the
prefix is reported as an unknown config, as any other); Kafka reads the same keys this way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Final

from common.config_schema import Config, ConfigKey, Value

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

LISTENER_PREFIX: Final = "listener.name."
# The keys a listener may override (Kafka's SSL and SASL server configs that tidelog reads).
LISTENER_KEYS: Final = frozenset({
    "sasl.enabled.mechanisms", "connections.max.reauth.ms",
    "ssl.keystore.location", "ssl.keystore.type", "ssl.key.password", "ssl.truststore.location",
    "ssl.truststore.type", "ssl.client.auth", "ssl.principal.mapping.rules",
})
# Kafka takes a listener's JAAS line only per mechanism: listener.name.<l>.<mechanism>.sasl.jaas.config
MECHANISM_KEYS: Final = frozenset({"sasl.jaas.config"})


def _base(name: str) -> str | None:
    """The key a prefixed name overrides, or None when it is not a listener override."""
    if not name.startswith(LISTENER_PREFIX):
        return None
    listener, _, rest = name[len(LISTENER_PREFIX):].partition(".")
    if not listener:
        return None
    if rest in LISTENER_KEYS:
        return rest
    mechanism, _, key = rest.partition(".")
    return key if mechanism and key in MECHANISM_KEYS else None


def listener_keys(raw: Mapping[str, object], keys: Iterable[ConfigKey]) -> list[ConfigKey]:
    """A key for each listener-prefixed name in `raw`, typed and validated as its base key."""
    by_name = {key.name: key for key in keys}
    made = []
    for name in raw:
        base = _base(name)
        if base is not None and base in by_name:
            made.append(dataclasses.replace(by_name[base], name=name))
    return made


def listener_value(config: Config, listener: str, key: str) -> Value:
    """`key` for `listener`: its `listener.name.<listener>.<key>` when set, else `key`'s value."""
    prefixed = f"{LISTENER_PREFIX}{listener.lower()}.{key}"
    return config.originals[prefixed] if prefixed in config.originals else config[key]


def jaas_value(config: Config, listener: str, mechanism: str) -> Value:
    """The JAAS line `mechanism` reads on `listener`: the listener-and-mechanism prefixed
    sasl.jaas.config when set, else the plain one (Kafka's JaasContext.loadServerContext)."""
    prefixed = f"{LISTENER_PREFIX}{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    return config.originals[prefixed] if prefixed in config.originals else config["sasl.jaas.config"]
