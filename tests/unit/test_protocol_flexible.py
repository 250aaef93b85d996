"""Tests for the flexible (KIP-482) forms in common/protocol/primitives.py and the header
versions in api_keys/frame: compact strings, bytes and arrays (unsigned varint of length + 1,
0 for null), tagged-field sections, request header v2 / response header v1, and the
ApiVersions exception. One table drives Reader and Writer; every malformed input raises
ProtocolError."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.protocol.api_keys import (
    FIRST_FLEXIBLE_VERSION,
    SUPPORTED_VERSIONS,
    ApiKey,
    is_flexible,
    reader_for,
    request_header_version,
    response_header_version,
    writer_for,
)
from common.protocol.frame import (
    RequestHeader,
    encode_request_header,
    frame_response,
    frame_response_for,
    join_chunks,
    parse_request_header,
    strip_response_header,
)
from common.protocol.primitives import ProtocolError, Reader, Writer

# (method, value, compact bytes)
COMPACT_CASES = [
    ("string", "", b"\x01"),
    ("string", "ab", b"\x03ab"),
    ("string", "é", b"\x03\xc3\xa9"),
    ("nullable_string", None, b"\x00"),
    ("nullable_string", "x", b"\x02x"),
    ("bytes_", b"", b"\x01"),
    ("bytes_", b"\x00\xff", b"\x03\x00\xff"),
    ("nullable_bytes", None, b"\x00"),
    ("nullable_bytes", b"z", b"\x02z"),
    ("string", "a" * 200, b"\xc9\x01" + b"a" * 200),  # 201 = varint c9 01
]


def _read(method: str, data: bytes) -> object:
    value = getattr(Reader(data, flexible=True), method)()
    return bytes(value) if isinstance(value, memoryview) else value


@pytest.mark.parametrize(("method", "value", "data"), COMPACT_CASES)
def test_compact_forms_round_trip_exactly(method: str, value: object, data: bytes) -> None:
    w = Writer(flexible=True)
    getattr(w, method)(value)
    assert w.to_bytes() == data
    assert _read(method, data) == value
    for cut in range(len(data)):
        with pytest.raises(ProtocolError):
            _read(method, data[:cut])


@pytest.mark.parametrize(("method", "data"), [
    ("string", b"\x00"),          # null where a string is required
    ("bytes_", b"\x00"),
    ("string", b"\x05ab"),        # length past the end
    ("string", b"\x02\xff"),      # not UTF-8
    ("string", b"\xff\xff\xff\xff\x7f"),  # a huge length: refused before allocating
    ("string", b"\xff\xff\xff\xff\xff\x01"),  # varint longer than 5 bytes
])
def test_malformed_compact_input_is_a_protocol_error(method: str, data: bytes) -> None:
    with pytest.raises(ProtocolError):
        _read(method, data)


def test_compact_arrays_and_null() -> None:
    w = Writer(flexible=True)
    w.array(("a", "bc"), Writer.string)
    w.nullable_array(None, Writer.string)
    w.nullable_array((), Writer.string)
    w.int32_array((1, -1))
    data = w.to_bytes()
    assert data == b"\x03\x02a\x03bc" + b"\x00" + b"\x01" + b"\x03" + struct.pack(">ii", 1, -1)
    r = Reader(data, flexible=True)
    assert r.array(Reader.string, 1) == ("a", "bc")
    assert r.nullable_array(Reader.string, 1) is None
    assert r.nullable_array(Reader.string, 1) == ()
    assert r.int32_array() == (1, -1)
    assert r.remaining == 0
    with pytest.raises(ProtocolError):
        Reader(b"\x00", flexible=True).array(Reader.string, 1)  # null where an array is required
    with pytest.raises(ProtocolError):
        Reader(b"\xff\xff\x03", flexible=True).array(Reader.string, 1)  # 65534 items in 0 bytes


def test_tagged_fields_are_empty_when_written_and_skipped_when_read() -> None:
    w = Writer(flexible=True)
    w.int8(1)
    w.tagged_fields()
    assert w.to_bytes() == b"\x01\x00"
    classic = Writer()
    classic.tagged_fields()
    assert classic.to_bytes() == b""  # a classic struct has no section
    r = Reader(b"\x02\x00\x01x\x07\x02yzrest", flexible=True)
    r.tagged_fields()  # unknown tags are skipped, as Kafka keeps them as raw fields
    assert bytes(r.rest()) == b"rest"
    r = Reader(b"rest")
    r.tagged_fields()  # classic: nothing read
    assert r.pos == 0


@pytest.mark.parametrize("data", [
    b"\x02\x05\x00\x01\x00",            # tags not ascending
    b"\x02\x01\x00\x01\x00",            # a tag twice
    b"\x01\x00\x05ab",                  # size past the end
    b"\x01\x00",                        # size missing
    b"\xff\xff\xff\xff\x0f",            # a count far beyond any real message
])
def test_malformed_tagged_sections_are_protocol_errors(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        Reader(data, flexible=True).tagged_fields()


@given(st.lists(st.one_of(st.none(), st.text(max_size=40)), max_size=20),
       st.lists(st.binary(max_size=300), max_size=5), st.booleans())
def test_round_trip_property(strings: list[str | None], blobs: list[bytes], flexible: bool) -> None:
    w = Writer(flexible=flexible)
    w.array(strings, Writer.nullable_string)
    w.array(blobs, Writer.bytes_)
    w.tagged_fields()
    r = Reader(w.to_bytes(), flexible=flexible)
    assert r.array(Reader.nullable_string, 1) == tuple(strings)
    assert tuple(bytes(b) for b in r.array(Reader.bytes_, 1)) == tuple(blobs)
    r.tagged_fields()
    assert r.remaining == 0


@given(st.binary(max_size=64))
def test_any_bytes_parse_or_raise_protocol_error(data: bytes) -> None:
    r = Reader(data, flexible=True)
    try:
        r.array(lambda r: (r.nullable_string(), r.nullable_bytes(), r.tagged_fields()), 2)
        r.tagged_fields()
    except ProtocolError:
        pass


def test_every_flexible_threshold_is_kafkas_and_above_classic_ranges() -> None:
    # Kafka's "flexibleVersions" per message JSON.
    assert FIRST_FLEXIBLE_VERSION[ApiKey.LIST_OFFSETS] == 6
    assert FIRST_FLEXIBLE_VERSION[ApiKey.API_VERSIONS] == 3
    assert FIRST_FLEXIBLE_VERSION[ApiKey.METADATA] == 9
    assert set(SUPPORTED_VERSIONS) <= set(FIRST_FLEXIBLE_VERSION) | {ApiKey.OFFSET_DELETE, ApiKey.SASL_HANDSHAKE}
    assert not is_flexible(ApiKey.OFFSET_DELETE, 0)  # never flexible
    assert not is_flexible(ApiKey.SASL_HANDSHAKE, 1)  # never flexible (its frame may even be raw, v0)
    assert reader_for(ApiKey.LIST_OFFSETS, 6, b"").flexible
    assert not writer_for(ApiKey.LIST_OFFSETS, 5).flexible


@pytest.mark.parametrize(("key", "version", "request_header", "response_header"), [
    (ApiKey.LIST_OFFSETS, 5, 1, 0),
    (ApiKey.LIST_OFFSETS, 6, 2, 1),
    (ApiKey.API_VERSIONS, 2, 1, 0),
    (ApiKey.API_VERSIONS, 3, 2, 0),  # Kafka's special case: the response header stays v0
    (ApiKey.API_VERSIONS, 4, 2, 0),
    (12345, 0, 1, 0),                # unknown APIs count as classic
])
def test_header_versions(key: int, version: int, request_header: int, response_header: int) -> None:
    assert request_header_version(key, version) == request_header
    assert response_header_version(key, version) == response_header


def test_request_header_v2_round_trip_and_response_header_v1() -> None:
    header = RequestHeader(int(ApiKey.LIST_OFFSETS), 7, 9, "rdkafka")
    data = encode_request_header(header)
    assert data == struct.pack(">hhih", 2, 7, 9, 7) + b"rdkafka" + b"\x00"  # client_id stays classic
    parsed, body = parse_request_header(data + b"\x01\x02")
    assert parsed == header and bytes(body) == b"\x01\x02"
    with pytest.raises(ProtocolError):
        parse_request_header(data[:-1])  # tagged section missing
    assert join_chunks(frame_response(9, [b"xy"], 1)) == struct.pack(">ii", 7, 9) + b"\x00xy"
    assert join_chunks(frame_response_for(header, [b"xy"])) == struct.pack(">ii", 7, 9) + b"\x00xy"
    api_versions = RequestHeader(int(ApiKey.API_VERSIONS), 3, 9, "rdkafka")
    assert join_chunks(frame_response_for(api_versions, [b"xy"])) == struct.pack(">ii", 6, 9) + b"xy"
    assert bytes(strip_response_header(ApiKey.LIST_OFFSETS, 7, memoryview(b"\x00xy"))) == b"xy"
    assert bytes(strip_response_header(ApiKey.API_VERSIONS, 3, memoryview(b"xy"))) == b"xy"
