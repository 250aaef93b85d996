"""broker/startup_heap.py: what is alive at start-up leaves the collector's sight; garbage does not."""

from __future__ import annotations

import gc
import weakref

from broker.startup_heap import collection_paused, freeze_startup_heap


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


def test_collection_paused_runs_no_collection_inside_then_freezes_what_is_alive() -> None:
    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])
    gc.callbacks.append(count)
    try:
        with collection_paused():
            assert not gc.isenabled()
            loaded = [_Node() for _ in range(10 * gc.get_threshold()[0])]  # would set off collections
        assert collections == []
        assert gc.isenabled()
        assert not any(o is loaded[0] for o in gc.get_objects())  # frozen with the loaded heap
    finally:
        gc.callbacks.remove(count)
        gc.unfreeze()


def test_collection_paused_leaves_a_disabled_collector_disabled_even_on_error() -> None:
    gc.disable()
    try:
        try:
            with collection_paused():
                raise ValueError("a log that cannot load")
        except ValueError:
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()
