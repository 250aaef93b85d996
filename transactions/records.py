"""`__transaction_state` records in Kafka's binary formats, so Kafka's tools read them.

    key, value = encode_record(metadata)        # one transactional id's state
    metadata = decode_record(key, value)        # None for a tombstone (an expired id)

Kafka's `TransactionLogKey` (version 0: the transactional id) and `TransactionLogValue`
(version 0; version 1, flexible, carries tagged PreviousProducerId, NextProducerId and
ClientTransactionVersion, written here for a transactions v2 client's id only). Each is
prefixed by its int16 version (MessageUtil.toVersionPrefixedBytes). An Empty transaction's
partitions are written as null, as Kafka's TransactionLog.valueToBytes does; decoding reads
both versions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from common.protocol.primitives import ProtocolError, Reader, Writer
from transactions.state import TransactionState

PURE = True

KEY_VERSION: Final = 0
VALUE_VERSION: Final = 0  # what transactions v0/v1 write
FLEXIBLE_VALUE_VERSION: Final = 1
NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
# tags of TransactionLogValue v1
TAG_PREVIOUS_PRODUCER_ID: Final = 0
TAG_NEXT_PRODUCER_ID: Final = 1
TAG_CLIENT_TRANSACTION_VERSION: Final = 2
TV2_CLIENT_VERSION: Final = 2  # transaction.version 2 (KIP-890 part 2)


class RecordFormatError(ValueError):
    """A `__transaction_state` record we cannot read."""


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    topic: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TransactionMetadata:
    """One transactional id's state, as stored (Kafka's TransactionMetadata), plus
    `last_producer_epoch`, which Kafka keeps in memory only: replay derives it (the epoch an
    InitProducerId bumped from, so a client retrying that bump is recognised, KIP-360)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: frozenset[tuple[str, int]]
    last_update_ms: int
    start_ms: int  # -1 until a transaction starts
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0
    last_producer_epoch: int = NO_PRODUCER_EPOCH

    def __post_init__(self) -> None:
        if self.state is TransactionState.EMPTY and self.partitions:
            raise ValueError(f"transactional id {self.transactional_id}: an Empty transaction has no partitions")

    def topic_partitions(self) -> tuple[TopicPartitions, ...]:
        """The partitions grouped by topic, sorted (a stable byte image)."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions):
            by_topic.setdefault(topic, []).append(partition)
        return tuple(TopicPartitions(t, tuple(p)) for t, p in by_topic.items())


def encode_key(transactional_id: str) -> bytes:
    w = Writer()
    w.int16(KEY_VERSION)
    w.string(transactional_id)
    return w.to_bytes()


def decode_key(data: bytes) -> str:
    try:
        r = Reader(data)
        version = r.int16()
        if version != KEY_VERSION:
            raise RecordFormatError(f"unknown __transaction_state key version {version}")
        return r.string()
    except ProtocolError as e:
        raise RecordFormatError(f"truncated __transaction_state key: {e.reason}") from None


def encode_value(m: TransactionMetadata, version: int = VALUE_VERSION) -> bytes:
    flexible = version >= FLEXIBLE_VALUE_VERSION
    w = Writer(flexible=flexible)
    w.int16(version)
    w.int64(m.producer_id)
    w.int16(m.producer_epoch)
    w.int32(m.timeout_ms)
    w.int8(m.state.id)
    groups = None if m.state is TransactionState.EMPTY else m.topic_partitions()
    w.nullable_array(groups, _write_topic)
    w.int64(m.last_update_ms)
    w.int64(m.start_ms)
    if flexible:
        tags: list[tuple[int, bytes]] = []
        if m.previous_producer_id != NO_PRODUCER_ID:
            tags.append((TAG_PREVIOUS_PRODUCER_ID, _int64(m.previous_producer_id)))
        if m.next_producer_id != NO_PRODUCER_ID:
            tags.append((TAG_NEXT_PRODUCER_ID, _int64(m.next_producer_id)))
        if m.client_transaction_version != 0:
            t = Writer()
            t.int16(m.client_transaction_version)
            tags.append((TAG_CLIENT_TRANSACTION_VERSION, t.to_bytes()))
        w.uvarint(len(tags))
        for tag, data in tags:
            w.uvarint(tag)
            w.uvarint(len(data))
            w.raw(data)
    return w.to_bytes()


def _int64(value: int) -> bytes:
    t = Writer()
    t.int64(value)
    return t.to_bytes()


def _write_topic(w: Writer, t: TopicPartitions) -> None:
    w.string(t.topic)
    w.int32_array(t.partitions)
    if w.flexible:
        w.tagged_fields()


def decode_value(transactional_id: str, data: bytes) -> TransactionMetadata:
    try:
        version = Reader(data).int16()
        if version not in (VALUE_VERSION, FLEXIBLE_VALUE_VERSION):
            raise RecordFormatError(f"unknown __transaction_state value version {version}")
        r = Reader(data, 2, flexible=version >= FLEXIBLE_VALUE_VERSION)
        producer_id, epoch, timeout_ms, status = r.int64(), r.int16(), r.int32(), r.int8()
        topics = r.nullable_array(_read_topic, 2)
        last_update_ms, start_ms = r.int64(), r.int64()
        previous, following, client_version = NO_PRODUCER_ID, NO_PRODUCER_ID, 0
        if version >= FLEXIBLE_VALUE_VERSION:
            for tag, raw in r.tagged_field_items():
                if tag == TAG_PREVIOUS_PRODUCER_ID:
                    previous = Reader(raw).int64()
                elif tag == TAG_NEXT_PRODUCER_ID:
                    following = Reader(raw).int64()
                elif tag == TAG_CLIENT_TRANSACTION_VERSION:
                    client_version = Reader(raw).int16()
        state = TransactionState.from_id(status)
    except ProtocolError as e:
        raise RecordFormatError(f"truncated __transaction_state value: {e.reason}") from None
    except ValueError as e:
        if isinstance(e, RecordFormatError):
            raise
        raise RecordFormatError(str(e)) from None
    partitions = frozenset((t.topic, p) for t in topics or () for p in t.partitions)
    return TransactionMetadata(transactional_id, producer_id, epoch, timeout_ms, state, partitions,
                               last_update_ms, start_ms, previous, following, client_version)


def _read_topic(r: Reader) -> TopicPartitions:
    topic, partitions = r.string(), r.int32_array()
    if r.flexible:
        r.skip_tagged_fields()
    return TopicPartitions(topic, partitions)


def encode_record(m: TransactionMetadata) -> tuple[bytes, bytes | None]:
    """The record of `m`; a Dead transactional id is a tombstone (Kafka's expiration)."""
    key = encode_key(m.transactional_id)
    if m.state is TransactionState.DEAD:
        return key, None
    # v1's tagged fields (the next producer id of an overflow, the client's transaction version)
    # are needed from a TV2 client's first write; a v1 client's records stay version 0
    flexible = m.client_transaction_version >= TV2_CLIENT_VERSION
    return key, encode_value(m, FLEXIBLE_VALUE_VERSION if flexible else VALUE_VERSION)


def decode_record(key: bytes, value: bytes | None) -> tuple[str, TransactionMetadata | None]:
    transactional_id = decode_key(key)
    return transactional_id, None if value is None else decode_value(transactional_id, value)
