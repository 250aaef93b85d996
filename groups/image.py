"""The groups of one `__consumer_offsets` partition, rebuilt by replaying its records.

    image = GroupsImage.EMPTY
    for record in records_of_partition:
        image = image.replay(record, now_ms)

Replay is the one way offsets change. Group metadata records give the group as Kafka loads
it (Empty, or Stable with its members); after loading, the runtime keeps the soft state of
rebalances itself and replays only offsets and tombstones (`replay_offsets`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from groups.group import ClassicGroup, group_from_record
from groups.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)

Offsets = Mapping[str, Mapping[tuple[str, int], OffsetCommitValue]]


@dataclass(frozen=True, slots=True)
class GroupsImage:
    groups: Mapping[str, ClassicGroup] = field(default_factory=dict)
    offsets: Offsets = field(default_factory=dict)
    EMPTY: ClassVar[GroupsImage]

    def replay(self, record: CoordinatorRecord, now_ms: int) -> GroupsImage:
        if isinstance(record.key, OffsetCommitKey):
            return GroupsImage(self.groups, replay_offsets(self.offsets, record))
        assert isinstance(record.key, GroupMetadataKey)
        groups = dict(self.groups)
        if record.value is None:
            groups.pop(record.key.group, None)
        else:
            assert isinstance(record.value, GroupMetadataValue)
            groups[record.key.group] = group_from_record(record.key.group, record.value, now_ms)
        return GroupsImage(groups, self.offsets)

    def group_ids(self) -> set[str]:
        """Every group known here: with metadata, or with offsets only (standalone commits)."""
        return set(self.groups) | {g for g, o in self.offsets.items() if o}


GroupsImage.EMPTY = GroupsImage()


def replay_offsets(offsets: Offsets, record: CoordinatorRecord) -> Offsets:
    """Offsets after one OffsetCommit record (a tombstone removes the partition's offset)."""
    key = record.key
    assert isinstance(key, OffsetCommitKey)
    group = dict(offsets.get(key.group, {}))
    if record.value is None:
        group.pop((key.topic, key.partition), None)
    else:
        assert isinstance(record.value, OffsetCommitValue)
        group[(key.topic, key.partition)] = record.value
    out = dict(offsets)
    if group:
        out[key.group] = group
    else:
        out.pop(key.group, None)
    return out
