"""Consumer-group members of three real clients, each in its own thread, for the group tests.

    members = [start_member("confluent", bootstrap, "g", "t", i) for i in range(3)]
    wait_until("split", lambda: split(members, 6))
    ...
    stop_members(members)   # each closes its consumer (LeaveGroup) and its thread ends

A member polls, records (partition, offset, value) of every record it gets, commits
synchronously after each non-empty poll, and publishes its current assignment. Errors end
the member and are re-raised by `stop_members`, so a test cannot pass over a broken member.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

POLL_MS = 200
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_MS = 500
JOIN_S = 30.0


@dataclass
class Member:
    client: str
    index: int
    stop: threading.Event = field(default_factory=threading.Event)
    records: list[tuple[int, int, bytes]] = field(default_factory=list)
    assignment: frozenset[int] = frozenset()
    error: BaseException | None = None
    commit_failures: int = 0
    thread: threading.Thread | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, partition: int, offset: int, value: bytes) -> None:
        with self.lock:
            self.records.append((partition, offset, value))

    def seen(self) -> list[tuple[int, int, bytes]]:
        with self.lock:
            return list(self.records)


def _confluent(m: Member, bootstrap: str, group: str, topic: str, extra: Mapping[str, Any]) -> None:
    from confluent_kafka import Consumer, KafkaException

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": SESSION_TIMEOUT_MS,
                  "heartbeat.interval.ms": HEARTBEAT_MS, "client.id": f"confluent-{m.index}", **extra})
    try:
        c.subscribe([topic])
        while not m.stop.is_set():  # until the test stops this member
            msgs = c.consume(num_messages=100, timeout=POLL_MS / 1000)
            for msg in msgs:
                if msg.error() is None:
                    m.add(msg.partition(), msg.offset(), msg.value())
            if any(msg.error() is None for msg in msgs):
                try:
                    c.commit(asynchronous=False)
                except KafkaException:
                    m.commit_failures += 1
            m.assignment = frozenset(tp.partition for tp in c.assignment())
    finally:
        c.close()


def _kafka_python(m: Member, bootstrap: str, group: str, topic: str, extra: Mapping[str, Any]) -> None:
    from kafka import KafkaConsumer
    from kafka.errors import CommitFailedError, KafkaError

    c = KafkaConsumer(topic, bootstrap_servers=bootstrap.split(","), group_id=group,
                      auto_offset_reset="earliest", enable_auto_commit=False,
                      session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                      client_id=f"kafka-python-{m.index}", **extra)
    try:
        _kafka_python_topic_known(c, topic, m.stop)
        while not m.stop.is_set():  # until the test stops this member
            batch = c.poll(timeout_ms=POLL_MS)
            for tp, msgs in batch.items():
                for msg in msgs:
                    m.add(tp.partition, msg.offset, msg.value)
            if batch:
                try:
                    c.commit()
                except (CommitFailedError, KafkaError):
                    m.commit_failures += 1
            m.assignment = frozenset(tp.partition for tp in c.assignment())
    finally:
        c.close()


def _kafka_python_topic_known(consumer: Any, topic: str, stop: threading.Event) -> None:
    """Return once the consumer's metadata holds the topic's partitions, before its first poll
    joins the group, as an application would for a topic it has just created.

    kafka-python 3.0.12 loses a join when it joins before that: its group leader assigns nothing
    ("No partition metadata for topic"), rejoins when the metadata arrives, and if that join
    outlasts the poll's timeout the next poll no longer sees a rejoin needed (the assignment
    snapshot now matches) and never awaits the join in flight. The member is never assigned
    and never heartbeats again, the coordinator expires it after the session timeout, and the
    group never splits (the CI failure: "3 members split 6 partitions" timed out, then its
    LeaveGroup got UNKNOWN_MEMBER_ID). The Java client awaits a pending join
    (AbstractCoordinator.rejoinNeededOrPending), as kafka-python 2.x did."""
    deadline = time.monotonic() + JOIN_S
    while not consumer.partitions_for_topic(topic):  # bounded by the deadline; each call fetches metadata
        if stop.is_set():
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"kafka-python's metadata had no partitions of {topic} after {JOIN_S:g} s")
        time.sleep(POLL_MS / 1000)


def _aiokafka(m: Member, bootstrap: str, group: str, topic: str, extra: Mapping[str, Any]) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import CommitFailedError, KafkaError

    async def run() -> None:
        c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=SESSION_TIMEOUT_MS,
                             heartbeat_interval_ms=HEARTBEAT_MS, client_id=f"aiokafka-{m.index}", **extra)
        await c.start()
        try:
            while not m.stop.is_set():  # until the test stops this member
                batch = await c.getmany(timeout_ms=POLL_MS)
                for tp, msgs in batch.items():
                    for msg in msgs:
                        m.add(tp.partition, msg.offset, msg.value)
                if batch:
                    try:
                        await c.commit()
                    except (CommitFailedError, KafkaError):
                        m.commit_failures += 1
                m.assignment = frozenset(tp.partition for tp in c.assignment())
        finally:
            await c.stop()

    asyncio.run(run())


CLIENTS: dict[str, Callable[[Member, str, str, str, Mapping[str, Any]], None]] = {
    "confluent": _confluent, "kafka-python": _kafka_python, "aiokafka": _aiokafka}


def start_member(client: str, bootstrap: str, group: str, topic: str, index: int,
                 extra: Mapping[str, Any] | None = None) -> Member:
    member = Member(client, index)

    def body() -> None:
        try:
            CLIENTS[client](member, bootstrap, group, topic, extra or {})
        except BaseException as e:  # noqa: BLE001 - handed to the test by stop_members
            member.error = e

    member.thread = threading.Thread(target=body, name=f"{client}-{index}", daemon=True)
    member.thread.start()
    return member


def stop_members(members: list[Member], timeout_s: float = 30.0) -> None:
    """Stop every member (each closes its consumer); raise the first error any had."""
    for m in members:
        m.stop.set()
    for m in members:
        if m.thread is not None:
            m.thread.join(timeout_s)
            assert not m.thread.is_alive(), f"{m.client}-{m.index} did not stop within {timeout_s} s"
    for m in members:
        if m.error is not None:
            raise AssertionError(f"{m.client}-{m.index} failed: {m.error!r}") from m.error


def split(members: list[Member], partitions: int) -> bool:
    """Every partition assigned to exactly one live member, and every live member has some."""
    live = [m for m in members if not m.stop.is_set()]
    for m in live:
        if m.error is not None:
            raise AssertionError(f"{m.client}-{m.index} failed: {m.error!r}") from m.error
    owned = [p for m in live for p in m.assignment]
    return sorted(owned) == list(range(partitions)) and all(m.assignment for m in live)


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for v in values:
        p.produce(topic, value=v, key=v)
    assert p.flush(30) == 0, "records not delivered within 30 s"
