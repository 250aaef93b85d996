"""Log compaction of a transactional topic on a real RF=3 cluster, the brokers' own cleaners
compacting it. First with transactional batches built by hand and markers written with
WriteTxnMarkers (the coordinator's request, sent by a test client): every replica drops the
aborted transaction's data and keeps its marker, and nothing at or past the last stable offset
(an open transaction) is cleaned until the transaction commits. Then with a real transactional
producer (confluent-kafka) through the transaction coordinator: an aborted transaction's
records leave every replica, committed ones are compacted by key. read_committed and
read_uncommitted confluent-kafka consumers read the cleaned partition back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from common.kafka_client import KafkaClient
from common.protocol import messages
from common.protocol.api_keys import ApiKey
from common.record_batch import iter_batches
from common.records import build_batch, decode_records
from localcluster.launcher import LocalCluster
from localcluster.replica_files import partition_dir
from tests.integration.cluster_fixtures import wait_until
from tests.integration.replication_fixtures import (
    BROKERS,
    create_topic,
    partition_state,
    replicated_cluster,
    wait_full_isr,
)
from tests.integration.txn_fixtures import read_partition

confluent_kafka = pytest.importorskip("confluent_kafka")

TOPIC = "txn-changelog"
COMMITTED, ABORTED, OPEN = 2001, 2002, 2003  # producer ids of the three transactions
CONFIGS = {"cleanup.policy": "compact", "segment.bytes": "600", "min.cleanable.dirty.ratio": "0.01",
           "delete.retention.ms": "3600000", "min.insync.replicas": "2"}
FILLERS = 30  # one-record batches after the transactions: several segments roll
WRITE_TXN_MARKERS_VERSION = 1
CLEANING_S = 60.0
CLIENT_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with replicated_cluster(tmp_path_factory.mktemp("txn-compaction"),
                            {"log.cleaner.backoff.ms": "200",
                             "transaction.state.log.num.partitions": "6"}) as (started, _):
        yield started


def client_of(cluster: LocalCluster) -> KafkaClient:
    servers = cluster.bootstrap_servers
    assert servers is not None
    hosts = [(h, int(p)) for h, p in (s.rsplit(":", 1) for s in servers.split(","))]
    return KafkaClient(hosts, client_id="txn-compaction-test")


def produce(client: KafkaClient, leader: int, pairs: list[tuple[bytes, bytes]], *,
            producer_id: int = -1) -> None:
    batch = build_batch(pairs, producer_id=producer_id, producer_epoch=0,  # type: ignore[arg-type]
                        base_sequence=0 if producer_id >= 0 else -1, is_transactional=producer_id >= 0)
    answer = client.produce(leader, TOPIC, {0: batch}, acks=-1, timeout_ms=10_000)
    assert answer[0].error_code == 0, answer


def write_marker(client: KafkaClient, leader: int, producer_id: int, *, commit: bool) -> None:
    m = messages.request_module(ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION)
    request = m.WriteTxnMarkersRequest(markers=(m.WritableTxnMarker(
        producer_id=producer_id, producer_epoch=0, transaction_result=commit, coordinator_epoch=0,
        topics=(m.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=(0,)),)),))
    response = client.call(leader, ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, request,
                           messages.encode_request, messages.response_decoder(ApiKey.WRITE_TXN_MARKERS))
    assert [int(p.error_code) for r in response.markers for t in r.topics for p in t.partitions] == [0]


def replica_records(cluster: LocalCluster, broker_id: int,
                    topic: str = TOPIC) -> list[tuple[int, bytes, bytes]] | None:
    """(offset, key, value) of every data record of one replica, read from its segment files;
    None while a swap renames them under us."""
    directory: Path = partition_dir(cluster.node(broker_id), topic, 0)
    out = []
    try:
        for path in sorted(directory.glob("*.log")):
            data = path.read_bytes()
            for pos, header in iter_batches(data, allow_partial_tail=True):
                if not header.is_control:
                    out.extend((r.offset, r.key or b"", r.value or b"")
                               for r in decode_records(data, pos, header))
    except Exception:  # noqa: BLE001 - a file swapped mid-read: read again
        return None
    return out


def every_replica(cluster: LocalCluster, check: object, topic: str = TOPIC) -> bool:
    for broker in BROKERS:
        records = replica_records(cluster, broker, topic)
        if records is None or not check(records):  # type: ignore[operator]
            return False
    return True


def consume(cluster: LocalCluster, isolation: str, count: int,
            topic: str = TOPIC) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) a consumer of `isolation` reads: `count` of them, ending at the partition end."""
    return read_partition(cluster, topic, isolation, count, group_id=f"{topic}-{isolation}")


def fill(client: KafkaClient, leader: int, tag: bytes) -> list[tuple[bytes, bytes]]:
    pairs = [(b"f%d" % i, tag) for i in range(FILLERS)]
    for pair in pairs:
        produce(client, leader, [pair])
    return pairs


