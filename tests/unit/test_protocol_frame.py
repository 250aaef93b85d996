"""Tests for common/protocol/frame.py and api_keys.py: framing, the size limit (checked on the
prefix alone), request header v1/v2, response framing and the ApiVersions fallback."""

from __future__ import annotations

import struct

import pytest

from broker.request_handler import IMPLEMENTED_VERSIONS
from common.protocol import messages
from common.protocol.api_keys import SUPPORTED_VERSIONS, ApiKey, is_supported
from common.protocol.api_versions import (
    ApiVersion,
    answer_api_versions,
    supported_api_versions,
)
from common.protocol.frame import (
    POOLED_FRAME_BYTES,
    FrameBuffers,
    FrameDecoder,
    RequestHeader,
    encode_request_header,
    frame_response,
    join_chunks,
    parse_request_header,
)
from common.protocol.primitives import ProtocolError


def sized(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


# (header, exact header bytes, trailing body)
HEADERS = [
    (RequestHeader(3, 8, 7, "rdkafka"),
     struct.pack(">hhih", 3, 8, 7, 7) + b"rdkafka", b"body"),
    (RequestHeader(0, 3, -1, None), struct.pack(">hhih", 0, 3, -1, -1), b""),
    (RequestHeader(18, 2, 1, ""), struct.pack(">hhih", 18, 2, 1, 0), b"\x00"),
    # ApiVersions v3 is flexible: header v2 ends with an (empty) tagged-field section.
    (RequestHeader(18, 3, 1, "c"), struct.pack(">hhih", 18, 3, 1, 1) + b"c\x00",
     b"\x06rdkaf\x061.2.3\x00"),
    # An unknown API is read as header v1.
    (RequestHeader(999, 0, 5, "x"), struct.pack(">hhih", 999, 0, 5, 1) + b"x", b"\x00"),
]


@pytest.mark.parametrize(("header", "data", "body"), HEADERS)
def test_request_header_both_directions(header: RequestHeader, data: bytes, body: bytes) -> None:
    assert encode_request_header(header) == data
    parsed, rest = parse_request_header(data + body)
    assert parsed == header
    assert bytes(rest) == body


def test_request_header_v2_skips_tagged_fields() -> None:
    data = struct.pack(">hhih", 18, 3, 9, -1) + b"\x01\x00\x02hi" + b"BODY"
    header, rest = parse_request_header(data)
    assert header == RequestHeader(18, 3, 9, None)
    assert bytes(rest) == b"BODY"


@pytest.mark.parametrize("cut", range(10))
def test_truncated_header_raises(cut: int) -> None:
    with pytest.raises(ProtocolError):
        parse_request_header(struct.pack(">hhih", 3, 1, 1, 0)[:cut])


def test_frames_whole_byte_at_a_time_and_batched() -> None:
    frames = [b"one", b"", b"three" * 100]
    stream = b"".join(sized(f) for f in frames)
    assert FrameDecoder(1000).feed(stream) == frames
    decoder = FrameDecoder(1000)
    got = [f for i in range(len(stream)) for f in decoder.feed(stream[i:i + 1])]
    assert got == frames
    assert decoder.buffered == 0
    decoder = FrameDecoder(1000)
    assert decoder.feed(stream[:11]) == [b"one", b""]
    assert decoder.feed(stream[11:]) == [b"three" * 100]


def test_size_limit_rejects_on_the_prefix_alone() -> None:
    decoder = FrameDecoder(max_request_bytes=100)
    assert decoder.feed(struct.pack(">i", 100)[:3]) == []
    with pytest.raises(ProtocolError, match="request size 101"):
        FrameDecoder(100).feed(struct.pack(">i", 101))
    with pytest.raises(ProtocolError):
        FrameDecoder(100).feed(struct.pack(">i", -1))
    assert FrameDecoder(100).feed(sized(b"x" * 100)) == [b"x" * 100]


def test_decoder_stays_failed_after_an_error() -> None:
    decoder = FrameDecoder(10)
    with pytest.raises(ProtocolError):
        decoder.feed(struct.pack(">i", 2**31 - 1) + b"x" * 50)
    assert decoder.buffered == 0
    with pytest.raises(ProtocolError):
        decoder.feed(sized(b"ok"))


# Frames on both sides of a 16-byte receive buffer: those of 12 bytes or fewer are split in it,
# larger ones get a buffer of their own and are received in place.
SMALL_RECEIVE = 16
MIXED_FRAMES = [b"", b"a", b"b" * 11, b"c" * 12, b"d" * 13, b"e" * 40, b"f", b"g" * 100, b"h" * 5]
MIXED_STREAM = b"".join(sized(f) for f in MIXED_FRAMES)


def split_reference(stream: bytes, limit: int) -> tuple[list[bytes], bool]:
    """What any decoder must make of `stream`: its whole frames, and whether a prefix is bad."""
    frames, pos = [], 0
    while len(stream) - pos >= 4:  # bounded: each pass consumes at least 4 bytes or stops
        size = struct.unpack_from(">i", stream, pos)[0]
        if not 0 <= size <= limit:
            return frames, True
        if len(stream) - pos - 4 < size:
            break
        frames.append(stream[pos + 4:pos + 4 + size])
        pos += 4 + size
    return frames, False


def receive_in_reads(decoder: FrameDecoder, stream: bytes, read: int) -> list[bytes | bytearray]:
    """As a socket does: each read of at most `read` bytes lands in the decoder's own buffer."""
    frames: list[bytes | bytearray] = []
    pos = 0
    while pos < len(stream):  # bounded: get_buffer is never empty, so each pass takes >= 1 byte
        target = decoder.get_buffer()
        n = min(len(target), read, len(stream) - pos)
        target[:n] = stream[pos:pos + n]
        pos += n
        decoder.buffer_updated(n, frames)
    return frames


@pytest.mark.parametrize("read", [1, 3, 7, SMALL_RECEIVE - 1, SMALL_RECEIVE, SMALL_RECEIVE + 1, 1000])
def test_frames_larger_than_the_receive_buffer_are_received_in_place(read: int) -> None:
    decoder = FrameDecoder(1000, receive_bytes=SMALL_RECEIVE)
    assert receive_in_reads(decoder, MIXED_STREAM, read) == MIXED_FRAMES
    assert decoder.buffered == 0
    fed = FrameDecoder(1000, receive_bytes=SMALL_RECEIVE)
    assert [f for i in range(0, len(MIXED_STREAM), read) for f in fed.feed(MIXED_STREAM[i:i + read])] \
        == MIXED_FRAMES


def test_a_large_frame_stays_as_received_while_later_frames_arrive() -> None:
    decoder = FrameDecoder(1000, receive_bytes=SMALL_RECEIVE)
    [large] = decoder.feed(sized(b"x" * 50))
    view = memoryview(large)[10:20]  # as a Produce's records stay a view of the request
    assert decoder.feed(sized(b"y" * 50) + sized(b"z")) == [b"y" * 50, b"z"]
    assert bytes(view) == b"x" * 10 and bytes(large) == b"x" * 50


@pytest.mark.parametrize("cut", range(1, len(MIXED_STREAM)))
def test_a_truncated_stream_gives_its_whole_frames_and_holds_the_rest(cut: int) -> None:
    decoder = FrameDecoder(1000, receive_bytes=SMALL_RECEIVE)
    frames, bad = split_reference(MIXED_STREAM[:cut], 1000)
    assert not bad
    assert decoder.feed(MIXED_STREAM[:cut]) == frames
    assert decoder.buffered == cut - sum(4 + len(f) for f in frames)


def test_a_bad_prefix_after_frames_in_one_read_keeps_those_frames() -> None:
    decoder = FrameDecoder(100, receive_bytes=SMALL_RECEIVE)
    out: list[bytes | bytearray] = []
    data = sized(b"ok") + struct.pack(">i", 101)
    target = decoder.get_buffer()
    target[:len(data)] = data
    with pytest.raises(ProtocolError, match="request size 101"):
        decoder.buffer_updated(len(data), out)
    assert out == [b"ok"]
    with pytest.raises(ProtocolError):
        decoder.get_buffer()


@pytest.mark.parametrize("flip", range(len(MIXED_STREAM)))
def test_any_flipped_byte_frames_differently_or_is_refused(flip: int) -> None:
    """h11's invariant for the framing layer: any bytes give the reference's frames or a ProtocolError."""
    stream = bytearray(MIXED_STREAM)
    stream[flip] ^= 0x80
    frames, bad = split_reference(bytes(stream), 1000)
    for read in (1, 5, SMALL_RECEIVE + 3):
        decoder = FrameDecoder(1000, receive_bytes=SMALL_RECEIVE)
        if bad:
            with pytest.raises(ProtocolError):
                receive_in_reads(decoder, bytes(stream), read)
        else:
            assert receive_in_reads(decoder, bytes(stream), read) == frames


def test_frame_response_counts_placeholders() -> None:
    class Slice:
        length = 10

    placeholder = Slice()
    chunks = frame_response(42, [b"ab", placeholder, b"c"])
    assert chunks == [struct.pack(">ii", 4 + 2 + 10 + 1, 42) + b"ab", placeholder, b"c"]
    assert join_chunks(frame_response(1, [b"xy"])) == struct.pack(">ii", 6, 1) + b"xy"
    assert frame_response(1, []) == [struct.pack(">ii", 4, 1)]


def test_supported_versions_match_design() -> None:
    assert SUPPORTED_VERSIONS[ApiKey.FETCH] == (4, 17)
    assert is_supported(ApiKey.API_VERSIONS, 4)
    assert not is_supported(ApiKey.API_VERSIONS, 5)
    assert is_supported(ApiKey.METADATA, 0) and not is_supported(ApiKey.METADATA, 13)  # Kafka 3.9: v0-v12
    assert not is_supported(12345, 0)
    assert set(IMPLEMENTED_VERSIONS) == set(SUPPORTED_VERSIONS)  # every API has a codec (issue 12: the group APIs)


def test_unsupported_api_versions_request_gets_v0_body_with_error_35() -> None:
    apis = (ApiVersion(0, 3, 8), ApiVersion(18, 0, 2))
    response, version = answer_api_versions(5, apis)
    assert version == 0
    assert messages.encode(response) == (
        struct.pack(">hi", 35, 2) + struct.pack(">hhh", 0, 3, 8) + struct.pack(">hhh", 18, 0, 2))
    response, version = answer_api_versions(2, apis)
    assert (response.error_code, version) == (0, 2)


def test_supported_api_versions_sorted_by_key() -> None:
    listed = supported_api_versions({ApiKey.METADATA: (1, 8), ApiKey.PRODUCE: (3, 8)})
    assert listed == (ApiVersion(0, 3, 8), ApiVersion(3, 1, 8))


def test_client_framing_numbers_requests_and_checks_answers():
    import struct

    from common.protocol.frame import ClientFraming, FrameDecoder, parse_request_header

    framing = ClientFraming("tester", max_response_bytes=100)
    first, second = framing.request(18, 3, [b"body"]), framing.request(18, 3, [b"body"])
    headers = [parse_request_header(f)[0] for f in FrameDecoder().feed(first + second)]
    assert [h.correlation_id for h in headers] == [1, 2] and headers[0].client_id == "tester"
    assert framing.body_size(struct.pack(">ii", 4 + 10, 2)) == 10
    for head in (struct.pack(">ii", 14, 1), struct.pack(">ii", 101, 2), struct.pack(">ii", 3, 2)):
        with pytest.raises(ProtocolError):
            framing.body_size(head)


# --- large frames' buffers lent again (FrameBuffers) -----------------------------------------

POOLED_FRAMES = [b"p" * 40, b"q", b"r" * 33, b"s" * 64, b"t" * 20]  # 17+ bytes: each a buffer of its own
POOLED_STREAM = b"".join(sized(f) for f in POOLED_FRAMES)


@pytest.mark.parametrize("read", [1, 2, 5, SMALL_RECEIVE, SMALL_RECEIVE + 1, 1000])
def test_pooled_frames_arrive_whole_in_any_reads(read: int) -> None:
    decoder = FrameDecoder(1000, receive_bytes=SMALL_RECEIVE, buffers=FrameBuffers())
    assert [bytes(f) for f in receive_in_reads(decoder, POOLED_STREAM + MIXED_STREAM, read)] \
        == POOLED_FRAMES + MIXED_FRAMES
    assert decoder.buffered == 0


def test_a_buffer_nothing_refers_to_is_lent_again() -> None:
    buffers = FrameBuffers()
    decoder = FrameDecoder(1000, receive_bytes=SMALL_RECEIVE, buffers=buffers)
    [first] = decoder.feed(sized(b"a" * 40))
    assert isinstance(first, memoryview) and len(first.obj) == 64  # a view of a 64-byte buffer
    lent = id(first.obj)  # not the object: a reference to it is a use (the pool keeps it alive)
    del first
    [second] = decoder.feed(sized(b"b" * 50))
    assert isinstance(second, memoryview) and id(second.obj) == lent and bytes(second) == b"b" * 50
    assert buffers.pooled_bytes == 64


def test_a_frame_still_referred_to_keeps_its_bytes() -> None:
    """The buffer of a frame someone still reads (a Produce's records view, a parked request)
    is never lent to a later frame, whichever way it is held."""
    buffers = FrameBuffers()
    decoder = FrameDecoder(1000, receive_bytes=SMALL_RECEIVE, buffers=buffers)
    [whole] = decoder.feed(sized(b"x" * 64))  # exactly a power of two: the bytearray itself
    [viewed] = decoder.feed(sized(b"y" * 40))
    records = viewed[10:20]  # as a Produce's records stay a view of the request
    del viewed
    later = [f for _ in range(3) for f in decoder.feed(sized(b"z" * 60))]
    assert bytes(whole) == b"x" * 64 and bytes(records) == b"y" * 10
    assert all(bytes(f) == b"z" * 60 for f in later)
    assert buffers.pooled_bytes == 64 * 5


def test_a_buffer_is_not_lent_while_its_frame_is_still_arriving() -> None:
    buffers = FrameBuffers()
    one = FrameDecoder(1000, receive_bytes=SMALL_RECEIVE, buffers=buffers)
    two = FrameDecoder(1000, receive_bytes=SMALL_RECEIVE, buffers=buffers)
    assert one.feed(sized(b"1" * 40)[:30]) == []  # half of a frame: its buffer is filling
    [other] = two.feed(sized(b"2" * 40))
    [done] = one.feed(sized(b"1" * 40)[30:])
    assert bytes(done) == b"1" * 40 and bytes(other) == b"2" * 40


def test_the_pool_is_bounded_and_lends_its_own_past_the_bound() -> None:
    buffers = FrameBuffers(max_bytes=128)
    decoder = FrameDecoder(1000, receive_bytes=SMALL_RECEIVE, buffers=buffers)
    held = [f for _ in range(4) for f in decoder.feed(sized(b"h" * 60))]  # 2 pooled, 2 of their own
    assert [bytes(f) for f in held] == [b"h" * 60] * 4
    assert buffers.pooled_bytes == 128
    del held
    [big] = decoder.feed(sized(b"b" * 100))  # room made from buffers nobody holds
    assert bytes(big) == b"b" * 100 and buffers.pooled_bytes == 128


def test_a_frame_over_the_pooled_size_gets_a_buffer_of_its_own() -> None:
    buffers = FrameBuffers()
    decoder = FrameDecoder(POOLED_FRAME_BYTES + 1, buffers=buffers)
    [frame] = decoder.feed(sized(bytes(POOLED_FRAME_BYTES + 1)))
    assert isinstance(frame, bytearray) and len(frame) == POOLED_FRAME_BYTES + 1
    assert buffers.pooled_bytes == 0
