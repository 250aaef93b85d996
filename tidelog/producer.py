"""The console producer's delivery logic: Kafka's partitioner and retries over `KafkaClient`.

    producer = Producer(client, "demo", acks=-1, request_timeout_ms=30_000, delivery_timeout_ms=30_000,
                        compression=CompressionType.NONE, router=Router())
    producer.send([PendingRecord(b"k1", b"hello", now_ms, movable=False)])   # delivered, or ClusterError

Partitioning is Kafka's: an explicit partition wins; a keyed record goes to murmur2(key) %
partitions (as the Java producer); unkeyed records stick to one partition with a leader per
batch and move on to the next for the following batch (`Router`, pure).

Failures: retriable errors (leader moved, partition offline, broker gone, topic being
created) refresh metadata and resend until the delivery timeout; unkeyed records waiting
for an offline partition move to one with a leader (tidelog's console tool does this so a
broker's controlled shutdown does not stall it; Kafka's producer would wait). Any other error
raises ClusterError with Kafka's error name. Without idempotence a resend after a lost
answer may write a record twice, as Kafka's producer with enable.idempotence=false.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from common.limits import CLIENT_RETRY_BACKOFF
from common.record_batch import CompressionType
from common.records import build_batch
from tidelog.cli_common import ClusterError
from common.broker_connection import BrokerUnavailable
from common.kafka_client import (
    RETRIABLE,
    ClusterInfo,
    KafkaClient,
    TopicInfo,
    error_name,
)
from tidelog.partitioner import partition_for_key

NETWORK_EXCEPTION: Final = 13  # a partition missing from an answer: count it as a lost answer


@dataclass(frozen=True, slots=True)
class PendingRecord:
    key: bytes | None
    value: bytes
    timestamp: int
    movable: bool  # unkeyed and no --partition: may go to another partition while its own is offline


@dataclass(slots=True)
class Router:
    """Kafka's partition choice (pure): explicit, murmur2 of the key, or sticky for unkeyed records."""

    explicit: int | None = None
    sticky_turn: int = 0  # advances once per batch of unkeyed records
    sticky: int | None = field(default=None)

    def next_batch(self) -> None:
        self.sticky = None
        self.sticky_turn += 1

    def partition(self, key: bytes | None, topic: TopicInfo) -> int | None:
        """The partition of one record; None when an unkeyed record finds no partition with a leader."""
        if self.explicit is not None:
            return self.explicit
        if key is not None:
            return partition_for_key(key, len(topic.partitions))
        if self.sticky is None or self.sticky not in topic.available():
            available = topic.available()
            self.sticky = available[self.sticky_turn % len(available)] if available else None
        return self.sticky


