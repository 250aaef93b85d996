"""groups/share_records.py: a share partition's snapshot and a share group's membership as
__consumer_offsets records, and their replay."""

from __future__ import annotations

import pytest

from groups.image import GroupsImage
from groups.records import RecordFormatError
from groups import share_group as sg
from groups.share_records import (
    MembershipRecord,
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareStateRecord,
    decode_record,
    encode_record,
    is_share_key,
    membership_records,
    share_lag,
)

KEY = ShareSnapshotKey("g", "AAAAAAAAAAAAAAAAAAAAAQ", 3)
SNAPSHOT = ShareStateRecord(KEY, ShareSnapshotValue(0, 7, 10, ((10, 11, 0, 1), (12, 13, 2, 1), (14, 14, 4, 5))))
TOMBSTONE = ShareStateRecord(KEY, None)


@pytest.mark.parametrize("record", [SNAPSHOT, TOMBSTONE, ShareStateRecord(KEY, ShareSnapshotValue(0, 0, 0, ()))])
def test_round_trip(record: ShareStateRecord) -> None:
    key, value = encode_record(record)
    assert is_share_key(key)
    assert decode_record(key, value) == record


def test_the_image_keeps_the_last_snapshot_and_a_tombstone_drops_it() -> None:
    image = GroupsImage.EMPTY.replay(SNAPSHOT, 0)
    assert image.share_states == {KEY: SNAPSHOT.value}
    assert image.replay(TOMBSTONE, 0).share_states == {}


# ---- a share group's membership in Kafka's ShareGroup* records -------------------------------------

TOPICS = {"jobs": ("AAAAAAAAAAAAAAAAAAAAAQ", 2), "mail": ("AAAAAAAAAAAAAAAAAAAAAg", 1)}
CONFIG = sg.ShareGroupConfig()


def _through_the_log(image: GroupsImage, records: tuple[MembershipRecord, ...]) -> GroupsImage:
    """Each record encoded and decoded, as a new coordinator loads it."""
    for record in records:
        decoded = decode_record(*encode_record(record))
        assert decoded == record
        image = image.replay(decoded, 0)
    return image


def _heartbeat(group: sg.ShareGroup | None, member: str, epoch: int, topics: tuple[str, ...] | None = ("jobs",)
               ) -> sg.HeartbeatOutcome:
    req = sg.HeartbeatRequest("g", member, epoch, "rack-1" if member == "a" else None, topics, f"client-{member}", "/10.0.0.1")
    return sg.heartbeat(group, req, topics=TOPICS, config=CONFIG)


def test_a_share_groups_records_rebuild_it_as_its_rules_left_it() -> None:
    """Joins, a subscription change, a leave and an expiry: the group replayed from Kafka's
    records (through their bytes) equals the group the rules' own records make."""
    image, group = GroupsImage.EMPTY, None
    steps = [("a", sg.JOIN_EPOCH, ("jobs",)), ("b", sg.JOIN_EPOCH, ("jobs",)), ("c", sg.JOIN_EPOCH, ("jobs", "mail")),
             ("a", None, None), ("b", None, ("mail",)), ("c", sg.LEAVE_EPOCH, None)]
    for member, epoch, topics in steps:
        held = None if group is None else group.members.get(member)
        out = _heartbeat(group, member, held.member_epoch if epoch is None and held else epoch or 0, topics)
        assert out.response.error is sg.E.NONE
        before = group or sg.ShareGroup("g")
        image = _through_the_log(image, membership_records(before, out.records))
        group = sg.replay_all(before, out.records)
        assert image.share_groups["g"] == group
    assert group is not None
    out = sg.expire(group, ["b"], topics=TOPICS)
    image = _through_the_log(image, membership_records(group, out.records))
    assert image.share_groups["g"] == sg.replay_all(group, out.records)
    assert set(image.share_groups["g"].members) == {"a"} and image.share_groups["g"].group_epoch == group.group_epoch + 1


def test_membership_records_are_kafkas_key_versions() -> None:
    out = _heartbeat(None, "a", sg.JOIN_EPOCH)
    records = membership_records(sg.ShareGroup("g"), out.records)
    assert [r.key.version for r in records] == [10, 14, 11, 13, 12]
    assert all(is_share_key(encode_record(r)[0]) for r in records)
    left = _heartbeat(sg.replay_all(sg.ShareGroup("g"), out.records), "a", sg.LEAVE_EPOCH)
    tombstones = membership_records(sg.replay_all(sg.ShareGroup("g"), out.records), left.records)
    assert [(r.key.version, r.value) for r in tombstones[:3]] == [(14, None), (13, None), (10, None)]


def test_an_offset_commit_keeps_the_share_state_and_groups() -> None:
    from groups.records import CoordinatorRecord, OffsetCommitKey, OffsetCommitValue
    image = _through_the_log(GroupsImage.EMPTY.replay(SNAPSHOT, 0),
                             membership_records(sg.ShareGroup("g"), _heartbeat(None, "a", sg.JOIN_EPOCH).records))
    after = image.replay(CoordinatorRecord(OffsetCommitKey("c", "jobs", 0), OffsetCommitValue(5, "", 0)), 0)
    assert after.share_states == image.share_states and after.share_groups == image.share_groups


@pytest.mark.parametrize("start, batches, high_watermark, lag", [
    (10, (), 10, 0),                                      # caught up
    (10, (), 15, 5),                                      # five never fetched
    (10, ((10, 11, 2, 1), (12, 13, 0, 1), (14, 14, 4, 5)), 15, 2),  # 12-13 available again: the lag
    (10, ((10, 14, 2, 1),), 20, 5),                       # 10-14 acknowledged, 15-19 unread
    (10, ((8, 11, 2, 1),), 12, 0),                        # a batch reaching below SPSO counts from SPSO
    (10, (), 4, 0),                                       # a high watermark behind SPSO (a replica's): no lag
])
def test_share_lag_counts_records_not_yet_acknowledged_or_archived(
        start: int, batches: tuple[tuple[int, int, int, int], ...], high_watermark: int, lag: int) -> None:
    assert share_lag(ShareSnapshotValue(0, 0, start, batches), high_watermark) == lag


def _joined() -> tuple[MembershipRecord, ...]:
    return membership_records(sg.ShareGroup("g"), _heartbeat(None, "a", sg.JOIN_EPOCH).records)


@pytest.mark.parametrize("record", [SNAPSHOT, *_joined()], ids=lambda r: type(r.value).__name__)
def test_truncated_values_are_refused(record: ShareStateRecord | MembershipRecord) -> None:
    key, value = encode_record(record)
    assert value is not None
    for cut in range(len(value)):
        with pytest.raises(RecordFormatError):
            decode_record(key, value[:cut])
