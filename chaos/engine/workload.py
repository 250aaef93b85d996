"""Jepsen's queue workload on real clients, every operation recorded in the history.

- `Producers`: one confluent-kafka producer writing unique values "0", "1", ... round-robin
  over the partitions at a steady rate; each send is an `invoke`, then `ok` (partition,
  offset), `fail` (definitely not written) or `info` (outcome unknown: timed out in flight).
- `Consumers`: consumers by assignment from offset 0 recording every polled record (`read`).
- `Sampler`: each partition's leader, ISR, epochs (admin API) and high watermark (ListOffsets).
- `final_read`: everything below each high watermark after the last heal (`final-read`).

Needs confluent-kafka (the reference client; the `chaos` and `test` extras).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any, Final

from chaos.engine.targets import ClusterView
from chaos.history import History
from chaos.scenarios.spec import Acks, WorkloadSpec
from localcluster.launcher import LocalCluster
from localcluster.security_setup import read_client_config
from common.limits import CHAOS_POLL_S

JOIN_S: Final = 30.0
FLUSH_S: Final = 40.0
# librdkafka errors after which the record was certainly not written; anything else (a timeout
# in flight, a retriable error on the last attempt) might have been: an `info`, Jepsen's unknown
DEFINITE_ERRORS: Final = frozenset({"_PURGE_QUEUE", "MSG_SIZE_TOO_LARGE", "_MSG_SIZE_TOO_LARGE",
                                    "RECORD_LIST_TOO_LARGE", "INVALID_RECORD", "TOPIC_AUTHORIZATION_FAILED"})


# librdkafka's own lines (a broker refused a connection, a request timed out) are expected under
# faults: they go to this logger, which the runner sends to clients.log in the report directory
CLIENT_LOG = logging.getLogger("chaos.clients")
# a scenario's `[cluster] security` gives every client the launcher's settings (security.protocol,
# CA, SASL user: localcluster.security_setup) on top of its own; PLAINTEXT clients get none
PLAINTEXT: Final[Mapping[str, str]] = {}


def workload_clients(cluster: LocalCluster, security: str | None) -> tuple[str, Mapping[str, str]]:
    """bootstrap.servers and the security settings of the workload's clients: the secured listeners
    and the launcher's client settings when the scenario asks for `security`, else PLAINTEXT."""
    if security is None:
        return cluster.bootstrap_servers or "", PLAINTEXT
    settings = read_client_config(cluster.root)
    return settings.pop("bootstrap.servers"), settings


class Producers:
    """Writes until `stop()`; a thread calls produce/poll, librdkafka's thread acknowledges."""

    def __init__(self, bootstrap: str, spec: WorkloadSpec, partitions: int, history: History, *,
                 security: Mapping[str, str] = PLAINTEXT) -> None:
        from confluent_kafka import Producer

        self.spec, self.partitions, self.history = spec, partitions, history
        config: dict[str, Any] = {"bootstrap.servers": bootstrap, "acks": spec.acks.value, "linger.ms": 2,
                                  "enable.idempotence": spec.idempotence, "retry.backoff.ms": 50,
                                  "message.timeout.ms": spec.message_timeout_ms, "logger": CLIENT_LOG,
                                  **security}
        if spec.acks is Acks.LEADER:
            config["max.in.flight.requests.per.connection"] = 1
        self._config = config
        self._producer = Producer(config)
        self.sent = self.acked = self.incarnations = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-producer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _on_delivery(self, error: Any, message: Any) -> None:
        value = message.value().decode()
        if error is None:
            self.acked += 1
            self.history.record("ok", process="p0", value=value, partition=message.partition(),
                                offset=message.offset())
        elif error.name() in DEFINITE_ERRORS:
            self.history.record("fail", process="p0", value=value, partition=message.partition(),
                                error=error.name())
        else:
            self.history.record("info", process="p0", value=value, partition=message.partition(),
                                error=error.name())

    def _run(self) -> None:
        from confluent_kafka import KafkaException

        interval = 1.0 / self.spec.rate
        next_at = time.monotonic()
        while not self._stop.is_set():  # until stop(); one send per pass
            value = str(self.sent)
            partition = self.sent % self.partitions
            try:
                self._producer.produce(self.spec.topic, value=value.encode(), partition=partition,
                                       on_delivery=self._on_delivery)
                self.history.record("invoke", process="p0", value=value, partition=partition)
                self.sent += 1
                next_at += interval
                self._producer.poll(max(0.0, next_at - time.monotonic()))
            except BufferError:
                self._producer.poll(CHAOS_POLL_S)  # the local queue is full while the cluster recovers
            except KafkaException as exc:
                if not exc.args[0].fatal():
                    raise
                self._replace(exc.args[0].name())

    def _replace(self, error: str) -> None:
        """A fatal idempotence error (e.g. OUT_OF_ORDER_SEQUENCE_NUMBER when an unclean leader lacks
        the producer's sequence state) kills the producer: Kafka's answer is a new producer id. The
        old one's outstanding sends are reported (as unknown: `info`) by the purge and flush."""
        from confluent_kafka import KafkaException, Producer

        self.history.record("note", what="producer-fatal", error=error, incarnation=self.incarnations)
        print(f"  producer fatal error {error}: starting a new producer (new producer id)", flush=True)
        old = self._producer
        try:
            old.purge()
        except KafkaException as exc:  # a fatal producer may refuse; the flush below still reports
            logging.getLogger(__name__).info("purge after a fatal error: %s", exc)
        old.flush(CHAOS_POLL_S)
        self.incarnations += 1
        self._producer = Producer(self._config)

    def stop(self) -> int:
        """Stop sending and wait (bounded) for every outstanding outcome; how many are left."""
        self._stop.set()
        self._thread.join(JOIN_S)
        return int(self._producer.flush(FLUSH_S))


