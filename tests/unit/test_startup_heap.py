"""broker/startup_heap.py: what is alive at start-up leaves the collector's sight; garbage does not."""

from __future__ import annotations

import gc
import weakref

from broker.startup_heap import freeze_startup_heap


class _Node:
    def __init__(self) -> None:
        self.peer: _Node | None = None


def test_freeze_keeps_the_live_heap_out_of_collections_and_collects_garbage_first() -> None:
    alive = _Node()
    cycle_a, cycle_b = _Node(), _Node()
    cycle_a.peer, cycle_b.peer = cycle_b, cycle_a  # garbage only the cyclic collector frees
    dead = weakref.ref(cycle_a)
    del cycle_a, cycle_b
    try:
        freeze_startup_heap()
        assert dead() is None  # collected before the freeze, not frozen forever
        assert gc.get_freeze_count() > 0
        assert not any(o is alive for o in gc.get_objects())  # frozen: no collection walks it
    finally:
        gc.unfreeze()
