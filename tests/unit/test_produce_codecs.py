"""Table tests for Produce (v3–v11) and InitProducerId (v0–v5) at the versions where a field
appears or the encoding turns flexible: Produce v9 (flexible), v10 (KIP-951's tagged
CurrentLeader and NodeEndpoints, sent only when set), v11 (same body); InitProducerId v3
(KIP-360's producer id and epoch). Same checks as test_protocol_codecs: exact bytes both ways,
trailing bytes tolerated, every truncation a ProtocolError, request frames one byte at a time,
the dispatch table encoding as the codec does."""

from __future__ import annotations

import random
import sys
from datetime import timedelta
from typing import Any

import pytest

from common.errors import ErrorCode
from common.protocol import messages, produce
from common.protocol.leader_discovery import LeaderIdAndEpoch, NodeEndpoint
from common.protocol.frame import join_chunks
from common.protocol.primitives import ProtocolError, Reader
from tests.unit.test_protocol_codecs import (
    BATCH,
    TAG,
    Row,
    arr,
    by,
    carr,
    check_codec_row,
    check_dispatch,
    check_request_frame,
    kio_req,
    kio_resp,
    cs,
    i16,
    i32,
    i64,
    req,
    resp,
    row_id,
    s,
)


def cby(v: bytes | None) -> bytes:
    """Compact nullable bytes (records), for lengths under 127."""
    return b"\x00" if v is None else bytes([len(v) + 1]) + v


def tags(*fields: tuple[int, bytes]) -> bytes:
    """A tagged-field section holding these (tag, value) fields (short values only)."""
    return bytes([len(fields)]) + b"".join(bytes([tag, len(value)]) + value for tag, value in fields)


PRODUCE_REQ = produce.ProduceRequest(None, -1, 30000, (
    produce.TopicProduceData("t", (produce.PartitionProduceData(0, BATCH),
                                   produce.PartitionProduceData(1, None))),))
PRODUCE_FLEX = (cs(None) + i16(-1) + i32(30000)
                + carr(cs("t") + carr(i32(0) + cby(BATCH) + TAG, i32(1) + cby(None) + TAG) + TAG) + TAG)

OK_PART = produce.PartitionProduceResponse(0, 0, 42, -1, 7)
MOVED = produce.PartitionProduceResponse(1, 6, -1, -1, -1, (), "not the leader",
                                         LeaderIdAndEpoch(2, 9))
LEADERLESS = produce.PartitionProduceResponse(2, 6, -1, -1, -1)  # leader unknown: no tag
ENDPOINT = NodeEndpoint(2, "h", 9092, "r")
LEADER_RESP = produce.ProduceResponse((produce.TopicProduceResponse("t", (OK_PART, MOVED, LEADERLESS)),),
                                      0, (ENDPOINT, NodeEndpoint(3, "g", 9093)))
OK_FLEX = i32(0) + i16(0) + i64(42) + i64(-1) + i64(7) + carr() + cs(None) + TAG
MOVED_FLEX = (i32(1) + i16(6) + i64(-1) + i64(-1) + i64(-1) + carr() + cs("not the leader")
              + tags((0, i32(2) + i32(9) + TAG)))
LEADERLESS_FLEX = i32(2) + i16(6) + i64(-1) + i64(-1) + i64(-1) + carr() + cs(None) + TAG
ENDPOINTS_FLEX = carr(i32(2) + cs("h") + i32(9092) + cs("r") + TAG, i32(3) + cs("g") + i32(9093) + cs(None) + TAG)
LEADER_RESP_V10 = (carr(cs("t") + carr(OK_FLEX, MOVED_FLEX, LEADERLESS_FLEX) + TAG) + i32(0)
                   + tags((0, ENDPOINTS_FLEX)))
PLAIN_RESP = produce.ProduceResponse((produce.TopicProduceResponse("t", (
    OK_PART, produce.PartitionProduceResponse(1, 0, 43, 5, 7, (produce.BatchIndexAndErrorMessage(0, "bad"),),
                                              "why"))),), 3)
PLAIN_FLEX = (carr(cs("t") + carr(OK_FLEX, i32(1) + i16(0) + i64(43) + i64(5) + i64(7)
                                  + carr(i32(0) + cs("bad") + TAG) + cs("why") + TAG) + TAG) + i32(3) + TAG)

def ipi_req(version: int, transactional_id: str | None, timeout_ms: int, producer_id: int, epoch: int) -> Any:
    """InitProducerId is served on kio's messages (broker/handlers/transactions.py)."""
    return messages.request_type(22, version)(transactional_id=transactional_id,
                                              transaction_timeout=timedelta(milliseconds=timeout_ms),
                                              producer_id=producer_id, producer_epoch=epoch)


