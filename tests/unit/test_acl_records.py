"""ACLs in the metadata log: AccessControlEntry / RemoveAccessControlEntry records, their replay
into the image's AclsImage, and the snapshot."""

from __future__ import annotations

import msgpack
import pytest

from metadata.codec import MetadataRecordError
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from metadata.records import (
    AccessControlEntry,
    RemoveAccessControlEntry,
    decode_record,
    decode_records,
    encode_record,
    encode_records,
)
from metadata.snapshot import decode_snapshot, encode_snapshot

ACL1 = AccessControlEntry(id="8M1xkKyWQrO8-0q6nUG7cA", resource_type=2, resource_name="orders", pattern_type=3,
                          principal="User:alice", host="*", operation=3, permission_type=3)
ACL2 = AccessControlEntry(id="nUG7cA8M1xkKyWQrO8-0q6", resource_type=3, resource_name="app-", pattern_type=4,
                          principal="User:*", host="10.0.0.1", operation=2, permission_type=2)


@pytest.mark.parametrize("record", [ACL1, ACL2, RemoveAccessControlEntry(id=ACL1.id)])
def test_round_trip(record: object) -> None:
    data = encode_record(record)  # type: ignore[arg-type]
    assert decode_record(data) == record
    assert msgpack.unpackb(data)["type"] in (6, 7)  # Kafka's apiKeys
    with pytest.raises(MetadataRecordError):
        decode_record(data[:-1])


@pytest.mark.parametrize(("change", "message"), [
    ({"id": ""}, "id"), ({"resource_name": ""}, "resource_name"), ({"operation": 300}, "operation"),
    ({"principal": 5}, "principal"), ({"host": None}, "host"),
])
def test_bad_fields_are_named(change: dict[str, object], message: str) -> None:
    m = msgpack.unpackb(encode_record(ACL1))
    with pytest.raises(MetadataRecordError, match=message):
        decode_record(msgpack.packb({**m, **change}))


def test_replay_creates_and_removes() -> None:
    image = apply(EMPTY_IMAGE, [(1, ACL1), (2, ACL2)])
    assert dict(image.acls.by_id) == {ACL1.id: ACL1, ACL2.id: ACL2}
    after = apply(image, [(3, RemoveAccessControlEntry(ACL1.id))])
    assert dict(after.acls.by_id) == {ACL2.id: ACL2}
    assert dict(image.acls.by_id) == {ACL1.id: ACL1, ACL2.id: ACL2}  # the base image is unchanged
    assert after.topics is image.topics  # untouched sub-images are shared
    unrelated = apply(after, [(4, RemoveAccessControlEntry(ACL2.id))])
    assert not unrelated.acls.by_id


def test_replay_in_any_split_of_batches_is_the_same() -> None:
    records = [(1, ACL1), (2, ACL2), (3, RemoveAccessControlEntry(ACL1.id))]
    whole = apply(EMPTY_IMAGE, records)
    for cut in range(len(records) + 1):
        assert apply(apply(EMPTY_IMAGE, records[:cut]), records[cut:]) == whole


@pytest.mark.parametrize(("records", "message"), [
    ([(1, ACL1), (2, ACL1)], "already exists"),
    ([(1, RemoveAccessControlEntry(ACL1.id))], "unknown ACL id"),
])
def test_contradictions_name_the_offset(records: list[tuple[int, object]], message: str) -> None:
    with pytest.raises(MetadataRecordError, match=message):
        apply(EMPTY_IMAGE, records)  # type: ignore[arg-type]


def test_snapshot_round_trip() -> None:
    image = apply(EMPTY_IMAGE, [(1, ACL1), (2, ACL2)])
    data = encode_snapshot(image)
    assert decode_snapshot(data) == image
    assert encode_snapshot(decode_snapshot(data)) == data  # canonical


def test_snapshot_without_acls_has_no_acls_key() -> None:
    assert "acls" not in msgpack.unpackb(encode_snapshot(EMPTY_IMAGE))
    assert decode_snapshot(encode_snapshot(EMPTY_IMAGE)) == EMPTY_IMAGE


def test_snapshot_with_a_duplicate_acl_is_refused() -> None:
    m = msgpack.unpackb(encode_snapshot(apply(EMPTY_IMAGE, [(1, ACL1)])))
    m["acls"] = m["acls"] * 2
    with pytest.raises(MetadataRecordError, match="duplicate ACL id"):
        decode_snapshot(msgpack.packb(m))


def test_batch_round_trip() -> None:
    assert decode_records(encode_records([ACL1, RemoveAccessControlEntry(ACL1.id)])) == (
        ACL1, RemoveAccessControlEntry(ACL1.id))
