"""broker.refusal_log with real clients against a real cluster (3 controllers + broker 4): a
request the broker refuses leaves one INFO line naming the client id and the reason, however
often the client retries.

- confluent-kafka's init_transactions with a transaction.timeout.ms above the broker's
  transaction.max.timeout.ms: librdkafka fails with INVALID_TRANSACTION_TIMEOUT (the response
  has no message); the broker log says why, once;
- confluent-kafka's AdminClient describe_acls: SECURITY_DISABLED (which librdkafka shows its
  user as an empty list), once per client.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster_fixtures import running_cluster, wait_until
from localcluster.launcher import LocalCluster

confluent_kafka = pytest.importorskip("confluent_kafka")
confluent_admin = pytest.importorskip("confluent_kafka.admin")

TOO_LONG_MS = 3_600_000  # above transaction.max.timeout.ms (900,000)
CLIENT_TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory.mktemp("refusal-log") / "cluster") as started:
        yield started  # every process stopped on exit, even on failure


def broker_log(cluster: LocalCluster) -> Path:
    return cluster.brokers[0].spec.log_path


def lines_with(path: Path, text: str) -> list[str]:
    return [line for line in path.read_text(errors="replace").splitlines() if text in line]


def test_a_refused_transactional_init_leaves_one_line_naming_the_client_and_why(cluster: LocalCluster) -> None:
    for _ in range(2):  # the second refusal is left out of the log
        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers, "client.id": "payments-app",
                                             "transactional.id": "payments-tx", "transaction.timeout.ms": TOO_LONG_MS})
        with pytest.raises(confluent_kafka.KafkaException) as caught:
            producer.init_transactions(CLIENT_TIMEOUT_S)
        assert caught.value.args[0].code() == confluent_kafka.KafkaError.INVALID_TRANSACTION_TIMEOUT
    expected = ("Refused InitProducerId from client 'payments-app' at /127.0.0.1: INVALID_TRANSACTION_TIMEOUT: "
                f"transaction timeout {TOO_LONG_MS} ms is not in 1..900000 (transaction.max.timeout.ms)")
    wait_until("the refusal in the broker log", lambda: lines_with(broker_log(cluster), expected), CLIENT_TIMEOUT_S)
    found = lines_with(broker_log(cluster), "Refused InitProducerId from client 'payments-app'")
    assert len(found) == 1 and " INFO " in found[0], found


def test_an_acl_call_leaves_one_line_per_client(cluster: LocalCluster) -> None:
    admin = confluent_admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers, "client.id": "acl-tool"})
    acl_filter = confluent_admin.AclBindingFilter(
        confluent_admin.ResourceType.ANY, None, confluent_admin.ResourcePatternType.ANY, None, None,
        confluent_admin.AclOperation.ANY, confluent_admin.AclPermissionType.ANY)
    for _ in range(3):  # librdkafka 2.x hands its user an empty list for SECURITY_DISABLED
        with contextlib.suppress(confluent_kafka.KafkaException):
            admin.describe_acls(acl_filter, request_timeout=CLIENT_TIMEOUT_S).result(timeout=CLIENT_TIMEOUT_S)
    expected = ("Refused DescribeAcls from client 'acl-tool' at /127.0.0.1: SECURITY_DISABLED: "
                "No Authorizer is configured on the broker")
    wait_until("the refusal in the broker log", lambda: lines_with(broker_log(cluster), expected), CLIENT_TIMEOUT_S)
    assert len(lines_with(broker_log(cluster), "Refused DescribeAcls from client 'acl-tool'")) == 1
