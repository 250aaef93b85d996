"""Operating transactions against a real cluster (3 controllers + 1 broker) with a real
confluent-kafka transactional producer that leaves its transaction open: `tidelog transactions
list/describe/describe-producers/find-hanging` see it, `abort --start-offset` ends it (the
last stable offset moves: a read_committed consumer then reads past it), and the admin API's
/v1/transactions endpoints do the same on another partition."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from common.waiting import WaitTimeout
from tests.integration.cluster_fixtures import http, running_cluster, wait_until
from localcluster.launcher import LocalCluster

confluent_kafka = pytest.importorskip("confluent_kafka")

TOPIC = "txn-tools"
PARTITIONS = 3
TRANSACTION_TIMEOUT_MS = 600_000  # the open transaction must outlive the test, not time out in it
CLIENT_TIMEOUT_S = 30.0
ABSENT_S = 2.0  # how long a read_committed consumer is given to (wrongly) read past an open transaction


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory.mktemp("txn-tools")) as started:
        status, body = http(f"{started.admin_url}/v1/topics", "POST",
                            {"name": TOPIC, "partitions": PARTITIONS, "replication_factor": 1})
        assert status == 201, body
        yield started


def tidelog(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    from tidelog.cli import main

    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def table(text: str) -> list[dict[str, str]]:
    """kafka-transactions.sh's tab-separated table as dicts by column name."""
    lines = [line.split("\t")[:-1] for line in text.splitlines() if "\t" in line]
    header = [h.strip() for h in lines[0]]
    return [dict(zip(header, (cell.strip() for cell in line))) for line in lines[1:]]


@pytest.fixture
def open_transaction(cluster: LocalCluster, request: pytest.FixtureRequest) -> Iterator[tuple[Any, int]]:
    """A transactional producer with one record in partition `request.param`, never committed;
    then a plain record after it in the same partition."""
    partition = request.param
    bootstrap = cluster.bootstrap_servers
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tools-{partition}",
                                  "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS})
    p.init_transactions(CLIENT_TIMEOUT_S)
    p.begin_transaction()
    p.produce(TOPIC, b"open", partition=partition)
    assert p.flush(CLIENT_TIMEOUT_S) == 0
    plain = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    plain.produce(TOPIC, b"after", partition=partition)
    assert plain.flush(CLIENT_TIMEOUT_S) == 0
    try:
        yield p, partition
    finally:
        try:
            p.abort_transaction(CLIENT_TIMEOUT_S)
        except confluent_kafka.KafkaException:
            pass  # after an operator's abort the coordinator may refuse: nothing left to clean


