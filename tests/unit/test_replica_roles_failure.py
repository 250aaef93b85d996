"""broker/replica_roles.py + replica_manager.py: a storage error on one partition fails that
replica alone (issue 36): the others are hosted and served, it answers KAFKA_STORAGE_ERROR, it
is never retried until restart, and it is what heartbeats report."""

from __future__ import annotations

import errno

import pytest

from broker.log.log_manager import PARALLEL_MIN, LogManager
from broker.metadata_follower import MetadataFollowerState, offline_replica_topics
from broker.replica_manager import ReplicaManager
from broker.replica_roles import describe_failure
from common.topic_partition import TopicPartition
from common import rpc
from common.errors import ErrorCode, KafkaError, KafkaStorageError
from common.log_config import LogConfig
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from metadata.local_changes import changes_for_broker
from metadata.records import (
    BeginEpoch,
    BrokerRegistrationChange,
    Listener,
    Partition,
    PartitionChange,
    RegisterBroker,
    Topic,
)
from tests.log_helpers import NOW, batch

ME = 1
MANY = PARALLEL_MIN + 4  # partitions of "wide": created together on the I/O pool


def replay(image, *records):
    return apply(image, enumerate(records, start=image.offset + 1))


CLUSTER = replay(EMPTY_IMAGE, BeginEpoch(1),
                 *(RegisterBroker(b, f"inc-{b}", (Listener("PLAINTEXT", f"127.0.0.{b}", 9092),)) for b in (1, 2)),
                 *(BrokerRegistrationChange(b, b, fenced=False) for b in (1, 2)))
TOPICS = replay(CLUSTER, Topic("orders", "ORD"),
                Partition("ORD", 0, (1, 2), (1, 2), leader=1), Partition("ORD", 1, (1, 2), (1, 2), leader=1),
                Partition("ORD", 2, (2, 1), (2, 1), leader=2),
                Topic("wide", "WIDE"), *(Partition("WIDE", p, (1, 2), (1, 2), leader=1) for p in range(MANY)))


@pytest.fixture
def log_dir(tmp_path):
    directory = tmp_path / "logs"
    directory.mkdir()
    return directory


def start(log_dir, *blocked: str) -> tuple[ReplicaManager, LogManager]:
    """A replica manager whose log dir holds a plain FILE where each `blocked` partition's log
    directory would be created: creating that log fails with a real OSError (root too)."""
    for name in blocked:
        (log_dir / name).write_text("not a log directory\n")
    log_manager = LogManager([log_dir], LogConfig(), now_ms=NOW)
    manager = ReplicaManager(ME, log_manager, now_ms=lambda: NOW)
    manager.apply_changes(changes_for_broker(EMPTY_IMAGE, TOPICS, ME), TOPICS)
    return manager, log_manager


def code_of(fn, *args, **kwargs) -> int:
    with pytest.raises(KafkaError) as info:
        fn(*args, **kwargs)
    return int(info.value.code)


@pytest.mark.parametrize("blocked, tp", [("orders-1", TopicPartition("orders", 1)),  # created alone
                                         ("wide-7", TopicPartition("wide", 7))],  # created with many
                         ids=["serial", "parallel"])
def test_one_failed_log_fails_that_replica_alone(log_dir, caplog, blocked, tp):
    manager, log_manager = start(log_dir, blocked)
    try:
        assert manager.failed_replicas == [("ORD" if tp.topic == "orders" else "WIDE", tp.partition)]
        assert manager.get_partition(tp) is None
        hosted = {t for t in manager.partitions}
        assert len(hosted) == 3 + MANY - 1  # every other replica is hosted
        # the others serve; the failed one answers KAFKA_STORAGE_ERROR (Kafka's offline replica)
        other = TopicPartition("orders", 0)
        assert manager.append(other, batch(), acks=1).first_offset == 0
        assert code_of(manager.append, tp, batch(), acks=1) == ErrorCode.KAFKA_STORAGE_ERROR
        assert code_of(manager.read, tp, 0, 1000) == ErrorCode.KAFKA_STORAGE_ERROR
        assert manager.replication_gauges()["failed_replicas"] == 1
        lines = [r.getMessage() for r in caplog.records if "failed on broker" in r.getMessage()]
        assert len(lines) == 1 and str(tp) in lines[0] and "errno 17 (EEXIST), File exists" in lines[0]
    finally:
        log_manager.shutdown()


