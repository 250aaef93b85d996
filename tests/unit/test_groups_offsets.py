"""groups/offsets.py: OffsetCommit checks, OffsetFetch, OffsetDelete, DeleteGroups, retention."""

from __future__ import annotations

from dataclasses import replace

import pytest

from common.errors import ErrorCode as E
from groups.group import ClassicGroup
from groups.offsets import (
    CommitPartition,
    CommitRequest,
    FetchedOffset,
    commit_offsets,
    delete_group,
    delete_offsets,
    delete_topic_offsets,
    expire_offsets,
    fetch_offsets,
)
from groups.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
)
from groups.state import GroupState as S
from tests.unit.group_helpers import COMPLETING, CONFIG, EMPTY, GEN, NOW, P0, STABLE, STATIC, join

TOPICS = {("orders", 0), ("orders", 1)}


def commit(group: ClassicGroup | None, generation: int = GEN, member: str = "a", instance: str | None = None,
           parts: tuple[CommitPartition, ...] = (P0,), group_id: str = "g"):  # noqa: ANN201
    return commit_offsets(group, CommitRequest(group_id, generation, member, instance, parts), now_ms=NOW,
                          config=CONFIG, partition_exists=lambda t, p: (t, p) in TOPICS)


@pytest.mark.parametrize("group, kwargs, expected", [
    (STABLE, {"group_id": ""}, E.INVALID_GROUP_ID),
    (None, {}, E.ILLEGAL_GENERATION),
    (replace(STABLE, state=S.DEAD), {}, E.COORDINATOR_NOT_AVAILABLE),
    (STABLE, {"member": "ghost"}, E.UNKNOWN_MEMBER_ID),
    (STABLE, {"generation": GEN - 1}, E.ILLEGAL_GENERATION),
    (STABLE, {"generation": -1, "member": ""}, E.UNKNOWN_MEMBER_ID),  # a standalone commit to a live group
    (STATIC, {"instance": "inst-b"}, E.FENCED_INSTANCE_ID),
    (STABLE, {"instance": "inst-z"}, E.UNKNOWN_MEMBER_ID),  # a known member id with an unknown instance
    (COMPLETING, {"generation": COMPLETING.generation_id}, E.REBALANCE_IN_PROGRESS),
], ids=["empty-id", "unknown-group-with-generation", "dead", "unknown-member", "old-generation",
        "standalone-to-live-group", "fenced", "unknown-instance", "completing"])
def test_commit_errors_store_nothing(group: ClassicGroup | None, kwargs: dict, expected: E) -> None:
    out = commit(group, **kwargs)
    assert out.response == (("orders", 0, expected),) and out.records == ()


@pytest.mark.parametrize("group, generation, member, unknown_group_error, expected", [
    # OffsetCommit v9: an unknown group committing with a generation is GROUP_ID_NOT_FOUND
    (None, GEN, "a", E.GROUP_ID_NOT_FOUND, E.GROUP_ID_NOT_FOUND),
    (None, GEN, "a", E.ILLEGAL_GENERATION, E.ILLEGAL_GENERATION),
    # ... but a standalone commit (generation -1) still creates it, at every version
    (None, -1, "", E.GROUP_ID_NOT_FOUND, E.NONE),
    # a classic group's generation is its member epoch: the same checks as v8
    (STABLE, GEN - 1, "a", E.GROUP_ID_NOT_FOUND, E.ILLEGAL_GENERATION),
    (STABLE, GEN, "a", E.GROUP_ID_NOT_FOUND, E.NONE),
], ids=["v9-unknown-group", "v8-unknown-group", "v9-standalone", "v9-old-generation", "v9-member"])
def test_commit_v9_errors(group: ClassicGroup | None, generation: int, member: str,
                          unknown_group_error: E, expected: E) -> None:
    request = CommitRequest("g", generation, member, None, (P0,), unknown_group_error=unknown_group_error)
    out = commit_offsets(group, request, now_ms=NOW, config=CONFIG, partition_exists=lambda t, p: (t, p) in TOPICS)
    assert out.response == (("orders", 0, expected),) and len(out.records) == (expected is E.NONE)


@pytest.mark.parametrize("commit_timestamp, stored", [(-1, NOW), (NOW - 5000, NOW - 5000)])
def test_commit_v1_timestamp_is_kept_when_given(commit_timestamp: int, stored: int) -> None:
    out = commit(STABLE, parts=(replace(P0, commit_timestamp=commit_timestamp),))
    assert out.records[0].value == OffsetCommitValue(42, "meta", stored, 3)


def test_member_commit_writes_kafkas_record_per_partition() -> None:
    out = commit(STABLE, parts=(P0, CommitPartition("orders", 1, 7, -1, None)))
    assert out.response == (("orders", 0, E.NONE), ("orders", 1, E.NONE))
    assert out.records == (
        CoordinatorRecord(OffsetCommitKey("g", "orders", 0), OffsetCommitValue(42, "meta", NOW, 3)),
        CoordinatorRecord(OffsetCommitKey("g", "orders", 1), OffsetCommitValue(7, "", NOW, -1)))


@pytest.mark.parametrize("group", [None, EMPTY], ids=["unknown-group", "empty-group"])
def test_standalone_commits_are_accepted(group: ClassicGroup | None) -> None:
    out = commit(group, generation=-1, member="")
    assert out.response == (("orders", 0, E.NONE),) and len(out.records) == 1
    assert out.group is not None and out.group.state is S.EMPTY


