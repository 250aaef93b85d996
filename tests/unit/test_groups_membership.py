"""groups/membership.py: Heartbeat, LeaveGroup (batch, static) and the timers (fake clock)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from common.errors import ErrorCode as E
from groups.group import ClassicGroup
from groups.membership import (
    LeaveResult,
    LeavingMember,
    expire,
    heartbeat,
    leave_group,
    next_deadline,
)
from groups.state import GroupState as S
from tests.unit.group_helpers import CONFIG, NOW, join, stable_group, with_deadline

STABLE = stable_group("a", "b")
GEN = STABLE.generation_id
STATIC = stable_group("a", "b", instances={"a": "inst-a", "b": "inst-b"})
PREPARING = join(STABLE, new="c", v4=False).group
EMPTY = replace(STABLE, state=S.EMPTY, members={})


@pytest.mark.parametrize("group, group_id, member, instance, generation, expected", [
    (STABLE, "", "a", None, GEN, E.INVALID_GROUP_ID),
    (None, "g", "a", None, GEN, E.UNKNOWN_MEMBER_ID),
    (replace(STABLE, state=S.DEAD), "g", "a", None, GEN, E.COORDINATOR_NOT_AVAILABLE),
    (STABLE, "g", "ghost", None, GEN, E.UNKNOWN_MEMBER_ID),
    (EMPTY, "g", "a", None, GEN, E.UNKNOWN_MEMBER_ID),
    (STATIC, "g", "a", "inst-b", GEN, E.FENCED_INSTANCE_ID),
    (STABLE, "g", "a", None, GEN - 1, E.ILLEGAL_GENERATION),
    (PREPARING, "g", "a", None, GEN, E.REBALANCE_IN_PROGRESS),
    (STABLE, "g", "b", None, GEN, E.NONE),
], ids=["empty-id", "unknown-group", "dead", "unknown-member", "empty", "fenced", "old-generation",
        "rebalancing", "ok"])
def test_heartbeat(group: ClassicGroup | None, group_id: str, member: str, instance: str | None,
                   generation: int, expected: E) -> None:
    out = heartbeat(group, group_id, member, instance, generation, NOW + 500)
    assert out.response is expected and out.records == ()


def test_heartbeat_refreshes_the_session() -> None:
    out = heartbeat(STABLE, "g", "b", None, GEN, NOW + 500)
    assert out.group.members["b"].session_deadline_ms == NOW + 500 + 10_000


def test_batch_leave_answers_each_member_and_rebalances_once() -> None:
    group = stable_group("a", "b", "c")
    out = leave_group(group, "g", (LeavingMember("a"), LeavingMember("c"), LeavingMember("ghost")), NOW, CONFIG)
    assert out.response == LeaveResult(E.NONE, ((LeavingMember("a"), E.NONE), (LeavingMember("c"), E.NONE),
                                                (LeavingMember("ghost"), E.UNKNOWN_MEMBER_ID)))
    assert list(out.group.members) == ["b"] and out.group.state is S.PREPARING_REBALANCE
    assert out.group.leader_id == "b"


def test_leave_v5_reasons_go_into_the_rebalance_log_line() -> None:
    group = stable_group("a", "b", "c")
    out = leave_group(group, "g", (LeavingMember("a", None, "the consumer is being closed"), LeavingMember("c")),
                      NOW, CONFIG)
    assert "a (client reason: the consumer is being closed)" in out.reason
    assert "c (client reason: not provided)" in out.reason


def test_static_leave_by_instance_and_fencing() -> None:
    out = leave_group(STATIC, "g", (LeavingMember("", "inst-a"), LeavingMember("a", "inst-b"),
                                    LeavingMember("", "inst-z")), NOW, CONFIG)
    assert [code for _, code in out.response.members] == [E.NONE, E.FENCED_INSTANCE_ID, E.UNKNOWN_MEMBER_ID]
    assert list(out.group.members) == ["b"]


def test_leave_of_an_unknown_group_is_per_member() -> None:
    out = leave_group(None, "g", (LeavingMember("a"),), NOW, CONFIG)
    assert out.response == LeaveResult(E.NONE, ((LeavingMember("a"), E.UNKNOWN_MEMBER_ID),)) and out.group is None


def test_last_member_leaving_empties_the_group_with_a_record() -> None:
    group = stable_group("a")
    out = leave_group(group, "g", (LeavingMember("a"),), NOW, CONFIG)
    assert out.group.state is S.EMPTY and out.group.generation_id == group.generation_id + 1
    assert len(out.records) == 1 and out.records[0].value.members == ()


def test_leave_during_preparing_may_complete_the_join() -> None:
    group = join(PREPARING, "a").group  # a and c joined, b has not
    out = leave_group(group, "g", (LeavingMember("b"),), NOW, CONFIG)
    assert out.group.state is S.COMPLETING_REBALANCE and {mid for mid, _ in out.joins} == {"a", "c"}


def test_expired_session_removes_the_member_and_rebalances() -> None:
    group = with_deadline(with_deadline(STABLE, "a", NOW + 10_000), "b", NOW + 5_000)
    assert next_deadline(group) == NOW + 5_000
    assert expire(group, NOW + 4_999, CONFIG).group == group
    out = expire(group, NOW + 5_000, CONFIG)
    assert list(out.group.members) == ["a"] and out.group.state is S.PREPARING_REBALANCE
    assert "expired" in out.reason or "rebalance" in out.reason


def test_members_waiting_in_a_join_do_not_expire_but_the_rebalance_deadline_does() -> None:
    group = join(STABLE, "a").group
    deadline = group.rebalance_deadline_ms
    group = with_deadline(group, "a", NOW + 1)
    assert next_deadline(group) <= deadline
    out = expire(group, deadline, CONFIG)
    assert list(out.group.members) == ["a"] and out.group.state is S.COMPLETING_REBALANCE


def test_pending_member_ids_expire() -> None:
    group = join(STABLE, new="p").group  # v4: pending until it rejoins
    assert group.pending_members == {"p": NOW + 10_000}
    assert expire(group, NOW + 10_000, CONFIG).group.pending_members == {}


def test_an_idle_group_has_no_deadline() -> None:
    assert next_deadline(EMPTY) == -1