def test_a_failed_replica_is_not_retried_until_restart(log_dir):
    manager, log_manager = start(log_dir, "orders-1")
    try:
        (log_dir / "orders-1").unlink()  # the cause is gone, but this process keeps it offline
        moved = replay(TOPICS, PartitionChange("ORD", 1, isr=(2,), leader=2))
        manager.apply_changes(changes_for_broker(TOPICS, moved, ME), moved)
        assert manager.get_partition(TopicPartition("orders", 1)) is None
        assert manager.failed_replicas == [("ORD", 1)]
    finally:
        log_manager.shutdown()
    restarted, log_manager = start(log_dir)  # a new process: created now
    try:
        assert restarted.failed_replicas == [] and restarted.get_partition(TopicPartition("orders", 1)) is not None
    finally:
        log_manager.shutdown()


def test_the_heartbeat_reports_failed_replicas_grouped_by_topic():
    state = MetadataFollowerState(ME)
    state.broker_epoch = 1
    body = state.heartbeat_request(offline_replicas=[("WIDE", 7), ("ORD", 1), ("ORD", 0)])
    assert rpc.decode_heartbeat_request(body).offline_replicas == offline_replica_topics(
        [("ORD", 0), ("ORD", 1), ("WIDE", 7)])
    assert [(t.topic_id, t.partitions) for t in offline_replica_topics([("WIDE", 7), ("ORD", 1), ("ORD", 0)])] == [
        ("ORD", (0, 1)), ("WIDE", (7,))]
    assert "offline_replicas" not in state.heartbeat_request()  # none: the body stays as before


def test_the_failure_names_the_errno_under_a_storage_error():
    wrapped = KafkaStorageError("cannot create the log")
    wrapped.__cause__ = OSError(errno.EMFILE, "Too many open files", "/data/orders-3")
    failure = describe_failure("ORD", "creating or opening its log", wrapped)
    assert failure.errno == errno.EMFILE
    assert (failure.errno_text, failure.reason) == ("24 (EMFILE)", "Too many open files (/data/orders-3)")
    assert describe_failure("ORD", "x", KafkaStorageError("no root cause")).errno is None


class RecordingFetchers:
    """The replica fetchers' interface, recording what it is told."""

    def __init__(self) -> None:
        self.removed: list[TopicPartition] = []

    def add_partitions(self, partitions) -> None:
        pass

    def remove_partitions(self, tps) -> None:
        self.removed.extend(tps)


def test_a_follower_whose_truncation_fails_fails_that_replica(log_dir, monkeypatch):
    """The replica fetcher calls truncate_follower; a storage error there fails the replica,
    stops fetching it, and the fetcher hears KAFKA_STORAGE_ERROR (it logs and carries on)."""
    manager, log_manager = start(log_dir)
    try:
        fetchers = manager.fetchers = RecordingFetchers()
        tp = TopicPartition("orders", 2)  # followed here (leader 2)
        partition = manager.get_partition(tp)

        def no_space(offset: int, *, now_ms: int) -> bool:
            raise OSError(errno.ENOSPC, "No space left on device", str(log_dir / "orders-2"))

        monkeypatch.setattr(partition.log, "truncate_to", no_space)
        assert code_of(manager.truncate_follower, partition, 0, "(test)") == ErrorCode.KAFKA_STORAGE_ERROR
        assert manager.failed_replicas == [("ORD", 2)] and manager.get_partition(tp) is None
        assert fetchers.removed == [tp]
        assert manager.roles.failed[tp].errno_text == "28 (ENOSPC)"
    finally:
        log_manager.shutdown()