def test_cleaning_drops_aborted_data_and_stops_at_the_last_stable_offset(cluster: LocalCluster) -> None:
    create_topic(cluster, TOPIC, partitions=1, configs=CONFIGS)
    wait_full_isr(cluster, TOPIC, 1)
    leader = int(partition_state(cluster, TOPIC, 0)["leader"])
    with client_of(cluster) as client:
        client.metadata([TOPIC])
        produce(client, leader, [(b"a", b"v0")])                                          # 0
        produce(client, leader, [(b"a", b"aborted"), (b"b", b"aborted")], producer_id=ABORTED)  # 1-2
        produce(client, leader, [(b"b", b"c1"), (b"c", b"c1")], producer_id=COMMITTED)    # 3-4
        write_marker(client, leader, ABORTED, commit=False)                               # 5
        write_marker(client, leader, COMMITTED, commit=True)                              # 6
        produce(client, leader, [(b"d", b"open")], producer_id=OPEN)                      # 7: the LSO
        produce(client, leader, [(b"a", b"late")])                                        # 8
        fillers = fill(client, leader, b"x")                                              # 9-38

        # every replica's cleaner drops the aborted data; a=late lies past the LSO, so it is
        # never mapped and a=v0 stays (and the open transaction stays whole)
        wait_until("every replica dropped the aborted transaction's data", lambda: every_replica(
            cluster, lambda records: all(v != b"aborted" for _, _, v in records)), CLEANING_S)
        for broker in BROKERS:
            records = replica_records(cluster, broker)
            assert records is not None
            assert [(o, k, v) for o, k, v in records if o < 9] == [
                (0, b"a", b"v0"), (3, b"b", b"c1"), (4, b"c", b"c1"), (7, b"d", b"open"), (8, b"a", b"late")]
        assert consume(cluster, "read_committed", 3) == [(b"a", b"v0"), (b"b", b"c1"), (b"c", b"c1")]
        assert consume(cluster, "read_uncommitted", 5 + FILLERS) == [
            (b"a", b"v0"), (b"b", b"c1"), (b"c", b"c1"), (b"d", b"open"), (b"a", b"late"), *fillers]

        # the open transaction commits: the LSO moves on, and the next cleanings compact past it
        write_marker(client, leader, OPEN, commit=True)                                   # 39
        later = fill(client, leader, b"y")                                                # 40-69
        wait_until("every replica dropped a=v0", lambda: every_replica(
            cluster, lambda records: (0, b"a", b"v0") not in records), CLEANING_S)
        latest = dict([(b"b", b"c1"), (b"c", b"c1"), (b"d", b"open"), (b"a", b"late"), *later])
        for isolation in ("read_committed", "read_uncommitted"):
            read = consume(cluster, isolation, len(latest))  # to the end: the cleaned log
            assert dict(read) == latest and (b"a", b"v0") not in read
            assert not any(value == b"aborted" for _, value in read)


def test_a_transactional_producers_aborted_records_are_cleaned_away(cluster: LocalCluster) -> None:
    topic = "txn-changelog-eos"
    create_topic(cluster, topic, partitions=1, configs={**CONFIGS, "segment.ms": "100"})
    wait_full_isr(cluster, topic, 1)
    producer = confluent_kafka.Producer({
        "bootstrap.servers": cluster.bootstrap_servers, "transactional.id": "compaction-eos",
        "linger.ms": 0, "transaction.timeout.ms": 60_000})
    producer.init_transactions(CLIENT_TIMEOUT_S)

    def transaction(pairs: list[tuple[bytes, bytes]], *, commit: bool) -> None:
        producer.begin_transaction()
        for key, value in pairs:
            producer.produce(topic, key=key, value=value)
            producer.flush(CLIENT_TIMEOUT_S)  # one batch per record: segments roll often
        if commit:
            producer.commit_transaction(CLIENT_TIMEOUT_S)
        else:
            producer.abort_transaction(CLIENT_TIMEOUT_S)

    keys = [b"k%d" % i for i in range(10)]
    transaction([(k, b"c1") for k in keys], commit=True)
    transaction([(k, b"aborted") for k in keys[:5]], commit=False)
    transaction([(k, b"c3") for k in keys[5:]], commit=True)
    fillers = [(b"f%d" % i, b"x") for i in range(FILLERS)]
    transaction(fillers, commit=True)  # the transactions above leave the active segment

    wait_until("every replica dropped the aborted records and k5-k9's first values", lambda: every_replica(
        cluster, lambda records: all(v != b"aborted" for _, _, v in records)
        and not any(k in keys[5:] and v == b"c1" for _, k, v in records), topic), CLEANING_S)
    latest = dict([*((k, b"c1") for k in keys[:5]), *((k, b"c3") for k in keys[5:]), *fillers])
    for isolation in ("read_committed", "read_uncommitted"):
        read = consume(cluster, isolation, len(latest), topic)
        assert dict(read) == latest
        assert [value for key, value in read if key in keys] == [b"c1"] * 5 + [b"c3"] * 5
