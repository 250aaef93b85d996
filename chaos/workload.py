"""Client workloads that record what the cluster promised: acknowledged writes, observed HWs.

    with ProducerWorkload(bootstrap, "orders") as writer:     # idempotent, acks=all, a thread
        ... faults ...
    writer.acked      # (partition, offset, value) of every acknowledged record
    writer.errors     # (monotonic time, error name) of every failed delivery

    sampler = HighWatermarkSampler(bootstrap, "orders", partitions=3)   # ListOffsets, a thread
    records = read_all(bootstrap, "orders", 3)   # everything below the HWs, as (partition, offset, value)

Needs confluent-kafka (the reference client; `pip install tidelog[test]`).
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any, NamedTuple

JOIN_S = 60.0  # a flush at the end waits at most this long


class Acked(NamedTuple):
    partition: int
    offset: int
    value: bytes
    at: float  # time.monotonic() of the delivery report


class ProducerWorkload:
    """Writes b"<n>" values (n = 0, 1, 2, ...) to `topic` until stopped, keyed round-robin."""

    def __init__(self, bootstrap: str, topic: str, *, partitions: int, interval_s: float = 0.002,
                 config: dict[str, Any] | None = None) -> None:
        from confluent_kafka import Producer

        self.topic, self.partitions, self.interval_s = topic, partitions, interval_s
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                   "linger.ms": 5, "message.timeout.ms": 60_000,
                                   "retry.backoff.ms": 50, **(config or {})})
        self.acked: list[Acked] = []
        self.errors: list[tuple[float, str]] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"producer-{topic}", daemon=True)

    def __enter__(self) -> ProducerWorkload:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    def _on_delivery(self, error: Any, message: Any) -> None:
        now = time.monotonic()
        if error is not None:
            self.errors.append((now, error.name()))
        else:
            self.acked.append(Acked(message.partition(), message.offset(), message.value(), now))

    def _run(self) -> None:
        while not self._stop.is_set():  # until stop(); each pass sends one record
            n = self.sent
            try:
                self._producer.produce(self.topic, value=b"%d" % n, partition=n % self.partitions,
                                       on_delivery=self._on_delivery)
                self.sent += 1
            except BufferError:
                pass  # the local queue is full while the cluster recovers: wait and retry
            self._producer.poll(self.interval_s)

    def stop(self) -> int:
        """Stop writing and wait (bounded) for every outstanding delivery; records left unsent."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(JOIN_S)
        return self._producer.flush(JOIN_S)


class HighWatermarkSampler:
    """Asks the partition leaders for their high watermark (ListOffsets latest) in a loop."""

    def __init__(self, bootstrap: str, topic: str, *, partitions: int, interval_s: float = 0.05) -> None:
        from confluent_kafka import Consumer

        self.topic, self.partitions, self.interval_s = topic, partitions, interval_s
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw-sampler",
                                   "enable.auto.commit": False})
        self.samples: list[tuple[int, int]] = []  # (partition, high watermark), in order seen
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"hw-sampler-{topic}", daemon=True)

    def __enter__(self) -> HighWatermarkSampler:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(JOIN_S)
        self._consumer.close()

    def _run(self) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        while not self._stop.is_set():  # until the block ends; one ListOffsets per partition per pass
            for p in range(self.partitions):
                try:
                    _, high = self._consumer.get_watermark_offsets(TopicPartition(self.topic, p),
                                                                   timeout=2.0, cached=False)
                except KafkaException:
                    continue  # a leader moving, or OFFSET_NOT_AVAILABLE (KIP-207): no sample
                if high >= 0:
                    self.samples.append((p, high))
            self._stop.wait(self.interval_s)


def read_all(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60.0
             ) -> list[tuple[int, int, bytes]]:
    """Every record below each partition's high watermark, as (partition, offset, value)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 100})
    deadline = time.monotonic() + timeout_s

    def high_watermark(partition: int) -> int:
        # retriable while a leader moves: NOT_LEADER_OR_FOLLOWER, OFFSET_NOT_AVAILABLE (KIP-207)
        while True:  # bounded by the deadline
            try:
                return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=5,
                                                      cached=False)[1]
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    try:
        ends = {p: high_watermark(p) for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[tuple[int, int, bytes]] = []
        position = dict.fromkeys(range(partitions), 0)
        while any(position[p] < ends[p] for p in ends) and time.monotonic() < deadline:  # bounded
            for message in consumer.consume(1000, 0.5):
                partition, offset, value = message.partition(), message.offset(), message.value()
                if message.error() is None and partition is not None and offset is not None:
                    out.append((partition, offset, value if value is not None else b""))
                    position[partition] = offset + 1
        if any(position[p] < ends[p] for p in ends):
            raise TimeoutError(f"read up to {position} in {timeout_s} s, expected {ends}")
        return out
    finally:
        consumer.close()


def describe_partitions(bootstrap: str, topic: str, partitions: int) -> list[str]:
    """What every bootstrap broker answers about `topic` now, one line each: its Metadata (the
    brokers it lists; leader, leader epoch, ISR and error per partition) and the named leader's
    ListOffsets (latest). The evidence for an availability failure: a client's 'unknown partition'
    says what it concluded, this says what the brokers said."""
    from common.protocol.list_offsets import LATEST_TIMESTAMP
    from common.broker_connection import BrokerUnavailable
    from common.kafka_client import KafkaClient, error_name

    lines = []
    for server in bootstrap.split(","):
        host, _, port = server.rpartition(":")
        with KafkaClient([(host, int(port))], client_id="chaos-evidence", request_timeout=5.0) as client:
            try:
                info = client.metadata([topic])
            except BrokerUnavailable as exc:
                lines.append(f"{server}: Metadata failed: {exc}")
                continue
            found = info.topics.get(topic)
            lines.append(f"{server}: Metadata lists brokers {sorted(info.brokers)}; topic {topic}: "
                         + ("absent" if found is None else error_name(found.error_code)))
            for p in range(partitions):
                part = None if found is None else found.partitions.get(p)
                if part is None:
                    lines.append(f"{server}:   {topic}-{p}: not in the Metadata answer")
                    continue
                answer = f"leader {part.leader} epoch {part.leader_epoch} isr {list(part.isr)} " \
                         f"{error_name(part.error_code)}"
                try:
                    offsets = client.list_offsets(part.leader, topic, {p: LATEST_TIMESTAMP}).get(p)
                    answer += "; ListOffsets: " + ("no answer for the partition" if offsets is None else
                                                   f"{error_name(offsets.error_code)} offset {offsets.offset}")
                except BrokerUnavailable as exc:
                    answer += f"; ListOffsets failed: {exc}"
                lines.append(f"{server}:   {topic}-{p}: {answer}")
    return lines
