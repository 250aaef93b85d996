"""The records section of a Fetch response turned into the source's Arrow columns in bulk.

Pure: bytes in, a RecordBatch and the next fetch position out. What runs per batch in
Python: the header (framing, CRC in C, transaction bookkeeping, decompression). What runs
per record in Python: one step following each record's length prefix (records inside a
batch can only be found in order) — nothing else. Every field is then decoded for all
records at once with numpy, and the key/value columns are gathered by Arrow's `take` from
the batch bytes, so no per-record `bytes` object is ever made.

Kafka's consumer rules kept here (Fetcher/CompletedFetch): records below the fetch
position (the first batch may start before it) are dropped; control batches are never
records; with read_committed, a transactional batch of a producer whose transaction the
response lists as aborted is skipped until that producer's ABORT marker; the position moves
past every batch looked at (`nextOffset`), so gaps from compaction and markers are crossed.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from common.compression import decompress
from common.errors import CorruptRecordError
from common.limits import MAX_VARLONG_BYTES, SCAN_PADDING
from common.protocol.fetch import AbortedTransaction
from common.record_batch import (
    HEADER_SIZE,
    CompressionType,
    RecordBatchHeader,
    TimestampType,
    complete_prefix,
    read_batches,
)
from common.units import US_PER_MS
from spark.arrow_schema import (
    ARROW_HEADERS,
    ARROW_SCHEMA,
    ARROW_SCHEMA_WITH_HEADERS,
    Header,
)

I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]

ABORT_MARKER: Final = 0  # control record key type (COMMIT is 1)
_CONTROL_KEY = struct.Struct(">hh")  # version, type


def _pair_tables() -> tuple[I64, I64]:
    """Value and size of the varint a little-endian byte pair starts, when it is 1 or 2
    bytes long (size 0: longer, decoded byte by byte)."""
    pair = np.arange(1 << 16, dtype=np.int64)
    b0, b1 = pair & 0x7F, (pair >> 8) & 0x7F
    one, two = pair & 0x80 == 0, pair & 0x8000 == 0
    raw = np.where(one, b0, b0 | b1 << 7)
    return (raw >> 1) ^ -(raw & 1), np.where(one, 1, np.where(two, 2, 0))


_PAIR_VALUE, _PAIR_SIZE = _pair_tables()
# bytes from a record's start to the next record's, for a 1- or 2-byte length prefix (0:
# a longer prefix, or a length that cannot be a record's)
_ADVANCE_ARRAY: Final = np.where((_PAIR_SIZE > 0) & (_PAIR_VALUE > 0), _PAIR_SIZE + _PAIR_VALUE, 0)
_ADVANCE: Final[list[int]] = _ADVANCE_ARRAY.tolist()


@dataclass(frozen=True, slots=True)
class FetchedRecords:
    """One response's records in [start, end) as a RecordBatch (None: none), and where the
    next fetch starts (past every batch looked at, at most the range's end)."""

    batch: pa.RecordBatch | None
    next_offset: int


def decode_fetched(records: bytes | memoryview | None, *, topic: str, partition: int, start: int, end: int,
                   read_committed: bool = False, aborted: Sequence[AbortedTransaction] | None = None,
                   include_headers: bool = False) -> FetchedRecords:
    """The records of offsets [start, end) in a partition's fetched `records`."""
    if not records:
        return FetchedRecords(None, start)
    view = memoryview(records)
    batches = read_batches(view[:complete_prefix(view)])
    kept, next_offset = _visible_batches(view, batches, start, end, read_committed, aborted or ())
    next_offset = min(max(next_offset, start), end)
    if not kept:
        return FetchedRecords(None, next_offset)
    sections: list[bytes | memoryview] = []
    for pos, header in kept:  # per batch
        body = view[pos + HEADER_SIZE : pos + header.size]
        sections.append(body if header.compression is CompressionType.NONE else
                        decompress(header.compression, bytes(body)))
    sizes = np.fromiter((len(s) for s in sections), np.int64, len(sections))
    data = b"".join((*sections, bytes(SCAN_PADDING)))
    section_start = np.zeros(len(kept), np.int64)
    np.cumsum(sizes[:-1], out=section_start[1:])
    counts = np.fromiter((h.record_count for _, h in kept), np.int64, len(kept))
    record_starts = _record_starts(data, section_start, sizes, counts)
    buf = np.frombuffer(data, np.uint8)
    fields = _decode_fields(buf, record_starts, counts)
    batch_of = np.repeat(np.arange(len(kept)), counts)
    base_offset = np.fromiter((h.base_offset for _, h in kept), np.int64, len(kept))
    base_ts = np.fromiter((h.base_timestamp for _, h in kept), np.int64, len(kept))
    max_ts = np.fromiter((h.max_timestamp for _, h in kept), np.int64, len(kept))
    log_append = np.fromiter((h.timestamp_type is TimestampType.LOG_APPEND_TIME for _, h in kept), np.bool_,
                             len(kept))
    offset = base_offset[batch_of] + fields.offset_delta
    keep = np.flatnonzero((offset >= start) & (offset < end))
    if not len(keep):
        return FetchedRecords(None, next_offset)
    # LogAppendTime: the broker's time, set once in the batch header, is every record's
    fixed = log_append[batch_of[keep]]
    timestamp = np.where(fixed, max_ts[batch_of[keep]], base_ts[batch_of[keep]] + fields.ts_delta[keep])
    columns = [
        binary_column(buf, fields.key_start[keep], fields.key_length[keep]),
        binary_column(buf, fields.value_start[keep], fields.value_length[keep]),
        constant_string(topic, len(keep)),
        pa.array(np.full(len(keep), partition, np.int32)),
        pa.array(offset[keep]),
        pa.Array.from_buffers(ARROW_SCHEMA.field("timestamp").type, len(keep),
                              [None, pa.py_buffer(np.ascontiguousarray(timestamp * US_PER_MS))]),
        pa.array(fixed.astype(np.int32)),  # Kafka's TimestampType id: 0 CreateTime, 1 LogAppendTime
    ]
    if not include_headers:
        return FetchedRecords(pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA), next_offset)
    headers = headers_column(data, fields.headers_start[keep], fields.end[keep])
    return FetchedRecords(pa.RecordBatch.from_arrays([*columns, headers], schema=ARROW_SCHEMA_WITH_HEADERS),
                          next_offset)


