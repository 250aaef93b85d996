"""groups/share_group.py: ShareGroupHeartbeat's rules and the share assignor."""

from __future__ import annotations

import pytest

from common.errors import ErrorCode
from groups.share_group import (
    HeartbeatRequest,
    HeartbeatResponse,
    ShareGroup,
    ShareGroupConfig,
    ShareGroupState,
    ShareMember,
    assign,
    expire,
    heartbeat,
    replay_all,
)

CONFIG = ShareGroupConfig(heartbeat_interval_ms=5_000, max_size=3)
TOPICS = {"jobs": ("J", 1), "other": ("O", 4)}


def beat(group: ShareGroup | None, member: str, epoch: int,
         topics: tuple[str, ...] | None = ("jobs",)) -> tuple[ShareGroup, HeartbeatResponse]:
    out = heartbeat(group, HeartbeatRequest("g", member, epoch, None, topics), topics=TOPICS, config=CONFIG)
    return replay_all(group or ShareGroup("g"), out.records), out.response


def test_two_members_share_one_partition() -> None:
    g, r1 = beat(None, "a", 0)
    assert (r1.member_epoch, r1.assignment, r1.heartbeat_interval_ms) == (1, frozenset({("J", 0)}), 5_000)
    g, r2 = beat(g, "b", 0)
    assert (r2.member_epoch, r2.assignment) == (2, frozenset({("J", 0)}))
    g, r1 = beat(g, "a", 1, None)  # a learns the new epoch; its assignment is unchanged but sent
    assert (r1.member_epoch, r1.assignment) == (2, frozenset({("J", 0)}))
    g, r1 = beat(g, "a", 2, None)  # steady: nothing changes, no assignment sent, no records
    assert (r1.member_epoch, r1.assignment, g.group_epoch) == (2, None, 2)
    assert g.state is ShareGroupState.STABLE


def test_leave_bumps_the_epoch_and_empties_the_group() -> None:
    g, _ = beat(None, "a", 0)
    g, r = beat(g, "a", -1)
    assert (r.member_epoch, g.group_epoch, g.state) == (-1, 2, ShareGroupState.EMPTY)


@pytest.mark.parametrize("member, epoch, topics, code", [
    ("", 0, ("jobs",), ErrorCode.INVALID_REQUEST),
    ("new", 0, None, ErrorCode.INVALID_REQUEST),  # a join names its subscription
    ("stranger", 1, None, ErrorCode.UNKNOWN_MEMBER_ID),
    ("a", 7, None, ErrorCode.FENCED_MEMBER_EPOCH),
])
def test_refusals(member: str, epoch: int, topics: tuple[str, ...] | None, code: ErrorCode) -> None:
    g, _ = beat(None, "a", 0)
    out = heartbeat(g, HeartbeatRequest("g", member, epoch, None, topics), topics=TOPICS, config=CONFIG)
    assert (out.response.error, out.records) == (code, ())


def test_max_size() -> None:
    g: ShareGroup | None = None
    for m in ("a", "b", "c"):
        g, _ = beat(g, m, 0)
    out = heartbeat(g, HeartbeatRequest("g", "d", 0, None, ("jobs",)), topics=TOPICS, config=CONFIG)
    assert out.response.error is ErrorCode.GROUP_MAX_SIZE_REACHED


def test_assignor_spreads_partitions_and_covers_every_partition() -> None:
    members = {m: ShareMember(m, 0, ("other",)) for m in ("a", "b")}
    assert assign(members, TOPICS) == {"a": frozenset({("O", 0), ("O", 2)}), "b": frozenset({("O", 1), ("O", 3)})}
    many = {m: ShareMember(m, 0, ("other",)) for m in "abcdef"}
    out = assign(many, TOPICS)
    assert all(len(a) == 1 for a in out.values())
    assert set().union(*out.values()) == {("O", p) for p in range(4)}


def test_a_partition_count_change_bumps_the_epoch() -> None:
    g, _ = beat(None, "a", 0)
    out = heartbeat(g, HeartbeatRequest("g", "a", 1, None, None), topics={"jobs": ("J", 2)}, config=CONFIG)
    assert (out.response.member_epoch, out.response.assignment) == (2, frozenset({("J", 0), ("J", 1)}))


def test_expiry_removes_members_in_one_epoch() -> None:
    g: ShareGroup | None = None
    for m in ("a", "b", "c"):
        g, _ = beat(g, m, 0)
    assert g is not None
    g = replay_all(g, expire(g, ["a", "b", "zz"], topics=TOPICS).records)
    assert (sorted(g.members), g.group_epoch) == (["c"], 4)
