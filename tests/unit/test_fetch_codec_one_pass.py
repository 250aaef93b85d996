"""common/protocol/fetch.py's one-pass codecs of the classic versions: a v7-v11 request read by
unpacks and a v5-v11 response written by packs give what the field-by-field Reader and Writer
give, byte for byte; a request the unpacks cannot read (short, a negative length, bad UTF-8)
goes to the field-by-field path, which reads it or refuses it with its own reason."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from common.protocol import fetch
from common.protocol.frame import join_chunks
from common.protocol.primitives import ProtocolError


@dataclass(frozen=True)
class Slice:
    """A records placeholder, as a segment FileSlice is one."""

    length: int


BATCH = b"\x00" * 8 + b"fake record batch"
P = fetch.FetchPartition

REQUESTS = [
    fetch.FetchRequest(-1, 500, 1, 52428800, 1, (fetch.FetchTopic("bench", (P(0, 1234, 1048576, -1, 5),)),)),
    fetch.FetchRequest(2, 500, 1, 10485760, 0, (
        fetch.FetchTopic("a", (P(0, 7, 1048576, 3, 1), P(5, 0, 1, 0, -1))),
        fetch.FetchTopic("\u00fcber-topic", ()),
        fetch.FetchTopic("b", (P(1, -1, 0, -1, 0),)),
    ), 77, 3, (fetch.ForgottenTopic("gone", (1, 2, 3)), fetch.ForgottenTopic("x", ()))),
    fetch.FetchRequest(-1, 0, 0, 0, 0, (), 0, -1, (), "rack-1"),
]

ANSWERS = [
    fetch.FetchPartitionResponse(0, 0, 10, BATCH, 9, 3),
    fetch.FetchPartitionResponse(1, 6, -1, None, -1, -1),
    fetch.FetchPartitionResponse(2, 0, 4, b"", 4, 0, ()),
    fetch.FetchPartitionResponse(3, 0, 10, memoryview(BATCH), 9, 0, (fetch.AbortedTransaction(5, 6),
                                                                       fetch.AbortedTransaction(8, 9))),
    fetch.FetchPartitionResponse(4, 0, 1 << 40, Slice(1 << 20), 1 << 40, 0, (), 2),
    fetch.FetchPartitionResponse(5, 0, 12, Slice(0), 12, 0),
    fetch.FetchPartitionResponse(6, 0, 12, Slice(7), 12, 0, (fetch.AbortedTransaction(1, 2),)),
]

RESPONSES = [
    fetch.FetchResponse(0, ()),
    fetch.FetchResponse(0, (fetch.FetchTopicResponse("bench", (ANSWERS[4],)),), 0, 0),
    fetch.FetchResponse(12, (fetch.FetchTopicResponse("a", tuple(ANSWERS[:4])),
                             fetch.FetchTopicResponse("b", ()),
                             fetch.FetchTopicResponse("c", tuple(ANSWERS[4:]))), 0, 99),
    fetch.FetchResponse(0, (), 71, 0),
]


def _fields(request: fetch.FetchRequest, version: int) -> bytes:
    return join_chunks(fetch.encode_fetch_request(request, version))


@pytest.mark.parametrize("version", range(7, 12))
@pytest.mark.parametrize("request_", REQUESTS)
def test_request_read_in_one_pass(version: int, request_: fetch.FetchRequest) -> None:
    if version < 11:
        request_ = fetch.FetchRequest(request_.replica_id, request_.max_wait_ms, request_.min_bytes,
                                      request_.max_bytes, request_.isolation_level, request_.topics,
                                      request_.session_id, request_.session_epoch, request_.forgotten_topics_data)
    if version < 9:  # no current leader epoch on the wire
        request_ = fetch.FetchRequest(request_.replica_id, request_.max_wait_ms, request_.min_bytes,
                                      request_.max_bytes, request_.isolation_level, tuple(
                                          fetch.FetchTopic(t.topic, tuple(P(p.partition, p.fetch_offset,
                                                                            p.partition_max_bytes, p.log_start_offset)
                                                                          for p in t.partitions))
                                          for t in request_.topics),
                                      request_.session_id, request_.session_epoch, request_.forgotten_topics_data,
                                      request_.rack_id)
    data = memoryview(_fields(request_, version))
    one_pass = fetch._decode_classic_request(data, version)
    assert one_pass == request_
    assert one_pass == fetch._decode_request_fields(data, version)
    assert fetch.decode_fetch_request(memoryview(bytes(data) + b"trailing"), version) == request_


@pytest.mark.parametrize("version", range(7, 12))
def test_every_cut_or_changed_byte_reads_as_the_fields_do(version: int) -> None:
    """Any bytes: the one-pass read gives what the field-by-field one gives, or hands them to it
    (None); decode_fetch_request either parses them or raises ProtocolError."""
    data = _fields(REQUESTS[1], version)
    rng = random.Random(35)
    cases = [data[:cut] for cut in range(len(data))]
    for _ in range(2000):
        changed = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            changed[rng.randrange(len(changed))] = rng.choice((0x00, 0xFF, 0x80, 0x7F, rng.randrange(256)))
        cases.append(bytes(changed))
    handed_on = 0
    for case in cases:
        view = memoryview(case)
        one_pass = fetch._decode_classic_request(view, version)
        try:
            fields: fetch.FetchRequest | None = fetch._decode_request_fields(view, version)
        except ProtocolError:
            fields = None
        if one_pass is None:
            handed_on += 1
        else:
            assert one_pass == fields
        try:
            assert fetch.decode_fetch_request(view, version) == fields
        except ProtocolError:
            assert fields is None
    assert handed_on >= len(data)  # every cut short of the end at least


@pytest.mark.parametrize("version", range(5, 12))
@pytest.mark.parametrize("response", RESPONSES)
def test_response_written_in_one_pass(version: int, response: fetch.FetchResponse) -> None:
    one_pass = fetch._encode_classic_response(response, version)
    assert _wire(one_pass) == _wire(fetch._encode_response_fields(response, version))
    assert all(isinstance(c, bytes) or c.length for c in one_pass)  # an empty slice is no chunk of its own
    assert fetch.encode_fetch_response(response, version) == one_pass


def _wire(chunks: Sequence[object]) -> list[object]:
    """The bytes between the records placeholders, joined, and the placeholders that send bytes."""
    out: list[object] = [b""]
    for chunk in chunks:
        if isinstance(chunk, bytes):
            out[-1] += chunk  # type: ignore[operator]
        elif chunk.length:  # type: ignore[attr-defined]
            out += [chunk, b""]
    return out
