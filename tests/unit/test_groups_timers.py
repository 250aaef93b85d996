"""groups/: Kafka's classic-group timers beside the session — the pending SyncGroup expiry
(KIP-814's pendingSyncMembers) and the new member join timeout (KAFKA-7610) — on a fake clock."""

from __future__ import annotations

from dataclasses import replace

import pytest

from common.errors import ErrorCode as E
from common.units import MINUTE_MS
from groups.group import ClassicGroup, GroupConfig
from groups.join import SyncRequest, sync_group
from groups.membership import (
    LeavingMember,
    expire,
    heartbeat,
    leave_group,
    next_deadline,
)
from groups.state import GroupState as S
from tests.unit.group_helpers import CONFIG, NOW, join, stable_group, with_deadline

REBALANCE = 30_000  # the helpers' rebalance timeout
JOIN_TIMEOUT = 5 * MINUTE_MS  # Kafka's GroupCoordinator.NewMemberJoinTimeoutMs


def completing(*member_ids: str, now: int = NOW) -> ClassicGroup:
    """Every member rejoined a Stable group: a new generation in CompletingRebalance, nobody synced."""
    group: ClassicGroup = stable_group(*member_ids, now=now)
    for mid in member_ids:
        out = join(group, mid, now=now)
        assert out.group is not None
        group = out.group
    assert group.state is S.COMPLETING_REBALANCE
    return group


def sync(group: ClassicGroup, member_id: str, now: int = NOW) -> ClassicGroup:
    assignments = tuple((m, b"x") for m in group.members) if member_id == group.leader_id else ()
    out = sync_group(group, SyncRequest("g", group.generation_id, member_id, None, assignments), now)
    assert out.group is not None
    assert out.response is None or out.response.error is E.NONE  # type: ignore[attr-defined]
    return out.group


# ---- pending sync (KIP-814) -------------------------------------------------------------------


def test_completing_a_join_makes_every_member_owe_a_sync_within_the_rebalance_timeout() -> None:
    group = completing("a", "b", "c", now=NOW + 7)
    assert group.pending_sync == {"a", "b", "c"}
    assert group.sync_deadline_ms == NOW + 7 + REBALANCE
    far = NOW + 10 * MINUTE_MS
    for member_id in group.members:
        group = with_deadline(group, member_id, far)
    assert next_deadline(group) == NOW + 7 + REBALANCE


@pytest.mark.parametrize("order, pending", [
    (("b",), {"a", "c"}),  # a follower parks its SyncGroup in CompletingRebalance
    (("a",), {"b", "c"}),  # the leader: the group becomes Stable, followers still owe theirs
    (("a", "b"), {"c"}),  # a follower syncing in Stable
    (("b", "a", "c"), set()),
], ids=["follower-first", "leader", "follower-in-stable", "everyone"])
def test_each_sync_pays_the_members_debt(order: tuple[str, ...], pending: set[str]) -> None:
    group = completing("a", "b", "c")
    for member_id in order:
        group = sync(group, member_id)
    assert group.pending_sync == pending


def test_all_synced_leaves_no_sync_deadline() -> None:
    group = completing("a", "b")
    group = sync(sync(group, "a"), "b")
    assert next_deadline(group) == NOW + 10_000  # the sessions only


@pytest.mark.parametrize("synced, removed", [
    (("a",), ["b"]),  # Stable: the leader assigned, a follower never asked for its part
    (("b",), ["a"]),  # CompletingRebalance: the leader never sent the assignment
    ((), ["a", "b"]),
], ids=["stable-follower", "completing-leader", "nobody"])
def test_members_that_never_sync_are_removed_and_the_group_rebalances(
        synced: tuple[str, ...], removed: list[str]) -> None:
    group = completing("a", "b")
    for member_id in synced:
        group = sync(group, member_id)
    # a heartbeat keeps the session alive but does not pay the sync debt
    for member_id in group.members:
        out = heartbeat(group, "g", member_id, None, group.generation_id, NOW + REBALANCE - 1)
        assert out.group is not None
        group = out.group
    assert expire(group, NOW + REBALANCE - 1, CONFIG).group == group
    out = expire(group, NOW + REBALANCE, CONFIG)
    assert out.group is not None
    kept = [m for m in ("a", "b") if m not in removed]
    assert list(out.group.members) == kept
    assert out.group.state is (S.PREPARING_REBALANCE if kept else S.EMPTY)
    assert not out.group.pending_sync
    if not kept:  # nobody left: Empty with its record, as Kafka's prepareRebalance of an empty group
        assert out.records
    assert "SyncGroup" in out.reason or not kept
    # a follower parked in CompletingRebalance learns the rebalance at once
    if group.state is S.COMPLETING_REBALANCE and kept:
        assert dict(out.syncs) and all(s.error is E.REBALANCE_IN_PROGRESS for _, s in out.syncs)


