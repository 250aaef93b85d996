"""The codecs of a record batch v2's records section, over cramjam. No I/O, no state.

The broker stores batches compressed as producers sent them unless the topic's
compression.type names a codec: then `recompress_batch` rewrites each batch in that codec
(one decompress and one compress per batch: records themselves are never parsed). Formats, as Kafka clients write
them:

- gzip: a gzip stream (RFC 1952); concatenated members are accepted.
- snappy: Java clients write snappy-java's *Xerial* framing; librdkafka writes Xerial or
  a bare raw-snappy block. `decompress` tells them apart by the Xerial magic.
  `compress` writes Xerial, like the Java producer, so every client can read it.
- lz4: the LZ4 *frame* format (magic 0x184D2204), as magic-2 batches require.
- zstd: one or more zstd frames; streamed frames that omit the content size are fine.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import cramjam
from crc32c import crc32c

from common.config import default_int
from common.errors import CorruptRecordError, UnsupportedCompressionError
from common.record_batch import (
    ATTRIBUTES_POS,
    COMPRESSION_MASK,
    CRC_POS,
    HEADER_SIZE,
    LENGTH_POS,
    LOG_OVERHEAD,
    CompressionType,
    RecordBatchHeader,
)
from common.units import KIB

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_VERSION = 1
XERIAL_MIN_COMPATIBLE_VERSION = 1
# magic, version, min compatible version: what snappy-java's SnappyOutputStream writes.
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_BLOCK_LENGTH = struct.Struct(">i")
# snappy-java's default block size: uncompressed bytes per Xerial block.
XERIAL_BLOCK_SIZE = 32 * KIB

# The level of a codec asked for none: Kafka's defaults, read from the key table (gzip's
# default, -1, is java.util.zip.Deflater.DEFAULT_COMPRESSION, which zlib takes as 6).
GZIP_LEVEL = 6
ZSTD_LEVEL = default_int("compression.zstd.level")
LZ4_LEVEL = default_int("compression.lz4.level")
GZIP_DEFAULT_LEVEL = -1  # java.util.zip.Deflater.DEFAULT_COMPRESSION: zlib's 6
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_UINT32 = struct.Struct(">I")

Buffer = bytes | bytearray | memoryview


def compress(codec: CompressionType | int, data: Buffer, level: int | None = None) -> bytes:
    """The records section `data` compressed with `codec` at `level` (None: Kafka's default for
    the codec; snappy has no levels); NONE returns it unchanged."""
    codec = _codec(codec)
    if codec is CompressionType.NONE:
        return bytes(data)
    if codec is CompressionType.GZIP:
        gzip_level = GZIP_LEVEL if level is None or level == GZIP_DEFAULT_LEVEL else level
        return bytes(cramjam.gzip.compress(data, level=gzip_level))
    if codec is CompressionType.SNAPPY:
        return _xerial_compress(data)
    if codec is CompressionType.LZ4:
        return bytes(cramjam.lz4.compress(data, level=LZ4_LEVEL if level is None else level))
    return bytes(cramjam.zstd.compress(data, level=ZSTD_LEVEL if level is None else level))


def recompress_batch(buf: Buffer, pos: int, header: RecordBatchHeader, codec: CompressionType,
                     level: int | None = None) -> bytearray:
    """The batch at `pos` rewritten with its records section in `codec` (NONE: uncompressed).

    Kafka's LogValidator recompression, per batch: every header field but the codec bits,
    batchLength and the CRC is kept (offsets, timestamps, producer id/epoch/sequence), and
    the records keep their bytes, since a record's encoding does not depend on the codec.
    """
    with memoryview(buf) as view:
        records = decompress(header.compression, view[pos + HEADER_SIZE : pos + header.size])
        body = compress(codec, records, level)
        out = bytearray(HEADER_SIZE + len(body))
        out[:HEADER_SIZE] = view[pos : pos + HEADER_SIZE]
    out[HEADER_SIZE:] = body
    _INT32.pack_into(out, LENGTH_POS, len(out) - LOG_OVERHEAD)
    _INT16.pack_into(out, ATTRIBUTES_POS, (header.attributes & ~COMPRESSION_MASK) | int(codec))
    _UINT32.pack_into(out, CRC_POS, crc32c(memoryview(out)[ATTRIBUTES_POS:]))
    return out


def decompress(codec: CompressionType | int, data: Buffer) -> bytes:
    """The records section in `data` decompressed; raises CorruptRecordError if it is not
    valid `codec` output (never a cramjam exception)."""
    codec = _codec(codec)
    if codec is CompressionType.NONE:
        return bytes(data)
    if codec is CompressionType.SNAPPY:
        if bytes(data[: len(XERIAL_MAGIC)]) == XERIAL_MAGIC:
            return _xerial_decompress(data)
        return _run(codec, "raw snappy block", cramjam.snappy.decompress_raw, data)
    function = {
        CompressionType.GZIP: cramjam.gzip.decompress,
        CompressionType.LZ4: cramjam.lz4.decompress,
        CompressionType.ZSTD: cramjam.zstd.decompress,
    }[codec]
    return _run(codec, "data", function, data)


def xerial_frame(blocks: list[bytes]) -> bytes:
    """Wrap already raw-snappy-compressed `blocks` in Xerial framing (tests build on it)."""
    parts = [_XERIAL_HEADER.pack(XERIAL_MAGIC, XERIAL_VERSION, XERIAL_MIN_COMPATIBLE_VERSION)]
    for block in blocks:
        parts.append(_XERIAL_BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _codec(codec: CompressionType | int) -> CompressionType:
    try:
        return CompressionType(codec)
    except ValueError:
        raise UnsupportedCompressionError(f"unknown compression codec {codec}") from None


def _run(
    codec: CompressionType, what: str, function: Callable[[Buffer], cramjam.Buffer], data: Buffer
) -> bytes:
    try:
        return bytes(function(data))
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(
            f"{codec.name.lower()} decompression failed: invalid {what} ({exc})"
        ) from None


def _xerial_compress(data: Buffer) -> bytes:
    with memoryview(data) as view:
        blocks = [
            bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE]))
            for start in range(0, len(view), XERIAL_BLOCK_SIZE)
        ]
    return xerial_frame(blocks)


def _xerial_decompress(data: Buffer) -> bytes:
    if len(data) < _XERIAL_HEADER.size:
        raise CorruptRecordError(
            f"snappy decompression failed: Xerial header needs {_XERIAL_HEADER.size} bytes, "
            f"got {len(data)}"
        )
    out: list[bytes] = []
    pos = _XERIAL_HEADER.size
    # Bounded: every pass consumes at least the 4-byte block length.
    while pos < len(data):
        if len(data) - pos < _XERIAL_BLOCK_LENGTH.size:
            raise CorruptRecordError(
                f"snappy decompression failed: truncated Xerial block length at byte {pos}"
            )
        (length,) = _XERIAL_BLOCK_LENGTH.unpack_from(data, pos)
        pos += _XERIAL_BLOCK_LENGTH.size
        if length < 0 or length > len(data) - pos:
            raise CorruptRecordError(
                f"snappy decompression failed: Xerial block at byte {pos} claims {length} "
                f"bytes, {len(data) - pos} remain"
            )
        block = data[pos : pos + length]
        out.append(
            _run(CompressionType.SNAPPY, "Xerial block", cramjam.snappy.decompress_raw, block)
        )
        pos += length
    return b"".join(out)
