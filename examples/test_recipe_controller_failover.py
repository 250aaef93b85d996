"""Recipe (issue 33): controller failover during topic creation, with confluent-kafka,
kafka-python and aiokafka.

An application creates topics one after another through its client's admin API (CreateTopics,
which the broker forwards to the active controller) while the active controller is SIGKILLed.
A creation in flight then may fail or succeed; the application retries what failed (measured:
the creation in flight fails with UNKNOWN_SERVER_ERROR "controller ... did not answer" with all
three clients, and confluent-kafka's retry once found TOPIC_ALREADY_EXISTS: the first attempt had
landed though its answer was an error, which is why a retry must accept it). What must hold: every creation the client saw acknowledged exists once the
controllers have a new leader, and the cluster keeps creating topics after the failover.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from common.waiting import wait_until
from tidelog.testing import Cluster

TOPICS = 12
BEFORE_KILL = 3  # creations acknowledged before the active controller is killed
CREATE_TIMEOUT_S = 15.0  # one CreateTopics; Kafka's default is 30 s, a failover takes a few
DEADLINE_S = 90.0  # the whole loop, retries included


def create_confluent(bootstrap: str, name: str) -> None:
    """Create one topic (1 partition, 3 replicas); raises if the client did not see it acknowledged."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, 1, 3)], operation_timeout=CREATE_TIMEOUT_S,
                                  request_timeout=CREATE_TIMEOUT_S)
    futures[name].result(CREATE_TIMEOUT_S)


def create_kafka_python(bootstrap: str, name: str) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(CREATE_TIMEOUT_S * 1000))
    try:
        response = admin.create_topics([NewTopic(name, 1, 3)], timeout_ms=int(CREATE_TIMEOUT_S * 1000))
        errors = [t for t in getattr(response, "topic_errors", getattr(response, "topics", [])) if t[1] != 0]
        assert not errors, errors
    finally:
        admin.close()


def create_aiokafka(bootstrap: str, name: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    async def create() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(CREATE_TIMEOUT_S * 1000))
        await admin.start()
        try:
            response = await admin.create_topics([NewTopic(name, 1, 3)], timeout_ms=int(CREATE_TIMEOUT_S * 1000))
            errors = [t for t in response.topic_errors if t[1] != 0]
            assert not errors, errors
        finally:
            await admin.close()
    asyncio.run(asyncio.wait_for(create(), CREATE_TIMEOUT_S * 2))


CLIENTS: dict[str, Callable[[str, str], None]] = {
    "confluent-kafka": create_confluent, "kafka-python": create_kafka_python, "aiokafka": create_aiokafka}


class Creator(threading.Thread):
    """The application: creates each topic in turn, retrying a failed one (it may exist already:
    TOPIC_ALREADY_EXISTS then means an earlier attempt did land, which the checks below accept)."""

    def __init__(self, create: Callable[[str, str], None], bootstrap: str, names: list[str]) -> None:
        super().__init__(daemon=True)
        self.create, self.bootstrap, self.names = create, bootstrap, names
        self.acknowledged: list[str] = []
        self.failures: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        deadline = time.monotonic() + DEADLINE_S
        try:
            for name in self.names:
                while time.monotonic() < deadline:  # bounded: the whole loop has a deadline
                    try:
                        self.create(self.bootstrap, name)
                    except Exception as exc:  # the client's error: the app retries this topic
                        self.failures.append(f"{name}: {exc!r}")
                        if "already exists" in str(exc).lower() or "TopicAlreadyExists" in repr(exc):
                            break  # an earlier attempt landed: not counted as acknowledged
                        time.sleep(0.2)  # the application's retry backoff
                        continue
                    self.acknowledged.append(name)
                    break
        except BaseException as exc:  # reported by the test, never lost in the thread
            self.error = exc


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_every_acknowledged_topic_survives_a_controller_failover(tidelog_cluster: Cluster, client: str,
                                                                 request: pytest.FixtureRequest) -> None:
    names = [f"failover-{client}-{i}" for i in range(TOPICS)]
    creator = Creator(CLIENTS[client], tidelog_cluster.bootstrap_servers, names)
    request.addfinalizer(lambda: [tidelog_cluster.delete_topic(n) for n in names
                                  if n in tidelog_cluster.topic_names()])
    creator.start()
    wait_until(f"{BEFORE_KILL} topics created before the kill",
               lambda: len(creator.acknowledged) >= BEFORE_KILL or not creator.is_alive(), DEADLINE_S, poll_s=0.01)
    assert creator.error is None, creator.error
    active = tidelog_cluster.active_controller()
    tidelog_cluster.kill(active)  # returns once the other controllers have elected a new active one
    creator.join(DEADLINE_S)
    assert not creator.is_alive() and creator.error is None, creator.error
    assert tidelog_cluster.active_controller() != active
    after_kill = creator.acknowledged[BEFORE_KILL:]
    assert after_kill, f"nothing created after the failover: {creator.failures}"
    existing = set(tidelog_cluster.topic_names())
    assert set(creator.acknowledged) <= existing, (sorted(set(creator.acknowledged) - existing), creator.failures)
    for name in creator.acknowledged:  # and every broker serves them to clients
        tidelog_cluster.wait_for_leaders(name)
