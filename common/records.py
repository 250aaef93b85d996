"""The individual records inside a v2 batch: decode them, and build batches from them.

For tools and tests only: the broker's append and fetch paths never look at records (see
`common.record_batch`). One record, after the batch's 61-byte header:

    length varint (bytes after this field)   attributes int8
    timestampDelta varlong                   offsetDelta varint
    keyLength varint (-1 = null)             key
    valueLength varint (-1 = null)           value
    headerCount varint, then per header: keyLength varint, key (utf-8),
                                         valueLength varint (-1 = null), value

Varints are zig-zag encoded, seven bits a byte, least significant group first.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from common.compression import compress, decompress
from common.errors import CorruptRecordError
from common.record_batch import (
    CONTROL_MASK,
    CRC_POS,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    CompressionType,
    RecordBatchHeader,
    TimestampType,
    compute_crc,
    parse_header,
)

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

INT8_MIN, INT8_MAX = -(1 << 7), (1 << 7) - 1
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
NULL_LENGTH = -1

# What `build_batch` stamps on records when given no timestamps: a fixed instant
# (2023-11-14T22:13:20Z) rather than a clock, so built batches are reproducible.
DEFAULT_TIMESTAMP = 1_700_000_000_000

Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class Header:
    """One record header: a UTF-8 key and an optional value."""

    key: str
    value: bytes | None

    def __post_init__(self) -> None:
        if not isinstance(self.key, str):
            raise TypeError(f"header key must be str, not {type(self.key).__name__}")
        _check_bytes_or_none("header value", self.value)


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a batch, with its absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    attributes: int = 0

    def __post_init__(self) -> None:
        _check_bytes_or_none("record key", self.key)
        _check_bytes_or_none("record value", self.value)
        if not isinstance(self.headers, tuple):
            raise TypeError("record headers must be a tuple of Header")
        if not INT8_MIN <= self.attributes <= INT8_MAX:
            raise ValueError(f"record attributes {self.attributes} do not fit in an int8")


def _check_bytes_or_none(what: str, value: object) -> None:
    if value is not None and not isinstance(value, bytes):
        raise TypeError(f"{what} must be bytes or None, not {type(value).__name__}")


# --- varints ---------------------------------------------------------------------------


def zigzag(value: int) -> int:
    """Map a signed integer to an unsigned one: 0, -1, 1, -2 ... -> 0, 1, 2, 3 ..."""
    return value << 1 if value >= 0 else (-value << 1) - 1


def unzigzag(value: int) -> int:
    """The inverse of `zigzag`."""
    return (value >> 1) ^ -(value & 1)


def encode_varint(value: int) -> bytes:
    """Zig-zag varint of an int32 (Kafka's ByteUtils.writeVarint)."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint {value} does not fit in an int32")
    return _encode_unsigned(zigzag(value))


def encode_varlong(value: int) -> bytes:
    """Zig-zag varlong of an int64 (Kafka's ByteUtils.writeVarlong)."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong {value} does not fit in an int64")
    return _encode_unsigned(zigzag(value))


def _encode_unsigned(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_varint(buf: Buffer, pos: int = 0, end: int | None = None) -> tuple[int, int]:
    """Read a zig-zag varint at `pos`; return (value, position after it)."""
    return _decode(buf, pos, len(buf) if end is None else end, 32, "varint")


def decode_varlong(buf: Buffer, pos: int = 0, end: int | None = None) -> tuple[int, int]:
    """Read a zig-zag varlong at `pos`; return (value, position after it)."""
    return _decode(buf, pos, len(buf) if end is None else end, 64, "varlong")


def _decode(buf: Buffer, pos: int, end: int, bits: int, what: str) -> tuple[int, int]:
    start = pos
    result = 0
    shift = 0
    # Bounded by the widest encoding: 5 bytes for 32 bits, 10 for 64.
    while shift < bits:
        if pos >= end:
            raise CorruptRecordError(f"{what} at byte {start} runs past the end of its buffer")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            # Java truncates the extra high bits of the last group; corrupt data should
            # not decode to a plausible number, so reject them.
            if result >> bits:
                raise CorruptRecordError(f"{what} at byte {start} overflows {bits} bits")
            return unzigzag(result), pos
        shift += 7
    raise CorruptRecordError(f"{what} at byte {start} is longer than {pos - start} bytes")


# --- decoding --------------------------------------------------------------------------


def decode_records(buf: Buffer, pos: int, header: RecordBatchHeader) -> list[Record]:
    """The records of the batch at `pos` (its parsed `header`), decompressed and with
    absolute offsets and timestamps. Any malformation raises CorruptRecordError."""
    if pos < 0 or header.batch_length < MIN_BATCH_LENGTH or pos + header.size > len(buf):
        raise CorruptRecordError(
            f"batch at offset {header.base_offset} does not fit in the buffer at position {pos}"
        )
    if header.record_count < 0:
        raise CorruptRecordError(
            f"batch at offset {header.base_offset} has negative record count "
            f"{header.record_count}"
        )
    codec = header.compression  # raises UnsupportedCompressionError for codecs 5-7
    with memoryview(buf) as view:
        section = bytes(view[pos + HEADER_SIZE : pos + header.size])
    if codec is not CompressionType.NONE:
        section = decompress(codec, section)
    records: list[Record] = []
    cursor = 0
    end = len(section)
    for index in range(header.record_count):
        if cursor >= end:
            raise CorruptRecordError(
                f"batch at offset {header.base_offset} claims {header.record_count} records "
                f"but its records section holds only {index}"
            )
        try:
            record, cursor = _decode_record(section, cursor, end, header)
        except CorruptRecordError as exc:
            raise CorruptRecordError(
                f"batch at offset {header.base_offset}, record {index}: {exc}"
            ) from None
        records.append(record)
    if cursor != end:
        raise CorruptRecordError(
            f"batch at offset {header.base_offset} has {end - cursor} trailing bytes after "
            f"its {header.record_count} records"
        )
    return records


def _decode_record(
    buf: bytes, pos: int, end: int, header: RecordBatchHeader
) -> tuple[Record, int]:
    length, pos = decode_varint(buf, pos, end)
    if length < 0 or length > end - pos:
        raise CorruptRecordError(
            f"record length {length} at byte {pos} does not fit the {end - pos} bytes left"
        )
    record_end = pos + length
    if pos >= record_end:
        raise CorruptRecordError(f"record at byte {pos} is empty")
    attributes = buf[pos] - 256 if buf[pos] > INT8_MAX else buf[pos]
    timestamp_delta, pos = decode_varlong(buf, pos + 1, record_end)
    offset_delta, pos = decode_varint(buf, pos, record_end)
    key, pos = _read_bytes(buf, pos, record_end, "key")
    value, pos = _read_bytes(buf, pos, record_end, "value")
    header_count, pos = decode_varint(buf, pos, record_end)
    if header_count < 0:
        raise CorruptRecordError(f"negative header count {header_count}")
    headers: list[Header] = []
    # Bounded: each header consumes at least two bytes of the record or raises.
    for _ in range(header_count):
        header_key, pos = _read_bytes(buf, pos, record_end, "header key")
        if header_key is None:
            raise CorruptRecordError(f"null header key before byte {pos}")
        try:
            key_text = header_key.decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptRecordError(f"header key before byte {pos} is not UTF-8") from None
        header_value, pos = _read_bytes(buf, pos, record_end, "header value")
        headers.append(Header(key_text, header_value))
    if pos != record_end:
        raise CorruptRecordError(
            f"record ends at byte {pos} but its length says byte {record_end}"
        )
    if header.timestamp_type is TimestampType.LOG_APPEND_TIME:
        timestamp = header.max_timestamp  # as Kafka's consumers report it
    else:
        timestamp = header.base_timestamp + timestamp_delta
    record = Record(
        offset=header.base_offset + offset_delta,
        timestamp=timestamp,
        key=key,
        value=value,
        headers=tuple(headers),
        attributes=attributes,
    )
    return record, pos


def _read_bytes(buf: bytes, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    length, pos = decode_varint(buf, pos, end)
    if length == NULL_LENGTH:
        return None, pos
    if length < 0 or length > end - pos:
        raise CorruptRecordError(
            f"{what} length {length} at byte {pos} does not fit the {end - pos} bytes left "
            "in the record"
        )
    return buf[pos : pos + length], pos + length


# --- building --------------------------------------------------------------------------

RecordInput = tuple[bytes | None, bytes | None] | Record
HeaderInput = Header | tuple[str, bytes | None]

# The batch header as `record_batch` lays it out (see its module docstring).
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
_UINT32 = struct.Struct(">I")
assert _BATCH_HEADER.size == HEADER_SIZE


def build_batch(
    records: Sequence[RecordInput],
    *,
    base_offset: int = 0,
    base_timestamp: int | None = None,
    timestamps: Sequence[int] | None = None,
    headers: Sequence[Iterable[HeaderInput] | None] | None = None,
    compression: CompressionType = CompressionType.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes:
    """A complete, CRC-signed v2 batch holding `records`: (key, value) pairs or Records.

    A pair takes the next offset (base_offset, +1, ...), timestamps[i] (else base_timestamp,
    else DEFAULT_TIMESTAMP) and headers[i]; a Record keeps its own offset, timestamp and
    headers. base_timestamp defaults to the first record's, as Kafka's producer does.
    """
    normal = _normalize(records, base_offset, base_timestamp, timestamps, headers)
    if base_timestamp is None:
        base_timestamp = normal[0].timestamp if normal else DEFAULT_TIMESTAMP
    section = b"".join(_encode_record(r, base_offset, base_timestamp) for r in normal)
    section = compress(compression, section)
    attributes = int(compression) | (
        TIMESTAMP_TYPE_MASK if timestamp_type == TimestampType.LOG_APPEND_TIME else 0
    )
    attributes |= TRANSACTIONAL_MASK if is_transactional else 0
    attributes |= CONTROL_MASK if is_control else 0
    fields = (
        base_offset,
        HEADER_SIZE - LOG_OVERHEAD + len(section),
        partition_leader_epoch,
        MAGIC_V2,
        0,  # crc, signed below once the bytes it covers exist
        attributes,
        normal[-1].offset - base_offset if normal else -1,
        base_timestamp,
        max(r.timestamp for r in normal) if normal else base_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(normal),
    )
    try:
        buf = bytearray(_BATCH_HEADER.pack(*fields) + section)
    except struct.error as exc:
        raise ValueError(f"batch field out of range: {exc}") from None
    header = parse_header(buf)
    _UINT32.pack_into(buf, CRC_POS, compute_crc(buf, 0, header))
    return bytes(buf)


def _normalize(
    records: Sequence[RecordInput],
    base_offset: int,
    base_timestamp: int | None,
    timestamps: Sequence[int] | None,
    headers: Sequence[Iterable[HeaderInput] | None] | None,
) -> list[Record]:
    for name, given in (("timestamps", timestamps), ("headers", headers)):
        if given is not None and len(given) != len(records):
            raise ValueError(f"{len(given)} {name} for {len(records)} records")
    default_timestamp = DEFAULT_TIMESTAMP if base_timestamp is None else base_timestamp
    normal: list[Record] = []
    next_offset = base_offset
    for index, item in enumerate(records):
        if isinstance(item, Record):
            if item.offset < next_offset:
                raise ValueError(
                    f"record offset {item.offset} is below {next_offset}: offsets within a "
                    "batch must increase from base_offset"
                )
            record = item
        else:
            key, value = item
            record = Record(
                offset=next_offset,
                timestamp=default_timestamp if timestamps is None else timestamps[index],
                key=key,
                value=value,
                headers=_headers(headers[index] if headers is not None else None),
            )
        normal.append(record)
        next_offset = record.offset + 1
    return normal


def _headers(given: Iterable[HeaderInput] | None) -> tuple[Header, ...]:
    if given is None:
        return ()
    return tuple(h if isinstance(h, Header) else Header(*h) for h in given)


def _encode_record(record: Record, base_offset: int, base_timestamp: int) -> bytes:
    body = bytearray()
    body.append(record.attributes & 0xFF)
    body += encode_varlong(record.timestamp - base_timestamp)
    body += encode_varint(record.offset - base_offset)
    _write_bytes(body, record.key)
    _write_bytes(body, record.value)
    body += encode_varint(len(record.headers))
    for header in record.headers:
        _write_bytes(body, header.key.encode("utf-8"))
        _write_bytes(body, header.value)
    return encode_varint(len(body)) + body


def _write_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out += encode_varint(NULL_LENGTH)
    else:
        out += encode_varint(len(value))
        out += value
