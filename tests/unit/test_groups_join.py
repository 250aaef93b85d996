"""groups/join.py: JoinGroup, SyncGroup and the rebalance they drive (pure, fake clock)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from common.errors import ErrorCode as E
from groups.group import ClassicGroup, GroupConfig
from groups.join import (
    SyncRequest,
    join_group,
    maybe_complete_join,
    sync_failed,
    sync_group,
)
from groups.outcome import JoinMember, JoinResult, SyncResult
from groups.records import GroupMetadataKey
from groups.state import GroupState as S
from tests.unit.group_helpers import CONFIG, NOW, RANGE, join, join_req, stable_group

STABLE = stable_group("a", "b")
STATIC = stable_group("a", "b", instances={"a": "inst-a", "b": "inst-b"})
DEAD = replace(STABLE, state=S.DEAD)


@pytest.mark.parametrize("group, kwargs, expected", [
    (None, {"group_id": ""}, E.INVALID_GROUP_ID),
    (None, {"session": 10}, E.INVALID_SESSION_TIMEOUT),
    (None, {"session": 3_600_000}, E.INVALID_SESSION_TIMEOUT),
    (None, {"member_id": "ghost"}, E.UNKNOWN_MEMBER_ID),
    (None, {"protocols": ()}, E.INCONSISTENT_GROUP_PROTOCOL),
    (None, {"protocol_type": ""}, E.INCONSISTENT_GROUP_PROTOCOL),
    (STABLE, {"protocol_type": "connect"}, E.INCONSISTENT_GROUP_PROTOCOL),
    (STABLE, {"protocols": (("roundrobin", b""),)}, E.INCONSISTENT_GROUP_PROTOCOL),
    (STABLE, {"member_id": "ghost"}, E.UNKNOWN_MEMBER_ID),
    (DEAD, {}, E.COORDINATOR_NOT_AVAILABLE),
    (STATIC, {"member_id": "b", "instance": "inst-a"}, E.FENCED_INSTANCE_ID),
], ids=["empty-id", "session-too-small", "session-too-large", "unknown-group-with-member", "no-protocols",
        "no-protocol-type", "other-protocol-type", "no-common-protocol", "unknown-member", "dead",
        "fenced-instance"])
def test_join_errors_store_nothing(group: ClassicGroup | None, kwargs: dict, expected: E) -> None:
    member_id = kwargs.pop("member_id", "")
    out = join(group, member_id, **kwargs)
    assert out.response == JoinResult(expected, member_id=member_id)
    assert out.group == group and out.records == () and not out.park


def test_group_max_size() -> None:
    out = join(STABLE, config=replace(CONFIG, max_size=2))
    assert out.response.error is E.GROUP_MAX_SIZE_REACHED and out.group == STABLE


def test_v4_join_needs_a_member_id_then_completes_at_once_with_no_delay() -> None:
    first = join(None, new="m-1")
    assert first.response == JoinResult(E.MEMBER_ID_REQUIRED, member_id="m-1")
    assert first.group.pending_members == {"m-1": NOW + 10_000} and first.group.state is S.EMPTY
    second = join(first.group, "m-1")
    assert second.park and second.records == ()
    assert second.group.state is S.COMPLETING_REBALANCE and second.group.generation_id == 1
    assert second.joins == (("m-1", JoinResult(E.NONE, 1, "consumer", "range", "m-1", "m-1",
                                               (JoinMember("m-1", None, b"range-meta"),))),)


def test_initial_rebalance_delay_waits_and_grows_with_new_members() -> None:
    config = replace(CONFIG, initial_rebalance_delay_ms=3000)
    out = join(None, new="a", v4=False, config=config)
    assert out.park and out.joins == () and out.group.rebalance_deadline_ms == NOW + 3000
    out = join(out.group, new="b", v4=False, now=NOW + 1000, config=config)
    assert out.joins == () and out.group.rebalance_deadline_ms == NOW + 4000
    assert maybe_complete_join(out.group, NOW + 3999).joins == ()  # all joined, but still the initial delay
    done = maybe_complete_join(out.group, NOW + 4000)
    assert [mid for mid, _ in done.joins] == ["a", "b"] and done.group.generation_id == 1


def test_leader_gets_the_members_and_followers_do_not() -> None:
    out = join(STABLE, new="c", v4=False)
    assert out.group.state is S.PREPARING_REBALANCE and out.joins == ()
    out = join(out.group, "a")
    assert out.joins == ()  # b has not rejoined yet
    out = join(out.group, "b")
    answers = dict(out.joins)
    assert answers["a"].members == tuple(JoinMember(m, None, b"range-meta") for m in ("a", "b", "c"))
    assert answers["b"].members == () and answers["c"].members == ()
    assert {r.generation_id for r in answers.values()} == {STABLE.generation_id + 1}
    assert {r.leader for r in answers.values()} == {"a"}


def test_protocol_with_most_first_choices_is_selected() -> None:
    prefs = {"a": (("range", b""), ("sticky", b"")), "b": (("sticky", b""), ("range", b"")),
             "c": (("sticky", b""), ("range", b""), ("roundrobin", b""))}
    group = None
    for mid, protocols in prefs.items():
        group = join(group, new=mid, v4=False, protocols=protocols).group
    out = group
    for mid, protocols in prefs.items():
        res = join(out, mid, protocols=protocols)
        out = res.group
    assert out.protocol_name == "sticky"


def test_stable_follower_rejoining_unchanged_gets_the_current_generation() -> None:
    out = join(STABLE, "b")
    assert out.response == JoinResult(E.NONE, STABLE.generation_id, "consumer", "range", "a", "b")
    assert out.group == STABLE and not out.park


def test_stable_leader_rejoining_triggers_a_rebalance() -> None:
    out = join(STABLE, "a")
    assert out.park and out.group.state is S.PREPARING_REBALANCE


def test_static_member_rejoin_in_stable_skips_the_rebalance_and_fences_the_old_id() -> None:
    out = join(STATIC, new="b2", instance="inst-b")
    assert out.response.error is E.NONE and out.response.member_id == "b2"
    assert out.group.state is S.STABLE and out.group.generation_id == STATIC.generation_id
    assert list(out.group.members) == ["a", "b2"] and out.group.members["b2"].assignment == b"assign-b"
    assert [r.key for r in out.records] == [GroupMetadataKey("g")]
    assert out.records[0].value.members[1].member_id == "b2"
    assert join(out.group, "b", instance="inst-b").response.error is E.FENCED_INSTANCE_ID


@pytest.mark.parametrize("instance, v9, expected", [
    # KIP-814 (JoinGroup v9): the rejoining static leader is told it leads, with the members,
    # and to skip the assignment; a follower learns nothing more than before.
    ("inst-a", True, JoinResult(E.NONE, STATIC.generation_id, "consumer", "range", "a2", "a2",
                                (JoinMember("a2", "inst-a", b"range-meta"), JoinMember("b", "inst-b", b"range-meta")),
                                skip_assignment=True)),
    ("inst-b", True, JoinResult(E.NONE, STATIC.generation_id, "consumer", "range", "a", "b2")),
    # Before v9: the previous leader id, so the new member id never thinks it leads
    ("inst-a", False, JoinResult(E.NONE, STATIC.generation_id, "consumer", "range", "a", "a2")),
    ("inst-b", False, JoinResult(E.NONE, STATIC.generation_id, "consumer", "range", "a", "b2")),
], ids=["leader-v9", "follower-v9", "leader-v8", "follower-v8"])
def test_static_rejoin_in_stable_answers_kip_814(instance: str, v9: bool, expected: JoinResult) -> None:
    new_id = instance[-1] + "2"
    request = replace(join_req(instance=instance), supports_skip_assignment=v9)
    out = join_group(STATIC, request, new_member_id=new_id, now_ms=NOW, config=CONFIG)
    assert out.response == expected and not out.park
    assert out.group.state is S.STABLE and out.group.leader_id == ("a2" if instance == "inst-a" else "a")


@pytest.mark.parametrize("reason, logged", [("rebalance requested by user", "rebalance requested by user"),
                                            (None, "not provided"), ("", "not provided")])
def test_join_reason_goes_into_the_rebalance_log_line(reason: str | None, logged: str) -> None:
    out = join_group(STABLE, replace(join_req(v4=False), reason=reason), new_member_id="c", now_ms=NOW,
                     config=CONFIG)
    assert out.reason.endswith(f"; client reason: {logged}") and out.group.state is S.PREPARING_REBALANCE


def test_static_member_with_new_protocols_rebalances() -> None:
    out = join(STATIC, new="b2", instance="inst-b", protocols=(("range", b"new"),))
    assert out.park and out.group.state is S.PREPARING_REBALANCE and "b2" in out.group.members


# ---- SyncGroup ----------------------------------------------------------------------------


def completing() -> ClassicGroup:
    out = join(STABLE, "a")
    return join(out.group, "b").group


@pytest.mark.parametrize("group, request_, expected", [
    (STABLE, SyncRequest("", 1, "a", None, ()), E.INVALID_GROUP_ID),
    (None, SyncRequest("g", 1, "a", None, ()), E.UNKNOWN_MEMBER_ID),
    (STABLE, SyncRequest("g", STABLE.generation_id, "ghost", None, ()), E.UNKNOWN_MEMBER_ID),
    (STABLE, SyncRequest("g", 99, "a", None, ()), E.ILLEGAL_GENERATION),
    (DEAD, SyncRequest("g", 1, "a", None, ()), E.COORDINATOR_NOT_AVAILABLE),
    (STATIC, SyncRequest("g", STATIC.generation_id, "a", "inst-b", ()), E.FENCED_INSTANCE_ID),
    (join(STABLE, new="c", v4=False).group, SyncRequest("g", STABLE.generation_id, "a", None, ()),
     E.REBALANCE_IN_PROGRESS),
    # SyncGroup v5: a protocol type or name other than the group's (a null one is not checked)
    (STABLE, SyncRequest("g", STABLE.generation_id, "a", None, (), "connect", None), E.INCONSISTENT_GROUP_PROTOCOL),
    (STABLE, SyncRequest("g", STABLE.generation_id, "a", None, (), "consumer", "roundrobin"),
     E.INCONSISTENT_GROUP_PROTOCOL),
    (STABLE, SyncRequest("g", 99, "a", None, (), "connect", None), E.ILLEGAL_GENERATION),  # generation first
], ids=["empty-id", "unknown-group", "unknown-member", "wrong-generation", "dead", "fenced", "preparing",
        "other-protocol-type", "other-protocol-name", "generation-before-protocol"])
def test_sync_errors(group: ClassicGroup | None, request_: SyncRequest, expected: E) -> None:
    out = sync_group(group, request_, NOW)
    assert out.response == SyncResult(expected) and out.records == () and out.group == group


def test_follower_waits_then_the_leaders_assignment_answers_everyone_once_persisted() -> None:
    group = completing()
    follower = sync_group(group, SyncRequest("g", group.generation_id, "b", None, ()), NOW)
    assert follower.park and follower.records == () and follower.syncs == ()
    leader = sync_group(follower.group, SyncRequest("g", group.generation_id, "a", None,
                                                    (("a", b"A"), ("b", b"B"))), NOW)
    assert leader.park and leader.group.state is S.STABLE
    assert dict(leader.syncs) == {"b": SyncResult(E.NONE, b"B", "consumer", "range"),
                                  "a": SyncResult(E.NONE, b"A", "consumer", "range")}
    (record,) = leader.records
    assert record.key == GroupMetadataKey("g")
    assert [(m.member_id, m.assignment) for m in record.value.members] == [("a", b"A"), ("b", b"B")]


@pytest.mark.parametrize("protocol_type, protocol_name", [("consumer", "range"), (None, None), ("consumer", None)])
def test_sync_v5_with_matching_or_null_protocols_gets_them_back(protocol_type: str | None,
                                                                protocol_name: str | None) -> None:
    out = sync_group(STABLE, SyncRequest("g", STABLE.generation_id, "b", None, (), protocol_type, protocol_name), NOW)
    assert out.response == SyncResult(E.NONE, b"assign-b", "consumer", "range")


def test_sync_in_stable_returns_the_stored_assignment() -> None:
    out = sync_group(STABLE, SyncRequest("g", STABLE.generation_id, "b", None, ()), NOW)
    assert out.response == SyncResult(E.NONE, b"assign-b", "consumer", "range") and out.records == ()


def test_failed_persist_answers_the_error_and_rebalances() -> None:
    out = sync_failed(STABLE, STABLE.generation_id, E.NOT_COORDINATOR, NOW, CONFIG)
    assert out.group.state is S.PREPARING_REBALANCE
    assert dict(out.syncs) == {"a": SyncResult(E.NOT_COORDINATOR), "b": SyncResult(E.NOT_COORDINATOR)}
    assert sync_failed(STABLE, 99, E.NOT_COORDINATOR, NOW, CONFIG).group == STABLE


def test_rebalance_in_completing_fails_waiting_syncs() -> None:
    group = completing()
    waiting = sync_group(group, SyncRequest("g", group.generation_id, "b", None, ()), NOW).group
    out = join(waiting, new="c", v4=False)
    assert dict(out.syncs) == {"b": SyncResult(E.REBALANCE_IN_PROGRESS)}


def test_rebalance_deadline_drops_members_that_did_not_rejoin() -> None:
    out = join(STABLE, "a")  # leader rejoins, b never does
    assert maybe_complete_join(out.group, out.group.rebalance_deadline_ms - 1).joins == ()
    done = maybe_complete_join(out.group, out.group.rebalance_deadline_ms)
    assert list(done.group.members) == ["a"] and [mid for mid, _ in done.joins] == ["a"]


def test_a_group_nobody_rejoins_becomes_empty_with_a_record() -> None:
    group = replace(join(STABLE, "a").group, members={})
    out = maybe_complete_join(replace(group, rebalance_deadline_ms=NOW), NOW)
    assert out.group.state is S.EMPTY and out.group.protocol_name is None
    assert out.records[0].value.members == () and out.records[0].value.generation == STABLE.generation_id + 1


def test_group_config_defaults_are_kafkas() -> None:
    c = GroupConfig()
    assert (c.min_session_timeout_ms, c.max_session_timeout_ms, c.initial_rebalance_delay_ms,
            c.offset_metadata_max_bytes, c.offsets_retention_ms) == (6000, 1_800_000, 3000, 4096, 10080 * 60_000)
    assert RANGE[0][0] == "range"