class Producer:
    """Delivers batches of pending records, retrying until delivered or the delivery timeout."""

    def __init__(self, client: KafkaClient, topic: str, *, acks: int, request_timeout_ms: int,
                 delivery_timeout_ms: int, compression: CompressionType, router: Router,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.client, self.topic, self.acks = client, topic, acks
        self.request_timeout_ms, self.delivery_timeout_ms = request_timeout_ms, delivery_timeout_ms
        self.compression, self.router, self._clock, self._sleep = compression, router, clock, sleep
        self._info: ClusterInfo | None = None
        self.delivered = 0
        self.partitions_written: set[int] = set()

    def _topic(self, deadline: float) -> TopicInfo:
        """Current metadata of the topic, created on first use when the brokers auto-create topics."""
        last = "no metadata yet"
        while True:  # bounded by the deadline
            if self._info is None:
                try:
                    self._info = self.client.metadata([self.topic], allow_auto_topic_creation=True)
                except BrokerUnavailable as exc:
                    last = f"NETWORK_EXCEPTION: {exc}"
            topic = None if self._info is None else self._info.topics.get(self.topic)
            if topic is not None and topic.error_code == 0 and topic.partitions:
                return topic
            if topic is not None and topic.error_code not in RETRIABLE:
                raise ClusterError(error_name(topic.error_code), f"topic {self.topic!r}")
            if topic is not None:
                last = f"{error_name(topic.error_code)} for topic {self.topic!r}"
            self._info = None
            if self._clock() >= deadline:
                raise ClusterError("REQUEST_TIMED_OUT", f"no metadata for topic {self.topic!r} within "
                                   f"delivery.timeout.ms={self.delivery_timeout_ms} (last: {last})")
            self._sleep(CLIENT_RETRY_BACKOFF)

    def send(self, records: list[PendingRecord]) -> None:
        """Deliver `records` (one batch per partition); ClusterError when they cannot be.

        However it ends (an error, Ctrl-C), `records` is left holding only what was not
        acknowledged, so a caller's final flush never sends a delivered record again.
        """
        deadline = self._clock() + self.delivery_timeout_ms / 1000
        topic = self._topic(deadline)
        pending: dict[int | None, list[PendingRecord]] = {}
        for record in records:
            pending.setdefault(self.router.partition(record.key, topic), []).append(record)
        self.router.next_batch()
        if self.router.explicit is not None and self.router.explicit not in topic.partitions:
            raise ClusterError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {self.topic!r} has no partition "
                               f"{self.router.explicit} (it has {len(topic.partitions)})")
        try:
            self._deliver(pending, deadline)
        finally:
            records[:] = [record for waiting in pending.values() for record in waiting]

    def _deliver(self, pending: dict[int | None, list[PendingRecord]], deadline: float) -> None:
        last_error = "none"
        while pending:  # bounded by the deadline
            topic = self._topic(deadline)
            rerouted = self._reroute(pending, topic)
            pending.clear()  # in place: `send` reads what is left from this very dict
            pending.update(rerouted)
            for leader, partitions in self._by_leader(pending, topic).items():
                last_error = self._send_to(leader, partitions, pending) or last_error
            if not pending:
                return
            self._info = None  # something failed: the next round starts from fresh metadata
            if self._clock() >= deadline:
                count = sum(len(v) for v in pending.values())
                where = ", ".join(f"{self.topic}-{p}" for p in sorted(p for p in pending if p is not None))
                raise ClusterError("REQUEST_TIMED_OUT", f"{count} record(s) for {where or self.topic} not delivered "
                                   f"within delivery.timeout.ms={self.delivery_timeout_ms} (last error: {last_error})")
            self._sleep(CLIENT_RETRY_BACKOFF)

    def _reroute(self, pending: dict[int | None, list[PendingRecord]],
                 topic: TopicInfo) -> dict[int | None, list[PendingRecord]]:
        """Movable records of a partition without a leader go to the sticky partition that has one."""
        out: dict[int | None, list[PendingRecord]] = {}
        for partition, records in pending.items():
            info = None if partition is None else topic.partitions.get(partition)
            if info is not None and info.leader != -1:
                out.setdefault(partition, []).extend(records)
                continue
            stay = [r for r in records if not r.movable]
            if stay:
                out.setdefault(partition, []).extend(stay)
            moved = [r for r in records if r.movable]
            if moved:
                out.setdefault(self.router.partition(None, topic), []).extend(moved)
        return out

    @staticmethod
    def _by_leader(pending: dict[int | None, list[PendingRecord]], topic: TopicInfo) -> dict[int, list[int]]:
        groups: dict[int, list[int]] = {}
        for partition in pending:
            info = None if partition is None else topic.partitions.get(partition)
            if info is not None and info.leader != -1:
                groups.setdefault(info.leader, []).append(info.partition)
        return groups

    def _send_to(self, leader: int, partitions: list[int],
                 pending: dict[int | None, list[PendingRecord]]) -> str | None:
        """One Produce request to one leader; delivered partitions leave `pending`. The last retriable error."""
        batches = {p: build_batch([(r.key, r.value) for r in pending[p]], timestamps=[r.timestamp for r in pending[p]],
                                  compression=self.compression) for p in partitions}
        try:
            answers = self.client.produce(leader, self.topic, batches, acks=self.acks,
                                          timeout_ms=self.request_timeout_ms)
        except BrokerUnavailable as exc:
            return f"NETWORK_EXCEPTION: {exc}"
        error = None
        for p in partitions:
            answer = answers.get(p)
            code = 0 if self.acks == 0 else (answer.error_code if answer is not None else NETWORK_EXCEPTION)
            if code == 0:
                self.delivered += len(pending.pop(p))
                self.partitions_written.add(p)
            elif code in RETRIABLE:
                error = f"{error_name(code)} from broker {leader} for {self.topic}-{p}"
            else:
                message = (answer.error_message if answer is not None else None) or f"{self.topic}-{p}"
                raise ClusterError(error_name(code), f"{message} (broker {leader}, {self.topic}-{p})")
        return error
