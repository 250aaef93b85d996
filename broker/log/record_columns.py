"""The records of many v2 batches scanned at once into numpy columns, and their keys hashed
in bulk: the cleaner's hot path without per-record Python work. No I/O, no state.

`record_scan.scan_batch` walks one batch record by record in Python; at 100-byte records
that caps the cleaner near 30 MB/s. Records inside a batch must be walked in order (each
one's position follows from the previous one's length), but the batches of a chunk are
independent, so the scan runs column-wise: step r decodes record r of every batch that has
one, as a handful of numpy operations over all those batches. A chunk of 16 KiB batches
therefore costs ~records-per-batch steps, whatever the number of batches.

Keys are identified by a 128-bit hash (two 64-bit lanes), as Kafka's SkimpyOffsetMap
identifies them by their 16-byte MD5: the map never holds key bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from common.compression import decompress
from common.errors import CorruptRecordError
from common.limits import MAX_VARLONG_BYTES, SCAN_PADDING
from common.record_batch import (
    COMPRESSION_MASK,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    RecordBatchHeader,
)

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
U8 = npt.NDArray[np.uint8]
BOOL = npt.NDArray[np.bool_]

NARROW = 8  # batches: fewer than this left, the walk goes on one record at a time
# Two lanes of a multiply-xorshift hash (the constants of splitmix64 / murmur3's fmix64),
# each seeded differently; the key length is mixed in so "a" and "a\0" differ.
_LANES = ((np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9)),
          (np.uint64(0x94D049BB133111EB), np.uint64(0xFF51AFD7ED558CCD)))
_FMIX = (np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53))


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """The scanned records of a chunk, batch after batch in offset order.

    `buf` holds the chunk and, after it, the decompressed sections of its compressed batches;
    key and record positions index it. Per batch (in the order given): where its records
    start in the columns (`first`, with `first[-1]` the total) and its records section in
    `buf`. Per record: absolute offset and timestamp, key position and length (-1: null
    key), whether the value is null, and its bytes [start, end) in `buf`.
    """

    buf: U8
    first: I64
    section_start: I64
    section_end: I64
    offset: I64
    timestamp: I64
    key_start: I64
    key_length: I64
    is_tombstone: BOOL
    start: I64
    end: I64
    batch_of_record: I64  # per record, its batch's index in the order given


def scan_chunk(chunk: bytes | bytearray | memoryview,
               batches: Sequence[tuple[int, RecordBatchHeader]],
               chunk_end: int = 0) -> RecordColumns:
    """Scan the batches at the given positions of `chunk` (none a control batch; each
    frame-checked by the caller); CorruptRecordError on any malformed record. `buf` keeps
    at least `chunk_end` bytes of the chunk (its batches not scanned, such as control
    batches after the last scanned one, are read from it too)."""
    n = len(batches)
    starts, ends = np.empty(n, np.int64), np.empty(n, np.int64)
    counts, base_offsets = np.empty(n, np.int64), np.empty(n, np.int64)
    base_ts, fixed_ts = np.empty(n, np.int64), np.empty(n, np.int64)
    extra: list[bytes] = []
    extra_at = len(chunk)  # moved back to data_end below when the chunk is cut there
    with memoryview(chunk) as view:
        for i, (pos, header) in enumerate(batches):  # per batch, not per record
            section_at = pos + HEADER_SIZE
            if not header.attributes & COMPRESSION_MASK:  # uncompressed (no enum made)
                starts[i], ends[i] = section_at, pos + header.size
            else:
                section = decompress(header.compression, bytes(view[section_at : pos + header.size]))
                starts[i], ends[i] = extra_at, extra_at + len(section)
                extra.append(section)
                extra_at += len(section)
            counts[i], base_offsets[i] = header.record_count, header.base_offset
            base_ts[i] = header.base_timestamp
            fixed_ts[i] = (header.max_timestamp
                           if header.attributes & TIMESTAMP_TYPE_MASK else -1)  # LOG_APPEND_TIME
        data_end = max((pos + header.size for pos, header in batches), default=chunk_end)
        data_end = max(data_end, chunk_end)
        if not extra and len(view) - data_end >= SCAN_PADDING:  # the reader padded the chunk
            buf = np.frombuffer(view, dtype=np.uint8)
        else:
            buf = np.frombuffer(b"".join((view[:data_end], *extra, bytes(SCAN_PADDING))),
                                dtype=np.uint8)
            starts[starts >= data_end] -= len(view) - data_end
            ends[ends > data_end] -= len(view) - data_end
    first = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=first[1:])
    batch_of = np.repeat(np.arange(n, dtype=np.int64), counts)
    f = _scan(buf, first, starts, ends, counts, batch_of)
    offset = base_offsets[batch_of] + f.offset_delta
    timestamp = base_ts[batch_of] + f.ts_delta
    if np.any(fixed_ts >= 0):  # LOG_APPEND_TIME batches: the broker's time for every record
        fixed = fixed_ts[batch_of]
        timestamp = np.where(fixed >= 0, fixed, timestamp)
    return RecordColumns(buf, first, starts, ends, offset, timestamp, f.key_start,
                         f.key_length, f.is_tombstone, f.start, f.end, batch_of)


class _Fields(NamedTuple):
    start: I64
    end: I64
    ts_delta: I64
    offset_delta: I64
    key_start: I64
    key_length: I64
    is_tombstone: BOOL


def _scan(buf: U8, first: I64, starts: I64, ends: I64, counts: I64, batch_of: I64) -> _Fields:
    try:
        start, end = _walk(buf, first, starts, counts, batch_of)
        return _decode(buf, first, ends, counts, start, end)
    except IndexError:  # a garbage length sent a position outside the buffer
        raise CorruptRecordError("a record runs past the end of its batch") from None


def _decode(buf: U8, first: I64, ends: I64, counts: I64, start: I64, end: I64) -> _Fields:
    """Every record's fields from where it starts, all records at once, checked.

    The walk made each record's end its start plus its length prefix's size and value, so
    the length is `end - p`: positive lengths make a batch's ends increase, and its last
    end falling exactly on its records section's end keeps every record inside it."""
    p = start + varint_sizes(buf, start)
    if np.any(end <= p):
        raise CorruptRecordError("a record's length is not positive")
    nonempty = counts > 0
    if np.any(end[first[1:][nonempty] - 1] != ends[nonempty]):
        raise CorruptRecordError("a batch's records do not fill its records section")
    ts_delta, p = varints(buf, p + 1)  # past the attributes byte
    offset_delta, p = varints(buf, p)
    key_length, key_start = varints(buf, p)
    p = key_start + np.maximum(key_length, 0)
    if np.any(p >= end) or np.any(key_length < -1):
        raise CorruptRecordError("a record's key or value overruns the record's length")
    # a null value is the varint -1: the byte 0x01
    return _Fields(start, end, ts_delta, offset_delta, key_start, key_length, buf[p] == 1)


