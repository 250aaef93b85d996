"""spark.kafka_security: Spark's Java-client security options as librdkafka settings (issue 29)."""

from __future__ import annotations

import pytest

from spark.kafka_security import SecurityOptionError, librdkafka_security
from spark.options import OptionError, parse_source_options

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="alice" password="s3cr\\"et";')
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="bob" password="pw";'

REWRITES = [
    ({"sasl.jaas.config": PLAIN_JAAS},
     {"sasl.username": "alice", "sasl.password": 's3cr"et', "sasl.mechanism": "PLAIN"}),
    ({"sasl.jaas.config": SCRAM_JAAS, "sasl.mechanism": "SCRAM-SHA-512"},
     {"sasl.username": "bob", "sasl.password": "pw", "sasl.mechanism": "SCRAM-SHA-512"}),
    ({"ssl.truststore.location": "/ca.pem", "ssl.truststore.type": "pem"}, {"ssl.ca.location": "/ca.pem"}),
    ({"ssl.truststore.certificates": "-----BEGIN CERTIFICATE-----", "ssl.truststore.type": "PEM"},
     {"ssl.ca.pem": "-----BEGIN CERTIFICATE-----"}),
    ({"ssl.keystore.location": "/me.pem", "ssl.keystore.type": "PEM", "ssl.key.password": "k"},
     {"ssl.certificate.location": "/me.pem", "ssl.key.location": "/me.pem", "ssl.key.password": "k"}),
    ({"ssl.keystore.location": "/me.p12", "ssl.keystore.type": "PKCS12", "ssl.keystore.password": "p"},
     {"ssl.keystore.location": "/me.p12", "ssl.keystore.password": "p"}),
    ({"ssl.endpoint.identification.algorithm": ""}, {"ssl.endpoint.identification.algorithm": "none"}),
    # librdkafka's own names pass as they are
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "a", "sasl.password": "b",
      "ssl.ca.location": "/ca.pem"},
     {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "a", "sasl.password": "b",
      "ssl.ca.location": "/ca.pem"}),
]


@pytest.mark.parametrize(("given", "expected"), REWRITES)
def test_rewrites(given: dict[str, str], expected: dict[str, str]) -> None:
    assert librdkafka_security(given) == expected


REFUSALS = [
    ({"sasl.jaas.config": "not jaas"}, "kafka.sasl.jaas.config"),
    ({"sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required;"}, "is not supported"),
    ({"sasl.jaas.config": PLAIN_JAAS.replace(' password="s3cr\\"et"', "")}, "names no username and password"),
    ({"sasl.jaas.config": PLAIN_JAAS, "sasl.password": "x"}, "both give the credentials"),
    ({"sasl.jaas.config": SCRAM_JAAS}, "SCRAM-SHA-256 or SCRAM-SHA-512"),
    ({"ssl.truststore.location": "/ts.jks"}, "JKS store, which librdkafka cannot read"),
    ({"ssl.truststore.location": "/ca.pem", "ssl.truststore.type": "PEM", "ssl.ca.location": "/other.pem"},
     "both name the file"),
    ({"ssl.keystore.location": "/ks.jks", "ssl.keystore.type": "JKS"}, "JKS store"),
    ({"ssl.truststore.certificates": "PEM", "ssl.ca.location": "/ca.pem"}, "both name the CA"),
]


@pytest.mark.parametrize(("given", "error"), REFUSALS)
def test_refusals_name_the_option_never_the_password(given: dict[str, str], error: str) -> None:
    with pytest.raises(SecurityOptionError, match=error) as raised:
        librdkafka_security(given)
    assert "s3cr" not in str(raised.value) and "pw" not in str(raised.value).split()


def test_source_options_carry_the_rewrite() -> None:
    options = parse_source_options({"kafka.bootstrap.servers": "h:9094", "subscribe": "t",
                                    "kafka.security.protocol": "SASL_SSL", "kafka.sasl.jaas.config": PLAIN_JAAS,
                                    "kafka.ssl.truststore.location": "/ca.pem",
                                    "kafka.ssl.truststore.type": "PEM"}, streaming=False)
    assert dict(options.kafka) == {"bootstrap.servers": "h:9094", "security.protocol": "SASL_SSL",
                                   "sasl.mechanism": "PLAIN", "sasl.username": "alice",
                                   "sasl.password": 's3cr"et', "ssl.ca.location": "/ca.pem"}
    with pytest.raises(OptionError, match="kafka.ssl.truststore.location"):
        parse_source_options({"kafka.bootstrap.servers": "h:9094", "subscribe": "t",
                              "kafka.ssl.truststore.location": "/ts.jks"}, streaming=False)
