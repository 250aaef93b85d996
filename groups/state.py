"""The classic group state machine, as one table (Kafka's ClassicGroupState).

    Empty ──join──▶ PreparingRebalance ──all joined / timeout──▶ CompletingRebalance
      ▲                 ▲      │ (no member left)                      │ leader's SyncGroup
      │                 │      ▼                                       ▼
      └── last member leaves ◀─ Empty            Stable ◀──────────────┘
    Dead: the group was deleted or its offsets expired (terminal).

Kafka's validPreviousStates, inverted: `TRANSITIONS[current]` is the set of next states. A
transition outside the table is a bug in a rule, raised as IllegalGroupTransition.
"""

from __future__ import annotations

import enum
from typing import Final


class GroupState(enum.Enum):
    """Kafka's names, as DescribeGroups and ListGroups show them."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class IllegalGroupTransition(RuntimeError):
    def __init__(self, group_id: str, current: GroupState, target: GroupState) -> None:
        super().__init__(f"group {group_id!r}: no transition from {current.value} to {target.value}")


TRANSITIONS: Final[dict[GroupState, frozenset[GroupState]]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.PREPARING_REBALANCE: frozenset({
        GroupState.COMPLETING_REBALANCE, GroupState.EMPTY, GroupState.DEAD}),
    GroupState.COMPLETING_REBALANCE: frozenset({
        GroupState.STABLE, GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.STABLE: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.DEAD: frozenset(),
}


def check_transition(group_id: str, current: GroupState, target: GroupState) -> GroupState:
    """`target` when the table allows current → target; IllegalGroupTransition otherwise."""
    if target not in TRANSITIONS[current]:
        raise IllegalGroupTransition(group_id, current, target)
    return target
