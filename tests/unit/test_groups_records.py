"""groups/records.py: `__consumer_offsets` keys and values in Kafka's layouts, byte for byte.

The expected bytes are written out field by field from Kafka's OffsetCommitKey/Value and
GroupMetadataKey/Value schemas (int16 lengths for strings, int32 for bytes and arrays).
"""

from __future__ import annotations

import struct

import pytest

from groups.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    decode_key,
    decode_record,
    encode_key,
    encode_record,
    encode_value,
)


def s(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def b(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


MEMBER = MemberMetadata("m-1", "inst-1", "client", "/127.0.0.1", 300000, 45000, b"\x00\x01sub", b"\x00\x02asg")
GROUP_VALUE = GroupMetadataValue("consumer", 7, "range", "m-1", 1_700_000_000_123, (MEMBER,))

CASES = [
    (CoordinatorRecord(OffsetCommitKey("g", "orders", 3), OffsetCommitValue(42, "meta", 1000, 5)),
     struct.pack(">h", 1) + s("g") + s("orders") + struct.pack(">i", 3),
     struct.pack(">hqi", 3, 42, 5) + s("meta") + struct.pack(">q", 1000)),
    (CoordinatorRecord(OffsetCommitKey("g", "t", 0), OffsetCommitValue(1, "", 2, -1, 99)),  # v1: expire timestamp
     struct.pack(">h", 1) + s("g") + s("t") + struct.pack(">i", 0),
     struct.pack(">hq", 1, 1) + s("") + struct.pack(">qq", 2, 99)),
    (CoordinatorRecord(GroupMetadataKey("g"), GROUP_VALUE),
     struct.pack(">h", 2) + s("g"),
     struct.pack(">h", 3) + s("consumer") + struct.pack(">i", 7) + s("range") + s("m-1")
     + struct.pack(">qi", 1_700_000_000_123, 1) + s("m-1") + s("inst-1") + s("client") + s("/127.0.0.1")
     + struct.pack(">ii", 300000, 45000) + b(b"\x00\x01sub") + b(b"\x00\x02asg")),
    (CoordinatorRecord(GroupMetadataKey("empty"), GroupMetadataValue("consumer", 2, None, None, 5, ())),
     struct.pack(">h", 2) + s("empty"),
     struct.pack(">h", 3) + s("consumer") + struct.pack(">i", 2) + s(None) + s(None) + struct.pack(">qi", 5, 0)),
    (CoordinatorRecord(OffsetCommitKey("g", "t", 1), None), struct.pack(">h", 1) + s("g") + s("t") + struct.pack(">i", 1), None),
    (CoordinatorRecord(GroupMetadataKey("g"), None), struct.pack(">h", 2) + s("g"), None),
]


@pytest.mark.parametrize("record, key, value", CASES)
def test_records_both_ways(record: CoordinatorRecord, key: bytes, value: bytes | None) -> None:
    assert encode_record(record) == (key, value)
    assert decode_record(key, value) == record


@pytest.mark.parametrize("record, key, value", [c for c in CASES if c[2] is not None])
def test_truncated_values_raise(record: CoordinatorRecord, key: bytes, value: bytes) -> None:
    for cut in range(len(value)):
        with pytest.raises(RecordFormatError):
            decode_record(key, value[:cut])


def test_older_value_versions_are_read() -> None:
    v0 = struct.pack(">hq", 0, 9) + s("m") + struct.pack(">q", 10)
    assert decode_record(encode_key(OffsetCommitKey("g", "t", 0)), v0).value == OffsetCommitValue(9, "m", 10)
    group_v0 = (struct.pack(">h", 0) + s("consumer") + struct.pack(">i", 1) + s("range") + s("a")
                + struct.pack(">i", 1) + s("a") + s("c") + s("h") + struct.pack(">i", 10000) + b(b"x") + b(b"y"))
    value = decode_record(encode_key(GroupMetadataKey("g")), group_v0).value
    assert value == GroupMetadataValue("consumer", 1, "range", "a", -1,
                                       (MemberMetadata("a", None, "c", "h", 10000, 10000, b"x", b"y"),))


@pytest.mark.parametrize("key", [struct.pack(">h", 3) + s("g"), b"\x00", b""])
def test_unknown_or_truncated_keys_raise(key: bytes) -> None:
    with pytest.raises(RecordFormatError):
        decode_key(key)


def test_unknown_value_version_raises() -> None:
    with pytest.raises(RecordFormatError):
        decode_record(encode_key(GroupMetadataKey("g")), struct.pack(">h", 9))


def test_tombstone_value_is_none() -> None:
    assert encode_value(None) is None
