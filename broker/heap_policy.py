"""When a broker's full collections run and what they freeze (issue 35): the decisions, without the gc module.

    policy = after_startup_freeze(frozen=gc.get_freeze_count(), young_per_gen1=700 * 10)
    gc.set_threshold(700, 10, policy.threshold2)
    ...                                         # after each full (generation-2) collection:
    decision = after_full_collection(policy, survivors=len(gc.get_objects(2)), young_per_gen1=700 * 10)
    if decision.freeze:
        gc.freeze()
    policy = decision.policy; gc.set_threshold(700, 10, policy.threshold2)

broker/startup_heap.py is the shell that reads gc and acts on these.

CPython 3.11's rule (Modules/gcmodule.c, gc_collect_generations): a full collection runs when
more than `threshold2` generation-1 collections ran since the last one AND the objects promoted
into generation 2 since then (long_lived_pending) exceed a quarter of those the last full
collection left there (long_lived_total). Each full collection walks all of generation 2, so a
heap that grows (the 33,000-100,000 logs and the metadata image of partitions created after
start-up) is walked again at every 25 % of growth: 21 full collections totalling 12.4 s in a
broker's first three minutes at 100,000 partitions, three over 1 s. `gc.freeze()` takes objects
out of every walk, but freezing after each slow collection alone made them 5x as frequent:
long_lived_total is then the small unfrozen rest, so the quarter is reached all the time.

So the quarter is taken here of the WHOLE long-lived heap, frozen included, and a full
collection that leaves many survivors freezes them: each long-lived object is walked by about
one full collection, and one full collection walks at most MAX_GROWTH objects more than
FREEZE_MIN_SURVIVORS. The growth is counted in CPython's own unit, generation-1 collections
(threshold2): each promotes at most about threshold0 x threshold1 objects, so the count is an
upper bound of the growth and costs nothing to read. The frozen count is kept here (the
start-up freeze's exact count plus each freeze's survivors), never read back: gc.get_freeze_count
walks the whole permanent generation (25 % of a broker's samples when called per collection).
Frozen objects freed since are not subtracted, so the count only overstates the heap, and a
quarter of it is still bounded by MAX_GROWTH.

Garbage is never frozen: a freeze follows a full collection at once, which has just freed every
unreachable cycle. A frozen object that later becomes cyclic garbage is out of every walk, for
good: a deleted partition was such a cycle (~39 objects; the log's snapshot_source closure held
the partition, until c50cad1), RSS growing 15 MiB a round of creating and deleting 3,000
partitions on one broker. So a partition the broker stops hosting must be freed by reference
counting alone (tests/unit/test_partition_cycles.py holds it to that), and nothing here walks the
frozen heap again. A whole-heap walk 90 s after a quarter of the partitions were removed did so
until then: after c50cad1 it freed 5-106 objects a walk (12 rounds of 3,000, one broker), and RSS
without it levelled at 121-135 MiB as with it (123-138), so it went (a ~1 s pause at 8 M objects).
Few survivors (below FREEZE_MIN_SURVIVORS: a steady broker's request churn) are not frozen at all.

A pause of the collector (gc.disable: the metadata catch-up, another broker's controlled shutdown)
breaks the unit: everything allocated meanwhile is promoted by the first one or two collections
after it, counted as one generation-1 collection. So the keeper, at the start of a young
collection, counts a young generation larger than threshold0 x threshold1 (only a pause makes one)
into the generation-1 collections left before the next full collection (`threshold2_after_young`):
that full collection walks what the pause left plus at most the growth the policy allows, not that
growth again on top.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

# Survivors of a full collection (objects left in generation 2) from which they are frozen: below
# it they are walked again by the next full collection (50,000 objects: ~7 ms on this box).
FREEZE_MIN_SURVIVORS: Final = 50_000
# The growth between full collections: a quarter of the whole long-lived heap (CPython's own share),
# at least CPython's default (threshold2 = 10 generation-1 collections) and at most MAX_GROWTH
# objects, the most one full collection walks beyond the unfrozen survivors (~75 ms on this box:
# 2,000,000 objects took 288 ms of CPU to collect at load 4).
GROWTH_SHARE: Final = 4
MIN_THRESHOLD2: Final = 10
MAX_GROWTH: Final = 500_000
# threshold2 is a C int; a young generation of 1 object per generation-1 collection stays far below.
MAX_THRESHOLD2: Final = 1 << 30


@dataclass(frozen=True, slots=True)
class HeapPolicy:
    """What the policy keeps between full collections."""

    frozen: int  # objects frozen: the start-up freeze's count plus each freeze's survivors (an upper bound)
    unfrozen: int  # the last full collection's survivors, when they were not frozen
    freezes: int  # freezes since the start-up one
    threshold2: int  # generation-1 collections before the next full collection (gc.set_threshold's third)

    def __post_init__(self) -> None:
        if (min(self.frozen, self.unfrozen, self.freezes) < 0
                or not MIN_THRESHOLD2 <= self.threshold2 <= MAX_THRESHOLD2):
            raise ValueError(f"not a heap policy state: {self}")

    @property
    def long_lived(self) -> int:
        """The whole long-lived heap, frozen included, as the policy counts it."""
        return self.frozen + self.unfrozen


@dataclass(frozen=True, slots=True)
class HeapDecision:
    """After one full collection: freeze its survivors or not, and the policy from then on."""

    freeze: bool
    survivors: int
    growth: int  # objects that may be promoted before the next full collection (an upper bound)
    policy: HeapPolicy


def full_collection_growth(long_lived: int) -> int:
    """Objects promoted between two full collections: a quarter of the long-lived heap, bounded."""
    return min(MAX_GROWTH, long_lived // GROWTH_SHARE)


def threshold2_for(growth: int, young_per_gen1: int) -> int:
    """Generation-1 collections that promote at most about `growth` objects, each promoting at
    most `young_per_gen1` (threshold0 x threshold1); never below CPython's default of 10."""
    if young_per_gen1 < 1:
        raise ValueError(f"young_per_gen1 must be positive, not {young_per_gen1}")
    return max(MIN_THRESHOLD2, min(MAX_THRESHOLD2, -(-growth // young_per_gen1)))


def after_startup_freeze(*, frozen: int, young_per_gen1: int) -> HeapPolicy:
    """The policy once the start-up heap (`frozen` objects, counted once) is frozen."""
    return HeapPolicy(frozen=frozen, unfrozen=0, freezes=0,
                      threshold2=threshold2_for(full_collection_growth(frozen), young_per_gen1))


def after_full_collection(policy: HeapPolicy, *, survivors: int, young_per_gen1: int) -> HeapDecision:
    """A full collection left `survivors` objects in generation 2: freeze them when they are many
    (they would be walked again by every later full collection), and when the next one runs."""
    if survivors < 0:
        raise ValueError(f"survivors must not be negative, not {survivors}")
    freeze = survivors >= FREEZE_MIN_SURVIVORS
    frozen = policy.frozen + survivors if freeze else policy.frozen
    unfrozen = 0 if freeze else survivors
    growth = full_collection_growth(frozen + unfrozen)
    return HeapDecision(freeze=freeze, survivors=survivors, growth=growth, policy=HeapPolicy(
        frozen=frozen, unfrozen=unfrozen, freezes=policy.freezes + freeze,
        threshold2=threshold2_for(growth, young_per_gen1)))


def threshold2_after_young(threshold2: int, young: int, young_per_gen1: int) -> int:
    """The generation-1 collections left before the next full collection (gc's live threshold2)
    once a young collection starts with `young` objects: each `young_per_gen1` of them stand for
    one generation-1 collection, the one that will promote them counted by CPython itself. 0 (or
    below the collections already run) makes the next generation-1 trigger a full collection."""
    if young_per_gen1 < 1:
        raise ValueError(f"young_per_gen1 must be positive, not {young_per_gen1}")
    return max(0, threshold2 - max(0, young // young_per_gen1 - 1))
