"""groups/image.py: replaying `__consumer_offsets` rebuilds groups and offsets."""

from __future__ import annotations

import pytest

from groups.image import GroupsImage
from groups.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
)
from groups.state import GroupState as S
from tests.unit.group_helpers import NOW

MEMBER = MemberMetadata("m", "inst", "client", "/h", 30000, 10000, b"sub", b"asg")
RECORDS = [
    CoordinatorRecord(OffsetCommitKey("g", "t", 0), OffsetCommitValue(1, "", NOW)),
    CoordinatorRecord(OffsetCommitKey("g", "t", 0), OffsetCommitValue(5, "x", NOW + 1)),
    CoordinatorRecord(OffsetCommitKey("g", "t", 1), OffsetCommitValue(9, "", NOW)),
    CoordinatorRecord(GroupMetadataKey("g"), GroupMetadataValue("consumer", 3, "range", "m", NOW, (MEMBER,))),
    CoordinatorRecord(OffsetCommitKey("g", "t", 1), None),
    CoordinatorRecord(OffsetCommitKey("solo", "t", 0), OffsetCommitValue(2, "", NOW)),
    CoordinatorRecord(GroupMetadataKey("gone"), GroupMetadataValue("consumer", 1, None, None, NOW, ())),
    CoordinatorRecord(GroupMetadataKey("gone"), None),
]


def replay(records: list[CoordinatorRecord]) -> GroupsImage:
    image = GroupsImage.EMPTY
    for r in records:
        image = image.replay(r, NOW)
    return image


def test_replay_keeps_the_latest_offsets_and_loads_groups_as_kafka() -> None:
    image = replay(RECORDS)
    assert image.offsets == {"g": {("t", 0): OffsetCommitValue(5, "x", NOW + 1)},
                             "solo": {("t", 0): OffsetCommitValue(2, "", NOW)}}
    group = image.groups["g"]
    assert (group.state, group.generation_id, group.protocol_name, group.leader_id) == (S.STABLE, 3, "range", "m")
    member = group.members["m"]
    assert (member.group_instance_id, member.assignment, member.metadata_for("range")) == ("inst", b"asg", b"sub")
    assert member.session_deadline_ms == NOW + 10000
    assert set(image.groups) == {"g"} and image.group_ids() == {"g", "solo"}


@pytest.mark.parametrize("cut", range(len(RECORDS) + 1))
def test_any_split_of_the_replay_reaches_the_same_image(cut: int) -> None:
    image = replay(RECORDS[:cut])
    for r in RECORDS[cut:]:
        image = image.replay(r, NOW)
    assert image == replay(RECORDS)


def test_an_empty_group_loads_empty() -> None:
    image = replay([CoordinatorRecord(GroupMetadataKey("e"), GroupMetadataValue("consumer", 4, None, None, NOW, ()))])
    assert image.groups["e"].state is S.EMPTY and image.groups["e"].generation_id == 4
