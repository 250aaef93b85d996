"""Four real clients against one real cluster (3 controllers + broker 4, every node a process).

For each of confluent-kafka, kafka-python, aiokafka and kcat: Metadata lists the broker and
the topics; a topic is created through the client's own admin API (kcat has none: the admin
HTTP API); records with keys, values, headers and explicit timestamps are produced once per
compression codec and once with idempotence on, read back by assigning partitions from the
beginning (no group, no commits) and compared exactly, offsets included; ListOffsets by
timestamp answers the first offset at or after it; the topic is deleted through the client
and disappears from Metadata and from the broker's log dir.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import struct
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import pytest

from tests.integration.cluster_fixtures import (
    BROKER_ID,
    WAIT_S,
    broker_log_dir,
    http,
    running_cluster,
    wait_until,
)
from common.compression import compress
from localcluster.launcher import LocalCluster

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
CLIENT_TIMEOUT_S = 20.0
PARTITIONS = 2
RECORDS = 40
SEED_TOPIC = "matrix-seed"
TIMESTAMP_STEP_MS = 1000
# Recent, whole seconds: far from retention.ms, and each record 1 s after the one before.
BASE_TIMESTAMP_MS = (int(time.time()) - 3600) * 1000
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
VARIANTS = (*CODECS, "idempotent")

Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class Record:
    """One record as produced or as consumed (offset -1 until the broker assigns one)."""
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: Headers
    timestamp: int | None  # None: the client stamps it (kcat -P cannot set one)


@dataclass(frozen=True, slots=True)
class Metadata:
    brokers: frozenset[tuple[int, str, int]]
    leaders: dict[str, dict[int, int]]  # topic -> partition -> leader id


class Driver(Protocol):
    name: str
    explicit_timestamps: bool  # False: the client stamps CreateTime itself
    per_record_headers: bool  # False: one header set for every record of a produce call
    # librdkafka sends a batch uncompressed when the codec would make it larger
    # (rd_kafka_msgset_writer_compress); the Java-style clients always compress.
    may_skip_compression: bool

    def metadata(self) -> Metadata: ...
    def create_topic(self, name: str, partitions: int) -> None: ...
    def delete_topic(self, name: str) -> None: ...
    def produce(self, topic: str, records: list[Record], codec: str, idempotent: bool) -> list[tuple[int, int]]: ...
    def consume(self, topic: str, ends: dict[int, int]) -> list[Record]: ...
    def offset_for_time(self, topic: str, partition: int, timestamp: int) -> int | None: ...


def deadline_loop(timeout_s: float = CLIENT_TIMEOUT_S) -> Iterator[None]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:  # bounded by the deadline
        yield


# ---- confluent-kafka (librdkafka) ---------------------------------------------------------

class ConfluentDriver:
    name = "confluent-kafka"
    explicit_timestamps = True
    per_record_headers = True
    may_skip_compression = True

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap})

    def metadata(self) -> Metadata:
        md = self.admin.list_topics(timeout=5)
        return Metadata(frozenset((b.id, b.host, b.port) for b in md.brokers.values()),
                        {name: {p.id: p.leader for p in t.partitions.values()}
                         for name, t in md.topics.items() if t.error is None})

    def create_topic(self, name: str, partitions: int) -> None:
        futures = self.admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)],
                                           operation_timeout=10)
        futures[name].result(timeout=CLIENT_TIMEOUT_S)

    def delete_topic(self, name: str) -> None:
        self.admin.delete_topics([name], operation_timeout=10)[name].result(timeout=CLIENT_TIMEOUT_S)

    def produce(self, topic: str, records: list[Record], codec: str, idempotent: bool) -> list[tuple[int, int]]:
        producer = confluent_kafka.Producer({
            "bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": "5",
            "compression.type": codec, "enable.idempotence": idempotent})
        delivered: list[tuple[int, int]] = []
        errors: list[Any] = []

        def report(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                delivered.append((msg.partition(), msg.offset()))
        for r in records:
            producer.produce(topic, value=r.value, key=r.key, partition=r.partition, headers=list(r.headers),
                             timestamp=r.timestamp or 0, on_delivery=report)
            producer.poll(0)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0, "records left undelivered"
        assert not errors, errors
        return delivered

    def _consumer(self) -> Any:
        return confluent_kafka.Consumer({"bootstrap.servers": self.bootstrap, "group.id": "never-joined",
                                         "enable.auto.commit": False, "enable.auto.offset.store": False,
                                         "fetch.wait.max.ms": 100})

    def consume(self, topic: str, ends: dict[int, int]) -> list[Record]:
        consumer = self._consumer()
        try:
            consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                             for p in ends])
            got: list[Record] = []
            for _ in deadline_loop():
                if len(got) >= sum(ends.values()):
                    break
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                assert msg.error() is None, msg.error()
                kind, ts = msg.timestamp()
                assert kind == confluent_kafka.TIMESTAMP_CREATE_TIME, (kind, ts)
                got.append(Record(msg.partition(), msg.offset(), msg.key(), msg.value(),
                                  tuple(msg.headers() or ()), ts))
            return got
        finally:
            consumer.close()

    def offset_for_time(self, topic: str, partition: int, timestamp: int) -> int | None:
        consumer = self._consumer()
        try:
            [found] = consumer.offsets_for_times([confluent_kafka.TopicPartition(topic, partition, timestamp)],
                                                 timeout=CLIENT_TIMEOUT_S)
            assert found.error is None, found.error
            return None if found.offset < 0 else found.offset
        finally:
            consumer.close()


# ---- kafka-python ---------------------------------------------------------------------------

class KafkaPythonDriver:
    name = "kafka-python"
    explicit_timestamps = True
    per_record_headers = True
    may_skip_compression = False

    def __init__(self, bootstrap: str) -> None:
        import kafka
        self.kafka = kafka
        self.bootstrap = bootstrap

    def _admin(self) -> Any:
        return self.kafka.KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=10_000)

    def metadata(self) -> Metadata:
        admin = self._admin()
        try:
            cluster = admin.describe_cluster()
            topics = admin.describe_topics()
        finally:
            admin.close()
        brokers = frozenset((b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"])
        return Metadata(brokers, {t["name"]: {p["partition_index"]: p["leader_id"] for p in t["partitions"]}
                                  for t in topics if t["error_code"] == 0})

    def create_topic(self, name: str, partitions: int) -> None:
        from kafka.admin import NewTopic as KNewTopic
        admin = self._admin()
        try:
            answer = admin.create_topics([KNewTopic(name, partitions, 1)], timeout_ms=10_000, raise_errors=False)
        finally:
            admin.close()
        assert [(t["name"], t["error_code"]) for t in answer["topics"]] == [(name, 0)], answer

    def delete_topic(self, name: str) -> None:
        admin = self._admin()
        try:
            answer = admin.delete_topics([name], timeout_ms=10_000, raise_errors=False)
        finally:
            admin.close()
        assert [(t["name"], t["error_code"]) for t in answer["topics"]] == [(name, 0)], answer

    def produce(self, topic: str, records: list[Record], codec: str, idempotent: bool) -> list[tuple[int, int]]:
        producer = self.kafka.KafkaProducer(
            bootstrap_servers=self.bootstrap, acks="all", linger_ms=5, enable_idempotence=idempotent,
            compression_type=None if codec == "none" else codec, request_timeout_ms=10_000)
        try:
            futures = [producer.send(topic, value=r.value, key=r.key, partition=r.partition,
                                     headers=list(r.headers), timestamp_ms=r.timestamp) for r in records]
            producer.flush(CLIENT_TIMEOUT_S)
            return [(m.partition, m.offset) for m in (f.get(timeout=CLIENT_TIMEOUT_S) for f in futures)]
        finally:
            producer.close(timeout=5)

    def _consumer(self) -> Any:
        return self.kafka.KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                                        enable_auto_commit=False, auto_offset_reset="earliest",
                                        fetch_max_wait_ms=100, request_timeout_ms=10_000)

    def consume(self, topic: str, ends: dict[int, int]) -> list[Record]:
        consumer = self._consumer()
        try:
            tps = [self.kafka.TopicPartition(topic, p) for p in ends]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            got: list[Record] = []
            for _ in deadline_loop():
                if len(got) >= sum(ends.values()):
                    break
                for batch in consumer.poll(timeout_ms=200).values():
                    for m in batch:
                        assert m.timestamp_type == 0, m  # CreateTime
                        got.append(Record(m.partition, m.offset, m.key, m.value, tuple(m.headers), m.timestamp))
            return got
        finally:
            consumer.close(autocommit=False)

    def offset_for_time(self, topic: str, partition: int, timestamp: int) -> int | None:
        consumer = self._consumer()
        try:
            tp = self.kafka.TopicPartition(topic, partition)
            found = consumer.offsets_for_times({tp: timestamp})[tp]
            return None if found is None else found.offset
        finally:
            consumer.close(autocommit=False)


# ---- aiokafka (asyncio) ---------------------------------------------------------------------

class AioKafkaDriver:
    name = "aiokafka"
    explicit_timestamps = True
    per_record_headers = True
    may_skip_compression = False

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run(asyncio.wait_for(coroutine, CLIENT_TIMEOUT_S + 5))

    async def _with_admin(self, use: Any) -> Any:
        from aiokafka.admin import AIOKafkaAdminClient
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=10_000)
        await admin.start()
        try:
            return await use(admin)
        finally:
            await admin.close()

    def metadata(self) -> Metadata:
        async def get(admin: Any) -> Metadata:
            cluster = await admin.describe_cluster()
            names = await admin.list_topics()
            topics = await admin.describe_topics(sorted(names)) if names else []
            brokers = frozenset((b["node_id"], b["host"], b["port"]) for b in cluster["brokers"])
            return Metadata(brokers, {t["topic"]: {p["partition"]: p["leader"] for p in t["partitions"]}
                                      for t in topics if t["error_code"] == 0})
        return self._run(self._with_admin(get))

    def create_topic(self, name: str, partitions: int) -> None:
        from aiokafka.admin import NewTopic as ANewTopic

        async def create(admin: Any) -> Any:
            return await admin.create_topics([ANewTopic(name, partitions, 1)], timeout_ms=10_000)
        answer = self._run(self._with_admin(create))
        assert [(t[0], t[1]) for t in answer.topic_errors] == [(name, 0)], answer

    def delete_topic(self, name: str) -> None:
        async def delete(admin: Any) -> Any:
            return await admin.delete_topics([name], timeout_ms=10_000)
        answer = self._run(self._with_admin(delete))
        assert [(t[0], t[1]) for t in answer.topic_error_codes] == [(name, 0)], answer

    def produce(self, topic: str, records: list[Record], codec: str, idempotent: bool) -> list[tuple[int, int]]:
        from aiokafka import AIOKafkaProducer

        async def send() -> list[tuple[int, int]]:
            producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=5,
                                        enable_idempotence=idempotent, request_timeout_ms=10_000,
                                        compression_type=None if codec == "none" else codec)
            await producer.start()
            try:
                futures = [await producer.send(topic, value=r.value, key=r.key, partition=r.partition,
                                               headers=list(r.headers), timestamp_ms=r.timestamp)
                           for r in records]
                return [(m.partition, m.offset) for m in await asyncio.gather(*futures)]
            finally:
                await producer.stop()
        return self._run(send())

    async def _with_consumer(self, use: Any) -> Any:
        from aiokafka import AIOKafkaConsumer
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False,
                                    auto_offset_reset="earliest", fetch_max_wait_ms=100,
                                    request_timeout_ms=10_000)
        await consumer.start()
        try:
            return await use(consumer)
        finally:
            await consumer.stop()

    def consume(self, topic: str, ends: dict[int, int]) -> list[Record]:
        from aiokafka import TopicPartition as ATopicPartition

        async def read(consumer: Any) -> list[Record]:
            tps = [ATopicPartition(topic, p) for p in ends]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            got: list[Record] = []
            for _ in deadline_loop():
                if len(got) >= sum(ends.values()):
                    break
                for batch in (await consumer.getmany(*tps, timeout_ms=200)).values():
                    for m in batch:
                        assert m.timestamp_type == 0, m  # CreateTime
                        got.append(Record(m.partition, m.offset, m.key, m.value, tuple(m.headers), m.timestamp))
            return got
        return self._run(self._with_consumer(read))

    def offset_for_time(self, topic: str, partition: int, timestamp: int) -> int | None:
        from aiokafka import TopicPartition as ATopicPartition
        tp = ATopicPartition(topic, partition)

        async def ask(consumer: Any) -> int | None:
            found = (await consumer.offsets_for_times({tp: timestamp}))[tp]
            return None if found is None else found.offset
        return self._run(self._with_consumer(ask))


# ---- kcat (librdkafka CLI; no admin API: topics through the admin HTTP API) -----------------

KCAT_HEADERS: Headers = (("client", b"kcat"), ("dup", b"a"), ("dup", b"b"))


class KcatDriver:
    name = "kcat"
    explicit_timestamps = False
    per_record_headers = False
    may_skip_compression = True

    def __init__(self, bootstrap: str, admin_url: str) -> None:
        self.bootstrap = bootstrap
        self.admin_url = admin_url

    def _kcat(self, *args: str, stdin: str | None = None) -> str:
        assert KCAT is not None
        done = subprocess.run([KCAT, "-b", self.bootstrap, *args], capture_output=True, text=True,
                              input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
                              timeout=CLIENT_TIMEOUT_S)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def metadata(self) -> Metadata:
        listing = json.loads(self._kcat("-L", "-J", "-m", "10"))
        brokers = frozenset((b["id"], *b["name"].rsplit(":", 1)) for b in listing["brokers"])
        return Metadata(frozenset((i, h, int(p)) for i, h, p in brokers),
                        {t["topic"]: {p["partition"]: p["leader"] for p in t["partitions"]}
                         for t in listing["topics"] if "error" not in t})

    def create_topic(self, name: str, partitions: int) -> None:
        status, answer = http(f"{self.admin_url}/v1/topics", "POST",
                              {"name": name, "partitions": partitions, "replication_factor": 1})
        assert status == 201, answer

    def delete_topic(self, name: str) -> None:
        status, answer = http(f"{self.admin_url}/v1/topics/{name}", "DELETE")
        assert status in (200, 202, 204), (status, answer)

    def produce(self, topic: str, records: list[Record], codec: str, idempotent: bool) -> list[tuple[int, int]]:
        headers = [arg for name, value in KCAT_HEADERS for arg in ("-H", f"{name}={value.decode()}")]
        for partition in sorted({r.partition for r in records}):
            lines = "".join(f"{(r.key or b'').decode()}:{r.value.decode()}\n"
                            for r in records if r.partition == partition)
            self._kcat("-P", "-t", topic, "-p", str(partition), "-K", ":", "-z", codec, *headers,
                       "-X", "acks=all", "-X", f"enable.idempotence={str(idempotent).lower()}", stdin=lines)
        return []  # kcat reports no offsets: the consumed offsets are checked instead

    def consume(self, topic: str, ends: dict[int, int]) -> list[Record]:
        got = []
        for partition, end in sorted(ends.items()):
            out = self._kcat("-C", "-J", "-e", "-q", "-t", topic, "-p", str(partition), "-o", "beginning",
                             "-c", str(end))
            for line in out.splitlines():
                m = json.loads(line)
                assert m["tstype"] == "create", m
                raw = m.get("headers") or []
                headers = tuple((raw[i], raw[i + 1].encode()) for i in range(0, len(raw), 2))
                got.append(Record(m["partition"], m["offset"], None if m["key"] is None else m["key"].encode(),
                                  m["payload"].encode(), headers, m["ts"]))
        return got

    def offset_for_time(self, topic: str, partition: int, timestamp: int) -> int | None:
        answer = json.loads(self._kcat("-Q", "-J", "-t", f"{topic}:{partition}:{timestamp}"))
        [found] = [p for p in answer[topic].values() if isinstance(p, dict) and p.get("partition") == partition]
        assert "error" not in found, found
        return None if found["offset"] < 0 else found["offset"]


DRIVERS = ("confluent-kafka", "kafka-python", "aiokafka", "kcat")


def make_driver(name: str, cluster: LocalCluster) -> Driver:
    bootstrap = cluster.bootstrap_servers or ""
    if name == "confluent-kafka":
        return ConfluentDriver(bootstrap)
    if name == "kafka-python":
        pytest.importorskip("kafka")
        return KafkaPythonDriver(bootstrap)
    if name == "aiokafka":
        pytest.importorskip("aiokafka")
        return AioKafkaDriver(bootstrap)
    if KCAT is None:
        pytest.skip("kcat is not installed")
    return KcatDriver(bootstrap, cluster.admin_url)


# ---- the cluster and the data -----------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory.mktemp("client-matrix") / "cluster") as started:
        status, answer = http(f"{started.admin_url}/v1/topics", "POST",
                              {"name": SEED_TOPIC, "partitions": PARTITIONS, "replication_factor": 1})
        assert status == 201, answer
        yield started


def make_records(tag: str, driver: Driver) -> list[Record]:
    """RECORDS rows over PARTITIONS; one null key where the client can send one."""
    out = []
    for i in range(RECORDS):
        key = None if i == 3 and driver.per_record_headers else f"{tag}-key-{i}".encode()
        value = f"{tag}-value-{i}-".encode() * (1 + i % 9)  # repetitive: compression has work to do
        headers = ((("seq", str(i).encode()), ("dup", b"a"), ("dup", b"b")) if driver.per_record_headers
                   else KCAT_HEADERS)
        timestamp = BASE_TIMESTAMP_MS + i * TIMESTAMP_STEP_MS if driver.explicit_timestamps else None
        out.append(Record(i % PARTITIONS, -1, key, value, headers, timestamp))
    return out


def with_offsets(records: list[Record]) -> list[Record]:
    next_offset: dict[int, int] = {}
    out = []
    for r in records:
        offset = next_offset.get(r.partition, 0)
        next_offset[r.partition] = offset + 1
        out.append(Record(r.partition, offset, r.key, r.value, r.headers, r.timestamp))
    return out


def wait_for_leaders(driver: Driver, topic: str) -> None:
    def led() -> bool:
        leaders = driver.metadata().leaders.get(topic)
        return leaders == {p: BROKER_ID for p in range(PARTITIONS)}
    wait_until(f"{driver.name} to see broker {BROKER_ID} leading {topic}", led)


def partition_dirs(cluster: LocalCluster, topic: str) -> list[str]:
    """Partition directories of `topic` in the broker's log dir, live or marked for deletion."""
    return sorted(d.name for d in broker_log_dir(cluster).iterdir()
                  if d.is_dir() and (d.name.rsplit("-", 1)[0] == topic
                                     or d.name.startswith(f"{topic}-") and d.name.endswith("-delete")))


CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
BATCH_HEADER = struct.Struct(">qiiBIhiqqqhii")  # record batch v2, up to the record count


@dataclass(frozen=True, slots=True)
class StoredBatch:
    codec: int
    producer_id: int
    base_sequence: int
    records: bytes  # the records section as stored (compressed when codec is not 0)


# How much smaller our codec library may make a records section that librdkafka's own frame of
# the same codec made larger (frame headers and checksums differ by a few bytes per codec).
FRAMING_SLACK_BYTES = 24


def stored_batches(cluster: LocalCluster, topic: str, partition: int) -> list[StoredBatch]:
    """Every batch in the partition's segments, as stored."""
    out = []
    for segment in sorted((broker_log_dir(cluster) / f"{topic}-{partition}").glob("*.log")):
        data = segment.read_bytes()
        position = 0
        while position + BATCH_HEADER.size <= len(data):  # bounded by the segment's size
            (_, length, _, magic, _, attributes, _, _, _, producer_id, _, base_sequence,
             _) = BATCH_HEADER.unpack_from(data, position)
            assert magic == 2, (segment, position, magic)
            out.append(StoredBatch(attributes & 0x7, producer_id, base_sequence,
                                   data[position + BATCH_HEADER.size:position + 12 + length]))
            position += 12 + length
    return out


