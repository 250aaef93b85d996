"""groups/share_records.py: a share partition's snapshot as a __consumer_offsets record, and its replay."""

from __future__ import annotations

import pytest

from groups.image import GroupsImage
from groups.records import RecordFormatError
from groups.share_records import (
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareStateRecord,
    decode_record,
    encode_record,
    is_share_key,
)

KEY = ShareSnapshotKey("g", "AAAAAAAAAAAAAAAAAAAAAQ", 3)
SNAPSHOT = ShareStateRecord(KEY, ShareSnapshotValue(0, 7, 10, ((10, 11, 0, 1), (12, 13, 2, 1), (14, 14, 4, 5))))
TOMBSTONE = ShareStateRecord(KEY, None)


@pytest.mark.parametrize("record", [SNAPSHOT, TOMBSTONE, ShareStateRecord(KEY, ShareSnapshotValue(0, 0, 0, ()))])
def test_round_trip(record: ShareStateRecord) -> None:
    key, value = encode_record(record)
    assert is_share_key(key)
    assert decode_record(key, value) == record


def test_truncated_values_are_refused() -> None:
    key, value = encode_record(SNAPSHOT)
    assert value is not None
    for cut in range(len(value)):
        with pytest.raises(RecordFormatError):
            decode_record(key, value[:cut])


def test_the_image_keeps_the_last_snapshot_and_a_tombstone_drops_it() -> None:
    image = GroupsImage.EMPTY.replay(SNAPSHOT, 0)
    assert image.share_states == {KEY: SNAPSHOT.value}
    assert image.replay(TOMBSTONE, 0).share_states == {}
