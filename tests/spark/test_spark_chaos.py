"""Faults under a streaming ingest, with Spark as the consumer: a chaos scenario of its own
(`make chaos-spark`; long, not in `make test`).

3 controllers + 3 brokers on 127.0.0.1-6, a topic of 3 partitions (RF 3, min.insync.replicas
2). An idempotent acks=all producer writes unique values at a steady rate and records every
acknowledgement (partition, offset). The ingest query (`tidelog spark ingest`'s: the tidelog
source into Spark's Parquet file sink, local[2], commitOffsetsToGroup) runs through, in turn:

1. SIGKILL of partition 0's leader, restarted after FAULT_S;
2. a controller failover: SIGKILL of the active controller, restarted once another is active;
3. a pause (SIGSTOP) of partition 1's leader for FAULT_S, then SIGCONT.

After the heal the producer stops; then the query must catch up with every high watermark,
its group's lag must return to zero (`tidelog groups describe`), and the output must hold
every acknowledged record exactly once (and nothing that is not in the log). Two sinks:
Parquet files (Spark's file sink; the output as Spark reads it), and a second topic through
the exactly-once sink (`transactional=true`; the output as a read_committed reader sees it).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

from spark.ingest_job import IngestConfig, IngestTrigger, source_options, start_ingest
from tests.integration.cluster_fixtures import http, wait_until
from tests.spark.spark_fixtures import SPARK_TIMEOUT_S, create_topic, spark_session
from tidelog import cli
from localcluster.launcher import LocalCluster, free_ports
from localcluster.node_process import NodeProcess

pytest.importorskip("pyspark")
pytestmark = [pytest.mark.long, pytest.mark.timeout(1200)]  # JVMs and faults on a loaded 2-core machine

HOSTS = tuple(f"127.0.0.{n}" for n in range(1, 7))
PROPERTIES = {"broker.heartbeat.interval.ms": "200", "broker.session.timeout.ms": "3000",
              "replica.lag.time.max.ms": "3000", "replica.fetch.backoff.ms": "200",
              "replica.socket.timeout.ms": "3000", "controlled.shutdown.timeout.ms": "8000"}
SINKS = ("parquet", "eos-topic")
PARTITIONS = 3
RATE_PER_S = 200  # produced records per second
FAULT_S = 5.0  # how long each fault lasts
SETTLE_S = 4.0  # records flowing between faults
HEAL_TIMEOUT_S = 120.0
MAX_ROWS = 1000


class AckedProducer:
    """Writes `RATE_PER_S` unique values from a thread; `acked` holds (partition, offset, value)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._topic = topic
        self._producer = confluent_kafka.Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
            "message.timeout.ms": 120_000, "log_level": 3})
        self.acked: list[tuple[int, int, bytes]] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="acked-producer", daemon=True)

    def _report(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))
        else:
            self.failed.append(str(err))

    def _run(self) -> None:
        sent = 0
        started = time.monotonic()
        while not self._stop.is_set():  # bounded by stop()
            due = int((time.monotonic() - started) * RATE_PER_S)
            for _ in range(due - sent):
                self._producer.produce(self._topic, b"value-%09d" % sent, key=b"k%d" % sent, on_delivery=self._report)
                sent += 1
            self._producer.poll(0.02)

    def __enter__(self) -> AckedProducer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)
        self._producer.flush(130)


@pytest.fixture(scope="module")
def chaos_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    raft, admin, kafka, metrics = free_ports(HOSTS, 4)
    with LocalCluster.start(tmp_path_factory.mktemp("spark-chaos") / "cluster", controllers=3, brokers=3,
                            raft_port=raft, admin_port=admin, kafka_port=kafka, metrics_port=metrics,
                            ready_timeout=90, extra_properties=PROPERTIES) as cluster:
        yield cluster  # every node stopped on exit, even on failure (paused ones are continued first)
        for node in cluster.nodes:
            if node.running():
                node.send(signal.SIGCONT)