def _visible_batches(view: memoryview, batches: list[tuple[int, RecordBatchHeader]], start: int, end: int,
                     read_committed: bool, aborted: Sequence[AbortedTransaction]
                     ) -> tuple[list[tuple[int, RecordBatchHeader]], int]:
    """The data batches a consumer shows from this response, and the offset after the last
    batch looked at. Batches at or past `end` are left for nobody (the range stops there)."""
    pending = sorted(aborted, key=lambda a: a.first_offset)
    aborted_producers: set[int] = set()
    kept: list[tuple[int, RecordBatchHeader]] = []
    next_offset = start
    for pos, header in batches:  # per batch
        if header.base_offset >= end:
            break
        next_offset = header.next_offset
        if header.next_offset <= start:
            continue
        if read_committed and header.producer_id >= 0:
            while pending and pending[0].first_offset <= header.last_offset:  # bounded: pops one each pass
                aborted_producers.add(pending.pop(0).producer_id)
            if header.is_control and _is_abort_marker(view, pos, header):
                aborted_producers.discard(header.producer_id)
            elif header.is_transactional and header.producer_id in aborted_producers:
                continue
        if header.is_control or header.record_count == 0:
            continue
        kept.append((pos, header))
    return kept, next_offset


def _is_abort_marker(view: memoryview, pos: int, header: RecordBatchHeader) -> bool:
    """The control record's key says ABORT (control batches are never compressed)."""
    data = bytes(view[pos + HEADER_SIZE : pos + header.size]) + bytes(SCAN_PADDING)
    p = _varint_end(data, 0) + 1  # past the length and the attributes byte
    p = _varint_end(data, _varint_end(data, p))  # past timestampDelta and offsetDelta
    key_length, p = _varint(data, p)
    if key_length < _CONTROL_KEY.size:
        raise CorruptRecordError(f"control batch at offset {header.base_offset} has a short key")
    return _CONTROL_KEY.unpack_from(data, p)[1] == ABORT_MARKER


def _record_starts(data: bytes, section_start: I64, sizes: I64, counts: I64) -> I64:
    """Where each record starts, batch after batch (checked to fill each batch exactly)."""
    pairs = np.ndarray((len(data) - 1,), "<u2", data, strides=(1,))
    parts: list[I64] = []
    for first, size, count in zip(section_start.tolist(), sizes.tolist(), counts.tolist(), strict=True):
        p, stop = _gallop(data, pairs, first, first + size, count, parts)
        if p != stop:
            raise CorruptRecordError("a batch's records do not fill its records section")
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


