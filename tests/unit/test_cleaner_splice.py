"""Batches rewritten in bulk (broker/log/cleaner_splice.py) are byte for byte what the
one-batch splice (`compaction.splice_batch`) writes; ranges are gathered exactly."""

from __future__ import annotations

import numpy as np
import pytest

from broker.log.cleaner_splice import GATHER_WIDTH, gather_ranges, splice_batches
from broker.log.compaction import splice_batch
from broker.log.record_columns import scan_chunk
from common.limits import SCAN_PADDING
from common.record_batch import read_batches
from common.records import Record, build_batch

W = GATHER_WIDTH
BUF = np.frombuffer(bytes(range(256)) * 3, np.uint8)


@pytest.mark.parametrize("ranges", [
    [],
    [(0, 0)],
    [(5, 1), (0, 3)],
    [(10, W), (100, W + 1), (3, 2 * W + 5)],
    [(len(BUF) - 7, 7), (len(BUF) - W - 3, W + 3)],  # ranges ending at the buffer's end
    [(1, 0), (2, 0), (700, 68)],
    # ranges of at most a row, some in the buffer's last row's bytes (shifted windows)
    [(0, 5), (len(BUF) - 7, 7), (len(BUF) - W, W), (len(BUF) - 50, 20), (9, W)],
    [(len(BUF) - 1, 1), (len(BUF) - 1, 0), (len(BUF) - W - 1, W)],
])
def test_gather_ranges(ranges: list[tuple[int, int]]) -> None:
    src = np.array([s for s, _ in ranges], np.int64)
    length = np.array([n for _, n in ranges], np.int64)
    expected = b"".join(BUF[s : s + n].tobytes() for s, n in ranges)
    assert gather_ranges(BUF, src, length).tobytes() == expected


def test_gather_ranges_from_a_buffer_shorter_than_a_row() -> None:
    buf = np.frombuffer(bytes(range(W // 2)), np.uint8)
    src, length = np.array([3, 0, 10], np.int64), np.array([4, 2, W // 2 - 10], np.int64)
    assert gather_ranges(buf, src, length).tobytes() == b"".join(
        buf[s : s + n].tobytes() for s, n in zip(src.tolist(), length.tolist()))


def test_bulk_splice_writes_what_the_one_batch_splice_writes() -> None:
    batches = []
    offset = 0
    for b, size in enumerate([1, 3, 7, 2]):
        records = [Record(offset=offset + i, timestamp=1000 + 7 * i - b, key=b"k%d" % i,
                          value=b"v" * (i * 40)) for i in range(size)]
        batches.append(build_batch(records, base_offset=offset, base_timestamp=900,
                                   producer_id=3 if b == 2 else -1, producer_epoch=0,
                                   base_sequence=0))
        offset += size
    chunk = b"".join(batches) + bytes(SCAN_PADDING)
    headers = read_batches(chunk[: -SCAN_PADDING])
    columns = scan_chunk(chunk, headers)
    keep = np.array([i % 2 == 0 or i == 5 for i in range(len(columns.offset))], np.bool_)
    kept = np.bincount(columns.batch_of_record, weights=keep, minlength=4).astype(np.int64)
    max_ts = np.array([int(columns.timestamp[(columns.batch_of_record == b) & keep].max())
                       for b in range(4)], np.int64)
    spliced = splice_batches(columns.buf, np.array([p for p, _ in headers], np.int64),
                             columns.start[keep], columns.end[keep],
                             columns.batch_of_record[keep], kept, max_ts)
    expected = []
    for b, (pos, header) in enumerate(headers):
        first, last = columns.first[b], columns.first[b + 1]
        payload = b"".join(chunk[columns.start[i] : columns.end[i]]
                           for i in range(first, last) if keep[i])
        expected.append(splice_batch(header, payload, int(kept[b]), int(max_ts[b])))
    assert spliced.data.tobytes() == b"".join(expected)
    assert np.diff(spliced.start).tolist() == [len(e) for e in expected]
