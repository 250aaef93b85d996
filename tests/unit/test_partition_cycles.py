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
from metadata.image import EMPTY_IMAGE
from metadata.local_changes import changes_for_broker
from metadata.records import PartitionChange, RemoveTopic
from tests.log_helpers import NOW, batch
from tests.unit.test_replica_manager import ME, ORDERS_0, TOPICS, TRIPLE_0, replay

# TOPICS: orders-0 led here (RF=1), orders-1 followed here, triple-0 led here (RF=3):
# each shape's partition objects differ


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[ReplicaManager]:
    log_manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    manager = ReplicaManager(ME, log_manager, now_ms=lambda: NOW)
    manager.apply_changes(changes_for_broker(EMPTY_IMAGE, TOPICS, ME), TOPICS)
    manager.append(ORDERS_0, batch(2), acks=1)
    manager.append(TRIPLE_0, batch(10), acks=1)
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
    gone = replay(TOPICS, RemoveTopic("ORDERS"), RemoveTopic("TRIPLE"))

    def drop() -> None:
        replicas.apply_changes(changes_for_broker(TOPICS, gone, ME), gone)
        replicas.log_manager.checkpoint()  # its pass lets go of the logs that moved (deleted ones too)

    assert cyclic_garbage(drop) == Counter()
    assert not replicas.partitions


def test_replicas_moved_away_leave_no_cycle(replicas: ReplicaManager) -> None:
    moved = replay(TOPICS, PartitionChange("ORDERS", 0, replicas=(2,), isr=(2,), leader=2),
                   PartitionChange("ORDERS", 1, replicas=(2,), isr=(2,)),
                   PartitionChange("TRIPLE", 0, replicas=(2, 3), isr=(2, 3), leader=2))

    def drop() -> None:
        replicas.apply_changes(changes_for_broker(TOPICS, moved, ME), moved)
        replicas.log_manager.checkpoint()

    assert cyclic_garbage(drop) == Counter()
    assert not replicas.partitions