def _gallop(data: bytes, pairs: npt.NDArray[np.uint16], p: int, stop: int, count: int,
            parts: list[I64]) -> tuple[int, int]:
    """Append the starts of `count` records from `p` to `parts`; return where they end.

    Records come in runs of one size (fixed-width keys and values change size only where a
    varint field grows a byte), so the walk guesses that the next records have the current
    one's size and checks every guess at once; a run of odd sizes is walked record by record
    instead (the only per-record Python step)."""
    left, window = count, GALLOP_MIN
    while left > 0:  # bounded: every pass takes at least one record
        step = _step(data, p, stop)
        k = min(left, window, (stop - 1 - p) // step + 1)
        guesses = p + step * np.arange(k, dtype=np.int64)
        wrong = np.flatnonzero(_ADVANCE_ARRAY[pairs[guesses]] != step)
        run = int(wrong[0]) if len(wrong) else k
        if run >= GALLOP_MIN // 4:  # the guesses up to the first wrong one are records of `step` bytes
            parts.append(guesses[:run])
            p, left = p + step * run, left - run
            window = min(window * 2, GALLOP_MAX) if run == k else GALLOP_MIN
            continue
        walked: list[int] = []
        p = _walk(data, p, stop, min(left, WALK_RUN), walked)
        parts.append(np.array(walked, np.int64))
        left -= len(walked)
    return p, stop


GALLOP_MIN: Final = 64
GALLOP_MAX: Final = 1 << 16
WALK_RUN: Final = 256


def _step(data: bytes, p: int, stop: int) -> int:
    """Bytes from the record at `p` to the next one."""
    if p >= stop:
        raise CorruptRecordError("a batch holds fewer records than its header counts")
    step = _ADVANCE[data[p] | data[p + 1] << 8]
    if step <= 0:  # a length prefix of 3+ bytes (records of 8 KiB and more), or garbage
        length, after = _varint(data, p)
        if length <= 0:
            raise CorruptRecordError(f"a record has length {length}")
        step = after - p + length
    return int(step)


def _walk(data: bytes, p: int, stop: int, count: int, starts: list[int]) -> int:
    """Follow `count` length prefixes from `p`, one record at a time."""
    add, advance = starts.append, _ADVANCE
    for _ in range(count):  # bounded: count
        if p >= stop:
            raise CorruptRecordError("a batch holds fewer records than its header counts")
        add(p)
        step = advance[data[p] | data[p + 1] << 8]
        p += step if step > 0 else _step(data, p, stop)
    return p


@dataclass(frozen=True, slots=True)
class _Fields:
    end: I64
    ts_delta: I64
    offset_delta: I64
    key_start: I64
    key_length: I64
    value_start: I64
    value_length: I64
    headers_start: I64


def _decode_fields(buf: U8, starts: I64, counts: I64) -> _Fields:
    """Every record's fields at once (`counts`: records per batch, the walk's order)."""
    length, p = varints(buf, starts)
    end = p + length
    # the record after each one starts where it ends (the walk made sure of the last of each batch)
    following = np.append(starts[1:], -1)
    last_of_batch = np.cumsum(counts) - 1
    following[last_of_batch] = end[last_of_batch]
    if np.any(end != following):
        raise CorruptRecordError("a record's length does not match where the next one starts")
    ts_delta, p = varints(buf, p + 1)  # past the attributes byte
    offset_delta, p = varints(buf, p)
    key_length, key_start = varints(buf, p)
    value_length, value_start = varints(buf, key_start + np.maximum(key_length, 0))
    headers_start = value_start + np.maximum(value_length, 0)
    if np.any(headers_start >= end) or np.any(key_length < -1) or np.any(value_length < -1):
        raise CorruptRecordError("a record's key or value overruns the record's length")
    return _Fields(end, ts_delta, offset_delta, key_start, key_length, value_start, value_length, headers_start)


def varints(buf: U8, pos: I64) -> tuple[I64, I64]:
    """The zig-zag varints at each position: (values, positions after). `buf` ends in SCAN_PADDING.

    One gather of the byte pair at each position answers the 1- and 2-byte varints (all of
    them for records under 8 KiB); the rest are decoded a byte at a time."""
    pairs = np.ndarray((len(buf) - 1,), "<u2", buf.data, strides=(1,))[pos]
    value, size = _PAIR_VALUE[pairs], _PAIR_SIZE[pairs]
    longer = np.flatnonzero(size == 0)
    if len(longer):
        raw = np.zeros(len(longer), np.uint64)
        after = pos[longer].copy()
        live = np.arange(len(longer))
        for k in range(MAX_VARLONG_BYTES):  # bounded: a varint has at most 10 bytes
            byte = buf[np.minimum(pos[longer][live] + k, len(buf) - 1)].astype(np.uint64)
            raw[live] |= (byte & np.uint64(0x7F)) << np.uint64(7 * k)
            after[live] += 1
            live = live[byte >= 0x80]
            if not len(live):
                break
        else:
            raise CorruptRecordError("a varint is longer than 10 bytes")
        value[longer] = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
        size[longer] = after - pos[longer]
    return value, pos + size


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """One zig-zag varint (the rare long length prefix, control keys, headers)."""
    raw, shift = 0, 0
    for k in range(MAX_VARLONG_BYTES):  # bounded
        if pos + k >= len(data):
            break
        byte = data[pos + k]
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos + k + 1
        shift += 7
    raise CorruptRecordError("a varint is longer than 10 bytes or runs past its record")


def _varint_end(data: bytes, pos: int) -> int:
    return _varint(data, pos)[1]


def binary_column(buf: U8, starts: I64, lengths: I64) -> pa.Array:
    """`buf[start : start + length]` per row as a binary array (length -1: null).

    The slices lie in `buf` in order with bytes between them. Arrow reads them as the even
    rows of one binary array over `buf` (offsets start0, end0, start1, end1, ...; the odd
    rows are the bytes in between) and `take` copies the even rows out in C.
    """
    n = len(starts)
    ends = starts + np.maximum(lengths, 0)
    if n > 1 and np.any(starts[1:] < ends[:-1]):
        raise ValueError("binary_column needs slices in buffer order")
    bounds = np.empty(2 * n + 1, np.int64)
    bounds[0:2 * n:2], bounds[1:2 * n:2] = starts, ends
    bounds[2 * n] = ends[-1] if n else 0
    if n and bounds[2 * n] >= 1 << 31:
        raise ValueError("a fetched records section beyond 2 GiB")
    interleaved = pa.Array.from_buffers(pa.binary(), 2 * n, [None, pa.py_buffer(bounds.astype(np.int32)),
                                                             pa.py_buffer(buf)])
    column = interleaved.take(pa.array(2 * np.arange(n, dtype=np.int64)))
    null = lengths < 0
    if not null.any():
        return column
    # a null row took an empty slice; mark it null afterwards (take over a bitmap is slower)
    _, offsets, data = column.buffers()
    return pa.Array.from_buffers(pa.binary(), n, [pa.py_buffer(np.packbits(~null, bitorder="little")), offsets,
                                                  data])


def constant_string(text: str, count: int) -> pa.Array:
    """`text` on every row, built from two buffers (no per-row objects)."""
    encoded = text.encode()
    offsets = np.arange(count + 1, dtype=np.int32) * len(encoded)
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(encoded * count)])


def headers_column(data: bytes, starts: I64, ends: I64) -> pa.Array:
    """The headers of each record (null when it has none, as Spark's Kafka source gives):
    per header Python work, paid only with includeHeaders=true."""
    rows: list[list[dict[str, str | bytes | None]] | None] = []
    for p, stop in zip(starts.tolist(), ends.tolist(), strict=True):  # per record
        count, p = _varint(data, p)
        record: list[Header] = []
        for _ in range(count):  # bounded: the header count, each header moves p forward
            key_length, p = _varint(data, p)
            value_length, q = _varint(data, p + max(key_length, 0))
            if key_length < 0 or q + max(value_length, 0) > stop:
                raise CorruptRecordError("a record header overruns its record")
            key = data[p : p + key_length].decode()
            record.append((key, None if value_length < 0 else data[q : q + value_length]))
            p = q + max(value_length, 0)
        if p != stop:
            raise CorruptRecordError("a record's headers do not fill the rest of the record")
        rows.append([{"key": k, "value": v} for k, v in record] if record else None)
    return pa.array(rows, ARROW_HEADERS)
