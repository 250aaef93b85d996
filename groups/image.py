"""The groups of one `__consumer_offsets` partition, rebuilt by replaying its records.

    image = GroupsImage.EMPTY
    for record in records_of_partition:
        image = image.replay(record, now_ms)                       # a plain batch
        image = image.replay(record, now_ms, producer_id=7)        # a transactional batch of producer 7
    image = image.end_transaction(7, committed=True)              # its marker

Replay is the one way offsets change, committed and pending alike (Kafka's
OffsetMetadataManager.replay and replayEndTransactionMarker): an OffsetCommit record of a
transactional batch is held as pending for its producer, invisible to OffsetFetch, until the
producer's marker commits it (it then replaces the committed offset, unless a plain commit of
the same partition was written after it) or aborts it (it goes). A tombstone removes the
committed offset and every pending one of the partition.

Group metadata records give the group as Kafka loads it (Empty, or Stable with its
members); a group tombstone removes it. What a classic group holds between two such records
(members joining or syncing, heartbeat deadlines, pending syncs) Kafka keeps in memory only
and never replays (its GroupMetadataManager writes classic groups' records with
replayRecords=false); the coordinator sets it with `with_group` after the replay, the one
change of this image that is not a record's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import ClassVar, Final, TypeVar

from groups.consumer_group import KEEP_REBALANCE_DEADLINE, ConsumerGroup, ConsumerTimers, replay_consumer
from groups.consumer_records import ConsumerRecord
from groups.share_group import ShareGroup
from groups.share_records import MembershipRecord, ShareRecord, ShareSnapshotKey, ShareSnapshotValue, ShareStateRecord, \
    replay_membership
from groups.group import ClassicGroup, group_from_record
from groups.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)
from groups.state import GroupState

K = TypeVar("K")
V = TypeVar("V")
NO_PRODUCER_ID: Final = -1  # a record of a plain (non-transactional) batch
Offsets = Mapping[str, Mapping[tuple[str, int], OffsetCommitValue]]


@dataclass(frozen=True, slots=True)
class PendingOffset:
    """A transactional offset waiting for its producer's marker. `superseded`: an offset of the
    same partition written after it was committed first (a plain commit, or another producer's
    transactional offset whose transaction committed), and wins when this transaction commits
    (Kafka compares the two records' log offsets). `sequence` orders the transactional offsets
    by their records (the image's count of transactional records before this one)."""

    value: OffsetCommitValue
    superseded: bool = False
    sequence: int = 0


PendingOffsets = Mapping[str, Mapping[tuple[str, int], PendingOffset]]  # group -> partition -> offset
_Change = Callable[[PendingOffset], "PendingOffset | None"]


@dataclass(frozen=True, slots=True)
class GroupsImage:
    groups: Mapping[str, ClassicGroup] = field(default_factory=dict)
    offsets: Offsets = field(default_factory=dict)
    pending: Mapping[int, PendingOffsets] = field(default_factory=dict)  # by producer id
    txn_records: int = 0  # transactional offset records replayed so far: PendingOffset.sequence
    # KIP-848 consumer groups (groups/consumer_group.py), by their own records; their members'
    # deadlines are memory only (with_consumer_timers), as classic groups' members are.
    consumer_groups: Mapping[str, ConsumerGroup] = field(default_factory=dict)
    consumer_timers: Mapping[str, Mapping[str, ConsumerTimers]] = field(default_factory=dict)
    # KIP-932: share partitions' durable state, this coordinator's share groups' (groups/share_records.py)
    share_states: Mapping[ShareSnapshotKey, ShareSnapshotValue] = field(default_factory=dict)
    # KIP-932 share groups (groups/share_group.py), by Kafka's ShareGroup* records; their
    # members' session deadlines are the share broker's timers (broker/share/state.py)
    share_groups: Mapping[str, ShareGroup] = field(default_factory=dict)
    EMPTY: ClassVar[GroupsImage]

    def replay(self, record: CoordinatorRecord | ConsumerRecord | ShareRecord, now_ms: int,
               producer_id: int = NO_PRODUCER_ID) -> GroupsImage:
        """The image after one record; `producer_id` the producer of its transactional batch."""
        if isinstance(record, MembershipRecord):
            group_id = record.key.group
            share_group = replay_membership(self.share_groups.get(group_id), record)
            return replace(self, share_groups=_put(self.share_groups, group_id, share_group))
        if isinstance(record, ShareStateRecord):
            return replace(self, share_states=_put(self.share_states, record.key, record.value))
        if isinstance(record, ConsumerRecord):
            group = replay_consumer(self.consumer_groups.get(record.key.group), record)
            return replace(self, consumer_groups=_put(self.consumer_groups, record.key.group, group))
        if isinstance(record.key, OffsetCommitKey):
            key = record.key
            if record.value is None:  # the committed offset and every pending one go
                return self._with(replay_offsets(self.offsets, record), _drop_pending(self.pending, key))
            if producer_id != NO_PRODUCER_ID:
                assert isinstance(record.value, OffsetCommitValue)
                offset = PendingOffset(record.value, sequence=self.txn_records)
                return replace(self, pending=_put_pending(self.pending, producer_id, key, offset),
                               txn_records=self.txn_records + 1)
            return self._with(replay_offsets(self.offsets, record), _supersede(self.pending, key, None))
        assert isinstance(record.key, GroupMetadataKey)
        groups = dict(self.groups)
        if record.value is None:
            groups.pop(record.key.group, None)
        else:
            assert isinstance(record.value, GroupMetadataValue)
            groups[record.key.group] = group_from_record(record.key.group, record.value, now_ms)
        return replace(self, groups=groups)

    def _with(self, offsets: Offsets, pending: Mapping[int, PendingOffsets]) -> GroupsImage:
        """The image with these offsets: the constructor, not dataclasses.replace, on the path of
        every committed offset (replace costs twice as much, a third of a record's replay)."""
        return GroupsImage(self.groups, offsets, pending, self.txn_records, self.consumer_groups,
                           self.consumer_timers, self.share_states, self.share_groups)

    def end_transaction(self, producer_id: int, committed: bool) -> GroupsImage:
        """The image after `producer_id`'s marker: its pending offsets become the committed
        ones (commit) or go (abort). A marker without pending offsets changes nothing."""
        txn = self.pending.get(producer_id)
        if txn is None:
            return self
        pending: Mapping[int, PendingOffsets] = {pid: o for pid, o in self.pending.items() if pid != producer_id}
        offsets = self.offsets
        if committed:
            changed = {g: dict(offsets.get(g, {})) for g in txn}
            for group_id, partitions in txn.items():
                for tp, offset in partitions.items():
                    if not offset.superseded:
                        changed[group_id][tp] = offset.value
                        # another transaction's earlier offset of the partition now loses to this one
                        key = OffsetCommitKey(group_id, *tp)
                        pending = _supersede(pending, key, offset.sequence)
            offsets = {**offsets, **{g: o for g, o in changed.items() if o}}
        return replace(self, offsets=offsets, pending=pending)

    def with_group(self, group_id: str, group: ClassicGroup | None) -> GroupsImage:
        """The memory-only state of one classic group (see the module's docstring): `group`
        replaces the replayed one; None or a Dead group removes it."""
        if group is not None and self.groups.get(group_id) is group and group.state is not GroupState.DEAD:
            return self  # unchanged (an offset commit of a group without members)
        groups = dict(self.groups)
        if group is None or group.state is GroupState.DEAD:
            groups.pop(group_id, None)
        else:
            groups[group_id] = group
        return replace(self, groups=groups)

    def with_consumer_timers(self, group_id: str, changes: Mapping[str, ConsumerTimers | None]) -> GroupsImage:
        """The consumer group's member deadlines after a rule (None: the member's go); a group
        no longer replayed keeps none."""
        timers = dict(self.consumer_timers.get(group_id, {}))
        for member_id, t in changes.items():
            if t is None:
                timers.pop(member_id, None)
                continue
            if t.rebalance_deadline_ms == KEEP_REBALANCE_DEADLINE:
                before = timers.get(member_id)
                t = replace(t, rebalance_deadline_ms=-1 if before is None else before.rebalance_deadline_ms)
            timers[member_id] = t
        group = self.consumer_groups.get(group_id)
        kept = {m: t for m, t in timers.items() if group is not None and m in group.members}
        out = {g: t for g, t in self.consumer_timers.items() if g != group_id}
        if kept:
            out[group_id] = kept
        return replace(self, consumer_timers=out)

    def pending_partitions(self, group_id: str) -> frozenset[tuple[str, int]]:
        """The partitions of `group_id` with a transactional offset awaiting its marker (Kafka's
        hasPendingTransactionalOffsets: OffsetFetch's require_stable answers them unstable)."""
        return frozenset(tp for txn in self.pending.values() for tp in txn.get(group_id, {}))

    def group_ids(self) -> set[str]:
        """Every group known here: with metadata, or with offsets only (standalone commits)."""
        return set(self.groups) | set(self.consumer_groups) | {g for g, o in self.offsets.items() if o}


GroupsImage.EMPTY = GroupsImage()


def _put(held: Mapping[K, V], key: K, value: V | None) -> dict[K, V]:
    """A copy of `held` with `key` set to `value`, or without it when `value` is None (a
    record's tombstone, a group with nothing left)."""
    out = dict(held)
    if value is None:
        out.pop(key, None)
    else:
        out[key] = value
    return out


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


def _put_pending(pending: Mapping[int, PendingOffsets], producer_id: int, key: OffsetCommitKey,
                 offset: PendingOffset) -> Mapping[int, PendingOffsets]:
    txn = pending.get(producer_id, {})
    group = {**txn.get(key.group, {}), (key.topic, key.partition): offset}
    return {**pending, producer_id: {**txn, key.group: group}}


def _supersede(pending: Mapping[int, PendingOffsets], key: OffsetCommitKey, before: int | None
               ) -> Mapping[int, PendingOffsets]:
    """An offset of `key`'s partition was committed: the pending ones written before it lose
    to it (a plain commit, `before` None: every one pending; a transactional offset: those of
    a lower sequence)."""
    return _map_pending(pending, key, lambda offset: replace(offset, superseded=True)
                        if before is None or offset.sequence < before else offset)


def _drop_pending(pending: Mapping[int, PendingOffsets], key: OffsetCommitKey) -> Mapping[int, PendingOffsets]:
    return _map_pending(pending, key, lambda offset: None)


def _map_pending(pending: Mapping[int, PendingOffsets], key: OffsetCommitKey, change: _Change
                 ) -> Mapping[int, PendingOffsets]:
    """`change` applied to each producer's pending offset of `key`'s partition (None: it goes;
    a producer left with nothing pending stays open: its marker is still to come)."""
    tp = (key.topic, key.partition)
    if not any(tp in txn.get(key.group, {}) for txn in pending.values()):
        return pending  # the common case, without transactions: nothing copied
    out: dict[int, PendingOffsets] = {}
    for producer_id, txn in pending.items():
        group = txn.get(key.group, {})
        if tp in group:
            changed = change(group[tp])
            rest = {k: v for k, v in group.items() if k != tp}
            if changed is not None:
                rest[tp] = changed
            txn = {**txn, key.group: rest} if rest else {g: o for g, o in txn.items() if g != key.group}
        out[producer_id] = txn
    return out