def assert_codec(driver: Driver, codec: str, batches: list[StoredBatch]) -> None:
    """Every batch carries `codec`, except where librdkafka's rule let one go uncompressed: only a
    batch that the codec would not have made smaller."""
    wanted = CODEC_IDS[codec]
    skipped = [b for b in batches if b.codec == 0 and wanted != 0 and driver.may_skip_compression]
    assert {b.codec for b in batches if b not in skipped} == {wanted}, (
        f"{driver.name} was asked for {codec} but stored batches have codec ids "
        f"{sorted({b.codec for b in batches})}: {batches}")
    for batch in skipped:
        compressed = len(compress(wanted, batch.records))
        assert compressed + FRAMING_SLACK_BYTES >= len(batch.records), (
            f"{driver.name} stored a {len(batch.records)}-byte records section uncompressed that "
            f"{codec} shrinks to {compressed} bytes")


# ---- the tests --------------------------------------------------------------------------------

@pytest.mark.parametrize("client", DRIVERS)
def test_metadata_lists_the_broker_and_topics(cluster: LocalCluster, client: str) -> None:
    driver = make_driver(client, cluster)
    host, port = (cluster.bootstrap_servers or "").rsplit(":", 1)
    wait_for_leaders(driver, SEED_TOPIC)
    metadata = driver.metadata()
    assert metadata.brokers == {(BROKER_ID, host, int(port))}
    assert metadata.leaders[SEED_TOPIC] == {0: BROKER_ID, 1: BROKER_ID}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("client", DRIVERS)