class Consumers:
    """`count` consumers by assignment, each a thread polling every partition from offset 0."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, count: int, history: History, *,
                 client_rack: str | None = None, security: Mapping[str, str] = PLAINTEXT) -> None:
        self.bootstrap, self.topic, self.partitions, self.history = bootstrap, topic, partitions, history
        self.security = security
        self.client_rack = client_rack  # KIP-392: set, the leader may send them to a follower in that rack
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(f"c{i}",), name=f"chaos-consumer-{i}",
                                          daemon=True) for i in range(count)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _run(self, name: str) -> None:
        from confluent_kafka import Consumer, TopicPartition

        config: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "group.id": f"chaos-{name}",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "fetch.wait.max.ms": 100, "topic.metadata.refresh.interval.ms": 1000,
                                  "logger": CLIENT_LOG, **self.security}
        if self.client_rack is not None:
            config["client.rack"] = self.client_rack
        consumer = Consumer(config)
        try:
            consumer.assign([TopicPartition(self.topic, p, 0) for p in range(self.partitions)])
            while not self._stop.is_set():  # until stop()
                messages: list[Any] = consumer.consume(500, CHAOS_POLL_S)  # the stubs say Optional everywhere
                for message in messages:
                    if message.error() is not None:
                        self.history.record("note", what="consumer-error", consumer=name,
                                            error=message.error().name())
                        continue
                    self.history.record("read", consumer=name, partition=message.partition(),
                                        offset=message.offset(), value=message.value().decode())
        finally:
            consumer.close()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(JOIN_S)


class Sampler:
    """Leader, ISR and epochs from the admin API, and the high watermark, every interval."""

    def __init__(self, view: ClusterView, bootstrap: str, topic: str, partitions: int, interval_s: float,
                 history: History, *, security: Mapping[str, str] = PLAINTEXT) -> None:
        self.view, self.bootstrap, self.topic, self.partitions = view, bootstrap, topic, partitions
        self.interval_s, self.history, self.security = interval_s, history, security
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "chaos-sampler", "logger": CLIENT_LOG,
                             **self.security})
        try:
            while not self._stop.wait(self.interval_s):  # until stop()
                try:
                    states = {p["partition"]: p for p in self.view.partitions(self.topic)}
                except (OSError, ValueError, KeyError):
                    states = {}
                for partition in range(self.partitions):
                    try:
                        high = consumer.get_watermark_offsets(TopicPartition(self.topic, partition), timeout=1.0,
                                                              cached=False)[1]
                    except KafkaException:
                        high = None  # the leader is moving: no high watermark this time
                    s = states.get(partition, {})
                    self.history.record("sample", partition=partition, high_watermark=high,
                                        leader=s.get("leader"), isr=s.get("isr"), leader_epoch=s.get("leader_epoch"),
                                        leader_recovery_state=s.get("leader_recovery_state"))
        finally:
            consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(JOIN_S)


def final_read(bootstrap: str, topic: str, partitions: int, history: History, timeout_s: float = 60.0, *,
               security: Mapping[str, str] = PLAINTEXT) -> bool:
    """Read every partition from 0 up to its high watermark into `final-read` events; False on timeout."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-final", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 100, "logger": CLIENT_LOG, **security})
    deadline = time.monotonic() + timeout_s
    try:
        ends: dict[int, int] = {}
        for p in range(partitions):
            while p not in ends and time.monotonic() < deadline:  # bounded by the deadline
                try:
                    ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5, cached=False)[1]
                except KafkaException:
                    time.sleep(CHAOS_POLL_S)  # a leader still moving
        if len(ends) < partitions:
            return False
        history.record("note", what="final-read-ends", ends={str(p): e for p, e in ends.items()})
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        position = dict.fromkeys(range(partitions), 0)
        while any(position[p] < ends[p] for p in ends) and time.monotonic() < deadline:  # bounded
            messages: list[Any] = consumer.consume(1000, 0.5)
            for message in messages:
                if message.error() is None and message.offset() < ends[message.partition()]:
                    history.record("final-read", partition=message.partition(), offset=message.offset(),
                                   value=message.value().decode())
                    position[message.partition()] = message.offset() + 1
        return all(position[p] >= ends[p] for p in ends)
    finally:
        consumer.close()