def read_committed(bootstrap: str, partition: int, timeout_s: float) -> list[bytes]:
    """Values a read_committed consumer reads from offset 0 until "after", or for `timeout_s`."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"rc-{partition}",
                                         "isolation.level": "read_committed", "enable.auto.commit": False})
    got: list[bytes] = []

    def reached_after() -> bool:
        got.extend(m.value() for m in consumer.consume(10, 0.1) if m.error() is None)
        return b"after" in got

    try:
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, partition, 0)])
        wait_until("a read_committed consumer reads past the transaction", reached_after, timeout_s)
    except WaitTimeout:
        pass  # the caller checks what was read
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("open_transaction", [0], indirect=True)
def test_cli_sees_the_open_transaction_and_abort_ends_it(cluster: LocalCluster, open_transaction: tuple[Any, int],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    _, partition = open_transaction
    bootstrap = cluster.bootstrap_servers
    assert bootstrap is not None
    server = ["--bootstrap-server", bootstrap]

    code, out = tidelog(capsys, "transactions", "list", *server)
    assert code == 0, out
    assert {"TransactionalId": "tools-0", "Coordinator": "4", "TransactionState": "Ongoing"}.items() <= next(
        r for r in table(out) if r["TransactionalId"] == "tools-0").items()

    code, out = tidelog(capsys, "transactions", "list", "--duration-filter", "3600000", *server)
    assert code == 0 and "tools-0" not in out, out  # open for seconds, not an hour (KIP-994)

    code, out = tidelog(capsys, "transactions", "describe", "--transactional-id", "tools-0", *server)
    assert code == 0, out
    (row,) = table(out)
    assert (row["TransactionState"], row["TopicPartitions"], row["TransactionTimeoutMs"]) == (
        "Ongoing", f"{TOPIC}-0", str(TRANSACTION_TIMEOUT_MS))

    code, out = tidelog(capsys, "transactions", "describe-producers", "--topic", TOPIC, "--partition", "0", *server)
    assert code == 0, out
    open_rows = [r for r in table(out) if r["CurrentTransactionStartOffset"] != "None"]
    assert [r["CurrentTransactionStartOffset"] for r in open_rows] == ["0"], out

    # open, but its coordinator lists this partition: a marker will come, so it is not hanging
    code, out = tidelog(capsys, "transactions", "find-hanging", "--topic", TOPIC, "--max-transaction-timeout", "0",
                        *server)
    assert code == 0, out
    assert table(out) == [], out

    assert b"after" not in read_committed(bootstrap, partition, ABSENT_S)  # the LSO holds at 0

    code, out = tidelog(capsys, "transactions", "abort", "--topic", TOPIC, "--partition", "0", "--start-offset", "7",
                        *server)
    assert code == 1 and "Could not find any open transactions starting at offset 7" in out, out

    code, out = tidelog(capsys, "transactions", "abort", "--topic", TOPIC, "--partition", "0", "--start-offset", "0",
                        *server)
    assert (code, out) == (0, ""), out
    assert read_committed(bootstrap, partition, CLIENT_TIMEOUT_S) == [b"after"]  # "open" was aborted
    code, out = tidelog(capsys, "transactions", "describe-producers", "--topic", TOPIC, "--partition", "0", *server)
    assert code == 0 and all(r["CurrentTransactionStartOffset"] == "None" for r in table(out)), out


def test_cli_errors_carry_kafkas_names(cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
    server = ["--bootstrap-server", str(cluster.bootstrap_servers)]
    code, out = tidelog(capsys, "transactions", "describe", "--transactional-id", "never-used", *server)
    assert code == 1 and out.startswith("Error: TRANSACTIONAL_ID_NOT_FOUND"), out
    code, out = tidelog(capsys, "transactions", "describe-producers", "--topic", "nope", "--partition", "0", *server)
    assert code == 1 and out.startswith("Error: UNKNOWN_TOPIC_OR_PARTITION"), out


@pytest.mark.parametrize("open_transaction", [1], indirect=True)
def test_admin_api_sees_the_open_transaction_and_aborts_it(cluster: LocalCluster,
                                                          open_transaction: tuple[Any, int]) -> None:
    _, partition = open_transaction
    api = cluster.admin_url
    bootstrap = cluster.bootstrap_servers
    assert bootstrap is not None

    def get(path: str) -> Any:
        status, body = http(f"{api}{path}")
        assert status == 200, body
        return json.loads(body)

    listed = [t for t in get("/v1/transactions") if t["transactional_id"] == "tools-1"]
    assert [(t["coordinator"], t["state"]) for t in listed] == [(4, "Ongoing")]
    assert "tools-1" not in [t["transactional_id"] for t in get("/v1/transactions?duration_filter=3600000")]
    described = get("/v1/transactions/tools-1")
    assert (described["state"], described["partitions"]) == ("Ongoing", [{"topic": TOPIC, "partition": 1}])
    producers = get(f"/v1/topics/{TOPIC}/partitions/1/producers")["producers"]
    assert [p["current_transaction_start_offset"] for p in producers
            if p["current_transaction_start_offset"] is not None] == [0]
    assert get(f"/v1/hanging-transactions?topic={TOPIC}&partition=1&max_transaction_timeout=0") == []

    status, body = http(f"{api}/v1/topics/{TOPIC}/partitions/1/abort-transaction", "POST", {"start_offset": 5})
    assert (status, json.loads(body)["field"]) == (400, "start_offset"), body
    status, body = http(f"{api}/v1/topics/{TOPIC}/partitions/1/abort-transaction", "POST", {"start_offset": 0})
    assert status == 200 and json.loads(body)["aborted"], body
    assert read_committed(bootstrap, partition, CLIENT_TIMEOUT_S) == [b"after"]
    assert all(p["current_transaction_start_offset"] is None
               for p in get(f"/v1/topics/{TOPIC}/partitions/1/producers")["producers"])
