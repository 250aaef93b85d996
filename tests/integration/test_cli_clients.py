"""`tidelog status | topics | produce | consume` against a real cluster, each a real CLI process.

One cluster for the module (controller 1, brokers 2 and 3, short heartbeats), found by the
commands through its data dir's cluster.json like an operator's. Exit codes are checked on
every call: 0 ok, 1 an error from the cluster (printed with Kafka's error name), 2 usage.
Records cross between our console tools and real clients (kcat, confluent-kafka with the
Java partitioner) both ways. The last test is the README tour's controlled shutdown: a broker
is asked to stop through POST /v1/brokers/{id}/shutdown while `tidelog produce` writes, and
no acknowledged record is lost.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.log.log_manager import CLEAN_SHUTDOWN_FILE
from tests.integration.cluster_fixtures import http, spawn_node, wait_until
from localcluster.launcher import LocalCluster, free_ports
from localcluster.node_process import NodeProcess

confluent_kafka = pytest.importorskip("confluent_kafka")  # the reference client; make test installs it

REPO = Path(__file__).resolve().parents[2]
HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
BROKERS = (2, 3)
CLI_TIMEOUT_S = 90.0
READY_S = 30.0
KCAT = shutil.which("kcat") or shutil.which("kafkacat")
PROPERTIES = {"broker.heartbeat.interval.ms": "200", "broker.session.timeout.ms": "3000",
              "controlled.shutdown.timeout.ms": "10000"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    raft_port, admin_port, kafka_port, metrics_port = free_ports(HOSTS, 4)
    with LocalCluster.start(tmp_path_factory.mktemp("cli") / "data", controllers=1, raft_port=raft_port,
                            admin_port=admin_port, brokers=2, kafka_port=kafka_port, metrics_port=metrics_port,
                            ready_timeout=READY_S, extra_properties=PROPERTIES, spawn=spawn_node) as started:
        yield started  # every node stopped here (a restarted broker included), even after a failure


def tidelog(cluster: LocalCluster, *args: str, stdin: str | None = None,
            data_dir: bool = True) -> subprocess.CompletedProcess[str]:
    where = ["--data-dir", str(cluster.root)] if data_dir else []
    return subprocess.run([sys.executable, "-m", "tidelog", *args, *where], input=stdin, capture_output=True,
                          text=True, cwd=REPO, timeout=CLI_TIMEOUT_S)


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, (done.args, done.stdout, done.stderr)
    return done.stdout


def fails(done: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    assert done.returncode == code, (done.args, done.stdout, done.stderr)
    assert text in done.stderr, done.stderr


def led(cluster: LocalCluster, topic: str) -> bool:
    status, answer = http(f"{cluster.admin_url}/v1/topics/{topic}")
    return status == 200 and all(p["leader"] != -1 for p in json.loads(answer)["partitions"])


def test_status(cluster: LocalCluster) -> None:
    out = ok(tidelog(cluster, "status"))
    assert "active controller 1," in out
    for broker in BROKERS:
        assert any(line.split()[:2] == [str(broker), "UNFENCED"] for line in out.splitlines()), out
    assert sum(" running " in line for line in out.splitlines()) == 3, out
    fails(tidelog(cluster, "status", "--admin-url", "http://127.0.0.1:1", data_dir=False), 1,
          "Error: CONTROLLER_UNREACHABLE")


def test_topics_lifecycle_and_exit_codes(cluster: LocalCluster, tmp_path: Path) -> None:
    assert ok(tidelog(cluster, "topics", "create", "--topic", "orders", "--partitions", "3",
                      "--replication-factor", "1", "--config", "retention.ms=600000")) == "Created topic orders.\n"
    fails(tidelog(cluster, "topics", "create", "--topic", "orders"), 1, "Error: TOPIC_ALREADY_EXISTS:")
    assert ok(tidelog(cluster, "topics", "create", "--topic", "orders", "--if-not-exists")) == ""
    fails(tidelog(cluster, "topics", "create", "--topic", "wide", "--replication-factor", "3"), 1,
          "Error: INVALID_REPLICATION_FACTOR:")
    fails(tidelog(cluster, "topics", "create", "--topic", "bad", "--config", "retention.ms=soon"), 1,
          "Error: INVALID_CONFIG:")
    listing = ok(tidelog(cluster, "topics", "list"))
    assert listing.splitlines()[0].split() == ["TOPIC", "PARTITIONS", "OFFLINE", "UNDER_REPLICATED", "TOPIC_ID"]
    assert ["orders", "3", "0", "0"] in [line.split()[:4] for line in listing.splitlines()]
    described = ok(tidelog(cluster, "topics", "describe", "--topic", "orders")).splitlines()
    assert described[0].startswith("Topic: orders  TopicId: ") and "Configs: retention.ms=600000" in described[0]
    assert [line.split()[0] for line in described[2:]] == ["0", "1", "2"]
    assert ok(tidelog(cluster, "topics", "describe", "--unavailable-partitions")) == ""
    altered = ok(tidelog(cluster, "topics", "alter-config", "--topic", "orders", "--config", "segment.bytes=1048576",
                         "--delete-config", "retention.ms"))
    assert altered.splitlines()[0] == "Completed updating config for topic orders."
    assert [line.split() for line in altered.splitlines()[1:]] == [["CONFIG", "VALUE"], ["segment.bytes", "1048576"]]
    fails(tidelog(cluster, "topics", "describe", "--topic", "nope"), 1, "Error: UNKNOWN_TOPIC_OR_PARTITION:")
    # explicit --admin-url, no data dir; usage errors exit 2
    assert "orders" in ok(tidelog(cluster, "topics", "list", "--admin-url", cluster.admin_url, data_dir=False))
    fails(tidelog(cluster, "topics", "list", "--data-dir", str(tmp_path), data_dir=False), 2, "no admin API")
    fails(tidelog(cluster, "topics", "create"), 2, "--topic")
    fails(tidelog(cluster, "topics", "alter-config", "--topic", "orders"), 2, "at least one")
    assert ok(tidelog(cluster, "topics", "delete", "--topic", "orders")) == "Deleted topic orders.\n"
    fails(tidelog(cluster, "topics", "delete", "--topic", "orders"), 1, "Error: UNKNOWN_TOPIC_OR_PARTITION:")
    assert ok(tidelog(cluster, "topics", "delete", "--topic", "orders", "--if-exists")) == ""


def test_configs_describe_and_alter_as_kafka_configs(cluster: LocalCluster) -> None:
    ok(tidelog(cluster, "topics", "create", "--topic", "configured", "--replication-factor", "1"))
    wait_until("configured led", lambda: led(cluster, "configured"))
    topic = ("--entity-type", "topics", "--entity-name", "configured")
    assert ok(tidelog(cluster, "configs", "describe", *topic)) == "Dynamic configs for topic configured are:\n"
    assert ok(tidelog(cluster, "configs", "alter", *topic, "--add-config",
                      "retention.ms=60000,cleanup.policy=[compact,delete]")) == \
        "Completed updating config for topic configured.\n"
    lines = ok(tidelog(cluster, "configs", "describe", *topic)).splitlines()
    assert lines[0] == "Dynamic configs for topic configured are:"
    assert sorted(line.split()[0] for line in lines[1:]) == ["cleanup.policy=compact,delete", "retention.ms=60000"]
    assert "synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000" in "\n".join(lines)
    ok(tidelog(cluster, "configs", "alter", *topic, "--delete-config", "retention.ms"))
    every = ok(tidelog(cluster, "configs", "describe", *topic, "--all")).splitlines()
    assert every[0] == "All configs for topic configured are:"
    assert "  retention.ms=604800000 sensitive=false" in "\n".join(every)
    fails(tidelog(cluster, "configs", "alter", *topic, "--add-config", "retention.ms=soon"), 1,
          "Error: INVALID_CONFIG:")
    fails(tidelog(cluster, "configs", "alter", *topic, "--add-config", "oops"), 2, "expected k=v")
    broker = ("--entity-type", "brokers", "--entity-name", str(BROKERS[0]))
    described = ok(tidelog(cluster, "configs", "describe", *broker, "--all"))
    assert described.startswith(f"All configs for broker {BROKERS[0]} are:\n")
    assert "controller.cluster.password" not in described or "controller.cluster.password=null" in described
    fails(tidelog(cluster, "configs", "alter", *broker, "--add-config", "log.dirs=/x"), 1,
          "Error: INVALID_REQUEST: Cannot update these configs dynamically: log.dirs")
    assert ok(tidelog(cluster, "configs", "alter", *broker, "--add-config", "log.retention.ms=3600000")) == \
        f"Completed updating config for broker {BROKERS[0]}.\n"  # a dynamic key (Kafka's DynamicLogConfig)
    assert "log.retention.ms=3600000" in ok(tidelog(cluster, "configs", "describe", *broker))
    ok(tidelog(cluster, "configs", "alter", *broker, "--delete-config", "log.retention.ms"))
    ok(tidelog(cluster, "topics", "delete", "--topic", "configured"))


def test_produce_and_consume_with_keys_and_real_clients(cluster: LocalCluster) -> None:
    ok(tidelog(cluster, "topics", "create", "--topic", "keyed", "--partitions", "3"))
    wait_until("keyed led", lambda: led(cluster, "keyed"))
    lines = [f"k{i}:v{i}" for i in range(30)]
    produced = tidelog(cluster, "produce", "keyed", "--key-separator", ":", stdin="\n".join(lines) + "\n")
    assert ok(produced) == "" and "30 record(s) to keyed" in produced.stderr
    consumed = tidelog(cluster, "consume", "keyed", "--from-beginning", "--max-messages", "30",
                       "--property", "print.key=true", "--property", "print.partition=true")
    assert "Processed a total of 30 messages" in consumed.stderr
    rows = [line.split("\t") for line in ok(consumed).splitlines()]  # Partition:N, key, value
    assert sorted(f"{key}:{value}" for _, key, value in rows) == sorted(lines)
    ours = {key: partition for partition, key, _ in rows}

    # the Java partitioner (librdkafka's murmur2_random) puts every key where ours did
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                         "partitioner": "murmur2_random"})
    delivered: dict[str, int] = {}
    for i in range(30):
        producer.produce("keyed", key=f"k{i}", value=f"java{i}",
                         on_delivery=lambda err, msg: delivered.__setitem__(msg.key().decode(), msg.partition()))
    assert producer.flush(30) == 0
    assert {k: f"Partition:{p}" for k, p in delivered.items()} == ours

    if KCAT is None:  # make test installs it from Debian when it can
        pytest.skip("kcat is not installed: the kcat half of this test did not run")
    # kcat reads what we wrote, and we read what kcat writes
    seen = subprocess.run([KCAT, "-C", "-b", cluster.bootstrap_servers, "-t", "keyed", "-e", "-q",
                           "-f", "%k:%s\n"], capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    assert set(lines) <= set(seen.stdout.splitlines()), seen.stderr
    subprocess.run([KCAT, "-P", "-b", cluster.bootstrap_servers, "-t", "keyed", "-p", "1", "-K", "="],
                   input="from=kcat\n", text=True, check=True, timeout=CLI_TIMEOUT_S)
    tail = tidelog(cluster, "consume", "keyed", "--partition", "1", "--offset", "earliest",
                   "--property", "print.key=true", "--timeout-ms", "2000")
    assert "from\tkcat" in ok(tail).splitlines()


def test_consume_options(cluster: LocalCluster) -> None:
    ok(tidelog(cluster, "topics", "create", "--topic", "counted", "--partitions", "1"))
    wait_until("counted led", lambda: led(cluster, "counted"))
    ok(tidelog(cluster, "produce", "counted", stdin="".join(f"{i}\n" for i in range(10))))
    assert ok(tidelog(cluster, "consume", "counted", "--partition", "0", "--offset", "7", "--max-messages", "2",
                      "--property", "print.offset=true")) == "Offset:7\t7\nOffset:8\t8\n"
    latest = tidelog(cluster, "consume", "counted", "--timeout-ms", "1000")
    assert ok(latest) == "" and "Processed a total of 0 messages" in latest.stderr
    fails(tidelog(cluster, "consume", "missing", "--timeout-ms", "1000"), 1, "Error: UNKNOWN_TOPIC_OR_PARTITION:")
    fails(tidelog(cluster, "consume", "counted", "--offset", "3"), 2, "--offset needs --partition")
    fails(tidelog(cluster, "consume", "counted", "--property", "print.colour=true"), 2, "not a property")
    fails(tidelog(cluster, "produce", "counted", "--partition", "5", stdin="x\n"), 1,
          "Error: UNKNOWN_TOPIC_OR_PARTITION:")
    fails(tidelog(cluster, "produce", "counted", "--key-separator", ":", stdin="no separator\n"), 1,
          "Error: INVALID_RECORD: line 1")


def test_admin_api_broker_shutdown_refusals(cluster: LocalCluster) -> None:
    status, answer = http(f"{cluster.admin_url}/v1/brokers/99/shutdown", "POST")
    assert status == 404 and json.loads(answer)["error"] == "BROKER_ID_NOT_REGISTERED", answer
    status, answer = http(f"{cluster.admin_url}/v1/brokers/2/shutdown", "POST", {"now": True})
    assert status == 400 and json.loads(answer)["field"] == "now", answer


def test_shutdown_api_while_producing_loses_nothing(cluster: LocalCluster, tmp_path: Path) -> None:
    ok(tidelog(cluster, "topics", "create", "--topic", "tour", "--partitions", "4"))
    wait_until("tour led", lambda: led(cluster, "tour"))
    count, stopped = 400, 3
    errors = tmp_path / "produce.err"
    with open(errors, "w") as sink:
        writer = subprocess.Popen([sys.executable, "-m", "tidelog", "produce", "tour", "--linger-ms", "20",
                                   "--data-dir", str(cluster.root)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                  stderr=sink, text=True, cwd=REPO)
    assert writer.stdin is not None

    def feed() -> None:
        assert writer.stdin is not None
        for i in range(count):  # ~4 s of lines, one every 10 ms
            writer.stdin.write(f"m{i}\n")
            writer.stdin.flush()
            time.sleep(0.01)
        writer.stdin.close()
    feeder = threading.Thread(target=feed, daemon=True)
    try:
        feeder.start()
        time.sleep(1.0)
        status, answer = http(f"{cluster.admin_url}/v1/brokers/{stopped}/shutdown", "POST")
        assert status == 202 and json.loads(answer)["shutdown_requested"] is True, answer
        node = cluster.node(stopped)
        wait_until(f"broker {stopped} to exit", lambda: not node.running(), timeout_s=30)
        feeder.join(timeout=30)
        writer.wait(CLI_TIMEOUT_S)
    finally:
        if writer.poll() is None:
            writer.send_signal(signal.SIGKILL)
            writer.wait(10)
    err = errors.read_text()
    assert writer.returncode == 0, err
    assert f"{count} record(s) to tour" in err, err
    log = node.spec.log_path.read_text(errors="replace")
    assert node.exit_status == 0 and "relays an operator's shutdown request" in log, log[-3000:]
    assert "Transitioning from PENDING_CONTROLLED_SHUTDOWN to SHUTTING_DOWN." in log, log[-3000:]
    assert (node.spec.directory / "data" / CLEAN_SHUTDOWN_FILE).exists()
    assert "3" not in [line.split()[0] for line in ok(tidelog(cluster, "status")).splitlines()
                       if line.split()[1:2] == ["UNFENCED"]]

    # back again: its RF 1 partitions are led again and every acknowledged record is there
    cluster.nodes[cluster.nodes.index(node)] = NodeProcess.spawn(node.spec)
    cluster.write_cluster_file()
    wait_until("tour led again", lambda: led(cluster, "tour"), timeout_s=READY_S)
    consumed = tidelog(cluster, "consume", "tour", "--from-beginning", "--timeout-ms", "3000")
    values = Counter(ok(consumed).splitlines())
    assert set(values) == {f"m{i}" for i in range(count)}, sorted(set(f"m{i}" for i in range(count)) - set(values))
    print(f"{count} lines produced across a controlled shutdown: {sum(values.values()) - count} duplicate(s)")
