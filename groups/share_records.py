"""A share partition's durable state (KIP-932) as a `__consumer_offsets` record.

    record = ShareStateRecord(ShareSnapshotKey("g", topic_id, 0), ShareSnapshotValue(...))
    key, value = encode_record(record); decode_record(key, value) == record

Kafka keeps it in `__share_group_state`, written by its share coordinator (ShareSnapshotKey and
ShareSnapshotValue: a compacted topic whose last record per key is the state). tidelog's share
coordinator is the share group's group coordinator, so the same snapshot is a record of the
group's `__consumer_offsets` partition: loading a coordinator replays it, compaction keeps the
last one per key, a null value deletes it. Its key version, SHARE_SNAPSHOT_KEY_VERSION, is
tidelog's own: Kafka's `__consumer_offsets` has no share-state records, and the number is far
from the versions Kafka uses there (0-16). The value is ShareSnapshotValue v0's fields, plain.

A state batch is (first offset, last offset, delivery state, delivery count) with Kafka's
delivery states (0 AVAILABLE, 2 ACKNOWLEDGED, 4 ARCHIVED; an acquired record is stored as
AVAILABLE with its count, so it is delivered again after a failover).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from common.protocol.primitives import ProtocolError, Reader, Writer
from groups.records import RecordFormatError

SHARE_SNAPSHOT_KEY_VERSION: Final = 100
SHARE_SNAPSHOT_VALUE_VERSION: Final = 0
StateBatch = tuple[int, int, int, int]  # (first offset, last offset, delivery state, delivery count)


@dataclass(frozen=True, slots=True)
class ShareSnapshotKey:
    group: str
    topic_id: str  # as the metadata image spells it
    partition: int


@dataclass(frozen=True, slots=True)
class ShareSnapshotValue:
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...]


@dataclass(frozen=True, slots=True)
class ShareStateRecord:
    key: ShareSnapshotKey
    value: ShareSnapshotValue | None  # None: deleted (the group's share state goes)


def is_share_key(key: bytes) -> bool:
    return len(key) >= 2 and int.from_bytes(key[:2], "big") == SHARE_SNAPSHOT_KEY_VERSION


def encode_record(record: ShareStateRecord) -> tuple[bytes, bytes | None]:
    w = Writer()
    w.int16(SHARE_SNAPSHOT_KEY_VERSION)
    w.string(record.key.group)
    w.string(record.key.topic_id)
    w.int32(record.key.partition)
    if record.value is None:
        return w.to_bytes(), None
    v = Writer()
    v.int16(SHARE_SNAPSHOT_VALUE_VERSION)
    v.int32(record.value.state_epoch)
    v.int32(record.value.leader_epoch)
    v.int64(record.value.start_offset)

    def batch(wr: Writer, b: StateBatch) -> None:
        wr.int64(b[0])
        wr.int64(b[1])
        wr.int8(b[2])
        wr.int16(b[3])

    v.array(record.value.batches, batch)
    return w.to_bytes(), v.to_bytes()


def decode_record(key: bytes, value: bytes | None) -> ShareStateRecord:
    try:
        r = Reader(key)
        if r.int16() != SHARE_SNAPSHOT_KEY_VERSION:
            raise RecordFormatError("not a share snapshot key")
        decoded = ShareSnapshotKey(r.string(), r.string(), r.int32())
        if value is None:
            return ShareStateRecord(decoded, None)
        v = Reader(value)
        version = v.int16()
        if version != SHARE_SNAPSHOT_VALUE_VERSION:
            raise RecordFormatError(f"unknown share snapshot value version {version}")
        state_epoch, leader_epoch, start = v.int32(), v.int32(), v.int64()
        batches = v.array(lambda rr: (rr.int64(), rr.int64(), rr.int8(), rr.int16()), 8 + 8 + 1 + 2)
    except ProtocolError as e:
        raise RecordFormatError(f"truncated share snapshot record: {e.reason}") from None
    return ShareStateRecord(decoded, ShareSnapshotValue(state_epoch, leader_epoch, start, tuple(batches)))
