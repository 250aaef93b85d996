"""Tests for common/protocol/primitives.py: one table drives Reader and Writer; malformed
input raises ProtocolError, and lengths are checked before anything is allocated."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.protocol.primitives import ProtocolError, Reader, Writer

U = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")

# (reader/writer method, value, exact bytes)
CASES = [
    ("int8", -2, b"\xfe"),
    ("int16", -2, b"\xff\xfe"),
    ("int32", 0x01020304, b"\x01\x02\x03\x04"),
    ("int64", -1, b"\xff" * 8),
    ("uint32", 0xFFFFFFFE, b"\xff\xff\xff\xfe"),
    ("boolean", True, b"\x01"),
    ("boolean", False, b"\x00"),
    ("uvarint", 0, b"\x00"),
    ("uvarint", 300, b"\xac\x02"),
    ("varint", 0, b"\x00"),
    ("varint", -1, b"\x01"),
    ("varint", 1, b"\x02"),
    ("varint", -64, b"\x7f"),
    ("varint", 64, b"\x80\x01"),
    ("varint", 2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
    ("varint", -(2**31), b"\xff\xff\xff\xff\x0f"),
    ("varlong", -(2**63), b"\xff" * 9 + b"\x01"),
    ("varlong", 2**63 - 1, b"\xfe" + b"\xff" * 8 + b"\x01"),
    ("string", "", b"\x00\x00"),
    ("string", "héllo", b"\x00\x06h\xc3\xa9llo"),
    ("nullable_string", None, b"\xff\xff"),
    ("nullable_string", "a", b"\x00\x01a"),
    ("bytes_", b"", b"\x00\x00\x00\x00"),
    ("bytes_", b"ab", b"\x00\x00\x00\x02ab"),
    ("nullable_bytes", None, b"\xff\xff\xff\xff"),
    ("nullable_bytes", b"\x00", b"\x00\x00\x00\x01\x00"),
    ("uuid", U, U.bytes),
    ("int32_array", (1, -1), b"\x00\x00\x00\x02\x00\x00\x00\x01\xff\xff\xff\xff"),
    ("int32_array", (), b"\x00\x00\x00\x00"),
]


@pytest.mark.parametrize(("method", "value", "data"), CASES)
def test_reader_decodes(method: str, value: object, data: bytes) -> None:
    r = Reader(data + b"trailing")
    assert getattr(r, method)() == value
    assert r.remaining == len(b"trailing")


@pytest.mark.parametrize(("method", "value", "data"), CASES)
def test_writer_encodes(method: str, value: object, data: bytes) -> None:
    w = Writer()
    getattr(w, method)(value)
    assert w.to_bytes() == data


@pytest.mark.parametrize(("method", "value", "data"), CASES)
def test_every_truncation_raises_protocol_error(method: str, value: object, data: bytes) -> None:
    for cut in range(len(data)):
        with pytest.raises(ProtocolError):
            getattr(Reader(data[:cut]), method)()


@pytest.mark.parametrize(("method", "data"), [
    ("string", b"\xff\xff"),  # null where not nullable
    ("nullable_string", b"\xff\xfe"),  # -2
    ("string", b"\x00\x02\xc3\x28"),  # bad UTF-8
    ("bytes_", b"\xff\xff\xff\xff"),
    ("nullable_bytes", b"\xff\xff\xff\xfe"),
    ("int32_array", b"\xff\xff\xff\xff"),
    ("uvarint", b"\x80\x80\x80\x80\x80\x01"),  # six bytes
    ("varint", b"\xff\xff\xff\xff\x1f"),  # > 32 bits
    ("varlong", b"\xff" * 10 + b"\x01"),
])
def test_malformed_values_raise_protocol_error(method: str, data: bytes) -> None:
    with pytest.raises(ProtocolError):
        getattr(Reader(data), method)()


def test_array_count_checked_against_remaining_bytes_before_reading_items() -> None:
    calls = []

    def item(r: Reader) -> int:
        calls.append(1)
        return r.int32()

    data = struct.pack(">i", 2**31 - 1) + b"\x00" * 8
    with pytest.raises(ProtocolError, match="cannot fit"):
        Reader(data).array(item, 4)
    assert calls == []
    assert Reader(struct.pack(">i", 2) + b"\x00" * 8).array(item, 4) == (0, 0)


def test_nullable_array_and_string_array() -> None:
    w = Writer()
    w.nullable_array(None, Writer.string)
    w.nullable_array(("a",), Writer.string)
    data = w.to_bytes()
    assert data == b"\xff\xff\xff\xff" + b"\x00\x00\x00\x01\x00\x01a"
    r = Reader(data)
    assert r.nullable_array(Reader.string, 2) is None
    assert r.nullable_array(Reader.string, 2) == ("a",)


def test_tagged_fields_are_skipped_and_checked() -> None:
    r = Reader(b"\x02\x00\x01x\x05\x02yzrest")
    r.skip_tagged_fields()
    assert bytes(r.rest()) == b"rest"
    with pytest.raises(ProtocolError):
        Reader(b"\x02\x05\x00\x01\x00").skip_tagged_fields()  # tags not ascending
    with pytest.raises(ProtocolError):
        Reader(b"\x01\x00\x05ab").skip_tagged_fields()  # size past the end


def test_records_placeholder_becomes_its_own_chunk() -> None:
    class Slice:
        length = 3

    w = Writer()
    w.int8(1)
    placeholder = Slice()
    w.records(placeholder)
    w.int8(2)
    assert w.chunks() == [b"\x01\x00\x00\x00\x03", placeholder, b"\x02"]
    assert w.size() == 9
    with pytest.raises(ValueError):
        w.to_bytes()


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(v: int) -> None:
    w = Writer()
    w.varlong(v)
    assert Reader(w.to_bytes()).varlong() == v


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_round_trip(v: int) -> None:
    w = Writer()
    w.varint(v)
    assert Reader(w.to_bytes()).varint() == v


@given(st.binary(max_size=64), st.sampled_from([c[0] for c in CASES]))
def test_any_bytes_parse_or_raise_protocol_error(data: bytes, method: str) -> None:
    try:
        getattr(Reader(data), method)()
    except ProtocolError:
        pass