def test_round_trip(cluster: LocalCluster, client: str, variant: str) -> None:
    driver = make_driver(client, cluster)
    codec, idempotent = ("none", True) if variant == "idempotent" else (variant, False)
    topic = f"matrix-{client}-{variant}"
    driver.create_topic(topic, PARTITIONS)
    wait_for_leaders(driver, topic)
    assert partition_dirs(cluster, topic) == [f"{topic}-{p}" for p in range(PARTITIONS)]

    records = make_records(f"{client}-{variant}", driver)
    expected = with_offsets(records)
    before_ms = int(time.time() * 1000)
    delivered = driver.produce(topic, records, codec, idempotent)
    after_ms = int(time.time() * 1000)
    if delivered:  # kcat reports none
        assert sorted(delivered) == sorted((r.partition, r.offset) for r in expected)

    ends = {p: sum(1 for r in records if r.partition == p) for p in range(PARTITIONS)}
    got = driver.consume(topic, ends)
    got.sort(key=lambda r: (r.partition, r.offset))
    if not driver.explicit_timestamps:  # the client stamped them at produce time
        assert all(before_ms <= r.timestamp <= after_ms for r in got), (before_ms, after_ms, got[:3])
        stamped = {(r.partition, r.offset): r.timestamp for r in got}
        expected = [Record(e.partition, e.offset, e.key, e.value, e.headers, stamped.get((e.partition, e.offset)))
                    for e in expected]
    assert got == sorted(expected, key=lambda r: (r.partition, r.offset))

    # The client did what was asked: each stored batch carries the codec, and a producer id
    # (sequences from 0) exactly when idempotence is on.
    # (A client that finds the codec "unsupported" in ApiVersions sends uncompressed batches
    # without an error: older librdkafka (kcat 1.7.1 has 2.0.2) does so for gzip/snappy/lz4
    # unless Produce v0 is advertised, librdkafka#4956; Kafka 4.0 keeps advertising Produce
    # 0-2 for it, KAFKA-18659.)
    for partition in range(PARTITIONS):
        batches = stored_batches(cluster, topic, partition)
        assert batches, f"no batches stored for {topic}-{partition}"
        assert_codec(driver, codec, batches)
        if idempotent:
            assert len({b.producer_id for b in batches}) == 1 and batches[0].producer_id >= 0, batches
            assert batches[0].base_sequence == 0, batches
        else:  # aiokafka writes base sequence 0 without a producer id; Kafka ignores it then
            assert {b.producer_id for b in batches} == {-1}, batches

    # ListOffsets by timestamp: the first offset whose timestamp is at or after the query.
    for partition in range(PARTITIONS):
        mine = [r for r in got if r.partition == partition]
        probes: dict[int, int | None] = {mine[0].timestamp - 60_000: 0, mine[0].timestamp: 0,
                                         mine[-1].timestamp + 60_000: None}
        later = [r for r in mine[1:] if r.timestamp > mine[r.offset - 1].timestamp]
        for r in later[2:3]:  # a record stamped strictly later than the one before it
            probes[r.timestamp] = r.offset
            probes[r.timestamp - 1] = r.offset
        answers = {ts: driver.offset_for_time(topic, partition, ts) for ts in sorted(probes)}
        assert answers == probes, (partition, [(r.offset, r.timestamp) for r in mine])

    driver.delete_topic(topic)
    wait_until(f"{driver.name} to stop listing {topic}", lambda: topic not in driver.metadata().leaders)
    wait_until(f"the partition dirs of {topic} to leave the broker's log dir",
               lambda: partition_dirs(cluster, topic) == [], timeout_s=WAIT_S)
