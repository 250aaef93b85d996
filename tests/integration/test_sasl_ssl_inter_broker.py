"""Replication and controlled shutdown over an inter-broker SASL_SSL listener whose brokers log in
with SCRAM-SHA-512 (issue 29), with real processes.

One controller and two brokers started as `tidelog up --security SASL_SSL` starts them
(localcluster.security_setup: a throwaway CA, a SASL_SSL listener that is also the
inter-broker one), plus what an operator adds for a SCRAM broker user, as in Kafka:
`sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512` and the broker's own login in
`listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config` (a ScramLoginModule line), and the
credential created with `tidelog users create` (Kafka: kafka-storage format --add-scram or
kafka-configs.sh). PLAIN still serves the admin client (the unprefixed PLAIN line); that line
also has a PLAIN `broker` user with the same password, so only SCRAM tells the two apart: until
the SCRAM credential exists the followers' logins are refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from common.waiting import wait_until
from localcluster.launcher import LocalCluster, free_ports
from localcluster.security_setup import read_client_config
from tests.integration.cluster_fixtures import http, spawn_node

confluent_kafka = pytest.importorskip("confluent_kafka")
confluent_admin = pytest.importorskip("confluent_kafka.admin")

HOSTS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]  # the controller, brokers 2 and 3
READY_S = 60.0
CLIENT_TIMEOUT_S = 20.0
WAIT_S = 30.0
BROKER_PASSWORD = "broker-scram-secret"
ADMIN_PASSWORD = "admin-plain-secret"
SCRAM_JAAS = ("org.apache.kafka.common.security.scram.ScramLoginModule required "
              f'username="broker" password="{BROKER_PASSWORD}";')
BROKER_CONFIG = {
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
    "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
    "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
    "broker.heartbeat.interval.ms": "200", "broker.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "4000", "replica.fetch.backoff.ms": "200",
    "controlled.shutdown.timeout.ms": "20000",
}
TOPIC = "replicated"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = tmp_path_factory.mktemp("inter-broker-scram")
    # the launcher makes its users' passwords once and keeps them here: made first, the broker's is
    # known to the SCRAM login line above before the first start
    tls = root / "tls"
    tls.mkdir(mode=0o700)
    passwords = tls / "passwords"
    passwords.write_text(f"admin={ADMIN_PASSWORD}\nbroker={BROKER_PASSWORD}\n")
    os.chmod(passwords, 0o600)
    raft, admin, kafka_port, metrics = free_ports(HOSTS, 4)
    with LocalCluster.start(root, controllers=1, brokers=2, raft_port=raft, admin_port=admin,
                            kafka_port=kafka_port, metrics_port=metrics, ready_timeout=READY_S,
                            security="SASL_SSL", broker_config=BROKER_CONFIG, spawn=spawn_node) as started:
        try:
            yield started
        finally:
            started.stop()


def client_config(cluster: LocalCluster) -> dict[str, Any]:
    return dict(read_client_config(cluster.root))


def broker_log(cluster: LocalCluster, broker_id: int) -> str:
    return cluster.node(broker_id).spec.log_path.read_text(errors="replace")


def partition(cluster: LocalCluster) -> dict[str, Any]:
    status, body = http(f"{cluster.admin_url}/v1/topics/{TOPIC}")
    assert status == 200, body
    return dict(json.loads(body)["partitions"][0])


def produce(config: dict[str, Any], count: int, tag: str) -> list[Any]:
    producer = confluent_kafka.Producer({**config, "acks": "all", "message.timeout.ms": 20_000})
    delivered: list[Any] = []
    for i in range(count):
        producer.produce(TOPIC, f"{tag}{i}".encode(), on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(CLIENT_TIMEOUT_S + 5) == 0
    return delivered


def test_followers_log_in_with_scram(cluster: LocalCluster) -> None:
    """Before the SCRAM credential exists the follower's logins fail (the PLAIN `broker` user would
    have let it in); once `tidelog users create` made it, acks=all with min.insync.replicas=2 succeeds,
    which needs the follower's fetches over SASL_SSL."""
    config = client_config(cluster)
    admin = confluent_admin.AdminClient(config)
    topic = confluent_admin.NewTopic(TOPIC, 1, 2, config={"min.insync.replicas": "2"})
    admin.create_topics([topic])[TOPIC].result(CLIENT_TIMEOUT_S)
    refused = "no SCRAM-SHA-512 credential for user 'broker'"
    wait_until("a follower's SCRAM login refused", lambda: any(
        refused in broker_log(cluster, b.spec.node_id) for b in cluster.brokers), WAIT_S)
    plaintext = cluster.brokers[0].spec.bootstrap_address
    created = subprocess.run([sys.executable, "-m", "tidelog", "users", "create", "--user", "broker",
                              "--password", BROKER_PASSWORD, "--mechanism", "SCRAM-SHA-512",
                              "--bootstrap-server", plaintext], capture_output=True, text=True, timeout=60)
    assert created.returncode == 0, created.stderr
    wait_until("the follower back in the ISR", lambda: len(partition(cluster)["isr"]) == 2, WAIT_S)
    assert produce(config, 5, "r") == [None] * 5
    for broker in cluster.brokers:
        log = broker_log(cluster, broker.spec.node_id)
        assert "inter-broker listener SASL_SSL" in log and "TLS handshake with" not in log


def test_controlled_shutdown_over_sasl_ssl(cluster: LocalCluster) -> None:
    """SIGTERM the leader: leadership moves to the other broker before it exits (exit 0), writes go
    on there; started again it catches up over SASL_SSL with SCRAM and rejoins the ISR."""
    from chaos.nemesis import Nemesis

    config = client_config(cluster)
    wait_until("both replicas in the ISR", lambda: len(partition(cluster)["isr"]) == 2, WAIT_S)
    victim = int(partition(cluster)["leader"])
    with Nemesis(cluster) as nemesis:
        report = cluster.node(victim).stop()
        assert (report.outcome, report.exit_status) == ("stopped", 0), broker_log(cluster, victim)[-3000:]
        state = partition(cluster)
        assert state["leader"] not in (victim, -1) and state["isr"] == [state["leader"]], state
        text = broker_log(cluster, victim)
        assert "Transitioning from PENDING_CONTROLLED_SHUTDOWN to SHUTTING_DOWN" in text, text[-3000:]
        assert "did not complete within controlled.shutdown.timeout.ms" not in text
        admin = confluent_admin.AdminClient(config)
        admin.incremental_alter_configs([confluent_admin.ConfigResource(
            confluent_admin.ConfigResource.Type.TOPIC, TOPIC, incremental_configs=[confluent_admin.ConfigEntry(
                "min.insync.replicas", "1", incremental_operation=confluent_admin.AlterConfigOpType.SET)])]
        )[confluent_admin.ConfigResource(confluent_admin.ConfigResource.Type.TOPIC, TOPIC)].result(CLIENT_TIMEOUT_S)
        assert produce(config, 3, "down") == [None] * 3  # the survivor alone
        nemesis.restart(victim)
        wait_until(f"broker {victim} back in the ISR", lambda: len(partition(cluster)["isr"]) == 2, WAIT_S)
    assert "Traceback" not in broker_log(cluster, victim)
    assert produce(config, 3, "after") == [None] * 3

