"""groups/state.py: the classic group state machine is one table (Kafka's validPreviousStates)."""

from __future__ import annotations

import pytest

from groups.state import (
    TRANSITIONS,
    GroupState,
    IllegalGroupTransition,
    check_transition,
)

S = GroupState
ALLOWED = {
    (S.EMPTY, S.PREPARING_REBALANCE), (S.EMPTY, S.DEAD),
    (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE), (S.PREPARING_REBALANCE, S.EMPTY),
    (S.PREPARING_REBALANCE, S.DEAD),
    (S.COMPLETING_REBALANCE, S.STABLE), (S.COMPLETING_REBALANCE, S.PREPARING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.DEAD),
    (S.STABLE, S.PREPARING_REBALANCE), (S.STABLE, S.DEAD),
}


@pytest.mark.parametrize("current", list(S))
@pytest.mark.parametrize("target", list(S))
def test_every_pair(current: GroupState, target: GroupState) -> None:
    if (current, target) in ALLOWED:
        assert check_transition("g", current, target) is target
    else:
        with pytest.raises(IllegalGroupTransition, match=f"from {current.value} to {target.value}"):
            check_transition("g", current, target)


def test_table_covers_every_state_and_dead_is_terminal() -> None:
    assert set(TRANSITIONS) == set(S)
    assert TRANSITIONS[S.DEAD] == frozenset()


def test_state_names_are_kafkas() -> None:
    assert [s.value for s in S] == ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]