def active_controller(cluster: LocalCluster) -> int:
    def agreed() -> int | None:
        named = set()
        for node in cluster.controllers:
            if not node.running():
                continue
            try:
                status, body = http(node.spec.admin_url + "/v1/cluster")
            except OSError:
                return None
            named.add(json.loads(body).get("active_controller") if status == 200 else None)
        return named.pop() if len(named) == 1 and None not in named else None
    return int(wait_until("one active controller", agreed, timeout_s=HEAL_TIMEOUT_S))


def leader_of(cluster: LocalCluster, topic: str, partition: int) -> NodeProcess:
    """The leader of a partition, as the first running controller that answers says."""
    def ask() -> int | None:
        for node in cluster.controllers:
            try:
                status, body = http(f"{node.spec.admin_url}/v1/topics/{topic}")
            except OSError:
                continue
            if status == 200:
                leader = json.loads(body)["partitions"][partition]["leader"]
                return int(leader) if leader >= 0 else None
        return None
    return cluster.node(wait_until(f"a leader of {topic}-{partition}", ask, timeout_s=HEAL_TIMEOUT_S))


def end_offsets(query: Any, topic: str) -> dict[int, int]:
    """The last batch's end offsets (Spark gives a Python source's offsets as JSON text)."""
    if query.lastProgress is None:
        return {}
    end = json.loads(query.lastProgress.json)["sources"][0]["endOffset"]
    end = json.loads(end) if isinstance(end, str) else end or {}
    return {int(p): int(o) for p, o in end.get(topic, {}).items()}


def respawn(cluster: LocalCluster, node: NodeProcess) -> None:
    node.kill()
    cluster.nodes[cluster.nodes.index(node)] = NodeProcess.spawn(node.spec)
    cluster.write_cluster_file()


def healed(cluster: LocalCluster, topic: str) -> bool:
    """Every broker unfenced and every ISR full, as a running controller says."""
    for node in cluster.controllers:
        try:
            status, brokers = http(node.spec.admin_url + "/v1/brokers")
            status_t, described = http(f"{node.spec.admin_url}/v1/topics/{topic}")
        except OSError:  # down, or restarted a moment ago: ask the next one
            continue
        if status == status_t == 200:
            return all(not b["fenced"] for b in json.loads(brokers)) and all(
                p["leader"] >= 0 and sorted(p["isr"]) == sorted(p["replicas"])
                for p in json.loads(described)["partitions"])
    return False


def high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-chaos-never-joined",
                                         "log_level": 3})
    try:
        return {p: consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=10)[1]
                for p in range(PARTITIONS)}
    finally:
        consumer.close()


def group_lag(cluster: LocalCluster, group: str, capsys: pytest.CaptureFixture[str]) -> int | None:
    capsys.readouterr()
    if cli.main(["groups", "describe", "--group", group, "--data-dir", str(cluster.root)]) != 0:
        return None
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith(group + " ")]
    return sum(int(r[5]) for r in rows) if len(rows) == PARTITIONS else None


def inject_faults(cluster: LocalCluster, topic: str) -> None:
    """The schedule: records flow before, between and after the three faults, each healed."""
    time.sleep(SETTLE_S)
    victim = leader_of(cluster, topic, 0)
    victim.send(signal.SIGKILL)  # 1. the leader of partition 0
    time.sleep(FAULT_S)
    respawn(cluster, victim)
    wait_until("healed after the leader kill", lambda: healed(cluster, topic), timeout_s=HEAL_TIMEOUT_S)
    time.sleep(SETTLE_S)
    active = cluster.node(active_controller(cluster))
    active.send(signal.SIGKILL)  # 2. a controller failover
    wait_until("another active controller", lambda: active_controller(cluster) != active.spec.node_id,
               timeout_s=HEAL_TIMEOUT_S)
    respawn(cluster, active)
    time.sleep(SETTLE_S)
    paused = leader_of(cluster, topic, 1)
    paused.send(signal.SIGSTOP)  # 3. a broker pause
    try:
        time.sleep(FAULT_S)
    finally:
        paused.send(signal.SIGCONT)
    wait_until("healed after the pause", lambda: healed(cluster, topic), timeout_s=HEAL_TIMEOUT_S)
    time.sleep(SETTLE_S)