def ipi_resp(version: int, error: ErrorCode, producer_id: int, epoch: int) -> Any:
    return messages.response_type(22, version)(throttle_time=messages.NO_THROTTLE, error_code=error,
                                               producer_id=producer_id, producer_epoch=epoch)

ROWS = [
    *[req(produce, "produce", 0, v, PRODUCE_REQ, PRODUCE_FLEX) for v in (9, 10, 11)],
    req(produce, "produce", 0, 9, produce.ProduceRequest("tx", 1, 100, ()), cs("tx") + i16(1) + i32(100) + carr() + TAG),
    req(produce, "produce", 0, 8, PRODUCE_REQ, s(None) + i16(-1) + i32(30000)
        + arr(s("t") + arr(i32(0) + by(BATCH), i32(1) + by(None)))),
    *[resp(produce, "produce", 0, v, PLAIN_RESP, PLAIN_FLEX) for v in (9, 10, 11)],
    *[resp(produce, "produce", 0, v, LEADER_RESP, LEADER_RESP_V10) for v in (10, 11)],
    *[kio_req(22, v, ipi_req(v, None, 60000, 5000, 3), cs(None) + i32(60000) + i64(5000) + i16(3) + TAG)
      for v in (3, 4, 5)],
    kio_req(22, 3, ipi_req(3, "tx", 1, -1, -1), cs("tx") + i32(1) + i64(-1) + i16(-1) + TAG),
    *[kio_resp(22, v, ipi_resp(v, ErrorCode.NONE, 1000, 0), i32(0) + i16(0) + i64(1000) + i16(0) + TAG)
      for v in (3, 4, 5)],
    kio_resp(22, 4, ipi_resp(4, ErrorCode.PRODUCER_FENCED, -1, -1), i32(0) + i16(90) + i64(-1) + i16(-1) + TAG),
]
REQUESTS = [r for r in ROWS if r.decode.__name__.endswith("_request")]
RESPONSES = [r for r in ROWS if r.decode.__name__.endswith("_response")]


@pytest.mark.parametrize("row", ROWS, ids=row_id)
def test_codec_rows(row: Row) -> None:
    check_codec_row(row)


@pytest.mark.parametrize("row", REQUESTS, ids=row_id)
def test_request_frame_fed_one_byte_at_a_time(row: Row) -> None:
    check_request_frame(row)


@pytest.mark.parametrize("row", RESPONSES, ids=row_id)
def test_dispatch_encodes_responses(row: Row) -> None:
    check_dispatch(row)


def test_v9_sends_no_leader_tags_and_v10_sends_none_when_unset() -> None:
    """Below v10 CurrentLeader and NodeEndpoints do not exist; from v10 they are sent only when set,
    so a response without a leader change is the same bytes at v9, v10 and v11 (Kafka's generated
    code writes a tagged field only when it differs from its default)."""
    v9 = join_chunks(produce.encode_produce_response(LEADER_RESP, 9))
    assert b"\x02\x00\x00\x00\x09" not in v9  # no (leader 2, epoch 9)
    decoded = produce.decode_produce_response(memoryview(v9), 9)
    assert decoded.node_endpoints == () and decoded.responses[0].partitions[1].current_leader == produce.UNKNOWN_LEADER
    for version in (10, 11):
        assert join_chunks(produce.encode_produce_response(PLAIN_RESP, version)) == PLAIN_FLEX
        explicit_default = produce.ProduceResponse((produce.TopicProduceResponse("t", (
            produce.PartitionProduceResponse(0, 0, 42, -1, 7, current_leader=LeaderIdAndEpoch(-1, -1)),)),))
        assert join_chunks(produce.encode_produce_response(explicit_default, version)) == (
            carr(cs("t") + carr(OK_FLEX) + TAG) + i32(0) + TAG)


def test_unknown_tags_are_skipped_and_known_tags_must_be_whole() -> None:
    unknown = (carr(cs("t") + carr(i32(0) + i16(0) + i64(42) + i64(-1) + i64(7) + carr() + cs(None)
                                   + tags((0, i32(2) + i32(9) + TAG), (7, b"xyz"))) + TAG) + i32(0) + tags((3, b"?")))
    decoded = produce.decode_produce_response(memoryview(unknown), 10)
    assert decoded.responses[0].partitions[0].current_leader == LeaderIdAndEpoch(2, 9)
    assert decoded.node_endpoints == ()
    long_tag = (carr(cs("t") + carr(i32(0) + i16(0) + i64(42) + i64(-1) + i64(7) + carr() + cs(None)
                                    + tags((0, i32(2) + i32(9) + TAG + b"extra"))) + TAG) + i32(0) + TAG)
    with pytest.raises(ProtocolError):
        produce.decode_produce_response(memoryview(long_tag), 10)