def test_a_new_rebalance_cancels_the_sync_expiry() -> None:
    group = sync(completing("a", "b"), "a")
    assert group.pending_sync == {"b"}
    out = join(group, "a", now=NOW + 1)  # the leader rejoins (new metadata): a new rebalance
    assert out.group is not None and out.group.state is S.PREPARING_REBALANCE
    assert not out.group.pending_sync and out.group.sync_deadline_ms == -1


def test_a_static_member_replaced_owes_its_predecessors_sync() -> None:
    group = sync(completing("a", "b"), "a")  # Stable, b still owes its SyncGroup
    group = replace(group, members={k: replace(m, group_instance_id=f"inst-{k}")
                                    for k, m in group.members.items()})
    out = join(group, new="b2", instance="inst-b")  # same protocols in Stable: no rebalance
    assert out.group is not None and out.group.state is S.STABLE
    assert out.group.pending_sync == {"b2"}


def test_a_member_removed_otherwise_owes_nothing() -> None:
    group = completing("a", "b")
    assert group.without_member("b").pending_sync == {"a"}


# ---- new member join timeout (KAFKA-7610) -----------------------------------------------------

def test_a_new_members_deadline_is_the_join_timeout_even_while_its_join_waits() -> None:
    stable = stable_group("a")
    out = join(stable, new="n", v4=False, rebalance=10 * MINUTE_MS, now=NOW + 1)
    group = out.group
    assert group is not None and group.state is S.PREPARING_REBALANCE  # waits for a to rejoin
    member = group.members["n"]
    assert member.is_new and member.awaiting_join
    assert member.session_deadline_ms == NOW + 1 + JOIN_TIMEOUT
    # past a's session, the join timeout comes before the 10-minute rebalance deadline
    assert next_deadline(with_deadline(group, "a", NOW + 20 * MINUTE_MS)) == NOW + 1 + JOIN_TIMEOUT


def test_a_new_member_whose_join_never_completes_is_removed_and_told_unknown_member() -> None:
    stable = stable_group("a")
    group = join(stable, new="n", v4=False, rebalance=10 * MINUTE_MS, now=NOW + 1).group
    assert group is not None
    # a keeps heartbeating (REBALANCE_IN_PROGRESS) but never rejoins
    group = heartbeat(group, "g", "a", None, group.generation_id, NOW + JOIN_TIMEOUT - 1).group
    assert group is not None
    assert "n" in expire(group, NOW + JOIN_TIMEOUT, CONFIG).group.members  # type: ignore[union-attr]
    out = expire(group, NOW + 1 + JOIN_TIMEOUT, CONFIG)
    assert out.group is not None and "n" not in out.group.members
    assert [(mid, j.error, j.member_id) for mid, j in out.joins] == [("n", E.UNKNOWN_MEMBER_ID, "")]
    assert out.group.state is S.PREPARING_REBALANCE  # a is still awaited until the rebalance deadline


def test_the_join_timeout_also_covers_a_member_id_required_rejoin() -> None:
    group = join(stable_group("a"), new="p", now=NOW).group  # v4: MEMBER_ID_REQUIRED
    assert group is not None and group.pending_members == {"p": NOW + 10_000}
    group = join(group, "p", now=NOW + 5, rebalance=10 * MINUTE_MS).group
    assert group is not None and group.members["p"].is_new and not group.pending_members
    assert group.members["p"].session_deadline_ms == NOW + 5 + JOIN_TIMEOUT


def test_a_completed_join_makes_the_member_old_with_a_session_deadline() -> None:
    group = join(stable_group("a"), new="n", v4=False, now=NOW + 1).group
    out = join(group, "a", now=NOW + 2)  # a rejoins: the join completes
    assert out.group is not None and out.group.state is S.COMPLETING_REBALANCE
    member = out.group.members["n"]
    assert not member.is_new and member.session_deadline_ms == NOW + 2 + 10_000


def test_the_join_timeout_is_configurable() -> None:
    config = GroupConfig(initial_rebalance_delay_ms=0, new_member_join_timeout_ms=1_000)
    group = join(stable_group("a"), new="n", v4=False, now=NOW, config=config).group
    assert group is not None and group.members["n"].session_deadline_ms == NOW + 1_000


def test_a_member_leaving_while_its_join_waits_is_answered_unknown_member() -> None:
    group = join(stable_group("a", "b"), "a", now=NOW + 1).group  # the leader rejoins; b is awaited
    assert group is not None and group.members["a"].awaiting_join
    out = leave_group(group, "g", (LeavingMember("a"),), NOW + 2, CONFIG)
    assert [(mid, j.error) for mid, j in out.joins] == [("a", E.UNKNOWN_MEMBER_ID)]


def test_a_new_member_sending_its_join_again_keeps_its_join_timeout() -> None:
    group = join(stable_group("a"), new="n", v4=False, now=NOW).group
    assert group is not None
    again = join(group, "n", now=NOW + 1_000, rebalance=10 * MINUTE_MS).group
    assert again is not None and again.members["n"].is_new
    assert again.members["n"].session_deadline_ms == NOW + JOIN_TIMEOUT