def start_query(spark: Any, sink: str, config: IngestConfig, output_topic: str) -> Any:
    """The ingest query into Parquet, or the same source into `output_topic` exactly once."""
    if sink == "parquet":
        return start_ingest(spark, config)
    return spark.readStream.format("tidelog").options(**source_options(config)).load().select("key", "value") \
        .writeStream.format("tidelog").option("kafka.bootstrap.servers", config.bootstrap_servers) \
        .option("topic", output_topic).option("transactional", "true") \
        .option("checkpointLocation", config.checkpoint).trigger(processingTime="500 milliseconds").start()


def read_output(spark: Any, sink: str, config: IngestConfig, output_topic: str) -> list[tuple[Any, Any, bytes]]:
    """(source partition, source offset, value) of each output row; the exactly-once topic keeps
    only the value, so its rows carry (None, None, value)."""
    if sink == "parquet":
        table = spark.read.parquet(config.output).select("partition", "offset", "value").toArrow()
        return list(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(),
                        table.column("value").to_pylist()))
    rows = spark.read.format("tidelog").option("kafka.bootstrap.servers", config.bootstrap_servers) \
        .option("subscribe", output_topic).option("kafka.isolation.level", "read_committed").load() \
        .select("value").toArrow().column("value").to_pylist()
    return [(None, None, value) for value in rows]


@pytest.mark.parametrize("sink", SINKS)
def test_ingest_through_leader_kill_controller_failover_and_pause(chaos_cluster: LocalCluster, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str],
                                                                  sink: str) -> None:
    cluster = chaos_cluster
    topic, group, output_topic = f"spark-chaos-{sink}", f"spark-chaos-{sink}-ingest", f"spark-chaos-{sink}-out"
    create_topic(cluster, topic, PARTITIONS, 3)
    if sink != "parquet":
        create_topic(cluster, output_topic, PARTITIONS, 3)
    bootstrap = cluster.bootstrap_servers or ""
    config = IngestConfig(topic=topic, output=str(tmp_path / "data"), checkpoint=str(tmp_path / "checkpoint"),
                          bootstrap_servers=bootstrap, trigger=IngestTrigger("processing-time", 500),
                          max_offsets_per_trigger=MAX_ROWS, commit_offsets_to_group=group)
    with spark_session(f"tidelog-spark-chaos-{sink}") as spark:
        query = start_query(spark, sink, config, output_topic)
        try:
            with AckedProducer(bootstrap, topic) as producer:
                inject_faults(cluster, topic)
                assert query.exception() is None, query.exception()
            assert producer.acked, "nothing acknowledged"
            ends = high_watermarks(bootstrap, topic)
            wait_until("the query at every high watermark", lambda: query.exception() or
                       end_offsets(query, topic) == ends, timeout_s=SPARK_TIMEOUT_S * 2)
            assert query.exception() is None, query.exception()
            wait_until("the group's lag back to zero", lambda: group_lag(cluster, group, capsys) == 0, timeout_s=60)
        finally:
            query.stop()
        got = read_output(spark, sink, config, output_topic)
    values = [value for _, _, value in got]
    assert len(values) == len(set(values)), "a record written twice"  # every value is unique
    assert sum(ends.values()) == len(got), (ends, len(got))  # the whole log, once (unacknowledged ones too)
    # Parquet keeps the source position: match it too; the topic copy only has the value
    missing = sorted(set(producer.acked) - set(got)) if sink == "parquet" else \
        sorted({value for _, _, value in producer.acked} - set(values))
    assert not missing, f"{len(missing)} acknowledged records missing, e.g. {missing[:3]}"
    print(f"\n{sink}: {len(producer.acked)} acknowledged, {len(producer.failed)} failed, {len(got)} in the output")
