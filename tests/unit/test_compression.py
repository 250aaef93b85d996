"""Tests for broker/compression.py: every codec round-trips, clients' framings decode,
and bad input is always a CorruptRecordError naming the codec."""

from __future__ import annotations

import random
import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.compression import (
    XERIAL_BLOCK_SIZE,
    XERIAL_MAGIC,
    compress,
    decompress,
    xerial_frame,
)
from common.errors import CorruptRecordError, UnsupportedCompressionError
from common.record_batch import CompressionType

CODECS = list(CompressionType)
COMPRESSED = [c for c in CompressionType if c is not CompressionType.NONE]

PAYLOADS = {
    "empty": b"",
    "one byte": b"x",
    "text": b"hello tidelog " * 50,
    "random": random.Random(7).randbytes(5000),
    "several xerial blocks": b"0123456789abcdef" * (XERIAL_BLOCK_SIZE // 16 * 2 + 3),
}


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
def test_round_trip(codec: CompressionType, payload: bytes) -> None:
    assert decompress(codec, compress(codec, payload)) == payload


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_accepts_int_codes_and_buffers(codec: CompressionType) -> None:
    payload = bytearray(b"abc" * 100)
    assert decompress(int(codec), memoryview(compress(int(codec), payload))) == payload


def test_none_is_identity() -> None:
    assert compress(CompressionType.NONE, b"abc") == b"abc"
    assert decompress(CompressionType.NONE, b"abc") == b"abc"


def test_snappy_compress_writes_xerial_like_java() -> None:
    payload = PAYLOADS["several xerial blocks"]
    out = compress(CompressionType.SNAPPY, payload)
    assert out[:8] == XERIAL_MAGIC
    assert struct.unpack_from(">ii", out, 8) == (1, 1)
    (first_block,) = struct.unpack_from(">i", out, 16)
    first = bytes(cramjam.snappy.decompress_raw(out[20 : 20 + first_block]))
    assert first == payload[:XERIAL_BLOCK_SIZE]


def test_hand_built_xerial_decodes() -> None:
    chunks = [b"first chunk " * 10, b"", b"second", random.Random(3).randbytes(700)]
    blocks = [bytes(cramjam.snappy.compress_raw(chunk)) for chunk in chunks]
    framed = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    for block in blocks:
        framed += struct.pack(">i", len(block)) + block
    assert xerial_frame(blocks) == framed
    assert decompress(CompressionType.SNAPPY, framed) == b"".join(chunks)


def test_xerial_header_alone_is_empty() -> None:
    assert decompress(CompressionType.SNAPPY, xerial_frame([])) == b""


def test_raw_snappy_block_decodes() -> None:
    payload = b"librdkafka may send one raw block " * 20
    raw = bytes(cramjam.snappy.compress_raw(payload))
    assert decompress(CompressionType.SNAPPY, raw) == payload


def test_lz4_is_the_frame_format() -> None:
    assert compress(CompressionType.LZ4, b"abc")[:4] == b"\x04\x22\x4d\x18"


def test_zstd_streamed_frame_without_content_size() -> None:
    payload = b"streamed by zstd-jni " * 300
    compressor = cramjam.zstd.Compressor()
    compressor.compress(payload)
    frame = bytes(compressor.finish())
    frame_header_descriptor = frame[4]
    assert frame_header_descriptor >> 6 == 0 and not frame_header_descriptor & 0x20
    assert decompress(CompressionType.ZSTD, frame) == payload


@pytest.mark.parametrize("codec", [CompressionType.GZIP, CompressionType.ZSTD], ids=str)
def test_concatenated_members_decode(codec: CompressionType) -> None:
    assert decompress(codec, compress(codec, b"ab") + compress(codec, b"cd")) == b"abcd"


GARBAGE = {
    "empty": b"",
    "text": b"this is not compressed at all",
    "zeros": bytes(64),
    "ones": b"\xff" * 64,
}


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
@pytest.mark.parametrize("garbage", GARBAGE.values(), ids=GARBAGE.keys())
def test_garbage_is_corrupt_record(codec: CompressionType, garbage: bytes) -> None:
    with pytest.raises(CorruptRecordError, match=codec.name.lower()):
        decompress(codec, garbage)


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_every_truncation_is_corrupt_or_short(codec: CompressionType) -> None:
    payload = PAYLOADS["random"][:400] + PAYLOADS["text"]
    compressed = compress(codec, payload)
    for cut in range(len(compressed)):
        try:
            out = decompress(codec, compressed[:cut])
        except CorruptRecordError:
            continue
        assert out != payload, f"{codec.name} cut at {cut} decoded as the whole payload"


XERIAL_MALFORMED = {
    "short header": XERIAL_MAGIC + b"\x00\x00\x00\x01",
    "short block length": xerial_frame([]) + b"\x00\x00",
    "block past the end": xerial_frame([]) + struct.pack(">i", 100) + b"abc",
    "negative block length": xerial_frame([]) + struct.pack(">i", -5),
    "corrupt block": xerial_frame([b"\xff\xff\xff\xff\xff\xff"]),
    "empty block": xerial_frame([b""]),
}


@pytest.mark.parametrize("framed", XERIAL_MALFORMED.values(), ids=XERIAL_MALFORMED.keys())
def test_malformed_xerial_is_corrupt_record(framed: bytes) -> None:
    with pytest.raises(CorruptRecordError, match="snappy"):
        decompress(CompressionType.SNAPPY, framed)


@pytest.mark.parametrize("code", [5, 6, 7, -1])
def test_unknown_codec(code: int) -> None:
    with pytest.raises(UnsupportedCompressionError):
        compress(code, b"abc")
    with pytest.raises(UnsupportedCompressionError):
        decompress(code, b"abc")


@settings(max_examples=200, deadline=None)
@given(codec=st.sampled_from(COMPRESSED), data=st.binary(max_size=300))
def test_any_bytes_decompress_or_raise_corrupt(codec: CompressionType, data: bytes) -> None:
    try:
        decompress(codec, data)
    except CorruptRecordError:
        pass


@settings(max_examples=200, deadline=None)
@given(
    codec=st.sampled_from(COMPRESSED),
    payload=st.binary(max_size=300),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_damaged_output_decompresses_or_raises_corrupt(
    codec: CompressionType, payload: bytes, flips: list[tuple[int, int]]
) -> None:
    damaged = bytearray(compress(codec, payload))
    for index, value in flips:
        damaged[index % len(damaged)] = value
    try:
        decompress(codec, bytes(damaged))
    except CorruptRecordError:
        pass
