"""The security options of Spark's Kafka source and sink, as the librdkafka settings our clients take
(issue 29).

Every `kafka.*` option reaches confluent-kafka as a librdkafka setting, so `kafka.security.protocol`,
`kafka.sasl.mechanism`, `kafka.sasl.username`/`kafka.sasl.password` and `kafka.ssl.ca.location`
work as they are. A job written for Spark's own Kafka source names the Java client's settings
instead, which librdkafka does not know; those with a librdkafka equivalent are rewritten here so
the same options work against tidelog:

    sasl.jaas.config (PlainLoginModule / ScramLoginModule,   ->  sasl.username, sasl.password
        username="..." password="...")                           (and sasl.mechanism=PLAIN for Plain)
    ssl.truststore.location + ssl.truststore.type=PEM       ->  ssl.ca.location
    ssl.truststore.certificates (PEM text)                  ->  ssl.ca.pem
    ssl.keystore.location + ssl.keystore.type=PEM           ->  ssl.certificate.location, ssl.key.location
    ssl.keystore.type=PKCS12                                ->  dropped (librdkafka's keystore is PKCS#12)
    ssl.endpoint.identification.algorithm="" (Java's "off") ->  none

A JKS store (the Java default type) cannot be read by librdkafka: the error says to convert it
to PEM. Nothing here logs or echoes a password.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from security.sasl_jaas import JaasError, parse_jaas

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

PLAIN_MODULE: Final = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE: Final = "org.apache.kafka.common.security.scram.ScramLoginModule"
PEM: Final = "PEM"
PKCS12: Final = "PKCS12"
JAVA_DEFAULT_STORE_TYPE: Final = "JKS"


class SecurityOptionError(ValueError):
    """A Java security option with no librdkafka equivalent, or two that contradict each other."""


def _jaas(params: dict[str, str]) -> None:
    text = params.pop("sasl.jaas.config")
    try:
        jaas = parse_jaas(text)
    except JaasError as exc:
        raise SecurityOptionError(f"option 'kafka.sasl.jaas.config': {exc}") from None
    if jaas.module not in (PLAIN_MODULE, SCRAM_MODULE):
        raise SecurityOptionError(f"option 'kafka.sasl.jaas.config': login module {jaas.module} is not supported "
                                  f"(only {PLAIN_MODULE} and {SCRAM_MODULE})")
    if jaas.credentials is None:
        raise SecurityOptionError("option 'kafka.sasl.jaas.config' names no username and password")
    for own in ("sasl.username", "sasl.password"):
        if own in params:
            raise SecurityOptionError(f"options 'kafka.sasl.jaas.config' and 'kafka.{own}' both give the "
                                      "credentials: keep one")
    params["sasl.username"], params["sasl.password"] = jaas.credentials
    if "sasl.mechanism" not in params:
        if jaas.module != PLAIN_MODULE:  # SCRAM-SHA-256 or -512: only the mechanism option says which
            raise SecurityOptionError("option 'kafka.sasl.jaas.config' uses ScramLoginModule: set "
                                      "'kafka.sasl.mechanism' to SCRAM-SHA-256 or SCRAM-SHA-512")
        params["sasl.mechanism"] = "PLAIN"


def _store(params: dict[str, str], store: str, targets: tuple[str, ...]) -> None:
    location = params.pop(f"ssl.{store}.location")
    kind = params.pop(f"ssl.{store}.type", JAVA_DEFAULT_STORE_TYPE).strip().upper()
    if kind != PEM:
        raise SecurityOptionError(f"option 'kafka.ssl.{store}.location' is a {kind} store, which librdkafka "
                                  f"cannot read: convert it to PEM and set 'kafka.ssl.{store}.type' to PEM "
                                  f"(or give 'kafka.{targets[0]}' directly)")
    for target in targets:
        if target in params:
            raise SecurityOptionError(f"options 'kafka.ssl.{store}.location' and 'kafka.{target}' both name "
                                      "the file: keep one")
        params[target] = location
    params.pop(f"ssl.{store}.password", None)  # Kafka refuses a password on a PEM store file too


def librdkafka_security(params: Mapping[str, str]) -> dict[str, str]:
    """`params` (kafka.* options without the prefix, lowercased names) with the Java client's
    security settings rewritten to librdkafka's; SecurityOptionError naming the option."""
    out = dict(params)
    if "sasl.jaas.config" in out:
        _jaas(out)
    if "ssl.truststore.location" in out:
        _store(out, "truststore", ("ssl.ca.location",))
    if "ssl.truststore.certificates" in out:
        if "ssl.ca.pem" in out or "ssl.ca.location" in out:
            raise SecurityOptionError("option 'kafka.ssl.truststore.certificates' and another CA option both "
                                      "name the CA: keep one")
        out["ssl.ca.pem"] = out.pop("ssl.truststore.certificates")
        out.pop("ssl.truststore.type", None)
    keystore = out.get("ssl.keystore.type", "").strip().upper()
    if keystore == PKCS12:  # librdkafka's ssl.keystore.location is a PKCS#12 file, its password the same name
        del out["ssl.keystore.type"]
    elif keystore and "ssl.keystore.location" in out:  # PEM, or JKS refused
        _store(out, "keystore", ("ssl.certificate.location", "ssl.key.location"))
    if out.get("ssl.endpoint.identification.algorithm", None) == "":
        out["ssl.endpoint.identification.algorithm"] = "none"  # Java turns the check off with ""
    return out
