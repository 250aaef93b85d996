"""The cleaner's read-buffer pool and chunk framing (broker/log/cleaner_io.py)."""

from __future__ import annotations

from broker.log.cleaner_io import BufferPool, whole_batches_length
from common.records import Record, build_batch


def test_buffers_given_back_are_reused_smallest_fitting_first() -> None:
    pool = BufferPool(max_bytes=1000, min_buffer_bytes=100)
    small, big = pool.take(10), pool.take(300)
    assert small.nbytes == 100 and big.nbytes == 300  # at least min_buffer_bytes
    pool.give_back([small, big])
    assert pool.take(50) is small
    assert pool.take(50) is big  # the only one left that fits
    assert pool.take(50) is not small  # all handed out: a fresh one
    assert pool.idle_bytes == 0


def test_the_pool_keeps_at_most_max_bytes_idle() -> None:
    pool = BufferPool(max_bytes=500, min_buffer_bytes=200)
    buffers = [pool.take(200) for _ in range(4)]
    pool.give_back(buffers)
    assert pool.idle_bytes == 400
    assert pool.take(201).nbytes == 201  # none idle fits: fresh


def test_whole_batches_length_stops_at_a_cut_or_a_bad_length() -> None:
    batches = [build_batch([Record(offset=i, timestamp=0, key=b"k", value=b"v" * 50)],
                           base_offset=i) for i in range(3)]
    data = b"".join(batches)
    assert whole_batches_length(memoryview(data)) == len(data)
    assert whole_batches_length(memoryview(data[:-1])) == len(data) - len(batches[-1])
    bad = bytearray(data)
    bad[len(batches[0]) + 8 : len(batches[0]) + 12] = (-12).to_bytes(4, "big", signed=True)
    assert whole_batches_length(memoryview(bytes(bad))) == len(batches[0])
