"""transactions/state.py: every (from, to) pair of the eight states, allowed or refused, against
Kafka's TransactionState.validPreviousStates (Kafka 4), and the ids/names on the wire."""

from __future__ import annotations

import itertools

import pytest

from transactions.state import TRANSITIONS, IllegalTransition, TransactionState, check_transition

S = TransactionState
# Kafka's validPreviousStates, as Kafka writes it: state -> the states it may be entered from.
KAFKA_PREVIOUS = {
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT: {S.ONGOING},
    S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING},
}


@pytest.mark.parametrize(("old", "new"), list(itertools.product(S, S)), ids=lambda s: s.label)
def test_every_pair(old: TransactionState, new: TransactionState) -> None:
    if old in KAFKA_PREVIOUS[new]:
        check_transition(old, new)
        assert new in TRANSITIONS[old]
    else:
        with pytest.raises(IllegalTransition, match=f"{old.label} -> {new.label}"):
            check_transition(old, new)


@pytest.mark.parametrize(("state", "state_id", "label"), [
    (S.EMPTY, 0, "Empty"), (S.ONGOING, 1, "Ongoing"), (S.PREPARE_COMMIT, 2, "PrepareCommit"),
    (S.PREPARE_ABORT, 3, "PrepareAbort"), (S.COMPLETE_COMMIT, 4, "CompleteCommit"),
    (S.COMPLETE_ABORT, 5, "CompleteAbort"), (S.DEAD, 6, "Dead"), (S.PREPARE_EPOCH_FENCE, 7, "PrepareEpochFence")])
def test_ids_and_names_are_kafkas(state: TransactionState, state_id: int, label: str) -> None:
    assert (state.id, state.label) == (state_id, label)
    assert S.from_id(state_id) is state and S.from_label(label) is state


def test_unknown_id_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown transaction state id 8"):
        S.from_id(8)
