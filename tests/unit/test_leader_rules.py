"""broker.replication.leader_rules: the leader's decisions moved out of the shells (issue 15)."""

from __future__ import annotations

import pytest

from broker.replication.leader_rules import (
    acks_all_refused,
    current_leader_epoch_error,
    follower_keeps_fetching,
    is_new_leadership,
)
from common.errors import ErrorCode

ME = 1


@pytest.mark.parametrize(("was", "epoch", "elected", "expected"), [
    (None, 3, False, True),  # first time hosted as leader (a restart): a new leadership
    ((ME, 3), 3, False, False),  # an ISR change of the same leader epoch
    ((ME, 3), 3, True, True),  # the metadata says just elected
    ((ME, 2), 3, False, True),  # re-elected at a newer epoch
    ((2, 3), 3, False, True),  # was following in the same epoch (cannot happen; still new)
])
def test_is_new_leadership(was: tuple[int, int] | None, epoch: int, elected: bool, expected: bool) -> None:
    assert is_new_leadership(was, broker_id=ME, leader_epoch=epoch, elected=elected) is expected


@pytest.mark.parametrize(("was", "leader", "epoch", "expected"), [
    ((2, 3), 2, 3, True),
    ((2, 3), 2, 4, False),  # new epoch, same leader: truncate by epoch again
    ((2, 3), 0, 4, False),
    (None, 2, 3, False),
])
def test_follower_keeps_fetching(was: tuple[int, int] | None, leader: int, epoch: int, expected: bool) -> None:
    assert follower_keeps_fetching(was, leader_id=leader, leader_epoch=epoch) is expected


@pytest.mark.parametrize(("requested", "current", "expected"), [
    (-1, 5, None),  # not checked (old request versions)
    (5, 5, None),
    (4, 5, ErrorCode.FENCED_LEADER_EPOCH),
    (6, 5, ErrorCode.UNKNOWN_LEADER_EPOCH),
])
def test_current_leader_epoch_error(requested: int, current: int, expected: ErrorCode | None) -> None:
    assert current_leader_epoch_error(requested, current) is expected


@pytest.mark.parametrize(("isr", "min_isr", "refused"), [((1, 2), 2, False), ((1,), 2, True), ((1,), 1, False)])
def test_acks_all_refused(isr: tuple[int, ...], min_isr: int, refused: bool) -> None:
    assert acks_all_refused(isr, min_isr) is refused
