"""Recipe (issue 33): a consumer that exceeds max.poll.interval.ms, with confluent-kafka, kafka-python
and aiokafka.

The application reads a partition in a group, commits the first half of what it read, then spends
longer than max.poll.interval.ms on the rest without polling (KIP-62: a stuck processing loop). Its
client notices (librdkafka's main thread, kafka-python's heartbeat thread, aiokafka's heartbeat
task) and leaves the group: the coordinator removes the member and the group rebalances to Empty,
which DescribeGroups shows while the application is still busy. Its late commit of the second half
fails (the member is no longer in the group): confluent-kafka raises UNKNOWN_MEMBER_ID (measured;
_MAX_POLL_EXCEEDED and ILLEGAL_GENERATION are its other ways of saying so), kafka-python
CommitFailedError. The application recovers by polling again: the client rejoins, is assigned the
partition in a new generation, and reads again from the last committed offset (the second half is
delivered twice: at-least-once), which it then commits. aiokafka differs: once it has left, it
commits as a consumer outside any group, which Kafka accepts while the group is Empty, so its late
commit succeeds and nothing is read twice (with another member in the group it would fail).

The cluster allows short sessions (tidelog.testing's group.min.session.timeout.ms=1000), so the
consumer runs with max.poll.interval.ms=4000 and session.timeout.ms=3000 and each client takes a
few seconds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from common.waiting import wait_until
from tidelog.testing import Cluster

RECORDS = 10
HALF = RECORDS // 2
AGAIN = RECORDS + RECORDS - HALF  # everything, then the uncommitted half once more
MAX_POLL_INTERVAL_MS = 4000
SESSION_TIMEOUT_MS = 3000  # librdkafka wants it <= max.poll.interval.ms; the broker's minimum is 1000 here
HEARTBEAT_INTERVAL_MS = 500
DEADLINE_S = 30.0
REMOVAL_TIMEOUT_S = MAX_POLL_INTERVAL_MS / 1000 + 15  # the client's own check, then LeaveGroup
COMMIT_ATTEMPTS = 20  # the application's own bound on commits in a row, each after a poll
POLL_S = 0.5
METADATA_MAX_AGE_MS = 1000  # kafka-python, aiokafka: a new topic's partitions are seen within a second


def produce(cluster: Cluster, topic: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": 0})
    for i in range(RECORDS):
        producer.produce(topic, b"v%d" % i, partition=0)
    assert producer.flush(DEADLINE_S) == 0


def group_members(bootstrap: str, group: str) -> int | None:
    """How many members the coordinator lists in `group` (DescribeGroups); None while unknown."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
    return len(description.members)


def wait_for_removal(bootstrap: str, group: str) -> None:
    """While the application is busy: the coordinator removes its member (the group is Empty)."""
    wait_until(f"the stalled member to be removed from {group}",
               lambda: group_members(bootstrap, group) == 0, REMOVAL_TIMEOUT_S)


def committed(cluster: Cluster, topic: str, group: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    try:
        return int(consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset)
    finally:
        consumer.close()


class Outcome:
    """What the application saw: the late commit's errors, the offsets it read, its assignments."""

    def __init__(self) -> None:
        self.commit_errors: list[str] = []
        self.offsets: list[int] = []
        self.assignments = 0


def run_confluent(bootstrap: str, topic: str, group: str) -> Outcome:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    seen = Outcome()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "max.poll.interval.ms": MAX_POLL_INTERVAL_MS,
                         "session.timeout.ms": SESSION_TIMEOUT_MS,
                         "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS})

    def assigned(_consumer: Any, _partitions: Any) -> None:
        seen.assignments += 1

    def read_until(count: int) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while len(seen.offsets) < count and time.monotonic() < deadline:  # bounded by the deadline
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                seen.offsets.append(message.offset())
        assert len(seen.offsets) == count, f"read {seen.offsets}"

    def commit(offset: int) -> bool:
        try:
            consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
            return True
        except KafkaException as exc:
            seen.commit_errors.append(exc.args[0].name())
            return False

    try:
        consumer.subscribe([topic], on_assign=assigned)
        read_until(RECORDS)
        assert commit(HALF)
        wait_for_removal(bootstrap, group)  # "processing" the rest, longer than max.poll.interval.ms
        assert not commit(RECORDS), "the late commit of a removed member must fail"
        read_until(AGAIN)  # polling again rejoins the group; the second half comes again
        for _ in range(COMMIT_ATTEMPTS):
            if commit(RECORDS):
                return seen
            consumer.poll(POLL_S)
        raise AssertionError(f"no commit succeeded after the rejoin: {seen.commit_errors}")
    finally:
        consumer.close()


def run_kafka_python(bootstrap: str, topic: str, group: str) -> Outcome:
    from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.errors import KafkaError

    seen = Outcome()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
                             session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
                             metadata_max_age_ms=METADATA_MAX_AGE_MS)

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]  # kafka-python ships no types
        def on_partitions_revoked(self, revoked: Any) -> None:
            pass

        def on_partitions_assigned(self, assigned: Any) -> None:
            seen.assignments += 1

    def read_until(count: int) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while len(seen.offsets) < count and time.monotonic() < deadline:  # bounded by the deadline
            for records in consumer.poll(timeout_ms=200).values():
                seen.offsets += [r.offset for r in records]
        assert len(seen.offsets) == count, f"read {seen.offsets}"

    def commit(offset: int) -> bool:
        try:
            consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(offset, "", -1)})
            return True
        except KafkaError as exc:
            seen.commit_errors.append(type(exc).__name__)
            return False

    try:
        # a group joined before kafka-python's metadata names the new topic is assigned nothing
        assert consumer.partitions_for_topic(topic), "kafka-python does not see the topic"
        consumer.subscribe([topic], listener=Listener())
        read_until(RECORDS)
        assert commit(HALF)
        wait_for_removal(bootstrap, group)
        assert not commit(RECORDS), "the late commit of a removed member must fail"
        read_until(AGAIN)
        for _ in range(COMMIT_ATTEMPTS):
            if commit(RECORDS):
                return seen
            consumer.poll(timeout_ms=int(POLL_S * 1000))
        raise AssertionError(f"no commit succeeded after the rejoin: {seen.commit_errors}")
    finally:
        consumer.close()


