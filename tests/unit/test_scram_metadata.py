"""SCRAM credentials in the metadata log: replay (Kafka's ScramDelta), snapshots, and the
broker's lookup (broker.listener_security.scram_credentials_of)."""

from __future__ import annotations

import pytest

from metadata.codec import MetadataRecordError
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from metadata.records import NoOp, RemoveUserScramCredential, UserScramCredential
from metadata.snapshot import decode_snapshot, encode_snapshot

ALICE_512 = UserScramCredential("alice", 2, "c2FsdA==", "c3RvcmVk", "c2VydmVy", 4096)
ALICE_512_NEW = UserScramCredential("alice", 2, "bmV3", "c3RvcmVk", "c2VydmVy", 8192)
ALICE_256 = UserScramCredential("alice", 1, "c2FsdA==", "c3RvcmVk", "c2VydmVy", 4096)
BOB_512 = UserScramCredential("bob", 2, "c2FsdA==", "c3RvcmVk", "c2VydmVy", 4096)

REPLAYS = [
    ([ALICE_512], {("alice", 2): ALICE_512}),
    ([ALICE_512, ALICE_256, BOB_512], {("alice", 2): ALICE_512, ("alice", 1): ALICE_256, ("bob", 2): BOB_512}),
    ([ALICE_512, ALICE_512_NEW], {("alice", 2): ALICE_512_NEW}),  # an upsert replaces
    ([ALICE_512, ALICE_256, RemoveUserScramCredential("alice", 2)], {("alice", 1): ALICE_256}),
]


@pytest.mark.parametrize("records, expected", REPLAYS)
def test_replay(records: list, expected: dict) -> None:
    image = apply(EMPTY_IMAGE, enumerate(records))
    assert dict(image.scram.credentials) == expected
    for split in range(len(records) + 1):  # any split into batches reaches the same image
        first = apply(EMPTY_IMAGE, enumerate(records[:split]))
        assert apply(first, ((i + split, r) for i, r in enumerate(records[split:]))) == image


def test_removing_an_unknown_credential_names_it() -> None:
    with pytest.raises(MetadataRecordError, match="offset 1: .*no SCRAM credential of mechanism 1 for user 'alice'"):
        apply(EMPTY_IMAGE, enumerate([ALICE_512, RemoveUserScramCredential("alice", 1)]))


def test_untouched_scram_image_is_shared() -> None:
    image = apply(EMPTY_IMAGE, enumerate([ALICE_512]))
    assert apply(image, [(5, NoOp())]).scram is image.scram


def test_snapshot_round_trip_and_empty_section_left_out() -> None:
    image = apply(EMPTY_IMAGE, enumerate([ALICE_512, BOB_512, ALICE_256]))
    assert decode_snapshot(encode_snapshot(image)) == image
    assert b"scram" not in encode_snapshot(EMPTY_IMAGE)


@pytest.mark.parametrize("mechanism", [0, 3])
def test_unknown_mechanism_code_refused(mechanism: int) -> None:
    with pytest.raises(MetadataRecordError, match="mechanism"):
        UserScramCredential("alice", mechanism, "c2FsdA==", "a", "b", 4096)
