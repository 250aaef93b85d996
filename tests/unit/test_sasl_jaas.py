"""security.sasl_jaas: Kafka's JAAS line as sasl.jaas.config holds it."""

from __future__ import annotations

import pytest

from security.sasl_jaas import JaasError, parse_jaas

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"

LINES = [
    (f'{PLAIN_MODULE} required username="admin" password="admin-secret" user_admin="admin-secret" '
     'user_alice="alice-secret";', {"admin": "admin-secret", "alice": "alice-secret"}, ("admin", "admin-secret")),
    (f'{PLAIN_MODULE} required user_bob="b o b";', {"bob": "b o b"}, None),  # no own credentials
    (f'{PLAIN_MODULE} required user_q="a\\"b";', {"q": 'a"b'}, None),  # an escaped quote
    ('org.apache.kafka.common.security.scram.ScramLoginModule required username=broker password=x;', {},
     ("broker", "x")),  # unquoted values
    (f"  {PLAIN_MODULE}   required  ;  ", {}, None),
]


@pytest.mark.parametrize("text, users, credentials", LINES)
def test_parse(text: str, users: dict[str, str], credentials: tuple[str, str] | None) -> None:
    jaas = parse_jaas(text)
    assert (jaas.plain_users, jaas.credentials) == (users, credentials)


@pytest.mark.parametrize("text", ["", "required s3cret", f"{PLAIN_MODULE} maybe user_a=\"s3cret\";",
                                  f'{PLAIN_MODULE} required user_a="s3cret',
                                  f"{PLAIN_MODULE} required =s3cret;"])
def test_refused_without_echoing_values(text: str) -> None:
    with pytest.raises(JaasError) as info:
        parse_jaas(text)
    assert "s3cret" not in str(info.value)  # a password never reaches a log line
