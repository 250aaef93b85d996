"""broker/startup_heap.py: what is alive at start-up leaves the collector's sight; garbage does not."""

from __future__ import annotations

import gc
import logging
import weakref
from collections.abc import Iterator

import pytest

from broker.heap_policy import FREEZE_MIN_SURVIVORS, after_startup_freeze, threshold2_after_young
from broker.startup_heap import HeapKeeper, collection_paused, freeze_startup_heap, heap_families
from common.prometheus import exposition, samples


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


# ---- the heap keeper: the policy's threshold and freezes, acting on the real collector --------

@pytest.fixture
def keeper() -> Iterator[HeapKeeper]:
    threshold = gc.get_threshold()
    heap = HeapKeeper(broker_id=4)
    try:
        yield heap
    finally:
        heap.stop()
        gc.unfreeze()
        gc.set_threshold(*threshold)


def _garbage_cycle() -> weakref.ref[_Node]:
    cycle_a, cycle_b = _Node(), _Node()
    cycle_a.peer, cycle_b.peer = cycle_b, cycle_a
    return weakref.ref(cycle_a)


def test_the_startup_freeze_hands_full_collections_to_the_policy_and_stop_hands_them_back(keeper: HeapKeeper) -> None:
    threshold = gc.get_threshold()
    started_with = [_Node() for _ in range(400_000)]  # a start-up heap whose quarter is past CPython's 10
    keeper.freeze_startup_heap()
    policy = keeper.stats.policy
    # the permanent generation only shrinks after a freeze: a frozen object that dies (a daemon
    # thread of an earlier test letting go of its objects) leaves it; none joins without a freeze.
    # A fresh-clone unit run once read 2 fewer than the policy's count taken at the freeze.
    assert policy is not None and 0 <= policy.frozen - gc.get_freeze_count() < 1_000
    assert policy.frozen >= len(started_with)
    young = threshold[0] * threshold[1]
    expected = after_startup_freeze(frozen=policy.frozen, young_per_gen1=young)
    assert gc.get_threshold() == (*threshold[:2], expected.threshold2)
    assert gc.get_threshold()[2] > threshold[2] and started_with  # the whole heap, frozen included, spaces them
    keeper.stop()
    assert gc.get_threshold() == threshold
    gc.collect()
    assert keeper.stats.full_collections == 0  # no decision after stop


def test_a_full_collection_with_many_survivors_frees_the_garbage_then_freezes_the_rest(
        keeper: HeapKeeper, caplog: pytest.LogCaptureFixture) -> None:
    keeper.freeze_startup_heap()
    before = keeper.stats.policy
    assert before is not None
    grown = [_Node() for _ in range(FREEZE_MIN_SURVIVORS + 10_000)]  # partitions created after start-up
    dead = _garbage_cycle()
    with caplog.at_level(logging.INFO, logger="broker.startup_heap"):
        gc.collect()
    assert dead() is None  # collected, not frozen
    after = keeper.stats.policy
    assert after is not None and after.freezes == 1
    survivors = keeper.stats.last_survivors
    assert survivors >= len(grown) and after.frozen == before.frozen + survivors
    assert not any(o is grown[0] for o in gc.get_objects())  # frozen: the next full collection skips it
    assert gc.get_threshold()[2] == after.threshold2
    assert "Broker 4: froze the" in caplog.text and f"{after.frozen} objects frozen in all" in caplog.text


def test_a_full_collection_with_few_survivors_freezes_nothing(keeper: HeapKeeper) -> None:
    keeper.freeze_startup_heap()
    few = [_Node() for _ in range(100)]
    gc.collect()
    policy = keeper.stats.policy
    assert policy is not None and policy.freezes == 0 and keeper.stats.full_collections == 1
    assert any(o is few[0] for o in gc.get_objects())  # left to the collector
    assert policy.unfrozen == keeper.stats.last_survivors


def test_what_a_pause_of_the_collector_let_pile_up_counts_towards_the_next_full_collection(
        keeper: HeapKeeper) -> None:
    started_with = [_Node() for _ in range(400_000)]  # a start-up heap: threshold2 well above 10
    keeper.freeze_startup_heap()
    policy = keeper.stats.policy
    assert policy is not None and started_with
    young_per_gen1 = gc.get_threshold()[0] * gc.get_threshold()[1]
    gc.disable()  # the follower's pause (another broker's controlled shutdown)
    try:
        grown = [[] for _ in range(20 * young_per_gen1)]  # tracked objects, none collected meanwhile
        young = gc.get_count()[0]
    finally:
        gc.enable()
    gc.collect(0)  # the first young collection after the pause
    counted = keeper.stats.paused_young  # the young generation as that collection started
    assert counted >= young >= len(grown)
    lowered = threshold2_after_young(policy.threshold2, counted, young_per_gen1)
    assert gc.get_threshold()[2] == lowered < policy.threshold2
    gc.collect(0)  # a usual one: nothing more counted
    assert gc.get_threshold()[2] == lowered and keeper.stats.paused_young == counted
    gc.collect()  # the full collection sets the policy's threshold again
    assert keeper.stats.policy is not None and gc.get_threshold()[2] == keeper.stats.policy.threshold2


def test_heap_families_say_what_the_keeper_did(keeper: HeapKeeper) -> None:
    assert samples(exposition(heap_families(keeper.stats, "p_")))["p_heap_freezes_total"] == 0
    keeper.freeze_startup_heap()
    grown = [_Node() for _ in range(FREEZE_MIN_SURVIVORS)]
    gc.collect()
    exported = samples(exposition(heap_families(keeper.stats, "p_")))
    policy = keeper.stats.policy
    assert policy is not None and len(grown) > 0
    assert exported["p_heap_freezes_total"] == 1
    assert exported["p_heap_frozen_objects"] == policy.frozen
    assert exported["p_heap_full_collection_threshold"] == policy.threshold2
    assert exported["p_heap_full_collections_total"] == 1