@pytest.mark.parametrize(("decode", "version"), [
    (produce.decode_produce_request, 2), (produce.decode_produce_request, 13)])
def test_versions_outside_the_ranges_are_protocol_errors(decode, version) -> None:
    with pytest.raises(ProtocolError):
        decode(memoryview(PRODUCE_FLEX), version)


def test_flexible_records_are_views_into_the_request() -> None:
    body = memoryview(bytearray(PRODUCE_FLEX))
    records = produce.decode_produce_request(body, 11).topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and records.obj is body.obj and bytes(records) == BATCH


# --- the request decoder against the Reader (the primitives' checks are the specification) ----


def reader_decode(body: memoryview, version: int) -> produce.ProduceRequest:
    """Produce's request as the generic Reader reads it, field by field: the oracle the
    one-pass decoder must agree with on every input, valid or not."""
    r = Reader(body, flexible=version >= 9)

    def partition(r: Reader) -> produce.PartitionProduceData:
        data = produce.PartitionProduceData(r.int32(), r.nullable_bytes())
        r.tagged_fields()
        return data

    def topic(r: Reader) -> produce.TopicProduceData:
        t = produce.TopicProduceData(r.string(), r.array(partition, 5 if r.flexible else 8))
        r.tagged_fields()
        return t

    transactional_id, acks, timeout_ms = r.nullable_string(), r.int16(), r.int32()
    topics = r.array(topic, 3 if r.flexible else 6)
    r.tagged_fields()
    return produce.ProduceRequest(transactional_id, acks, timeout_ms, topics)


def outcome(decode: Any, body: bytes, version: int) -> Any:
    try:
        return decode(memoryview(body), version)
    except ProtocolError:
        return ProtocolError


DIFFERENTIAL_REQUESTS = [
    produce.ProduceRequest(None, 1, 30000, (produce.TopicProduceData("orders", (
        produce.PartitionProduceData(0, BATCH),)),)),
    PRODUCE_REQ,
    produce.ProduceRequest("txn-é", -1, 5, (
        produce.TopicProduceData("a" * 130, (produce.PartitionProduceData(7, BATCH * 2),
                                             produce.PartitionProduceData(8, b""))),
        produce.TopicProduceData("b", ()))),
    produce.ProduceRequest(None, 0, 0, ()),
]


