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
