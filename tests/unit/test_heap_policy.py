"""broker/heap_policy.py: full collections spaced by the whole long-lived heap, frozen included;
a full collection's survivors frozen when they are many. No gc module here: a model of CPython
3.11's rule (Modules/gcmodule.c) drives the policy as the broker's collector would."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from broker.heap_policy import (
    FREEZE_MIN_SURVIVORS,
    MAX_GROWTH,
    MIN_THRESHOLD2,
    HeapPolicy,
    after_full_collection,
    after_startup_freeze,
    threshold2_after_young,
    threshold2_for,
)

YOUNG = 700 * 10  # CPython's default threshold0 x threshold1: promoted per generation-1 collection at most
STARTED = after_startup_freeze(frozen=400_000, young_per_gen1=YOUNG)


def test_the_startup_freeze_spaces_the_first_full_collection_by_a_quarter_of_the_frozen_heap() -> None:
    assert STARTED == HeapPolicy(frozen=400_000, unfrozen=0, freezes=0, threshold2=100_000 // YOUNG + 1)
    assert after_startup_freeze(frozen=0, young_per_gen1=YOUNG).threshold2 == MIN_THRESHOLD2  # CPython's 10


@pytest.mark.parametrize(("survivors", "freeze", "frozen", "unfrozen"), [
    (0, False, 400_000, 0),
    (FREEZE_MIN_SURVIVORS - 1, False, 400_000, FREEZE_MIN_SURVIVORS - 1),  # walked again next time: few
    (FREEZE_MIN_SURVIVORS, True, 400_000 + FREEZE_MIN_SURVIVORS, 0),
    (3_000_000, True, 3_400_000, 0),
])
def test_many_survivors_are_frozen_and_counted_few_are_left_to_the_next_collection(
        survivors: int, freeze: bool, frozen: int, unfrozen: int) -> None:
    decision = after_full_collection(STARTED, survivors=survivors, young_per_gen1=YOUNG)
    assert (decision.freeze, decision.policy.frozen, decision.policy.unfrozen) == (freeze, frozen, unfrozen)
    assert decision.policy.freezes == int(freeze)
    assert decision.survivors == survivors


@pytest.mark.parametrize(("frozen", "survivors", "growth"), [
    (400_000, 0, 100_000),  # a quarter of the whole heap: the frozen part counts
    (400_000, 40_000, 110_000),  # unfrozen survivors count too
    (100, 0, 25),  # below CPython's default: threshold2 stays 10
    (8_000_000, 0, MAX_GROWTH),  # one full collection walks at most MAX_GROWTH new objects
])
def test_the_next_full_collection_waits_for_a_quarter_of_the_whole_heap_bounded(
        frozen: int, survivors: int, growth: int) -> None:
    policy = HeapPolicy(frozen=frozen, unfrozen=0, freezes=0, threshold2=MIN_THRESHOLD2)
    decision = after_full_collection(policy, survivors=survivors, young_per_gen1=YOUNG)
    assert decision.growth == growth
    assert decision.policy.threshold2 == max(MIN_THRESHOLD2, -(-growth // YOUNG))


def test_threshold2_is_bounded_and_refuses_nonsense() -> None:
    assert threshold2_for(10**18, 1) == 1 << 30
    with pytest.raises(ValueError):
        threshold2_for(1000, 0)
    with pytest.raises(ValueError):
        after_full_collection(STARTED, survivors=-1, young_per_gen1=YOUNG)
    with pytest.raises(ValueError):
        HeapPolicy(frozen=0, unfrozen=0, freezes=0, threshold2=0)


@pytest.mark.parametrize(("young", "threshold2"), [
    (701, 72),  # the usual young collection (threshold0 + 1): nothing to count
    (YOUNG, 72),  # one generation-1 collection's worth: CPython counts the one that promotes it
    (10 * YOUNG, 63),  # after a pause: nine more
    (600_000, 0),  # more than the growth left: the next generation-1 collection is a full one
])
def test_a_pause_of_the_collector_counts_its_young_objects_towards_the_next_full_collection(
        young: int, threshold2: int) -> None:
    assert threshold2_after_young(72, young, YOUNG) == threshold2
    with pytest.raises(ValueError):
        threshold2_after_young(72, young, 0)


# ---- a model of CPython 3.11's collector, driven by the policy or by CPython's rule alone -----

@dataclass
class Collector:
    """Generation 2 as CPython 3.11 keeps it, one generation-1 collection at a time: a full
    collection runs when more than threshold2 generation-1 collections ran since the last one and
    long_lived_pending > long_lived_total / 4 (gc.freeze does not reset long_lived_total)."""

    policy: HeapPolicy | None  # None: CPython's rule alone (threshold2 = 10, nothing frozen)
    live: int = 0  # unfrozen live objects in generation 2
    garbage: int = 0  # unfrozen cyclic garbage in generation 2 (only a full collection frees it)
    frozen_garbage: int = 0  # garbage frozen: leaked until a restart
    pending: int = 0
    long_lived_total: int = 0
    count2: int = 0
    walks: list[int] = field(default_factory=list)  # objects each full collection walked

    def promote(self, live: int, garbage: int = 0) -> None:
        """One generation-1 collection promotes `live` objects and `garbage` (cycles, dead later)."""
        threshold2 = MIN_THRESHOLD2 if self.policy is None else self.policy.threshold2
        if self.count2 > threshold2 and self.pending > self.long_lived_total // 4:
            self.collect()
        self.count2 += 1
        self.pending += live + garbage
        self.live += live
        self.garbage += garbage

    def collect(self) -> None:
        self.walks.append(self.live + self.garbage)
        self.garbage = 0
        self.pending = self.count2 = 0
        self.long_lived_total = self.live
        if self.policy is not None:
            decision = after_full_collection(self.policy, survivors=self.live, young_per_gen1=YOUNG)
            if decision.freeze:
                self.frozen_garbage += self.garbage  # always 0: the freeze follows the collection
                self.live = 0
            self.policy = decision.policy


HEAP = 8_001_000  # a broker's objects at 100,000 partitions, in round figures (a multiple of YOUNG)


@pytest.mark.parametrize("policy", [STARTED, None], ids=["policy", "cpython"])
def test_a_growing_heap_is_walked_about_once_in_short_collections_with_the_policy(policy: HeapPolicy | None) -> None:
    heap = Collector(policy, live=0 if policy else STARTED.frozen, long_lived_total=0 if policy else STARTED.frozen)
    for _ in range(HEAP // YOUNG):
        heap.promote(YOUNG)
    if policy is None:  # CPython alone walks the growing heap again at each quarter: the stalls
        assert sum(heap.walks) > 3 * HEAP and max(heap.walks) > HEAP // 2
        return
    assert sum(heap.walks) <= HEAP  # each object walked by one full collection, then frozen
    assert max(heap.walks) <= MAX_GROWTH + FREEZE_MIN_SURVIVORS + YOUNG
    assert len(heap.walks) <= 30
    assert heap.policy is not None and heap.policy.frozen + heap.live == STARTED.frozen + HEAP


def test_churn_on_a_steady_heap_is_collected_never_frozen() -> None:
    """Requests come and go in cycles (an exception's traceback, a task and its coroutine): each
    full collection frees them, its few survivors are not frozen, and the garbage waiting for
    the next one stays under a quarter of the whole heap."""
    heap = Collector(after_startup_freeze(frozen=HEAP, young_per_gen1=YOUNG))
    waiting: list[int] = []
    for step in range(2000):
        heap.promote(live=1 if step % 2 else 0, garbage=YOUNG - 1)
        waiting.append(heap.garbage)
    assert heap.policy is not None and heap.policy.freezes == 0 and heap.frozen_garbage == 0
    assert len(heap.walks) >= 10  # collected all along
    assert max(waiting) <= MAX_GROWTH + 2 * YOUNG
