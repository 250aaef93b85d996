"""Parked session fetches woken where the request that made them due ends (Kafka's
tryCompleteActions after KafkaApis.handle; broker/fetch_sessions.py `run_pending`), on a real
three-broker cluster:

- acks=all produces at RF=3 from confluent-kafka, one request at a time and in batches over
  two partitions, all complete and are all read back: every follower fetch a produce makes
  due is woken and answered (nothing waits for its max.wait);
- a consumer's parked fetch reads what the request that woke it appended, not what the next
  request on the same read appends: three requests in one write (the fetch, then two
  produces) are handled in one turn of the broker, and the fetch is answered between them.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any, BinaryIO

import pytest

from common.protocol import fetch, produce
from common.protocol.api_keys import ApiKey
from common.protocol.frame import RequestHeader, frame_request, join_chunks
from tests.log_helpers import batch
from tidelog.testing.cluster import Cluster

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.tidelog(brokers=3)
RECORDS = 300
CLIENT_TIMEOUT_S = 60.0
SOCKET_TIMEOUT_S = 30.0
FETCH_VERSION = 11  # sessions, topics by name, not flexible (response header v0)
PRODUCE_VERSION = 8
WAIT_MS = 20_000  # the parked fetch's max.wait: far longer than the test; a fetch not woken fails it


def test_acks_all_produces_at_rf3_all_complete(tidelog_cluster: Cluster, tidelog_topic: Any) -> None:
    topic = tidelog_topic(partitions=2, replication_factor=3, configs={"min.insync.replicas": "2"})
    for partition in (0, 1):
        tidelog_cluster.wait_for_isr(topic, partition, 3)
    bootstrap = tidelog_cluster.bootstrap_servers
    sent: list[bytes] = []
    # one request at a time (linger 0, each flushed), then batches over both partitions at once
    for linger_ms, flush_each in ((0, True), (5, False)):
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                             "linger.ms": linger_ms, "message.timeout.ms": 30_000})
        failed: list[Any] = []
        for i in range(RECORDS):  # bounded
            value = f"{linger_ms}-{i}".encode()
            sent.append(value)
            producer.produce(topic, value=value, partition=i % 2,
                             on_delivery=lambda err, _msg: failed.append(err) if err is not None else None)
            if flush_each:
                assert producer.flush(CLIENT_TIMEOUT_S) == 0
        assert producer.flush(CLIENT_TIMEOUT_S) == 0, "records left undelivered"
        assert failed == []
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(got) < len(sent) and time.monotonic() < deadline:  # bounded by the deadline
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
    finally:
        consumer.close()
    assert sorted(got) == sorted(sent)


def _frame(api: ApiKey, version: int, correlation_id: int, body: list[Any]) -> bytes:
    return join_chunks(frame_request(RequestHeader(api, version, correlation_id, "wake-test"), body))


def _fetch(topic: str, session: tuple[int, int], offsets: dict[int, int], *, max_wait_ms: int,
           correlation_id: int) -> bytes:
    parts = tuple(fetch.FetchPartition(p, o, 1 << 20, 0, -1) for p, o in offsets.items())
    request = fetch.FetchRequest(-1, max_wait_ms, 1, 1 << 20, fetch.READ_UNCOMMITTED,
                                 (fetch.FetchTopic(topic, parts),) if parts else (), *session)
    return _frame(ApiKey.FETCH, FETCH_VERSION, correlation_id, fetch.encode_fetch_request(request, FETCH_VERSION))


def _produce(topic: str, records: bytes, correlation_id: int) -> bytes:
    request = produce.ProduceRequest(None, 1, 10_000, (
        produce.TopicProduceData(topic, (produce.PartitionProduceData(0, records),)),))
    return _frame(ApiKey.PRODUCE, PRODUCE_VERSION, correlation_id,
                  produce.encode_produce_request(request, PRODUCE_VERSION))


def _answer(stream: BinaryIO) -> tuple[int, memoryview]:
    """(correlation id, body) of the next response (header v0) on the socket's reader."""
    size, = struct.unpack(">i", stream.read(4))  # a buffered read waits for all n bytes (or EOF)
    frame = stream.read(size)
    if len(frame) < size:
        raise ConnectionError("the broker closed the connection")
    return struct.unpack(">i", frame[:4])[0], memoryview(frame)[4:]


def test_a_parked_fetch_reads_what_the_request_that_woke_it_appended(
        tidelog_cluster: Cluster, tidelog_topic: Any) -> None:
    topic = tidelog_topic(partitions=1, replication_factor=1)
    leader = tidelog_cluster.leader_of(topic, 0)
    host, port = tidelog_cluster.node(leader).spec.bootstrap_address.rsplit(":", 1)
    first, second = batch(1, tag="first"), batch(2, tag="second")
    with socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S) as sock, \
            sock.makefile("rb") as stream:
        sock.sendall(_fetch(topic, (0, 0), {0: 0}, max_wait_ms=0, correlation_id=1))  # a session, at the end
        _, body = _answer(stream)
        opened = fetch.decode_fetch_response(body, FETCH_VERSION)
        assert opened.error_code == 0 and opened.session_id != 0
        # one write: the fetch parks, the first produce wakes it, the second appends after its read
        sock.sendall(_fetch(topic, (opened.session_id, 1), {}, max_wait_ms=WAIT_MS, correlation_id=2)
                     + _produce(topic, first, 3) + _produce(topic, second, 4))
        answers = dict(_answer(stream) for _ in range(3))
    woken = fetch.decode_fetch_response(answers[2], FETCH_VERSION)
    assert woken.error_code == 0
    parts = [p for t in woken.responses for p in t.partitions]
    assert [(p.partition_index, p.error_code, p.high_watermark) for p in parts] == [(0, 0, 1)]
    records = parts[0].records
    assert isinstance(records, (bytes, memoryview)) and len(records) == len(first)  # the first produce's batch alone
    for correlation_id in (3, 4):
        produced = produce.decode_produce_response(answers[correlation_id], PRODUCE_VERSION)
        assert [p.error_code for t in produced.responses for p in t.partitions] == [0]
