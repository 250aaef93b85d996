"""Which offsets a log read holds: the [base, last] offsets of each record batch in its bytes
(the v2 batch headers, `common.record_batch`), so a share partition can acquire them.

    spans = batch_spans(data)          # (base, last, control, start, end) of each whole batch
    data[spans[i].start:spans[j].end]  # the bytes of batches i..j, as ShareFetch returns them

A trailing incomplete batch (a read cut at its byte limit) is left out; the CRCs were checked
when the batches were appended.
"""

from __future__ import annotations

from typing import NamedTuple

from common.record_batch import iter_batches


class Span(NamedTuple):
    base: int
    last: int
    control: bool  # transaction markers: no record a consumer gets
    start: int  # byte position of the batch in the read
    end: int


def batch_spans(data: bytes) -> tuple[Span, ...]:
    return tuple(Span(h.base_offset, h.base_offset + h.last_offset_delta, h.is_control, pos, pos + h.size)
                 for pos, h in iter_batches(data, verify=False, allow_partial_tail=True))
