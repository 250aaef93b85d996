"""common/protocol/fetch.py's one-pass codecs: a v7-v17 request read by unpacks and a v5-v17
response written by packs give what the field-by-field Reader and Writer give, byte for byte; a
request the unpacks cannot read (short, a negative length, bad UTF-8, a tagged field, a compact
length over one byte) goes to the field-by-field path, which reads it or refuses it with its
own reason, and a response with tagged fields to write is written by the Writer."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest

from common.protocol import fetch, fetch_one_pass, fetch_one_pass_responses
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
    _reads_alike(_fields(request_, version), version, request_, fetch._decode_classic_request)


def _reads_alike(data: bytes, version: int, expected: object, one_pass_read: Callable[[memoryview, int], object],
                 fields_read: Callable[[memoryview, int], object] = fetch._decode_request_fields,
                 decode: Callable[[memoryview, int], object] = fetch.decode_fetch_request) -> None:
    """The one-pass read, the field-by-field one and `decode` (with trailing bytes) all give `expected`."""
    view = memoryview(data)
    one_pass = one_pass_read(view, version)
    assert one_pass == expected
    assert one_pass == fields_read(view, version)
    assert decode(memoryview(data + b"trailing"), version) == expected


def _calls_noted(monkeypatch: pytest.MonkeyPatch, module: ModuleType, name: str) -> list[int]:
    """`module.name` (a codec's arrays path) replaced by itself noting the version of each call,
    and the list it notes them in: which messages a test's path handed on."""
    calls: list[int] = []
    arrays = getattr(module, name)

    def noted(message: Any, version: int) -> Any:
        calls.append(version)
        return arrays(message, version)

    monkeypatch.setattr(module, name, noted)
    return calls


# A follower's Fetch in an acks=all canary's round: the one partition whose offsets moved.
CANARY_FETCH = fetch.FetchRequest(5, 500, 1, 10485760, 0, (fetch.FetchTopic("canary", (P(0, 41, 1048576, 0, 3),)),),
                                  77, 12, (), "")


@pytest.mark.parametrize("version", range(7, 12))
@pytest.mark.parametrize("request_", [REQUESTS[1], CANARY_FETCH])
def test_every_cut_or_changed_byte_reads_as_the_fields_do(version: int, request_: fetch.FetchRequest) -> None:
    """Any bytes: the one-pass read gives what the field-by-field one gives, or hands them to it
    (None); decode_fetch_request either parses them or raises ProtocolError."""
    handed_on = _every_cut_or_change(_fields(request_, version), version, fetch._decode_classic_request)
    assert handed_on >= len(_fields(request_, version))  # every cut short of the end at least


@pytest.mark.parametrize(("request_", "by_the_arrays"), [
    (CANARY_FETCH, False),
    (fetch.FetchRequest(-1, 0, 0, 0, 1, (fetch.FetchTopic("\u00fcber", (P(7, -1, 0, -1, -1),)),), 0, -1, (), "rack-1"),
     False),
    (fetch.FetchRequest(5, 500, 1, 1, 0, (fetch.FetchTopic("", (P(0, 1, 1, 0, 3),)),), 77, 12), False),
    (REQUESTS[0], False),
    (REQUESTS[1], True),
    (REQUESTS[2], True),  # no topic
    (fetch.FetchRequest(5, 500, 1, 1, 0, (fetch.FetchTopic("t", (P(0, 1, 1, 0, 3), P(1, 1, 1, 0, 3))),), 77, 12), True),
    (fetch.FetchRequest(5, 500, 1, 1, 0, (fetch.FetchTopic("t", ()),), 77, 12), True),
    (fetch.FetchRequest(5, 500, 1, 1, 0, (fetch.FetchTopic("t", (P(0, 1, 1, 0, 3),)),), 77, 12,
                        (fetch.ForgottenTopic("gone", (1,)),)), True),
])
def test_a_followers_fetch_of_one_partition_is_read_without_the_arrays(
        request_: fetch.FetchRequest, by_the_arrays: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A v11 Fetch of one partition of one topic forgetting nothing (a follower's, mostly; the
    leader reads two per acks=all produce) is read by two unpacks and gives what the
    field-by-field path gives, trailing bytes or not; any other is the arrays' to read."""
    arrays = _calls_noted(monkeypatch, fetch_one_pass, "_decode_classic_request_arrays")
    data = _fields(request_, 11)
    for case in (data, data + b"trailing"):
        assert fetch.decode_fetch_request(memoryview(case), 11) == request_
        assert fetch._decode_request_fields(memoryview(case), 11) == request_
    assert arrays == ([11, 11] if by_the_arrays else [])


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


TOPIC_ID = uuid.UUID(int=0x1234_5678_9ABC_DEF0_1234_5678_9ABC_DEF0)


def _flexible_request(version: int, *, rack: str = "", replica_id: int = -1, tagged: bool = False
                      ) -> fetch.FetchRequest:
    by_id = version >= 13

    def topic(name: str, partitions: tuple[fetch.FetchPartition, ...]) -> fetch.FetchTopic:
        return fetch.FetchTopic("" if by_id else name, partitions, TOPIC_ID if by_id else fetch.ZERO_UUID)
    directory = uuid.UUID(int=7) if tagged and version >= 17 else fetch.ZERO_UUID
    return fetch.FetchRequest(replica_id, 500, 1, 52428800, 1, (
        topic("bench", (P(0, 1234, 1048576, -1, 5, 4, directory), P(3, 0, 1, 2, -1, -1))), topic("b", ())),
        9, 2, (fetch.ForgottenTopic("" if by_id else "gone", (1, 2), TOPIC_ID if by_id else fetch.ZERO_UUID),),
        rack, "cluster" if tagged else None, -1)


@pytest.mark.parametrize("version", range(12, 18))
@pytest.mark.parametrize(("kind", "one_pass"), [("plain", True), ("rack", True), ("follower", None),
                                                ("tagged", False)])
def test_flexible_request_read_in_one_pass(version: int, kind: str, one_pass: bool | None) -> None:
    request_ = _flexible_request(version, rack="rack-1" if kind == "rack" else "",
                                 replica_id=2 if kind == "follower" else -1, tagged=kind == "tagged")
    data = memoryview(_fields(request_, version))
    fields = fetch._decode_request_fields(data, version)
    assert fields == request_
    if one_pass is None:  # a follower's replica id: in the request at v12-v14, in a tag from v15
        one_pass = version <= 14
    assert (fetch._decode_flexible_request(data, version) == request_) is one_pass
    if not one_pass:
        assert fetch._decode_flexible_request(data, version) is None
    assert fetch.decode_fetch_request(memoryview(bytes(data) + b"trailing"), version) == request_


def _consumer_fetch(version: int, rack: str = "") -> fetch.FetchRequest:
    """A librdkafka consumer's usual v16 fetch: one partition of one topic, by id (v13+)."""
    by_id = version >= 13
    return fetch.FetchRequest(-1, 500, 1, 52428800, 1, (fetch.FetchTopic(
        "" if by_id else "bench", (P(3, 1234, 1048576, -1, 5, 4),), TOPIC_ID if by_id else fetch.ZERO_UUID),),
        9, 2, (), rack, None, -1)


@pytest.mark.parametrize("version", [12, 16, 17])
@pytest.mark.parametrize("request_of", [lambda v: _flexible_request(v, rack="r"), _consumer_fetch])
def test_every_cut_or_changed_flexible_byte_reads_as_the_fields_do(
        version: int, request_of: Callable[[int], fetch.FetchRequest]) -> None:
    _every_cut_or_change(_fields(request_of(version), version), version, fetch._decode_flexible_request)


@pytest.mark.parametrize("version", range(12, 18))
@pytest.mark.parametrize(("request_of", "by_the_arrays"), [
    (_consumer_fetch, False),
    (lambda v: _consumer_fetch(v, rack="rack-1"), True),
    (_flexible_request, True),
    (lambda v: _flexible_request(v, tagged=True), True),
])
def test_a_consumers_fetch_of_one_partition_is_read_without_the_arrays(
        version: int, request_of: Callable[[int], fetch.FetchRequest], by_the_arrays: bool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A v15+ Fetch of one partition of one topic forgetting nothing with no rack id (a librdkafka
    consumer's usual fetch) is one unpack and gives what the field-by-field path gives, trailing
    bytes or not; any other (and any before v15, with its replica id) is the arrays' to read."""
    arrays = _calls_noted(monkeypatch, fetch_one_pass, "_decode_flexible_request_arrays")
    request_ = request_of(version)
    data = _fields(request_, version)
    for case in (data, data + b"trailing"):
        assert fetch.decode_fetch_request(memoryview(case), version) == request_
        assert fetch._decode_request_fields(memoryview(case), version) == request_
    assert bool(arrays) is (by_the_arrays or version < 15)


def _every_cut_or_change(data: bytes, version: int, one_pass_read: Callable[[memoryview, int], object | None],
                         fields_read: Callable[[memoryview, int], object] = fetch._decode_request_fields,
                         decode: Callable[[memoryview, int], object] = fetch.decode_fetch_request) -> int:
    """Every cut of `data` and 2,000 seeded changes of a few bytes: the one-pass read gives what
    the field-by-field one gives or None (counted); `decode` (the request's, or the response's)
    parses or raises ProtocolError. Returns how many the one-pass read handed on."""
    rng = random.Random(version)
    cases = [data[:cut] for cut in range(len(data))]
    for _ in range(2000):
        changed = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            changed[rng.randrange(len(changed))] = rng.choice((0x00, 0x01, 0xFF, 0x80, 0x7F, rng.randrange(256)))
        cases.append(bytes(changed))
    handed_on = 0
    for case in cases:
        view = memoryview(case)
        one_pass = one_pass_read(view, version)
        try:
            fields: object | None = fields_read(view, version)
        except ProtocolError:
            fields = None
        if one_pass is None:
            handed_on += 1
        else:
            assert one_pass == fields
        try:
            assert decode(view, version) == fields
        except ProtocolError:
            assert fields is None
    return handed_on


FLEXIBLE_RESPONSES = [
    *RESPONSES,
    fetch.FetchResponse(0, (fetch.FetchTopicResponse("", tuple(ANSWERS), TOPIC_ID),
                            fetch.FetchTopicResponse("t" * 200, (ANSWERS[1],), TOPIC_ID)), 0, 5),
    fetch.FetchResponse(0, (fetch.FetchTopicResponse("bench", (fetch.FetchPartitionResponse(
        0, 0, 10, BATCH * 20, 9, 3),), TOPIC_ID),), 0, 5),
    # records lengths at the varint's byte boundaries (compact: length + 1)
    fetch.FetchResponse(0, (fetch.FetchTopicResponse("bench", tuple(fetch.FetchPartitionResponse(
        i, 0, 10, Slice(length), 9, 3, ()) for i, length in enumerate(
            (0x7E, 0x7F, 0x3FFE, 0x3FFF, 0x1FFFFE, 0x1FFFFF, 0xFFFFFFE, 0xFFFFFFF))), TOPIC_ID),), 0, 5),
]
TAGGED_RESPONSES = [
    fetch.FetchResponse(0, (fetch.FetchTopicResponse("a", (fetch.FetchPartitionResponse(
        0, 0, 10, b"", 10, 0, diverging_epoch=fetch.EpochEndOffset(3, 7)),), TOPIC_ID),)),
    fetch.FetchResponse(0, (fetch.FetchTopicResponse("a", (fetch.FetchPartitionResponse(
        0, 0, 10, b"", 10, 0, snapshot_id=fetch.SnapshotId(7, 3)),), TOPIC_ID),)),
]


@pytest.mark.parametrize("version", range(12, 18))
@pytest.mark.parametrize("response", FLEXIBLE_RESPONSES)
def test_flexible_response_written_in_one_pass(version: int, response: fetch.FetchResponse) -> None:
    one_pass = fetch._encode_flexible_response(response, version)
    assert one_pass is not None
    assert _wire(one_pass) == _wire(fetch._encode_response_fields(response, version))
    assert fetch.encode_fetch_response(response, version) == one_pass


@pytest.mark.parametrize("version", range(12, 18))
@pytest.mark.parametrize("response", TAGGED_RESPONSES)
def test_tagged_answers_written_by_the_fields(version: int, response: fetch.FetchResponse) -> None:
    assert fetch._encode_flexible_response(response, version) is None
    assert _wire(fetch.encode_fetch_response(response, version)) == _wire(
        fetch._encode_response_fields(response, version))


def _random_response(rng: random.Random, version: int) -> fetch.FetchResponse:
    """A seeded v5-v11 answer: topics with and without answers, null, empty and filled records,
    aborted transactions null, empty or several, names beyond ASCII; fields the version lacks
    at their defaults, as the field-by-field path reads them."""

    def answer(index: int) -> fetch.FetchPartitionResponse:
        records = rng.choice((None, b"", BATCH, rng.randbytes(rng.randrange(1, 300))))
        aborted = rng.choice((None, (), tuple(fetch.AbortedTransaction(rng.randrange(-1, 1 << 40), rng.randrange(1 << 20))
                                             for _ in range(rng.randint(1, 3)))))
        return fetch.FetchPartitionResponse(
            index, rng.choice((0, 0, 1, 6, 74)), rng.randrange(-1, 1 << 50), records, rng.randrange(-1, 1 << 50),
            rng.randrange(-1, 1 << 30), aborted, rng.randrange(-1, 5) if version >= 11 else -1)

    topics = tuple(fetch.FetchTopicResponse(rng.choice(("t", "canary", "\u00fcber", "x" * 300)),
                                            tuple(answer(i) for i in range(rng.randint(0, 4))))
                   for _ in range(rng.randint(0, 3)))
    v7 = version >= 7
    return fetch.FetchResponse(rng.randrange(0, 1000), topics, rng.choice((0, 70)) if v7 else 0,
                               rng.randrange(0, 1 << 31) if v7 else 0)


@pytest.mark.parametrize("version", range(5, 12))
def test_response_read_in_one_pass(version: int) -> None:
    """Seeded answers written field by field: the unpacks read what the Reader reads."""
    rng = random.Random(version)
    for _ in range(300):
        response = _random_response(rng, version)
        _reads_alike(join_chunks(fetch._encode_response_fields(response, version)), version, response,
                     fetch._decode_classic_response, fetch._decode_response_fields, fetch.decode_fetch_response)


# A follower's answer in an acks=all canary's round: one batch of one partition of one topic.
CANARY_ANSWER = fetch.FetchResponse(0, (fetch.FetchTopicResponse("canary", (
    fetch.FetchPartitionResponse(0, 0, 41, BATCH, 41, 0, None, -1),)),), 0, 77)


@pytest.mark.parametrize("version", range(5, 12))
@pytest.mark.parametrize("response", [
    fetch.FetchResponse(3, (
        fetch.FetchTopicResponse("canary", (fetch.FetchPartitionResponse(0, 0, 10, BATCH, 9, 3, (), 1),
                                            fetch.FetchPartitionResponse(1, 0, 4, None, 4, 0, None, -1))),
        fetch.FetchTopicResponse("t", (fetch.FetchPartitionResponse(
            2, 0, 5, b"xy", 5, 0, (fetch.AbortedTransaction(7, 1),), -1),))), 0, 5),
    CANARY_ANSWER,
])
def test_every_cut_or_changed_response_byte_reads_as_the_fields_do(version: int,
                                                                    response: fetch.FetchResponse) -> None:
    """Any bytes: the one-pass read gives what the field-by-field one gives, or hands them to it
    (None); decode_fetch_response either parses them or raises ProtocolError."""
    data = join_chunks(fetch._encode_response_fields(response, version))
    handed_on = _every_cut_or_change(data, version, fetch._decode_classic_response, fetch._decode_response_fields,
                                     fetch.decode_fetch_response)
    assert handed_on >= len(data)  # every cut short of the end at least


def test_a_topic_id_decoded_again_is_the_same_uuid() -> None:
    """Every fetch of a consumer names its topic by id (v13+): the UUID is made once, not by
    uuid.UUID's Python constructor on every request."""
    request_ = _flexible_request(16)
    data = _fields(request_, 16)
    first, second = (fetch._decode_flexible_request(memoryview(data), 16) for _ in range(2))
    assert first is not None and second is not None and first == second == request_
    assert first.topics[0].topic_id is second.topics[0].topic_id


def _one_topic(*answers: fetch.FetchPartitionResponse, name: str = "canary") -> fetch.FetchResponse:
    return fetch.FetchResponse(5, (fetch.FetchTopicResponse(name, answers),), 70, 123)


A = fetch.FetchPartitionResponse


@pytest.mark.parametrize(("response", "by_the_arrays"), [
    (CANARY_ANSWER, False),
    (_one_topic(A(3, 0, 1 << 40, BATCH, 1 << 40, 7, (), 2), name="\u00fcber"), False),
    (_one_topic(A(0, 6, -1, b"", -1, -1, None, -1), name=""), False),  # NOT_LEADER: no records
    (_one_topic(A(0, 0, 4, None, 4, 0, None, -1)), True),  # null records
    (_one_topic(A(0, 0, 4, BATCH, 4, 0, (fetch.AbortedTransaction(7, 1),), -1)), True),
    (_one_topic(A(0, 0, 4, BATCH, 4, 0), A(1, 0, 4, b"", 4, 0)), True),
    (_one_topic(), True),
    (fetch.FetchResponse(0, ()), True),
    (fetch.FetchResponse(0, (CANARY_ANSWER.responses[0],) * 2), True),
])
def test_a_followers_answer_of_one_partition_is_read_without_the_arrays(
        response: fetch.FetchResponse, by_the_arrays: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A v11 answer of one partition of one topic with its records (a follower's round, mostly)
    is read by two unpacks and gives what the field-by-field path gives, trailing bytes or not;
    any other answer is the arrays' to read."""
    arrays = _calls_noted(monkeypatch, fetch_one_pass_responses, "_decode_classic_topics")
    data = join_chunks(fetch._encode_response_fields(response, 11))
    for case in (data, data + b"trailing"):
        assert fetch.decode_fetch_response(memoryview(case), 11) == response
        assert fetch._decode_response_fields(memoryview(case), 11) == response
    assert arrays == ([11, 11] if by_the_arrays else [])


@pytest.mark.parametrize(("response", "by_the_arrays"), [
    (CANARY_ANSWER, False),
    (_one_topic(A(3, 0, 1 << 40, Slice(1 << 20), 1 << 40, 7, (), 2), name="\u00fcber"), False),
    (_one_topic(A(0, 6, -1, None, -1, -1, None, -1), name=""), False),
    (_one_topic(A(0, 0, 4, b"", 4, 0)), False),
    (_one_topic(A(0, 0, 4, Slice(0), 4, 0)), False),
    (_one_topic(A(0, 0, 4, memoryview(BATCH), 4, 0, ())), False),
    (_one_topic(A(0, 0, 4, BATCH, 4, 0, (fetch.AbortedTransaction(7, 1),))), True),
    (_one_topic(A(0, 0, 4, BATCH, 4, 0), A(1, 0, 4, b"", 4, 0)), True),
    (_one_topic(), True),
    (fetch.FetchResponse(0, ()), True),
    (fetch.FetchResponse(0, (CANARY_ANSWER.responses[0],) * 2), True),
])
def test_a_followers_answer_of_one_partition_is_written_without_the_arrays(
        response: fetch.FetchResponse, by_the_arrays: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The leader writes a follower's answer of one partition of one topic with no aborted
    transaction (two per acks=all produce) by two packs around the name: the Writer's bytes, and
    the same chunks (records in bytes joined in, a placeholder its own) as the arrays' path."""
    expected = fetch_one_pass_responses._encode_classic_topics(response, 11)
    arrays = _calls_noted(monkeypatch, fetch_one_pass_responses, "_encode_classic_topics")
    chunks = fetch.encode_fetch_response(response, 11)
    assert chunks == expected
    assert _wire(chunks) == _wire(fetch._encode_response_fields(response, 11))
    assert arrays == ([11] if by_the_arrays else [])


def test_a_name_past_the_string_limit_is_the_writers_error() -> None:
    response = _one_topic(A(0, 0, 4, BATCH, 4, 0), name="x" * 0x8000)
    with pytest.raises(ValueError, match="32767"):
        fetch.encode_fetch_response(response, 11)


def _by_id(*answers: fetch.FetchPartitionResponse) -> fetch.FetchResponse:
    return fetch.FetchResponse(5, (fetch.FetchTopicResponse("", answers, TOPIC_ID),), 0, 123)


@pytest.mark.parametrize("version", range(13, 18))
@pytest.mark.parametrize(("response", "by_the_arrays"), [
    (_by_id(A(3, 0, 1 << 40, BATCH, 1 << 40, 7, (), 2)), False),
    (_by_id(A(3, 0, 1 << 40, memoryview(BATCH * 200), 1 << 40, 7, None, -1)), False),  # a 2-byte varint
    (_by_id(A(0, 0, 4, Slice(1 << 20), 4, 0, ())), False),
    (_by_id(A(0, 0, 4, Slice(0), 4, 0)), False),
    (_by_id(A(0, 0, 4, b"", 4, 0)), False),
    (_by_id(A(0, 6, -1, None, -1, -1, None, -1)), False),
    (_by_id(A(0, 0, 4, BATCH, 4, 0, (fetch.AbortedTransaction(7, 1),))), True),
    (_by_id(A(0, 0, 4, BATCH, 4, 0), A(1, 0, 4, b"", 4, 0)), True),
    (_by_id(), True),
    (fetch.FetchResponse(0, ()), True),
])
def test_a_consumers_answer_of_one_partition_is_written_without_the_arrays(
        version: int, response: fetch.FetchResponse, by_the_arrays: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A v13+ answer of one partition of one topic with no aborted transaction and no tagged
    field (a consumer's usual answer) is one pack up to its records: the Writer's bytes, and
    the same chunks as the arrays' path."""
    expected = fetch_one_pass_responses._encode_flexible_topics(response, version)
    arrays = _calls_noted(monkeypatch, fetch_one_pass_responses, "_encode_flexible_topics")
    chunks = fetch.encode_fetch_response(response, version)
    assert chunks == expected
    assert _wire(chunks) == _wire(fetch._encode_response_fields(response, version))
    assert arrays == ([version] if by_the_arrays else [])


def _random_answers(rng: random.Random, version: int) -> fetch.FetchResponse:
    """A seeded answer for the arrays' encoders: topics with 0-4 partitions (now and then 130:
    a compact count of two bytes), records null, empty, in bytes, in a view or a slice (lengths
    around the varint's byte boundaries), aborted transactions null, empty or several, names
    beyond ASCII and repeated; by topic id from v13. Fields the version lacks at their defaults."""

    def answer(index: int) -> fetch.FetchPartitionResponse:
        records = rng.choice((None, b"", BATCH, memoryview(BATCH * 9), Slice(0),
                              Slice(rng.choice((1, 0x7E, 0x7F, 0x3FFF, 0x1FFFFF, 800_000)))))
        aborted = rng.choice((None, (), tuple(fetch.AbortedTransaction(rng.randrange(-1, 1 << 40), rng.randrange(1 << 20))
                                             for _ in range(rng.randint(1, 3)))))
        return fetch.FetchPartitionResponse(
            index, rng.choice((0, 1, 6)), rng.randrange(-1, 1 << 50), records, rng.randrange(-1, 1 << 50),
            rng.randrange(-1, 1 << 30), aborted, rng.randrange(-1, 5) if version >= 11 else -1)

    by_id = version >= 13
    topics = tuple(fetch.FetchTopicResponse(
        "" if by_id else rng.choice(("t", "canary", "\u00fcber", "x" * 300, "")),
        tuple(answer(i) for i in range(rng.choice((0, 1, 1, 2, 4, 130) if version >= 12 else (0, 1, 2, 4)))),
        uuid.UUID(int=rng.randrange(1 << 128)) if by_id else fetch.ZERO_UUID) for _ in range(rng.randint(0, 3)))
    v7 = version >= 7
    return fetch.FetchResponse(rng.randrange(0, 1000), topics, rng.choice((0, 70)) if v7 else 0,
                               rng.randrange(0, 1 << 31) if v7 else 0)


@pytest.mark.parametrize("version", range(5, 18))
def test_the_arrays_write_what_the_writer_writes(version: int) -> None:
    """Seeded answers of any shape: the arrays' encoders (every answer but the one-partition ones)
    give the Writer's bytes, with no empty slice as a chunk of its own, and the same chunks again
    once the names are kept encoded."""
    rng = random.Random(version)
    arrays = fetch_one_pass_responses._encode_classic_topics if version <= 11 \
        else fetch_one_pass_responses._encode_flexible_topics
    for _ in range(150):
        response = _random_answers(rng, version)
        chunks = arrays(response, version)
        assert chunks is not None
        assert _wire(chunks) == _wire(fetch._encode_response_fields(response, version))
        assert all(isinstance(c, bytes) or c.length for c in chunks)
        assert arrays(response, version) == chunks


def test_encoded_names_are_kept_up_to_their_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """An answer's topic names are encoded once and kept (a leader answers the same few topics
    fetch after fetch), up to MAX_ENCODED_NAMES: then the cache starts again."""
    monkeypatch.setattr(fetch_one_pass_responses, "_names", {})
    monkeypatch.setattr(fetch_one_pass_responses, "MAX_ENCODED_NAMES", 2)
    for name in ("canary", "t", "\u00fcber", "canary", "x" * 300):
        for response in (_one_topic(A(0, 0, 4, BATCH, 4, 0), name=name),
                         _one_topic(A(0, 0, 4, BATCH, 4, 0), A(1, 0, 4, None, 4, 0), name=name)):
            for version in (7, 11, 12):
                assert _wire(fetch.encode_fetch_response(response, version)) == _wire(
                    fetch._encode_response_fields(response, version))
        assert fetch_one_pass_responses._names[name] == name.encode("utf-8")
        assert len(fetch_one_pass_responses._names) <= 2


def _random_request(rng: random.Random, version: int) -> fetch.FetchRequest:
    """A seeded request the arrays' decoders read: 0-3 topics of 0-3 partitions (now and then
    100), forgotten topics, a rack id or none; names beyond ASCII, by topic id from v13; no
    tagged field (no cluster id, replica state or directory id), fields the version lacks at
    their defaults, as the field-by-field path reads them."""
    by_id = version >= 13

    def partition(index: int) -> fetch.FetchPartition:
        return P(index, rng.randrange(-1, 1 << 50), rng.randrange(0, 1 << 30), rng.randrange(-1, 1 << 40),
                 rng.randrange(-1, 9) if version >= 9 else -1, rng.randrange(-1, 9) if version >= 12 else -1)

    def name() -> str:
        return "" if by_id else rng.choice(("t", "canary", "\u00fcber", "x" * 120, ""))

    def topic_id() -> uuid.UUID:
        return uuid.UUID(int=rng.randrange(1, 1 << 128)) if by_id else fetch.ZERO_UUID

    topics = tuple(fetch.FetchTopic(name(), tuple(partition(i) for i in range(rng.choice((0, 1, 1, 2, 3, 100)))),
                                    topic_id()) for _ in range(rng.randint(0, 3)))
    forgotten = tuple(fetch.ForgottenTopic(name(), tuple(rng.sample(range(50), rng.randint(0, 3))), topic_id())
                      for _ in range(rng.choice((0, 0, 1, 2))))
    return fetch.FetchRequest(rng.randrange(-1, 9) if version <= 14 else -1, rng.randrange(0, 1000), 1, 1 << 20,
                              rng.choice((0, 1)), topics, rng.randrange(0, 1 << 31), rng.randrange(-1, 1 << 31),
                              forgotten, rng.choice(("", "rack-1")) if version >= 11 else "")


@pytest.mark.parametrize("version", range(7, 18))
def test_the_arrays_read_what_the_reader_reads(version: int) -> None:
    """Seeded requests of any shape: the arrays' decoders (every request but the one-partition
    ones) give what the field-by-field path gives, trailing bytes or not."""
    rng = random.Random(version)
    arrays = fetch_one_pass._decode_classic_request_arrays if version <= 11 \
        else fetch_one_pass._decode_flexible_request_arrays
    for _ in range(150):
        request_ = _random_request(rng, version)
        data = _fields(request_, version)
        for case in (data, data + b"trailing"):
            assert arrays(memoryview(case), version) == request_
            assert fetch._decode_request_fields(memoryview(case), version) == request_
