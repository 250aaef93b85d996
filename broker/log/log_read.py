"""A partition log's read (Kafka's LocalLog.read): the file slice a Fetch sends, found from a
fetch offset by the segments' base offsets and one segment's sparse offset index.

    data = read_slice(segments, bases, offset, max_bytes, log_end_offset=leo, max_offset=hw,
                      min_one_batch=True)

No bytes are read here beyond a batch header or two: the slice names (fd, position, length)
and the network layer sends it from the file; the slice holds the segment's file handle, so
the descriptor stays open until it is sent. Kafka's rules: the slice starts at the batch
holding `offset`, stops below `max_offset` (the high watermark for consumers), may end inside
a batch (clients drop the partial one), and with `min_one_batch` holds at least the whole
first batch even when that is larger than `max_bytes`, so that a consumer always progresses.

A Fetch sends `whole_batches(data)`: a slice cut by `max_bytes` inside a batch, with a whole
batch before it, ends at that batch's start instead. Kafka sends the partial batch, which the
client drops and fetches again: with librdkafka's 1 MiB per partition and the bulk bench's
~0.8 MB batches that was a fifth of every response (bench/produce_consume.py's
'sent/payload' 1.39-1.48), sent and parsed for nothing. A slice with no whole batch (a
partition's budget smaller than its next batch) still ends in the partial one, as Kafka's.
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_right
from collections.abc import Sequence
from typing import Final

from broker.log.segment import NO_FD, FileSlice, LogSegment
from common.errors import KafkaError
from common.record_batch import HEADER_SIZE, LENGTH_POS, LOG_OVERHEAD, MIN_BATCH_LENGTH, parse_header
from common.slotted import instance_builder

_MARKERS_SCANNED_BYTES = 16 * HEADER_SIZE  # a segment tail this small may be only markers
# Batch length prefixes `whole_batches` reads (a 12-byte pread each, ~1 us) looking for the last
# batch boundary of a slice: past it the partial tail it would save is at most 1/8 of the
# slice, less than the reads cost, and the slice is sent as Kafka's (small batches: a
# Java producer's 16 KiB default leaves at most 16 KiB of a 1 MiB fetch).
WHOLE_BATCHES_SCANNED: Final = 8
_BATCH_LENGTH: Final = struct.Struct(">i")  # at LENGTH_POS: the batch's bytes after its LOG_OVERHEAD
_new_slice: Final = instance_builder(FileSlice, tuple(FileSlice.__dataclass_fields__))


def read_slice(segments: Sequence[LogSegment], bases: Sequence[int], offset: int, max_bytes: int, *,
               log_end_offset: int, max_offset: int | None, min_one_batch: bool) -> FileSlice:
    """The slice from the batch holding `offset` (the caller checked the log's range), below
    `max_offset` (None: the log end); empty at the end."""
    limit = log_end_offset if max_offset is None else min(max_offset, log_end_offset)
    i = bisect_right(bases, offset) - 1
    while 0 <= i < len(segments) and offset < limit:  # bounded by the segment count
        segment = segments[i]
        segment_end = bases[i + 1] if i + 1 < len(bases) else log_end_offset
        max_position = None
        if limit < segment_end:
            found = segment.translate_offset(limit)
            max_position = found[0] if found else None
        data = segment.read(offset, max_bytes, max_position=max_position, min_one_batch=min_one_batch)
        if data is not None and not (i + 1 < len(segments) and _only_offset_markers(segment, data)):
            return data
        i += 1
    # empty: no descriptor (an idle partition's evicted file is not reopened to send nothing);
    # built from its fields (a parked follower's every read of its partition ends here)
    return _new_slice((NO_FD, segments[-1].size, 0, None, 0))


def _only_offset_markers(segment: LogSegment, data: FileSlice) -> bool:
    """Whether `data` is the tail of an inactive segment holding only the empty batches
    the cleaner keeps to mark a cleaned segment's last offset. Kafka's cleaner drops such
    batches, so a Kafka consumer never gets a fetch of nothing but them (librdkafka reports
    one as MSG_SIZE_TOO_LARGE); the read moves on to the next segment instead. Empty
    batches of producers (kept for their producer state) are served, as Kafka does."""
    if data.position + data.length != segment.size or data.length > _MARKERS_SCANNED_BYTES:
        return False
    return all(h.record_count == 0 and h.producer_id < 0
               for _, h in segment.headers_from(data.position))


def _note_next_batch(segment: LogSegment, position: int, head: bytes) -> None:
    try:
        header = parse_header(head, require_body=False)
    except KafkaError:  # not a batch header (a short read at the file's end): nothing to note
        return
    segment.note_next_batch(position, header)


def whole_batches(data: FileSlice) -> FileSlice:
    """`data` less a partial batch at its end when a whole batch comes before it (and the
    boundary is within WHOLE_BATCHES_SCANNED batches of its start); else `data` itself.

    Reads each batch's header bytes but parses only its length prefix (LogSegment.headers_from
    parses the whole header: three times the instructions, for nothing used here), and not the
    first batch's when the read that made the slice knew its size (`first_batch_size`: it
    parsed its header); anything unexpected (a length out of range, a short read) leaves `data`
    as Kafka would send it. The batch the slice now stops before is the one the consumer asks
    for next: its header is parsed and noted in the segment (`LogSegment.note_next_batch`), so
    that fetch finds it with no read."""
    segment = data.segment
    end = data.position + data.length
    if segment is None or not data.length or end >= segment.size:  # a file's end is a batch boundary
        return data
    position = kept = data.position
    scans = WHOLE_BATCHES_SCANNED
    if data.first_batch_size:
        position += data.first_batch_size
        if position >= end:  # the first batch is whole only at the end, and nothing is kept before it
            return data
        kept, scans = position, scans - 1
    handle = segment.file()  # held (the descriptor open) across the preads
    for _ in range(scans):  # bounded: each pass moves one batch on
        head = os.pread(handle.fd, HEADER_SIZE, position)  # one syscall whatever its size
        if len(head) < LOG_OVERHEAD:
            return data
        length = _BATCH_LENGTH.unpack_from(head, LENGTH_POS)[0]
        if length < MIN_BATCH_LENGTH:
            return data
        start, position = position, position + LOG_OVERHEAD + length
        if position > end:
            _note_next_batch(segment, start, head)
            break
        if position == end:
            return data
        kept = position
    else:
        return data  # the boundary is further on: sent as Kafka's
    # built from its fields (common.slotted), not by dataclasses.replace (~2 us of its field walk)
    # nor by the frozen __init__'s setattrs: on every consumer fetch
    return data if kept == data.position else _new_slice((data.fd, data.position, kept - data.position, segment,
                                                          data.first_batch_size))
