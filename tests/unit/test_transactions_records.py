"""transactions/records.py: `__transaction_state` keys and values against bytes laid out by
hand from Kafka's TransactionLogKey.json / TransactionLogValue.json (a version-prefixed key
and value, v0 classic, v1 flexible with tagged fields), round trips, and bad bytes."""

from __future__ import annotations

import struct

import pytest

from transactions.image import TransactionsImage
from transactions.records import (
    RecordFormatError,
    TransactionMetadata,
    decode_key,
    decode_record,
    decode_value,
    encode_key,
    encode_record,
    encode_value,
)
from transactions.state import TransactionState

S = TransactionState


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def string(v: str) -> bytes:
    return i16(len(v)) + v.encode()


ONGOING = TransactionMetadata("tx-1", 1000, 3, 60_000, S.ONGOING, frozenset({("b", 0), ("a", 2), ("a", 1)}),
                              1_700_000_000_500, 1_700_000_000_000)
ONGOING_V0 = (i16(0) + i64(1000) + i16(3) + i32(60_000) + b"\x01"
              + i32(2) + string("a") + i32(2) + i32(1) + i32(2) + string("b") + i32(1) + i32(0)
              + i64(1_700_000_000_500) + i64(1_700_000_000_000))
EMPTY = TransactionMetadata("tx-1", 1000, 0, 60_000, S.EMPTY, frozenset(), 5, -1)
EMPTY_V0 = i16(0) + i64(1000) + i16(0) + i32(60_000) + b"\x00" + i32(-1) + i64(5) + i64(-1)  # null partitions
TAGGED = TransactionMetadata("t", 7, 1, 100, S.COMPLETE_COMMIT, frozenset(), 9, 8, previous_producer_id=6,
                             next_producer_id=-1, client_transaction_version=2)
TAGGED_V1 = (i16(1) + i64(7) + i16(1) + i32(100) + b"\x04" + b"\x01"  # compact array of 0 topics
             + i64(9) + i64(8) + b"\x02" + b"\x00\x08" + i64(6) + b"\x02\x02" + i16(2))

VALUES = [
    pytest.param(ONGOING, 0, ONGOING_V0, id="ongoing-v0"),
    pytest.param(EMPTY, 0, EMPTY_V0, id="empty-v0-null-partitions"),
    pytest.param(TAGGED, 1, TAGGED_V1, id="complete-v1-tagged"),
]


def test_key_is_version_0_and_the_id() -> None:
    assert encode_key("tx-1") == i16(0) + string("tx-1")
    assert decode_key(i16(0) + string("tx-1")) == "tx-1"


@pytest.mark.parametrize(("metadata", "version", "golden"), VALUES)
def test_value_bytes(metadata: TransactionMetadata, version: int, golden: bytes) -> None:
    assert encode_value(metadata, version) == golden
    assert decode_value(metadata.transactional_id, golden) == metadata
    assert decode_value(metadata.transactional_id, golden + b"trailing") == metadata


@pytest.mark.parametrize(("metadata", "version", "golden"), VALUES)
def test_every_truncation_is_a_format_error(metadata: TransactionMetadata, version: int, golden: bytes) -> None:
    for cut in range(len(golden)):
        with pytest.raises(RecordFormatError):
            decode_value(metadata.transactional_id, golden[:cut])


@pytest.mark.parametrize("bad", [i16(2) + ONGOING_V0[2:], ONGOING_V0[:16] + b"\x09" + ONGOING_V0[17:]],
                         ids=["unknown-version", "unknown-state"])
def test_bad_values(bad: bytes) -> None:
    with pytest.raises(RecordFormatError):
        decode_value("tx", bad)


def test_bad_key() -> None:
    with pytest.raises(RecordFormatError, match="key version 1"):
        decode_key(i16(1) + string("x"))
    with pytest.raises(RecordFormatError):
        decode_key(b"\x00")


def test_dead_is_a_tombstone_and_replay_removes_the_id() -> None:
    key, value = encode_record(ONGOING)
    image = TransactionsImage.EMPTY.replay(key, value)
    assert image.get("tx-1") == ONGOING
    dead_key, dead_value = encode_record(TransactionMetadata("tx-1", 1000, 3, 60_000, S.DEAD, frozenset(), 1, -1))
    assert (dead_key, dead_value) == (key, None)
    assert decode_record(dead_key, dead_value) == ("tx-1", None)
    assert image.replay(dead_key, dead_value).get("tx-1") is None


def test_an_empty_transaction_has_no_partitions() -> None:
    with pytest.raises(ValueError, match="Empty transaction has no partitions"):
        TransactionMetadata("tx", 1, 0, 1, S.EMPTY, frozenset({("a", 0)}), 0, -1)
