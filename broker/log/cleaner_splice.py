"""Many uncompressed batches rewritten at once: their kept records' bytes under their own
headers, with the new length, max timestamp, record count and CRC. No I/O, no state.

`compaction.splice_batch` does this for one batch (and recompresses); at 100-byte records
a chunk holds thousands of batches that each lose records, and a Python call per batch
(struct packing, bytes joins) costs as much as the whole scan. Here one byte gather builds
every rewritten batch of a chunk, consecutive in one buffer: each batch's original header
bytes, then its kept records' bytes; the changed header fields are patched in as columns,
and only the CRC (crc32c of each batch from its attributes on) is one C call per batch.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from crc32c import crc32c

from broker.log.record_columns import I64, U8
from common.record_batch import (
    ATTRIBUTES_POS,
    CRC_POS,
    HEADER_SIZE,
    LENGTH_POS,
    LOG_OVERHEAD,
    MAX_TIMESTAMP_POS,
    RECORDS_COUNT_POS,
)

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

GATHER_WIDTH = 128  # bytes copied per row by gather_ranges (a 100-byte record: one row)
_COLUMNS = np.arange(GATHER_WIDTH, dtype=np.int16)


class SplicedBatches(NamedTuple):
    """The rewritten batches back to back in `data`; batch k is
    `data[start[k] : start[k + 1]]`."""

    data: U8
    start: I64


def splice_batches(buf: U8, header_at: I64, record_start: I64, record_end: I64,
                   record_batch: I64, count: I64, max_timestamp: I64) -> SplicedBatches:
    """Batches k = 0.. whose header lies at `buf[header_at[k]:]`, each keeping the records
    `buf[record_start[i]:record_end[i]]` with `record_batch[i] == k` (in order, ascending
    k), `count[k]` of them with the greatest timestamp `max_timestamp[k]`. Callers pass
    only uncompressed batches that keep at least one record and no new delete horizon."""
    n = len(header_at)
    lengths = record_end - record_start
    payload = np.bincount(record_batch, weights=lengths, minlength=n).astype(np.int64)
    size = HEADER_SIZE + payload
    start = np.zeros(n + 1, np.int64)
    np.cumsum(size, out=start[1:])
    # pieces in output order: each batch's header, then its records (batch k's header is
    # piece k + the records of the batches before it; record i is piece i + its batch + 1)
    header_piece = np.arange(n, dtype=np.int64)
    header_piece[1:] += np.cumsum(count[:-1])
    record_piece = np.arange(len(record_start), dtype=np.int64) + record_batch + 1
    piece_src = np.empty(n + len(record_start), np.int64)
    piece_len = np.empty(n + len(record_start), np.int64)
    piece_src[header_piece], piece_len[header_piece] = header_at, HEADER_SIZE
    piece_src[record_piece], piece_len[record_piece] = record_start, lengths
    data = gather_ranges(buf, piece_src, piece_len)
    at = start[:-1]
    _put_be(data, at + LENGTH_POS, size - LOG_OVERHEAD, 4)
    _put_be(data, at + MAX_TIMESTAMP_POS, max_timestamp, 8)
    _put_be(data, at + RECORDS_COUNT_POS, count, 4)
    with data.data as view:  # bounded: one C call per batch
        crcs = np.array([crc32c(view[a + ATTRIBUTES_POS : b])
                         for a, b in zip(at.tolist(), start[1:].tolist())], np.int64)
    _put_be(data, at + CRC_POS, crcs, 4)
    return SplicedBatches(data, start)


def gather_ranges(buf: U8, src: I64, length: I64) -> U8:
    """`buf[src[i] : src[i] + length[i]]` for every i, concatenated.

    A byte index per output byte (8 index bytes per byte copied) costs more than the data;
    instead each range's window of GATHER_WIDTH bytes of `buf` is gathered as a row (a row
    copy each) and the rows' used bytes kept with one boolean mask. Ranges longer than a
    row, or windows running past `buf`'s end, take `_gather_pieces`."""
    width = GATHER_WIDTH
    if not len(src):
        return np.empty(0, np.uint8)
    limit = len(buf) - width  # the last window's start
    if int(length.max()) > width or limit < 0:
        return _gather_pieces(buf, src, length)
    windows = np.ndarray(shape=(limit + 1, width), dtype=np.uint8, buffer=buf.data,
                         strides=(1, 1))
    if int(src.max()) <= limit:
        return windows[src][_COLUMNS < length.astype(np.int16)[:, None]]
    # ranges in buf's last bytes: the last window, their bytes `shift` into it
    shift = np.maximum(src - limit, 0).astype(np.int16)
    used = (_COLUMNS >= shift[:, None]) & (_COLUMNS < (shift + length.astype(np.int16))[:, None])
    return windows[src - shift][used]


def _gather_pieces(buf: U8, src: I64, length: I64) -> U8:
    """`gather_ranges` for any ranges: each cut into pieces of at most GATHER_WIDTH
    bytes, gathered as rows; pieces in `buf`'s last bytes copied one by one."""
    width = GATHER_WIDTH
    pieces = (length + width - 1) // width
    first = np.zeros(len(src), np.int64)
    np.cumsum(pieces[:-1], out=first[1:])
    total = int(pieces.sum())
    owner = np.repeat(np.arange(len(src), dtype=np.int64), pieces)
    step = np.arange(total, dtype=np.int64) - first[owner]
    piece_src = src[owner] + step * width
    piece_len = np.minimum(length[owner] - step * width, width)
    rows = np.empty((total, width), np.uint8)
    whole = piece_src <= len(buf) - width  # the window fits in `buf`
    windows = np.ndarray(shape=(max(0, len(buf) - width + 1), width), dtype=np.uint8,
                         buffer=buf.data, strides=(1, 1))
    rows[whole] = windows[piece_src[whole]]
    for i in np.flatnonzero(~whole).tolist():  # bounded: pieces in buf's last bytes
        rows[i, : piece_len[i]] = buf[piece_src[i] : piece_src[i] + piece_len[i]]
    used = _COLUMNS < piece_len.astype(np.int16)[:, None]
    return rows[used]


def _put_be(data: U8, at: I64, values: I64, width: int) -> None:
    """Write `values` big-endian, `width` bytes each, at positions `at` of `data`."""
    v = values.astype(np.uint64)
    for k in range(width):  # bounded: the field's width
        shift = np.uint64(8 * (width - 1 - k))
        data[at + k] = ((v >> shift) & np.uint64(0xFF)).astype(np.uint8)

