"""security.ssl_principal: Kafka's SslPrincipalMapper (ssl.principal.mapping.rules), with the
cases of Kafka's SslPrincipalMapperTest, and common.listener_prefix's per-listener keys."""

from __future__ import annotations

import pytest

from common.config import parse_config
from common.config_schema import ConfigError
from common.listener_prefix import jaas_value, listener_value
from security.ssl_principal import NoMatchingRule, PrincipalMapper, RulesError

MAPPED = [  # (rules, distinguished name, principal name): Kafka's SslPrincipalMapperTest
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT", "CN=Duke,OU=ServiceUsers,O=Org,C=US", "Duke"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT", "CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US",
     "CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US"),
    ("RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
     "CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US", "duke@javasoft"),
    ("RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U", "cn=duke,ou=javasoft,dc=sun,dc=com", "DUKE@JAVASOFT"),
    ("RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L", "CN=Duke,OU=ServiceUsers,O=Org,C=US", "duke"),
    ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, RULE:^CN=(.*?),OU=(.*?),.*$/$2-$1/,DEFAULT",
     "CN=Duke,OU=Eng,O=Org", "Eng-Duke"),
    (r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT", r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz", r"Tkac\, Adam"),
    (r"RULE:^CN=(.*?)\/(.*?),.*$/$1_$2/", "CN=a/b,OU=x", "a_b"),  # an escaped slash in the pattern
    ("DEFAULT", "CN=alice", "CN=alice"),
    (None, "CN=alice", "CN=alice"),
]


@pytest.mark.parametrize(("rules", "dn", "expected"), MAPPED)
def test_rules_map_names_as_kafka(rules: str | None, dn: str, expected: str) -> None:
    assert PrincipalMapper.parse(rules).name(dn) == expected


@pytest.mark.parametrize("rules", [  # Kafka's testInvalidRules, and a pattern Python cannot compile
    "DEFAULT/L", "DEFAULT/U", "DEFAUL", "RULE:CN=(.*?),OU=ServiceUsers.*/$1", "RULE:CN=(.*?),OU=ServiceUsers.*/$1/L/U",
    "RULE:CN=(.*?),OU=ServiceUsers.*/L", "RULE:CN=(.*?),OU=ServiceUsers.*/U", "RULE:CN=(.*?),OU=ServiceUsers.*/LU",
    "RULE:CN=(.*/$1/", "RULE:^CN=(.*)$/$2/"])
def test_invalid_rules_are_refused(rules: str) -> None:
    with pytest.raises(RulesError):
        PrincipalMapper.parse(rules)


def test_no_matching_rule() -> None:
    with pytest.raises(NoMatchingRule, match="CN=bob"):
        PrincipalMapper.parse("RULE:^CN=(.*?),OU=ServiceUsers$/$1/").name("CN=bob")


def test_empty_rules_are_ignored() -> None:
    assert PrincipalMapper.parse("RULE:^CN=(.*)$/$1/, , DEFAULT").name("OU=x") == "OU=x"


# --- listener-prefixed keys ---------------------------------------------------------------------

NODE = {"node.id": "1", "process.roles": "broker"}


def test_listener_prefixed_keys_override_the_plain_ones() -> None:
    config = parse_config({**NODE,
        "ssl.client.auth": "none", "listener.name.internal.ssl.client.auth": "required",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="1";',
        "listener.name.internal.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_b="2";',
        "listener.name.internal.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512"})
    assert listener_value(config, "INTERNAL", "ssl.client.auth") == "required"
    assert listener_value(config, "EXTERNAL", "ssl.client.auth") == "none"
    assert listener_value(config, "INTERNAL", "sasl.enabled.mechanisms") == ("PLAIN", "SCRAM-SHA-512")
    assert 'user_b' in str(getattr(jaas_value(config, "INTERNAL", "PLAIN"), "value"))
    assert 'user_a' in str(getattr(jaas_value(config, "INTERNAL", "SCRAM-SHA-512"), "value"))
    assert 'user_a' in str(getattr(jaas_value(config, "EXTERNAL", "PLAIN"), "value"))


@pytest.mark.parametrize(("key", "value", "problem"), [
    ("listener.name.internal.ssl.client.auth", "sometimes", "listener.name.internal.ssl.client.auth"),
    ("listener.name.internal.ssl.client.auht", "none", "unknown config"),
    ("listener.name.internal.sasl.jaas.config", "x", "unknown config"),  # Kafka: per mechanism only
    ("listener.name.internal.connections.max.reauth.ms", "-1", "listener.name.internal.connections.max.reauth.ms"),
])
def test_a_bad_prefixed_key_is_named(key: str, value: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem.replace(".", r"\.")):
        parse_config({**NODE, key: value})