def test_commit_during_preparing_rebalance_is_accepted() -> None:
    preparing = join(STABLE, new="c", v4=False).group
    assert commit(preparing).response == (("orders", 0, E.NONE),)


def test_bad_partitions_fail_alone() -> None:
    big = CommitPartition("orders", 1, 1, -1, "x" * 4097)
    unknown = CommitPartition("nope", 0, 1, -1, None)
    out = commit(STABLE, parts=(P0, big, unknown))
    assert out.response == (("orders", 0, E.NONE), ("orders", 1, E.OFFSET_METADATA_TOO_LARGE),
                            ("nope", 0, E.UNKNOWN_TOPIC_OR_PARTITION))
    assert [r.key.partition for r in out.records] == [0]


OFFSETS = {("orders", 0): OffsetCommitValue(42, "meta", NOW, 3)}


@pytest.mark.parametrize("wanted, expected", [
    ((("orders", (0, 1)),), (FetchedOffset("orders", 0, 42, 3, "meta", E.NONE),
                             FetchedOffset("orders", 1, -1, -1, "", E.NONE))),
    (None, (FetchedOffset("orders", 0, 42, 3, "meta", E.NONE),)),
])
def test_fetch_offsets(wanted, expected) -> None:  # noqa: ANN001
    assert fetch_offsets(OFFSETS, wanted) == expected


def test_fetch_of_an_unknown_group_is_all_unset() -> None:
    assert fetch_offsets(None, (("t", (0,)),)) == (FetchedOffset("t", 0, -1, -1, "", E.NONE),)


def test_delete_group() -> None:
    assert delete_group(None, None, "g", NOW).response is E.GROUP_ID_NOT_FOUND
    assert delete_group(STABLE, OFFSETS, "g", NOW).response is E.NON_EMPTY_GROUP
    assert delete_group(EMPTY, OFFSETS, "", NOW).response is E.INVALID_GROUP_ID
    out = delete_group(EMPTY, OFFSETS, "g", NOW)
    assert out.response is E.NONE and out.group.state is S.DEAD
    assert out.records == (CoordinatorRecord(OffsetCommitKey("g", "orders", 0), None),
                           CoordinatorRecord(GroupMetadataKey("g"), None))


def test_offset_delete() -> None:
    assert delete_offsets(None, None, "g", (("orders", 0),)).response == (E.GROUP_ID_NOT_FOUND, ())
    out = delete_offsets(EMPTY, OFFSETS, "g", (("orders", 0), ("orders", 1)))
    assert out.response == (E.NONE, (("orders", 0, E.NONE), ("orders", 1, E.NONE)))
    assert out.records == (CoordinatorRecord(OffsetCommitKey("g", "orders", 0), None),)


def test_offset_delete_refuses_subscribed_topics() -> None:
    subscription = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x06orders" + b"\xff\xff\xff\xff"
    group = join(None, new="a", v4=False, protocols=(("range", subscription),)).group
    out = delete_offsets(group, OFFSETS, "g", (("orders", 0), ("other", 0)))
    assert out.response == (E.NONE, (("orders", 0, E.GROUP_SUBSCRIBED_TO_TOPIC), ("other", 0, E.NONE)))
    assert out.records == ()


def test_offsets_expire_for_empty_groups_only() -> None:
    retention = CONFIG.offsets_retention_ms
    assert expire_offsets(STABLE, OFFSETS, NOW + 10 * retention, CONFIG).records == ()
    assert expire_offsets(EMPTY, OFFSETS, NOW + retention - 1, CONFIG).records == ()
    out = expire_offsets(EMPTY, OFFSETS, NOW + retention, CONFIG)
    assert out.records == (CoordinatorRecord(OffsetCommitKey("g", "orders", 0), None),
                           CoordinatorRecord(GroupMetadataKey("g"), None))
    assert out.group.state is S.DEAD


def test_explicit_expire_timestamp_wins() -> None:
    offsets = {("orders", 0): OffsetCommitValue(1, "", NOW, -1, NOW + 5)}
    assert len(expire_offsets(EMPTY, offsets, NOW + 5, CONFIG).records) == 2


TWO_TOPICS = {("orders", 0): OffsetCommitValue(42, "", NOW, 3), ("orders", 1): OffsetCommitValue(7, "", NOW, 3),
              ("audit", 0): OffsetCommitValue(9, "", NOW, 3)}


@pytest.mark.parametrize("group, deleted, tombstoned, dead", [
    (STABLE, {"orders"}, [("orders", 0), ("orders", 1)], False),  # members or not: the offsets go
    (EMPTY, {"orders"}, [("orders", 0), ("orders", 1)], False),  # audit's offset keeps the group
    (EMPTY, {"orders", "audit"}, [("audit", 0), ("orders", 0), ("orders", 1)], True),
    (STABLE, {"orders", "audit"}, [("audit", 0), ("orders", 0), ("orders", 1)], False),  # members keep it
    (EMPTY, {"payments"}, [], False),  # nothing of this group's
])
def test_offsets_of_deleted_topics_go_with_them(group, deleted, tombstoned, dead) -> None:
    out = delete_topic_offsets(group, TWO_TOPICS, deleted, NOW)
    keys = [r.key for r in out.records]
    assert keys[:len(tombstoned)] == [OffsetCommitKey("g", t, p) for t, p in tombstoned]
    assert all(r.value is None for r in out.records)
    assert (GroupMetadataKey("g") in keys, out.group.state is S.DEAD) == (dead, dead)
