"""spark.fetch_client's pure parts: which clusters the raw-Fetch reader can talk to, and
how bootstrap.servers is read."""

from __future__ import annotations

import pytest

from spark.fetch_client import bootstrap_addresses, supports


@pytest.mark.parametrize(("kafka", "expected"), [
    ({"bootstrap.servers": "h:9092"}, True),
    ({"security.protocol": "PLAINTEXT"}, True),
    ({"security.protocol": " plaintext "}, True),
    ({"security.protocol": "SSL"}, False),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, False),
    ({"ssl.ca.location": "/ca.pem"}, False),
    ({"sasl.username": "u"}, False),
])
def test_only_plaintext_clusters_take_the_raw_fetch_path(kafka: dict[str, str], expected: bool) -> None:
    assert supports(kafka) is expected


@pytest.mark.parametrize(("servers", "expected"), [
    ("127.0.0.1:9092", [("127.0.0.1", 9092)]),
    ("a:1, b:2,", [("a", 1), ("b", 2)]),
    ("broker", [("broker", 9092)]),
    ("[::1]:9093", [("::1", 9093)]),
    ("::1", [("::1", 9092)]),
    ("", []),
])
def test_bootstrap_addresses(servers: str, expected: list[tuple[str, int]]) -> None:
    assert bootstrap_addresses(servers) == expected
