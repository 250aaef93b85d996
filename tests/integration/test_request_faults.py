"""Request-level faults (issue 33) on a real cluster, through `tidelog.testing.Cluster`, with real
clients: each fault kind changes what the client sees, and each fault's `fired` count matches the
requests it changed, checked against the broker's own request metrics (tidelog_broker_requests_total,
counted when an answer is written: an error answer counts, a dropped one does not).

- NOT_LEADER_OR_FOLLOWER once on Produce, with confluent-kafka, kafka-python and aiokafka: the
  client refreshes metadata and retries, the record lands once, two Produce answers were written;
- a Produce served but its answer lost (drop_connection after): with idempotence no duplicate,
  without it a duplicate (the retry appends again), one Produce answer written, the other lost;
- a Produce dropped before serving: nothing appended by it, the retry lands once;
- a delay measured on the client; a throttle seen by the client (librdkafka's throttle_cb), its
  one firing the one Produce answer written while it was installed;
- bad input (API, error, broker, times) refused naming the argument, nothing installed; the
  control route refuses a request without the cluster's token; recover() clears the faults.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from broker.request_fault_hook import ROUTE
from chaos.nemeses.requests import RequestFaultNemesis
from common.prometheus import samples
from tidelog.testing.cluster import Cluster

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.tidelog(brokers=1, combined=True)
HTTP_TIMEOUT_S = 10.0
DELIVERY_TIMEOUT_S = 30.0
DELAY_MS = 400
THROTTLE_MS = 700
PRODUCE_ANSWERS = 'tidelog_broker_requests_total{api="PRODUCE"}'


def metric(cluster: Cluster, name: str) -> float:
    broker = cluster.broker_ids[0]
    with urllib.request.urlopen(cluster.node(broker).spec.metrics_url, timeout=HTTP_TIMEOUT_S) as answer:
        return samples(answer.read().decode()).get(name, 0.0)


def count_records(cluster: Cluster, topic: str) -> int:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"count-{topic}",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), timeout=10)
        return int(high - low)
    finally:
        consumer.close()


def confluent_send(bootstrap: str, topic: str, value: bytes, **config: Any) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **config})
    errors: list[Any] = []
    producer.produce(topic, value, partition=0, on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(DELIVERY_TIMEOUT_S) == 0, "the record was not delivered"
    assert errors == [None]


def kafka_python_send(bootstrap: str, topic: str, value: bytes) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, retries=5, linger_ms=0, acks=1)
    try:
        producer.send(topic, value, partition=0).get(timeout=DELIVERY_TIMEOUT_S)
    finally:
        producer.close(timeout=5)


def aiokafka_send(bootstrap: str, topic: str, value: bytes) -> None:
    from aiokafka import AIOKafkaProducer

    async def send() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1)
        await producer.start()
        try:
            await asyncio.wait_for(producer.send_and_wait(topic, value, partition=0), DELIVERY_TIMEOUT_S)
        finally:
            await producer.stop()
    asyncio.run(send())


SENDERS: dict[str, Callable[[str, str, bytes], None]] = {
    "confluent-kafka": lambda b, t, v: confluent_send(b, t, v, acks=1),
    "kafka-python": kafka_python_send, "aiokafka": aiokafka_send}


@pytest.mark.parametrize("client", sorted(SENDERS))
def test_not_leader_once_makes_the_client_refresh_and_retry_and_the_record_lands_once(
        tidelog_cluster: Cluster, tidelog_topic: Callable[..., str], client: str) -> None:
    if client != "confluent-kafka":
        pytest.importorskip(client.replace("-python", ""))
    topic = tidelog_topic()
    answers = metric(tidelog_cluster, PRODUCE_ANSWERS)
    with tidelog_cluster.inject("Produce", "NOT_LEADER_OR_FOLLOWER", times=1, topic=topic) as fault:
        SENDERS[client](tidelog_cluster.bootstrap_servers, topic, b"once")
        assert fault.fired == 1
    assert count_records(tidelog_cluster, topic) == 1
    # the error answer and the retry's answer: every Produce the broker answered
    assert metric(tidelog_cluster, PRODUCE_ANSWERS) - answers == fault.fired + 1


@pytest.mark.parametrize(("idempotent", "records"), [(True, 1), (False, 2)], ids=["idempotent", "not-idempotent"])
def test_a_produce_whose_answer_is_lost_is_deduplicated_only_with_idempotence(
        tidelog_cluster: Cluster, tidelog_topic: Callable[..., str], idempotent: bool, records: int) -> None:
    topic = tidelog_topic()
    confluent_send(tidelog_cluster.bootstrap_servers, topic, b"warm-up", **{"enable.idempotence": idempotent})
    answers = metric(tidelog_cluster, PRODUCE_ANSWERS)
    with tidelog_cluster.drop_connection("Produce", when="after", times=1, topic=topic) as fault:
        confluent_send(tidelog_cluster.bootstrap_servers, topic, b"lost-answer", **{"enable.idempotence": idempotent})
    assert fault.fired == 1
    assert count_records(tidelog_cluster, topic) == 1 + records  # the warm-up, then one or a duplicate
    # served twice, answered once: the fired one's answer never went out
    assert metric(tidelog_cluster, PRODUCE_ANSWERS) - answers == 2 - fault.fired


def test_a_produce_dropped_before_serving_appends_nothing(tidelog_cluster: Cluster,
                                                          tidelog_topic: Callable[..., str]) -> None:
    topic = tidelog_topic()
    confluent_send(tidelog_cluster.bootstrap_servers, topic, b"warm-up", acks=1)
    answers = metric(tidelog_cluster, PRODUCE_ANSWERS)
    with tidelog_cluster.drop_connection("Produce", when="before", times=2, topic=topic) as fault:
        confluent_send(tidelog_cluster.bootstrap_servers, topic, b"after-two-drops", acks=1)
    assert fault.fired == 2
    assert count_records(tidelog_cluster, topic) == 2
    assert metric(tidelog_cluster, PRODUCE_ANSWERS) - answers == 1  # the two dropped were never answered


def test_a_delay_is_seen_by_the_client(tidelog_cluster: Cluster, tidelog_topic: Callable[..., str]) -> None:
    topic = tidelog_topic()
    bootstrap = tidelog_cluster.bootstrap_servers
    confluent_send(bootstrap, topic, b"warm-up", acks=1)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1})
    producer.produce(topic, b"baseline", partition=0)
    assert producer.flush(DELIVERY_TIMEOUT_S) == 0
    answers = metric(tidelog_cluster, PRODUCE_ANSWERS)
    with tidelog_cluster.delay("Produce", DELAY_MS, topic=topic) as fault:
        began = time.monotonic()
        producer.produce(topic, b"delayed", partition=0)
        assert producer.flush(DELIVERY_TIMEOUT_S) == 0
        took_ms = (time.monotonic() - began) * 1000
    assert DELAY_MS <= took_ms < DELAY_MS + 2000, f"delivery took {took_ms:.0f} ms with a {DELAY_MS} ms delay"
    assert fault.fired == 1 == metric(tidelog_cluster, PRODUCE_ANSWERS) - answers


def test_a_throttle_is_seen_by_the_client(tidelog_cluster: Cluster, tidelog_topic: Callable[..., str]) -> None:
    topic = tidelog_topic()
    throttled: list[float] = []
    producer = confluent_kafka.Producer({"bootstrap.servers": tidelog_cluster.bootstrap_servers, "linger.ms": 0,
                                         "acks": 1, "throttle_cb": lambda e: throttled.append(e.throttle_time)})
    producer.produce(topic, b"warm-up", partition=0)
    assert producer.flush(DELIVERY_TIMEOUT_S) == 0
    answers = metric(tidelog_cluster, PRODUCE_ANSWERS)
    with tidelog_cluster.throttle("Produce", THROTTLE_MS, times=1, topic=topic) as fault:
        producer.produce(topic, b"throttled", partition=0)
        assert producer.flush(DELIVERY_TIMEOUT_S) == 0
        producer.poll(0)  # throttle_cb is served from poll
    assert fault.fired == 1
    assert throttled == [pytest.approx(THROTTLE_MS / 1000)]
    # served and answered (with throttle_time_ms): the one answer the fault changed
    assert metric(tidelog_cluster, PRODUCE_ANSWERS) - answers == fault.fired


def _listed(cluster: Cluster) -> list[Any]:
    return list(RequestFaultNemesis(cluster.local)._call(cluster.broker_ids[0], "GET", ROUTE)["faults"])


@pytest.mark.parametrize(("call", "argument"), [
    (lambda c: c.inject("Produsce", "NOT_LEADER_OR_FOLLOWER"), "api:"),
    (lambda c: c.inject("Produce", "NOT_AN_ERROR"), "error:"),
    (lambda c: c.inject("Produce", "NOT_LEADER_OR_FOLLOWER", broker=99), "broker:"),
    (lambda c: c.inject("Produce", "NOT_LEADER_OR_FOLLOWER", times=0), "times:"),
    (lambda c: c.delay("Fetch", 0), "ms:"),
    (lambda c: c.drop_connection("Produce", when="during"), "when:"),
    (lambda c: c.inject("OffsetFetch", "NOT_COORDINATOR"), "api:"),
], ids=["api", "error", "broker", "times", "ms", "when", "inexpressible"])
def test_bad_input_names_the_argument_and_installs_nothing(tidelog_cluster: Cluster,
                                                           call: Callable[[Cluster], Any], argument: str) -> None:
    with pytest.raises(ValueError) as refused:
        call(tidelog_cluster)
    assert str(refused.value).startswith(argument)
    assert tidelog_cluster.request_faults() == [] and _listed(tidelog_cluster) == []


def test_the_control_route_needs_the_clusters_token(tidelog_cluster: Cluster) -> None:
    spec = tidelog_cluster.node(tidelog_cluster.broker_ids[0]).spec
    url = f"http://{spec.host}:{spec.metrics_port}{ROUTE}"
    body = json.dumps({"kind": "error", "api": "Produce", "error": "NOT_LEADER_OR_FOLLOWER"}).encode()
    for headers in ({}, {"Authorization": "Bearer " + "0" * 64}):
        request = urllib.request.Request(url, data=body, method="POST", headers=headers)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S)
        assert refused.value.code == 403
    assert _listed(tidelog_cluster) == []


def test_recover_removes_the_tests_request_faults(tidelog_cluster: Cluster) -> None:
    fault = tidelog_cluster.inject("Fetch", "NOT_LEADER_OR_FOLLOWER", times=None)
    assert len(_listed(tidelog_cluster)) == 1
    tidelog_cluster.recover()
    assert fault.removed and tidelog_cluster.request_faults() == [] and _listed(tidelog_cluster) == []
