"""Client-side helpers for the ISR and unclean-election tests: produce and see each record's
fate, read a broker's gauges, and wait on a broker's registration.

`produce` uses confluent-kafka with idempotence and retries off, so the broker's error code
for each batch reaches the test unchanged (NOT_ENOUGH_REPLICAS stays NOT_ENOUGH_REPLICAS
instead of being retried until the message times out).
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any, NamedTuple

from common.prometheus import samples
from tests.integration.cluster_fixtures import HTTP_TIMEOUT_S, http, wait_until
from localcluster.launcher import LocalCluster

FLUSH_S = 30.0  # a flush waits at most this long; message.timeout.ms is always below it


class Delivery(NamedTuple):
    value: bytes
    offset: int  # -1 when not delivered
    error: str | None  # librdkafka's error name (e.g. NOT_ENOUGH_REPLICAS, _MSG_TIMED_OUT)


def produce(bootstrap: str, topic: str, values: list[bytes], *, acks: str, partition: int = 0,
            message_timeout_ms: int = 15_000) -> list[Delivery]:
    """Send `values` in order with `acks`, no retries; every record's delivery report."""
    from confluent_kafka import Producer

    assert message_timeout_ms < FLUSH_S * 1000
    reports: dict[bytes, Delivery] = {}

    def on_delivery(error: Any, message: Any) -> None:
        value = message.value()
        reports[value] = Delivery(value, -1 if error is not None else message.offset(),
                                  None if error is None else error.name())

    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": False,
                         "retries": 0, "linger.ms": 0, "message.timeout.ms": message_timeout_ms,
                         "max.in.flight.requests.per.connection": 1})
    for value in values:
        producer.produce(topic, value=value, partition=partition, on_delivery=on_delivery)
    left = producer.flush(FLUSH_S)
    assert left == 0, f"{left} records still undelivered after {FLUSH_S} s"
    return [reports[v] for v in values]


def values(prefix: str, count: int) -> list[bytes]:
    """Distinct record values b"<prefix>-0", b"<prefix>-1", ... (produce() tells them apart)."""
    return [b"%s-%d" % (prefix.encode(), i) for i in range(count)]


def assert_delivered(deliveries: list[Delivery]) -> list[int]:
    """The offsets of records that must all have been acknowledged."""
    failed = [d for d in deliveries if d.error is not None]
    assert failed == [], failed[:5]
    return [d.offset for d in deliveries]


def leader_bootstrap(cluster: LocalCluster, broker_id: int) -> str:
    """One broker's address alone: a client bootstrapping from a paused broker would hang on it."""
    return cluster.node(broker_id).spec.bootstrap_address


def broker_registration(cluster: LocalCluster, broker_id: int) -> dict[str, Any]:
    status, body = http(f"{cluster.admin_url}/v1/brokers/{broker_id}")
    assert status == 200, body
    return json.loads(body)  # type: ignore[no-any-return]


def wait_unfenced(cluster: LocalCluster, broker_id: int, timeout_s: float = 30.0) -> dict[str, Any]:
    return wait_until(f"broker {broker_id} registered and unfenced",  # type: ignore[no-any-return]
                      lambda: (r := broker_registration(cluster, broker_id))["fenced"] is False and r,
                      timeout_s)


def broker_gauges(cluster: LocalCluster, broker_id: int) -> dict[str, float]:
    """Every unlabelled sample of the broker's GET /metrics, by metric name."""
    with urllib.request.urlopen(cluster.node(broker_id).spec.metrics_url, timeout=HTTP_TIMEOUT_S) as answer:
        text = answer.read().decode()
    return {name: value for name, value in samples(text).items() if "{" not in name}
