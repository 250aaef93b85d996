"""broker/share/batches.py: the offsets and byte ranges of the batches a log read returned."""

from __future__ import annotations

from broker.share.batches import Span, batch_spans
from common.records import build_batch


def test_spans_of_data_and_control_batches_and_a_cut_tail() -> None:
    first = build_batch([(None, b"a"), (None, b"b"), (None, b"c")], base_offset=10)
    marker = build_batch([(b"\0\0\0\0", b"\0\0\0\0\0\0")], base_offset=13, is_control=True, is_transactional=True)
    third = build_batch([(None, b"d")], base_offset=14)
    data = first + marker + third
    assert batch_spans(data + third[:20]) == (
        Span(10, 12, False, 0, len(first)),
        Span(13, 13, True, len(first), len(first) + len(marker)),
        Span(14, 14, False, len(first) + len(marker), len(data)))
    assert batch_spans(b"") == ()
