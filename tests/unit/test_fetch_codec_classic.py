"""common/protocol/fetch.py's one-pass reading of classic (v5-v11) answers and request partition
arrays: it reads what the field-by-field path reads, and hands anything else to it (None, and
for a request's partitions the reader where it was)."""

from __future__ import annotations

import pytest

from common.protocol import fetch
from common.protocol.frame import join_chunks
from common.protocol.primitives import ProtocolError, Reader

BATCH = b"\x00" * 8 + b"fake record batch"
PLAIN = fetch.FetchPartitionResponse(0, 0, 10, BATCH, 9, 3)
NULL_RECORDS = fetch.FetchPartitionResponse(1, 6, -1, None, -1, -1)
EMPTY_ABORTED = fetch.FetchPartitionResponse(2, 0, 4, b"", 4, 0, ())
ABORTED = fetch.FetchPartitionResponse(3, 0, 10, BATCH, 9, 0, (fetch.AbortedTransaction(5, 6),))

ANSWER_ROWS = [  # the answers of one topic
    (),
    (PLAIN,),
    (PLAIN, NULL_RECORDS, EMPTY_ABORTED, PLAIN),
    (PLAIN, ABORTED, NULL_RECORDS),  # aborted transactions between their count and the preferred replica
]


def _answers(partitions: tuple[fetch.FetchPartitionResponse, ...], version: int) -> bytes:
    response = fetch.FetchResponse(0, (fetch.FetchTopicResponse("t", partitions),), 0, 7)
    return join_chunks(fetch.encode_fetch_response(response, version))


def _with_preferred(p: fetch.FetchPartitionResponse, version: int) -> fetch.FetchPartitionResponse:
    return p if version >= 11 else fetch.FetchPartitionResponse(
        p.partition_index, p.error_code, p.high_watermark, p.records, p.last_stable_offset,
        p.log_start_offset, p.aborted_transactions)


@pytest.mark.parametrize("version", range(5, 12))
@pytest.mark.parametrize("partitions", ANSWER_ROWS)
def test_answers_read_as_encoded(version: int, partitions: tuple[fetch.FetchPartitionResponse, ...]) -> None:
    partitions = tuple(_with_preferred(p, version) for p in partitions)
    data = _answers(partitions, version)
    decoded = fetch.decode_fetch_response(memoryview(data + b"trailing"), version)
    assert decoded.responses[0].partitions == partitions
    one_pass = fetch._decode_classic_response(memoryview(data), version)
    assert one_pass == decoded == fetch._decode_response_fields(memoryview(data), version)


@pytest.mark.parametrize("version", range(5, 12))
def test_every_truncated_answer_is_refused(version: int) -> None:
    data = _answers((PLAIN, NULL_RECORDS, ABORTED, EMPTY_ABORTED), version)
    for cut in range(len(data)):
        assert fetch._decode_classic_response(memoryview(data[:cut]), version) is None
        with pytest.raises(ProtocolError):
            fetch.decode_fetch_response(memoryview(data[:cut]), version)


@pytest.mark.parametrize("version", range(9, 12))
def test_request_partitions_read_in_one_pass(version: int) -> None:
    partitions = (fetch.FetchPartition(2, 100, 1048576, 5, 7), fetch.FetchPartition(0, -1, 1, -1, -1))
    request = fetch.FetchRequest(3, 500, 1, 1000, 1, (fetch.FetchTopic("t", partitions),), 9, 3)
    data = join_chunks(fetch.encode_fetch_request(request, version))
    assert fetch.decode_fetch_request(memoryview(data), version) == request
    # replica id, max wait, min bytes, max bytes, isolation, session id and epoch, topic count, "t"
    start = 4 * 4 + 1 + 4 + 4 + 4 + 2 + 1
    r = Reader(memoryview(data), start)
    assert fetch._read_partitions_v9_to_v11(r) == partitions
    assert r.remaining == 4 + (2 if version >= 11 else 0)  # the forgotten topics (and the rack id) follow
    for cut in range(start, len(data) - r.remaining):  # within the partitions array
        r = Reader(memoryview(data[:cut]), start)
        assert fetch._read_partitions_v9_to_v11(r) is None and r.pos == start