def _walk(buf: U8, first: I64, starts: I64, counts: I64, batch_of: I64) -> tuple[I64, I64]:
    """Where each record starts and ends, found by following the length prefixes: step r
    reads the length of record r of every batch that has one. Malformed lengths give
    garbage positions here (never an endless loop: one step per record of the longest
    batch); `_scan` checks every record afterwards."""
    total = int(first[-1])
    start, end = np.empty(total, np.int64), np.empty(total, np.int64)
    if not total:
        return start, end
    # batches with the most records first, so the batches still active at step r are a prefix
    order = np.argsort(-counts, kind="stable")
    sorted_counts = counts[order]
    n = len(order)
    # numpy steps while more than NARROW batches have a record r; the rest one by one
    steps = int(sorted_counts[NARROW]) if n > NARROW else 0
    # step r's ends go to row r of a matrix (a contiguous write, no index per record) when
    # the matrix is about as small as the records' column: batches of like sizes
    rows = np.empty((steps, n), np.int64) if steps * n <= 2 * total else None
    at = first[:-1][order]
    pos = starts[order].copy()
    pairs = _pairs(buf)
    active = n
    for r in range(steps):  # bounded: records of the (NARROW + 1)-th longest batch
        while sorted_counts[active - 1] <= r:
            active -= 1
        p = pos[:active]
        advance = _ADVANCE[pairs[p]]
        if advance.min() <= 0:  # a length prefix of 3 bytes or more (records of 8 KiB and more)
            longer = np.flatnonzero(advance <= 0)
            length, after = varints(buf, p[longer])
            advance = advance.astype(np.int64)  # int16 in the table: big records overflow it
            advance[longer] = after - p[longer] + length
        p += advance  # a view of `pos`: the batches' positions move on in place
        if rows is not None:
            rows[r, :active] = p
        else:
            end[at[:active] + r] = p
    tail = int(np.count_nonzero(sorted_counts > steps))  # too few batches for numpy steps
    if tail:
        _walk_tail(buf, pos[:tail], at[:tail], sorted_counts[:tail], steps, end)
    if rows is not None and steps:
        _unpack_rows(rows, order, counts, first, batch_of, end, whole=not tail)
    start[1:] = end[:-1]
    nonempty = counts > 0
    start[first[:-1][nonempty]] = starts[nonempty]
    return start, end