def run_aiokafka(bootstrap: str, topic: str, group: str) -> Outcome:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
    from aiokafka.errors import KafkaError

    seen = Outcome()

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            pass

        def on_partitions_assigned(self, assigned: Any) -> None:
            seen.assignments += 1

    async def run() -> Outcome:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                                    enable_auto_commit=False, max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
                                    session_timeout_ms=SESSION_TIMEOUT_MS,
                                    heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
                                    metadata_max_age_ms=METADATA_MAX_AGE_MS)
        consumer.subscribe([topic], listener=Listener())
        await consumer.start()

        async def read_until(count: int) -> None:
            deadline = time.monotonic() + DEADLINE_S
            while len(seen.offsets) < count and time.monotonic() < deadline:  # bounded by the deadline
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    seen.offsets += [r.offset for r in records]
            assert len(seen.offsets) == count, f"read {seen.offsets}"

        async def commit(offset: int) -> bool:
            try:
                await consumer.commit({TopicPartition(topic, 0): offset})
                return True
            except KafkaError as exc:
                seen.commit_errors.append(type(exc).__name__)
                return False

        try:
            await read_until(RECORDS)
            assert await commit(HALF)
            # busy for longer than max_poll_interval_ms: no getmany (the heartbeat task still runs)
            await asyncio.to_thread(wait_for_removal, bootstrap, group)
            # aiokafka resets its generation once its LeaveGroup is answered (a moment after the
            # coordinator removed it; no public API says so): from then on its commit goes out as
            # one from outside any group (generation -1), which Kafka accepts while the group is
            # Empty (ClassicGroup.validateOffsetCommit). Before that moment it would fail
            # UNKNOWN_MEMBER_ID (CommitFailedError): a longer stall, as a real one is, means this.
            coordinator = consumer._coordinator
            await asyncio.to_thread(wait_until, "aiokafka to reset its generation after leaving",
                                    lambda: coordinator.generation == -1, REMOVAL_TIMEOUT_S)
            assert await commit(RECORDS), "aiokafka's late commit to the Empty group is accepted"
            deadline = time.monotonic() + DEADLINE_S
            while seen.assignments < 2 and time.monotonic() < deadline:  # bounded: getmany rejoins
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    seen.offsets += [r.offset for r in records]
            return seen  # nothing is read again: the late commit covered the second half
        finally:
            await consumer.stop()
    return asyncio.run(run())


CLIENTS: dict[str, Callable[[str, str, str], Outcome]] = {
    "confluent-kafka": run_confluent, "kafka-python": run_kafka_python, "aiokafka": run_aiokafka}
LATE_COMMIT_ERRORS = {"confluent-kafka": {"_MAX_POLL_EXCEEDED", "UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION"},
                      "kafka-python": {"CommitFailedError"}}


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_consumer_past_max_poll_interval_is_removed_and_recovers(tidelog_cluster: Cluster, tidelog_topic: Any,
                                                                   client: str) -> None:
    topic = tidelog_topic()
    group = f"{topic}-group"
    produce(tidelog_cluster, topic)
    seen = CLIENTS[client](tidelog_cluster.bootstrap_servers, topic, group)
    assert seen.assignments >= 2, "the application should have been assigned the partition again"
    assert committed(tidelog_cluster, topic, group) == RECORDS
    if client == "aiokafka":  # its late commit was accepted: nothing is read twice
        assert seen.commit_errors == [] and seen.offsets == list(range(RECORDS))
        return
    assert seen.commit_errors, "the late commit should have failed"
    assert seen.commit_errors[0] in LATE_COMMIT_ERRORS[client], seen.commit_errors
    # read once, then from the last commit again: the second half twice (at-least-once)
    assert seen.offsets == list(range(RECORDS)) + list(range(HALF, RECORDS))
