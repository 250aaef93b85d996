"""A partition the broker stops hosting (its topic deleted, or the replica moved away) is freed
by reference counting, with no cycle left for the collector: once the heap keeper has frozen a
partition (broker/heap_policy.py), a cycle through it would never be collected at all."""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.log.log_manager import LogManager
from broker.replica_manager import ReplicaManager
from common.log_config import LogConfig
from common.topic_partition import TopicPartition
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.local_changes import changes_for_broker
from metadata.records import (
    BeginEpoch,
    BrokerRegistrationChange,
    Listener,
    Partition,
    PartitionChange,
    Record,
    RegisterBroker,
    RemoveTopic,
    Topic,
)
from tests.log_helpers import NOW, batch

ME = 1


def replay(image: MetadataImage, *records: Record) -> MetadataImage:
    return apply(image, enumerate(records, start=image.offset + 1))


CLUSTER = replay(EMPTY_IMAGE, BeginEpoch(1),
                 *(RegisterBroker(b, f"inc-{b}", (Listener("PLAINTEXT", f"127.0.0.{b}", 9092),)) for b in (1, 2, 3)),
                 *(BrokerRegistrationChange(b, b, fenced=False) for b in (1, 2, 3)))
# led here RF=1, led here RF=3, followed here: each shape's partition objects differ
LED, LED_RF3, FOLLOWED = TopicPartition("led", 0), TopicPartition("led3", 0), TopicPartition("followed", 0)
TOPICS = replay(
    CLUSTER,
    Topic("led", "LED"), Partition("LED", 0, (1,), (1,), leader=1),
    Topic("led3", "LED3"), Partition("LED3", 0, (1, 2, 3), (1, 2, 3), leader=1),
    Topic("followed", "FOLLOWED"), Partition("FOLLOWED", 0, (2, 1), (2, 1), leader=2),
)


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[ReplicaManager]:
    log_manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    manager = ReplicaManager(ME, log_manager, now_ms=lambda: NOW)
    manager.apply_changes(changes_for_broker(EMPTY_IMAGE, TOPICS, ME), TOPICS)
    manager.append(LED, batch(10), acks=1)
    manager.append(LED_RF3, batch(10), acks=1)
    yield manager
    log_manager.shutdown()


def cyclic_garbage(drop: Callable[[], None]) -> Counter[str]:
    """Call `drop` (which lets go of partitions), then collect: the types of what only the
    cyclic collector could free (empty when reference counting freed everything)."""
    was_enabled, flags = gc.isenabled(), gc.get_debug()
    gc.disable()
    try:
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds stays in gc.garbage, to name it
        drop()
        gc.collect()
        found = Counter(type(o).__qualname__ for o in gc.garbage)
        gc.garbage.clear()
        return found
    finally:
        gc.set_debug(flags)
        if was_enabled:
            gc.enable()


def test_deleted_topics_leave_no_cycle(replicas: ReplicaManager) -> None:
    gone = replay(TOPICS, RemoveTopic("LED"), RemoveTopic("LED3"), RemoveTopic("FOLLOWED"))

    def drop() -> None:
        replicas.apply_changes(changes_for_broker(TOPICS, gone, ME), gone)
        replicas.log_manager.checkpoint()  # its pass lets go of the logs that moved (deleted ones too)

    assert cyclic_garbage(drop) == Counter()
    assert not replicas.partitions


def test_replicas_moved_away_leave_no_cycle(replicas: ReplicaManager) -> None:
    moved = replay(TOPICS, PartitionChange("LED", 0, replicas=(2,), isr=(2,), leader=2),
                   PartitionChange("LED3", 0, replicas=(2, 3), isr=(2, 3), leader=2),
                   PartitionChange("FOLLOWED", 0, replicas=(2,), isr=(2,)))

    def drop() -> None:
        replicas.apply_changes(changes_for_broker(TOPICS, moved, ME), moved)
        replicas.log_manager.checkpoint()

    assert cyclic_garbage(drop) == Counter()
    assert not replicas.partitions
