"""The transaction state machine: every allowed transition in one table.

    check_transition(TransactionState.ONGOING, TransactionState.PREPARE_COMMIT)   # or IllegalTransition

Kafka's `TransactionState` (transaction-coordinator, Kafka 4): each state names the states it
may be entered from (`validPreviousStates`); here the same facts read the other way, from a
state to where it may go. The ids are the `TransactionStatus` byte of `__transaction_state`'s
value, the names what DescribeTransactions and ListTransactions show. Empty, CompleteCommit
and CompleteAbort may expire (a transactional id unused for `transactional.id.expiration.ms`
becomes Dead, a tombstone).

PrepareAbort from Empty/CompleteCommit/CompleteAbort exists for transactions v2 (KIP-890 part
2: a client unsure of the server's state may always abort, EndTxn v5 in transactions.rules).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

PURE = True


class TransactionState(enum.Enum):
    """(id in the log, name on the wire)."""

    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    @property
    def id(self) -> int:
        return int(self.value[0])

    @property
    def label(self) -> str:
        return str(self.value[1])

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState:
        state = _BY_ID.get(state_id)
        if state is None:
            raise ValueError(f"unknown transaction state id {state_id}")
        return state

    @classmethod
    def from_label(cls, label: str) -> TransactionState | None:
        return _BY_LABEL.get(label)


_BY_ID: Final = {s.id: s for s in TransactionState}
_BY_LABEL: Final = {s.label: s for s in TransactionState}

S = TransactionState
# from-state -> the states it may move to (Kafka's validPreviousStates, inverted)
TRANSITIONS: Final[Mapping[TransactionState, frozenset[TransactionState]]] = {
    S.EMPTY: frozenset({S.EMPTY, S.ONGOING, S.PREPARE_ABORT, S.DEAD}),
    S.ONGOING: frozenset({S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE}),
    S.PREPARE_COMMIT: frozenset({S.COMPLETE_COMMIT}),
    S.PREPARE_ABORT: frozenset({S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.EMPTY, S.ONGOING, S.PREPARE_ABORT, S.DEAD}),
    S.COMPLETE_ABORT: frozenset({S.EMPTY, S.ONGOING, S.PREPARE_ABORT, S.DEAD}),
    S.DEAD: frozenset(),
    S.PREPARE_EPOCH_FENCE: frozenset({S.PREPARE_ABORT}),
}
# A transactional id in one of these may expire (Kafka's isExpirationAllowed).
EXPIRABLE: Final = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})
# Markers are being written: the next transaction waits (CONCURRENT_TRANSACTIONS).
PREPARED: Final = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})


class IllegalTransition(ValueError):
    """A transition the table does not allow: a bug in a rule, never a client's error."""

    def __init__(self, old: TransactionState, new: TransactionState) -> None:
        super().__init__(f"illegal transaction state transition {old.label} -> {new.label}")
        self.old, self.new = old, new


def check_transition(old: TransactionState, new: TransactionState) -> None:
    if new not in TRANSITIONS[old]:
        raise IllegalTransition(old, new)
