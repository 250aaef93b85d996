"""Shrinking a failing schedule: the shortest prefix, then the fewest faults, same invariant.

Deterministic: a run depends only on its options, so a candidate either still fails the
same invariant or not. Bounded: the prefix search is a bisection, the fault search tries
each remaining fault once per pass and stops after MAX_PASSES.
"""

from __future__ import annotations

import dataclasses

from chaos.sim.schedule import RngFactory, SimOptions
from chaos.sim.world import SimResult, Simulation

MAX_PASSES = 3


def fails_with(options: SimOptions, invariant: str, rngs: RngFactory) -> SimResult | None:
    result = Simulation(options, rngs).run()
    if result.violation is not None and result.violation.invariant == invariant:
        return result
    return None


def shrink(options: SimOptions, invariant: str, rngs: RngFactory) -> SimOptions:
    """Smaller options that still fail `invariant` (the input itself if nothing smaller does)."""
    low, high = 0, options.steps  # high fails; find the fewest steps that still fail
    while low + 1 < high:
        mid = (low + high) // 2
        if fails_with(dataclasses.replace(options, steps=mid), invariant, rngs):
            high = mid
        else:
            low = mid
    best = dataclasses.replace(options, steps=high, faults=tuple(f for f in options.faults if f.step < high))
    for _ in range(MAX_PASSES):  # each pass tries every remaining fault once
        changed = False
        for fault in best.faults:
            candidate = dataclasses.replace(best, faults=tuple(f for f in best.faults if f is not fault))
            if fails_with(candidate, invariant, rngs):
                best, changed = candidate, True
        if not changed:
            break
    return best
