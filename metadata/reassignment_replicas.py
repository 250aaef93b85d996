"""The replica arithmetic of a partition reassignment (KIP-455), as Kafka's
PartitionReassignmentReplicas and PartitionReassignmentRevert: plain functions over id tuples.

While a reassignment runs, a partition's replicas are the target followed by the current
replicas the target drops; `adding` = target - current, `removing` = current - target. It
completes (`maybe_complete`) once every adding replica is in the ISR: replicas become the
target and the ISR loses the removing replicas. A cancel (`revert`) drops the adding
replicas from the replicas and the ISR.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReassignmentReplicas:
    """The replicas, adding and removing sets while moving `current` to `target`."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


def reassignment_replicas(current: Sequence[int], target: Sequence[int]) -> ReassignmentReplicas:
    """Kafka's PartitionReassignmentReplicas(current, target): target order first, so the
    preferred replica is the target's first."""
    removing = tuple(r for r in current if r not in target)
    adding = tuple(r for r in target if r not in current)
    return ReassignmentReplicas((*target, *removing), adding, removing)


def maybe_complete(replicas: Sequence[int], adding: Sequence[int], removing: Sequence[int],
                   isr: Sequence[int], min_insync_replicas: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(replicas, ISR) once the reassignment completes, else None (none runs, or not yet).

    Kafka's maybeCompleteReassignment: every adding replica in the ISR and a non-empty ISR
    left without the removing ones. tidelog adds one guard (issue 18): the completion itself
    never takes the ISR below min.insync.replicas (capped at the target's size, so a
    requested RF below it still completes) when it was not already there; it waits for the
    target replicas to catch up instead.
    """
    if not adding and not removing:
        return None
    new_isr = tuple(r for r in isr if r not in removing)
    new_replicas = tuple(r for r in replicas if r not in removing)
    if not new_isr or any(r not in new_isr for r in adding):
        return None
    floor = min(min_insync_replicas, len(new_replicas))
    if len(new_isr) < floor and len(new_isr) < len(isr):
        return None
    return new_replicas, new_isr


@dataclass(frozen=True, slots=True)
class Revert:
    """Kafka's PartitionReassignmentRevert: what a cancel goes back to; unclean when no
    replica of the original assignment is left in the ISR."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    unclean: bool


def revert(replicas: Sequence[int], isr: Sequence[int], adding: Sequence[int]) -> Revert:
    """Take out every replica the reassignment was adding; keep the ones it was removing."""
    kept = tuple(r for r in replicas if r not in adding)
    kept_isr = tuple(r for r in isr if r not in adding)
    return Revert(kept, kept_isr, not kept_isr)
