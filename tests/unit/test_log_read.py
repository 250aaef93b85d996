"""broker/log/log_read.py: the slice a fetch sends, as a table over a real log of three segments
with ten 3-record batches each (Kafka's rules: from the batch holding the offset, below
max_offset, partial last batch allowed, the whole first batch with min_one_batch), and what a
Fetch sends of it: `whole_batches`, no partial batch after a whole one."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.log.log_read import WHOLE_BATCHES_SCANNED, read_slice, whole_batches
from broker.log.partition_log import PartitionLog
from common.record_batch import iter_batches
from common.log_config import LogConfig
from tests.log_helpers import batch, open_log

BATCHES = 30
PER_BATCH = 3


@pytest.fixture
def log(tmp_path: Path) -> Iterator[PartitionLog]:
    opened = open_log(tmp_path, LogConfig(index_interval_bytes=100))
    for i in range(BATCHES):
        if i and i % 10 == 0:
            opened.roll(0)
        opened.append(batch(PER_BATCH, tag=f"b{i:02d}"), now_ms=0)
    try:
        yield opened
    finally:
        opened.close()


def read(log: PartitionLog, offset: int, max_bytes: int, *, max_offset: int | None = None,
         min_one_batch: bool = True, as_fetched: bool = False) -> tuple[list[int], int]:
    """(base offsets of the whole batches in the slice, bytes of a partial batch at its end);
    `as_fetched`: of the slice a Fetch sends."""
    segments = log.segments
    found = read_slice(segments, [s.base_offset for s in segments], offset, max_bytes,
                       log_end_offset=log.log_end_offset, max_offset=max_offset, min_one_batch=min_one_batch)
    data = (whole_batches(found) if as_fetched else found).read_bytes()
    whole = [(position, header) for position, header in iter_batches(data, allow_partial_tail=True)]
    end = whole[-1][0] + whole[-1][1].size if whole else 0
    return [h.base_offset for _, h in whole], len(data) - end


def size(log: PartitionLog) -> int:
    return log.segments[0].size // 10  # every batch has the same size


@pytest.mark.parametrize(("offset", "batches", "max_offset", "expected"), [
    pytest.param(0, 2, None, ([0, 3], 0), id="from-the-start"),
    pytest.param(4, 2, None, ([3, 6], 0), id="from-the-batch-holding-the-offset"),
    pytest.param(27, 10, None, ([27], 0), id="stops-at-the-segment-end"),
    pytest.param(29, 10, None, ([27], 0), id="offset-in-the-last-batch-of-a-segment"),
    pytest.param(30, 2, None, ([30, 33], 0), id="next-segment"),
    pytest.param(3, 10, 9, ([3, 6], 0), id="never-at-or-past-max-offset"),
    pytest.param(9, 10, 9, ([], 0), id="nothing-at-max-offset"),
    pytest.param(90, 10, None, ([], 0), id="nothing-at-the-log-end"),
])
def test_read_slice(log: PartitionLog, offset: int, batches: int, max_offset: int | None,
                    expected: tuple[list[int], int]) -> None:
    assert read(log, offset, batches * size(log), max_offset=max_offset) == expected


def test_a_slice_may_end_inside_a_batch(log: PartitionLog) -> None:
    assert read(log, 0, size(log) + 7) == ([0], 7)


def test_min_one_batch_returns_the_whole_first_batch(log: PartitionLog) -> None:
    assert read(log, 0, 5) == ([0], 0)
    assert read(log, 0, 5, min_one_batch=False) == ([], 5)


@pytest.mark.parametrize(("offset", "max_bytes", "min_one_batch", "expected"), [
    pytest.param(0, lambda one: one + 7, True, ([0], 0), id="partial-second-batch-dropped"),
    pytest.param(4, lambda one: 3 * one + 1, True, ([3, 6, 9], 0), id="from-the-batch-holding-the-offset"),
    pytest.param(0, lambda one: 2 * one, True, ([0, 3], 0), id="ends-on-a-boundary-unchanged"),
    pytest.param(0, lambda one: 5, True, ([0], 0), id="min-one-batch-whole"),
    pytest.param(0, lambda one: 5, False, ([], 5), id="no-whole-batch-keeps-the-partial-one"),
    pytest.param(21, lambda one: 10 * one, True, ([21, 24, 27], 0), id="segment-end"),
    pytest.param(0, lambda one: WHOLE_BATCHES_SCANNED * one + 7, True,
                 (list(range(0, 3 * WHOLE_BATCHES_SCANNED, 3)), 7), id="boundary-past-the-scan-bound-kept-as-kafka"),
    pytest.param(0, lambda one: (WHOLE_BATCHES_SCANNED - 1) * one + 7, True,
                 (list(range(0, 3 * (WHOLE_BATCHES_SCANNED - 1), 3)), 0), id="last-boundary-within-the-scan-bound"),
])
def test_whole_batches(log: PartitionLog, offset: int, max_bytes: Callable[[int], int], min_one_batch: bool,
                       expected: tuple[list[int], int]) -> None:
    assert read(log, offset, max_bytes(size(log)), min_one_batch=min_one_batch, as_fetched=True) == expected


def test_whole_batches_does_not_read_the_first_batchs_length_again(log: PartitionLog,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The segment's read parsed the first batch's header (translate_offset): its size rides on
    the slice, and a consumer's Fetch preads one length prefix fewer (finding of session 12)."""
    one = size(log)
    segments = log.segments
    found = read_slice(segments, [s.base_offset for s in segments], 0, 3 * one + 7,
                       log_end_offset=log.log_end_offset, max_offset=None, min_one_batch=True)
    preads: list[int] = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, at: preads.append(at) or real(fd, n, at))
    trimmed = whole_batches(found)
    assert (trimmed.position, trimmed.length) == (0, 3 * one)
    assert preads == [one, 2 * one, 3 * one]  # batches 1, 2 and 3: not batch 0's prefix again