@pytest.mark.parametrize("version", [3, 8, 9, 11, 12])
@pytest.mark.parametrize("request_", DIFFERENTIAL_REQUESTS, ids=range(len(DIFFERENTIAL_REQUESTS)))
def test_the_request_decoder_agrees_with_the_reader_on_any_bytes(request_, version) -> None:
    """Valid bodies, every truncation, and seeded byte flips (lengths, counts, UTF-8, tags): both
    decoders give the same request or both raise ProtocolError, never anything else."""
    body = join_chunks(produce.encode_produce_request(request_, version))
    assert produce.decode_produce_request(memoryview(body), version) == request_
    assert outcome(produce.decode_produce_request, body + b"\x00\x07", version) == request_  # trailing bytes
    for cut in range(len(body)):
        assert outcome(produce.decode_produce_request, body[:cut], version) is ProtocolError
    rng = random.Random(f"{version}-{len(body)}")
    for _ in range(200):  # bounded: a fixed number of seeded mutations
        mutated = bytearray(body)
        for _ in range(rng.randint(1, 3)):
            mutated[rng.randrange(len(mutated))] = rng.choice((0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        assert (outcome(produce.decode_produce_request, bytes(mutated), version)
                == outcome(reader_decode, bytes(mutated), version)), bytes(mutated).hex()


def test_a_tagged_field_section_goes_through_the_readers_checks() -> None:
    """Unknown tags in a request are skipped; out-of-order tags and a size past the end are refused."""
    def body(section: bytes) -> bytes:
        return cs(None) + i16(1) + i32(5) + carr(cs("t") + carr(i32(0) + cby(BATCH) + section) + TAG) + TAG

    decoded = produce.decode_produce_request(memoryview(body(tags((1, b"ab"), (5, b"")))), 11)
    assert decoded.topic_data[0].partition_data[0].records == BATCH
    for bad in (tags((5, b""), (1, b"ab")), b"\x01\x01\x7f"):
        with pytest.raises(ProtocolError):
            produce.decode_produce_request(memoryview(body(bad)), 11)


# --- the partition loop: one unpack per entry (a bulk producer's request holds one per partition) ----

# Records lengths at the compact length's varint boundaries: 1 byte up to 126 bytes of records, 2 up to
# 16,382, 3 up to 2,097,150 (the partition loop's own reading), 4 from 2,097,151 (its slow path).
BOUNDARY_LENGTHS = (0, 126, 127, 16382, 16383, 2_097_150, 2_097_151)


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def digest(decoded: Any) -> Any:
    """A decoded request with each records view as its bytes' hash: a memoryview of megabytes
    compares item by item, ~14 ms a pair."""
    if not isinstance(decoded, produce.ProduceRequest):
        return decoded
    return (decoded.transactional_id, decoded.acks, decoded.timeout_ms, [
        (t.name, [(p.index, None if p.records is None else hash(bytes(p.records))) for p in t.partition_data])
        for t in decoded.topic_data])


@pytest.mark.parametrize("version", [3, 8, 9, 12])
def test_records_at_every_length_boundary_decode_as_the_reader_reads_them(version) -> None:
    """Each boundary length, and a null, beside each other in one request: the same request back as
    encoded and as the Reader reads it; a cut inside any partition's head or records, and seeded
    byte flips in the heads, fail (or decode) as the Reader's do."""
    entries = tuple(produce.PartitionProduceData(i, bytes([i]) * n) for i, n in enumerate(BOUNDARY_LENGTHS))
    request_ = produce.ProduceRequest(None, 1, 30000, (produce.TopicProduceData(
        "t", (*entries, produce.PartitionProduceData(99, None))),))
    body = join_chunks(produce.encode_produce_request(request_, version))
    assert produce.decode_produce_request(memoryview(body), version) == request_ == reader_decode(
        memoryview(body), version)
    flexible = version >= 9
    heads, pos = [], body.index(b"t") + 1 + (1 if flexible else 4)  # past the name and the count
    for entry in request_.topic_data[0].partition_data:
        heads.append(pos)
        n = -1 if entry.records is None else len(entry.records)
        pos += 4 + (len(uvarint(n + 1)) + 1 if flexible else 4) + max(n, 0)  # index, length, records (tags)
    assert body[pos:] == (TAG * 2 if flexible else b"")  # the topic's and the request's tags
    rng = random.Random(version)
    view, mutated = memoryview(body), bytearray(body)  # cuts as views, flips made and undone in place
    for head in heads:
        for cut in range(head, min(head + 9, len(body))):
            assert outcome(produce.decode_produce_request, view[:cut], version) is ProtocolError
        for _ in range(20):  # bounded: seeded flips of the head's bytes
            at = head + rng.randrange(8)
            mutated[at] = rng.choice((0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)))
            assert (digest(outcome(produce.decode_produce_request, mutated, version))
                    == digest(outcome(reader_decode, mutated, version))), (head, bytes(mutated[head:head + 8]).hex())
            mutated[at] = body[at]


@pytest.mark.parametrize("version", [3, 8, 9, 12])
def test_the_request_decoder_enters_no_python_frame_per_partition(version) -> None:
    """A bulk producer's request holds one entry per partition: the decoder reads each entry inline
    (its index and length in one unpack, the entry built by C setters), so a request of 60
    partitions (records of 1, 2 and 3-byte compact lengths) enters as many Python frames as one of
    one partition. On 3b4ad8c each entry entered _length, _uvarint and the dataclass's __init__."""
    counted = (produce.__file__, "<string>")

    def frames(partitions: int) -> int:
        request_ = produce.ProduceRequest(None, 1, 30000, (produce.TopicProduceData("t", tuple(
            produce.PartitionProduceData(i, BATCH * (1, 10, 1000)[i % 3]) for i in range(partitions))),))
        body = memoryview(join_chunks(produce.encode_produce_request(request_, version)))
        entered = 0

        def profile(frame: Any, event: str, arg: Any) -> None:
            # the codec's frames and dataclass-generated ones: a collection the 60 entries set off
            # may run gc.callbacks (another test's heap keeper) inside the decode, as a
            # fresh-clone unit run once saw (17 frames against 15)
            nonlocal entered
            entered += event == "call" and frame.f_code.co_filename in counted

        sys.setprofile(profile)
        try:
            decoded = produce.decode_produce_request(body, version)
        finally:
            sys.setprofile(None)
        assert decoded == request_
        return entered

    assert frames(60) == frames(1)