def _unpack_rows(rows: I64, order: I64, counts: I64, first: I64, batch_of: I64, end: I64,
                 *, whole: bool) -> None:
    """Put the walk's matrix (row r: the end of record r of each batch, longest batch
    first) into `end` in record order; `whole`: the matrix holds every record."""
    steps, n = rows.shape
    by_batch = rows.T  # row j: the ends of the j-th longest batch
    if np.any(order != np.arange(n)):  # back to the batches' own order
        rank = np.empty(n, np.int64)
        rank[order] = np.arange(n, dtype=np.int64)
        by_batch = by_batch[rank]
    taken = np.minimum(counts, steps)
    if np.all(taken == steps):  # every batch has a record at every step
        ends = by_batch.reshape(-1)
    else:
        ends = by_batch[np.arange(steps, dtype=np.int64) < taken[:, None]]
    if whole:
        end[:] = ends
    else:  # the longest batches' later records came from _walk_tail
        end[np.arange(len(end), dtype=np.int64) - first[batch_of] < steps] = ends


def _walk_tail(buf: U8, pos: I64, at: I64, counts: I64, r: int, end: I64) -> None:
    """`_walk` from step r for a few batches, one record at a time: only the length prefix
    is read here (the fields are decoded in bulk after)."""
    data, advances = buf.data, _ADVANCE_LIST
    limit = len(buf) - 2
    for b in range(len(pos)):  # bounded: the few batches left
        p, row, count = int(pos[b]), int(at[b]), int(counts[b])
        ends = []
        for _ in range(r, count):  # bounded: the batch's record count
            if not 0 <= p <= limit:
                raise IndexError(p)  # a garbage length: _scan reports the batch corrupt
            advance = advances[data[p] | data[p + 1] << 8]
            if advance <= 0:
                length, after = varints(buf, np.array([p], np.int64))
                advance = int(after[0] + length[0]) - p
            p += advance
            ends.append(p)
        end[row + r : row + count] = ends


def _pair_tables() -> tuple[I64, I64]:
    """For each little-endian pair of bytes starting a varint, its value and size when it
    is one or two bytes long (size 0 otherwise: decoded in full)."""
    pair = np.arange(1 << 16, dtype=np.int64)
    b0, b1 = pair & 0xFF, pair >> 8
    one = b0 < 0x80
    raw = np.where(one, b0, (b0 & 0x7F) | (b1 & 0x7F) << 7)
    return (raw >> 1) ^ -(raw & 1), np.where(one, 1, np.where(b1 < 0x80, 2, 0))


_VALUE, _SIZE = _pair_tables()
# Both in one int16 per pair (value * 4 + size: a two-byte varint's value fits 14 bits),
# so decoding gathers from one 128 KiB table that stays in cache
_PACKED = (_VALUE << 2 | _SIZE).astype(np.int16)
# bytes from a record's start to the next record's: its length prefix's size plus value
# (0: a longer prefix, decoded in full); at most 2 + 8191, so int16 too
_ADVANCE = np.where(_SIZE > 0, _SIZE + _VALUE, 0).astype(np.int16)
_ADVANCE_LIST: list[int] = _ADVANCE.tolist()
_U1, _U7, _LOW7 = np.uint64(1), np.uint64(7), np.uint64(0x7F)
_U31, _U33 = np.uint64(31), np.uint64(33)


def _raw_varints(buf: U8, pos: I64) -> U64:
    byte = buf[pos].astype(np.uint64)
    value = byte & _LOW7
    after = pos + 1
    more = np.flatnonzero(byte >= 0x80)
    shift = np.uint64(7)
    while more.size:  # bounded: MAX_VARLONG_BYTES
        if shift >= np.uint64(7 * MAX_VARLONG_BYTES):
            raise CorruptRecordError("a varint is longer than 10 bytes")
        byte = buf[after[more]].astype(np.uint64)
        value[more] |= (byte & _LOW7) << shift
        after[more] += 1
        more = more[byte >= 0x80]
        shift += _U7
    return value


def varints(buf: U8, pos: I64) -> tuple[I64, I64]:
    """The zig-zag varints/varlongs at each position of `pos`: (values, positions after).
    `buf` must hold a byte after the last position (SCAN_PADDING)."""
    packed = _PACKED[_pairs(buf)[pos]]
    value, size = (packed >> 2).astype(np.int64), packed & 3
    longer = np.flatnonzero(size == 0)
    if len(longer):  # three bytes or more: continuation bits followed one byte at a time
        at = pos[longer]
        raw = _raw_varints(buf, at)
        value[longer] = ((raw >> _U1) ^ (np.uint64(0) - (raw & _U1))).view(np.int64)
        length = np.full(len(longer), 3, np.int64)
        cont = buf[at + 2] >= 0x80
        for k in range(3, MAX_VARLONG_BYTES):  # bounded: _raw_varints checked the length
            if not cont.any():
                break
            length += cont
            cont = cont & (buf[np.minimum(at + k, len(buf) - 1)] >= 0x80)
        size[longer] = length
    return value, pos + size