def fetch_walk(log: PartitionLog, offset: int, max_bytes: int) -> tuple[int, int, int]:
    """One Fetch's read as the handler does it: read_slice then whole_batches; (position,
    length, the offset after the slice's last whole batch)."""
    segments = log.segments
    sent = whole_batches(read_slice(segments, [s.base_offset for s in segments], offset, max_bytes,
                                    log_end_offset=log.log_end_offset, max_offset=None, min_one_batch=True))
    batches = list(iter_batches(sent.read_bytes()))
    return sent.position, sent.length, batches[-1][1].next_offset


def test_a_consumer_s_next_fetch_finds_its_batch_without_a_read(log: PartitionLog,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A Fetch's slice stops before a batch that whole_batches read the header of: the segment
    notes it, and the consumer's next fetch, at that batch's base offset, reads no header
    (the offset index lands on the batch before: two header reads). A truncation forgets it."""
    one = size(log)
    assert fetch_walk(log, 0, 2 * one + 7) == (0, 2 * one, 6)
    preads: list[int] = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, at: preads.append(at) or real(fd, n, at))
    segments = log.segments
    found = read_slice(segments, [s.base_offset for s in segments], 6, 2 * one + 7,
                       log_end_offset=log.log_end_offset, max_offset=None, min_one_batch=True)
    assert (found.position, preads) == (2 * one, [])
    monkeypatch.setattr(os, "pread", real)
    assert fetch_walk(log, 6, 2 * one + 7) == (2 * one, 2 * one, 12)  # notes batch 4 (offset 12)
    log.truncate_to(12)  # batch 4 goes; a batch of another size takes its place, one more after it
    log.append(batch(5, tag="new"), now_ms=0)
    log.append(batch(PER_BATCH, tag="after"), now_ms=0)
    assert fetch_walk(log, 12, len(batch(5, tag="new")) + 7) == (4 * one, len(batch(5, tag="new")), 17)
