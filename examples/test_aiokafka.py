"""Testing an asyncio application that uses aiokafka against a real tidelog cluster.

The fixtures come from the tidelog pytest plugin (async tests here run under pytest-asyncio).
Consumer groups are not in tidelog yet, so the consumer reads by assigning partitions.
"""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tidelog.testing import Cluster


async def read_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout_s: float = 30.0
                   ) -> list[bytes]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        values: list[bytes] = []
        async with asyncio.timeout(timeout_s):
            while len(values) < expected:  # bounded by the timeout
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    values += [record.value for record in records]
        return values
    finally:
        await consumer.stop()


async def test_produce_and_consume(tidelog_bootstrap: str, tidelog_topic) -> None:
    topic = tidelog_topic(partitions=2)
    producer = AIOKafkaProducer(bootstrap_servers=tidelog_bootstrap, acks="all")
    await producer.start()
    try:
        for i in range(100):
            await producer.send_and_wait(topic, key=b"k%d" % (i % 5), value=b"v%d" % i)
    finally:
        await producer.stop()

    values = await read_all(tidelog_bootstrap, topic, partitions=2, expected=100)
    assert sorted(values) == sorted(b"v%d" % i for i in range(100))


async def test_idempotent_producer_survives_leader_kill(tidelog_cluster: Cluster, tidelog_topic) -> None:
    """Kill the partition leader while the application writes: every record is there exactly once."""
    topic = tidelog_topic(partitions=1, replication_factor=3, configs={"min.insync.replicas": 2})
    producer = AIOKafkaProducer(bootstrap_servers=tidelog_cluster.bootstrap_servers, acks="all",
                                enable_idempotence=True, linger_ms=5, request_timeout_ms=10_000)
    await producer.start()
    try:
        sent = [await producer.send(topic, value=b"%d" % i) for i in range(500)]
        # the fault helpers block: run them off the event loop so the producer keeps working
        old_leader = await asyncio.to_thread(tidelog_cluster.kill_leader, topic, 0)
        sent += [await producer.send(topic, value=b"%d" % i) for i in range(500, 1000)]
        metadata = await asyncio.gather(*sent)
    finally:
        await producer.stop()

    assert all(m.offset >= 0 for m in metadata)
    assert tidelog_cluster.leader_of(topic, 0) != old_leader.node_id
    values = await read_all(tidelog_cluster.bootstrap_servers, topic, partitions=1, expected=1000)
    assert sorted(values, key=int) == [b"%d" % i for i in range(1000)]  # nothing lost, nothing twice