def varint_sizes(buf: U8, pos: I64) -> I64:
    """The size in bytes of the varint at each position of `pos` (its value unread)."""
    size = (_PACKED[_pairs(buf)[pos]] & 3).astype(np.int64)
    longer = np.flatnonzero(size == 0)
    if len(longer):  # three bytes or more
        size[longer] = varints(buf, pos[longer])[1] - pos[longer]
    return size


def _pairs(buf: U8) -> npt.NDArray[np.uint16]:
    """An unaligned little-endian 2-byte word at every byte position of `buf`."""
    return np.ndarray(shape=(max(0, len(buf) - 1),), dtype="<u2", buffer=buf.data, strides=(1,))


def _words(buf: U8) -> U64:
    """An unaligned little-endian 8-byte word at every byte position of `buf`."""
    return np.ndarray(shape=(max(0, len(buf) - 7),), dtype="<u8", buffer=buf.data, strides=(1,))


def _word_pairs(buf: U8) -> npt.NDArray[np.uint64]:
    """Two unaligned little-endian 8-byte words (16 bytes) at every byte position of `buf`:
    a key's first two words in one row gather."""
    return np.ndarray(shape=(max(0, len(buf) - 15), 2), dtype="<u8", buffer=buf.data,
                      strides=(1, 8))


def hash_keys(buf: U8, key_start: I64, key_length: I64, seed: int = 0) -> tuple[U64, U64]:
    """Two 64-bit hash lanes of each key `buf[key_start : key_start + key_length]` (a null
    key, length -1, hashes as the empty key: callers drop null keys first). `buf` must
    hold SCAN_PADDING bytes after the last key.

    Steps where every key still has bytes (all of them for keys of one length, the usual
    case) run in place over whole columns; a key's first 16 bytes come from one gather."""
    length = np.maximum(key_length, 0).astype(np.uint64)
    lanes = [length * mult for _, mult in _LANES]
    for lane, (base, _) in zip(lanes, _LANES):
        lane ^= np.uint64(seed) ^ base  # one scalar: the seed and the lane's constant
    if not len(length):
        return lanes[0], lanes[1]
    longest, shortest = int(length.max()), int(length.min())
    words = _words(buf)
    # the first two words of every key: SCAN_PADDING bytes after the last key keep it in `buf`
    head = _word_pairs(buf)[key_start] if shortest > 8 else None
    scratch = np.empty(len(length), np.uint64)
    for j in range(0, longest, 8):  # bounded by the longest key, 8 bytes a step
        if shortest <= j:  # some keys have ended: the keys still going, gathered
            live = np.flatnonzero(length > np.uint64(j))
            word = _masked(words[key_start[live] + j], length[live] - np.uint64(j))
            for k, (_, mult) in enumerate(_LANES):
                h = (lanes[k][live] ^ word) * mult
                lanes[k][live] = h ^ (h >> _U31)
            continue
        word = head[:, j // 8] if head is not None and j < 16 else words[key_start + j]
        if shortest < j + 8:  # some keys end in this word
            word = (word & np.uint64((1 << 8 * (longest - j)) - 1) if shortest == longest
                    else _masked(word, length - np.uint64(j)))
        for k, (_, mult) in enumerate(_LANES):
            lane = lanes[k]
            lane ^= word
            lane *= mult
            np.right_shift(lane, _U31, out=scratch)
            lane ^= scratch
    return _fmix(lanes[0], scratch), _fmix(lanes[1], scratch)


def _masked(word: U64, remaining: U64) -> U64:
    """Each word cut to its key's `remaining` bytes (8 or more: whole)."""
    short = remaining < np.uint64(8)
    bits = np.where(short, remaining, np.uint64(0)) * np.uint64(8)
    return np.where(short, word & ((np.uint64(1) << bits) - np.uint64(1)), word)


def _fmix(h: U64, scratch: U64) -> U64:
    """murmur3's fmix64, in place (`scratch`: an array of h's size)."""
    for mult in _FMIX:
        np.right_shift(h, _U33, out=scratch)
        h ^= scratch
        h *= mult
    np.right_shift(h, _U33, out=scratch)
    h ^= scratch
    return h


def hash_key_bytes(keys: Sequence[bytes], seed: int = 0) -> tuple[U64, U64]:
    """`hash_keys` of whole byte strings (the map's single-key calls and tests)."""
    lengths = np.fromiter((len(k) for k in keys), np.int64, len(keys))
    starts = np.zeros(len(keys), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    buf = np.frombuffer(b"".join((*keys, bytes(SCAN_PADDING))), dtype=np.uint8)
    return hash_keys(buf, starts, lengths, seed)
