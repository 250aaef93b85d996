"""The bulk record scan and key hashing of the cleaner (broker/log/record_columns.py):
it agrees with the per-record scan on every kind of batch, wide chunks and narrow ones, and
any damage is a CorruptRecordError, never anything else."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log.record_columns import (
    NARROW,
    hash_key_bytes,
    hash_keys,
    scan_chunk,
    varints,
)
from broker.log.record_scan import scan_batch
from common.limits import SCAN_PADDING
from common.errors import CorruptRecordError
from common.record_batch import (
    HEADER_SIZE,
    CompressionType,
    TimestampType,
    parse_header,
    read_batches,
)
from common.records import Record, build_batch

T0 = 1_700_000_000_000


def records(n: int, *, base: int = 0, value_size: int = 20, seed: int = 1) -> list[Record]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        key = None if i % 7 == 3 else b"key-%d" % rng.randrange(50)
        value = None if i % 5 == 4 else rng.randbytes(rng.randrange(value_size + 1))
        out.append(Record(offset=base + i * 2, timestamp=T0 - 13 * i, key=key, value=value,
                          headers=()))
    return out


def batch(n: int, *, base: int = 0, **kw: object) -> bytes:
    return build_batch(records(n, base=base, seed=base, **{k: v for k, v in kw.items()  # type: ignore[arg-type]
                                                           if k == "value_size"}),
                       base_offset=base, **{k: v for k, v in kw.items() if k != "value_size"})  # type: ignore[arg-type]


def reference(chunk: bytes) -> list[tuple[int, int, bytes | None, bool, int]]:
    out = []
    for pos, header in read_batches(chunk):
        scanned = scan_batch(memoryview(chunk)[pos : pos + header.size], header)
        out.extend((r.offset, r.timestamp, r.key, r.is_tombstone, r.end - r.start)
                   for r in scanned.records)
    return out


def bulk(chunk: bytes) -> list[tuple[int, int, bytes | None, bool, int]]:
    cols = scan_chunk(chunk, read_batches(chunk))
    return [(int(o), int(t), None if kl < 0 else cols.buf[ks : ks + kl].tobytes(), bool(tb),
             int(e - s))
            for o, t, ks, kl, tb, s, e in zip(cols.offset, cols.timestamp, cols.key_start,
                                               cols.key_length, cols.is_tombstone, cols.start,
                                               cols.end)]


# (name, batches of the chunk)
CHUNKS = [
    ("one batch (narrow walk)", [batch(40)]),
    ("empty batch", [build_batch([], base_offset=0)]),
    ("wide chunk of uneven batches",
     [batch(n, base=1000 * i) for i, n in enumerate([1, 30, 7, 100, 2] * (NARROW + 1))]),
    ("every codec", [batch(25, base=100 * i, compression=c)
                     for i, c in enumerate(list(CompressionType) * 3)]),
    ("log append time", [batch(10, base=100 * i, timestamp_type=TimestampType.LOG_APPEND_TIME)
                         for i in range(NARROW + 2)]),
    # the walk's matrix of ends (batches of like sizes): in the batches' own order, in
    # another order, and with the longest batches finished one record at a time
    ("batches of one size", [batch(16, base=100 * i) for i in range(NARROW + 5)]),
    ("batches of like sizes, shuffled",
     [batch(n, base=100 * i) for i, n in enumerate([20, 25, 20, 20, 25] * 6)]),
    ("batches of like sizes and a few long ones",
     [batch(n, base=100 * i) for i, n in enumerate([20, 25, 60, 20, 25, 20, 20] * 3
                                                   + [25] * 9)]),
    ("records of 8 KiB and more (3-byte length prefixes)",
     [batch(3, base=100 * i, value_size=40_000) for i in range(NARROW + 2)]),
]


@pytest.mark.parametrize("parts", [c[1] for c in CHUNKS], ids=[c[0] for c in CHUNKS])
def test_bulk_scan_agrees_with_the_per_record_scan(parts: list[bytes]) -> None:
    chunk = b"".join(parts)
    assert bulk(chunk) == reference(chunk)


def test_a_padded_chunk_is_scanned_in_place() -> None:
    chunk = b"".join(batch(20, base=100 * i) for i in range(12))
    padded = bytearray(chunk + bytes(SCAN_PADDING))
    cols = scan_chunk(memoryview(padded), read_batches(chunk))
    assert np.shares_memory(cols.buf, np.frombuffer(padded, np.uint8))
    assert bulk(chunk) == reference(chunk)


@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("cut", [1, 5, 20, 33])
def test_damaged_records_are_corrupt(wide: bool, cut: int) -> None:
    good = [batch(4, base=100 * i) for i in range(NARROW + 3 if wide else 1)]
    data = good[-1]
    header = parse_header(data)
    damaged = data[:HEADER_SIZE] + data[HEADER_SIZE + cut :] + bytes(cut)
    chunk = b"".join(good[:-1]) + damaged
    positions = [pos for pos, _ in read_batches(b"".join(good))]
    with pytest.raises(CorruptRecordError):
        scan_chunk(chunk, [(p, parse_header(chunk, p, require_body=False)) for p in positions[:-1]]
                   + [(positions[-1], header)])


@settings(max_examples=200, deadline=None)
@given(flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1,
                      max_size=4), wide=st.booleans())
def test_any_damage_parses_or_is_corrupt(flips: list[tuple[int, int]], wide: bool) -> None:
    parts = [batch(6, base=100 * i) for i in range(NARROW + 2 if wide else 1)]
    chunk = bytearray(b"".join(parts))
    batches = read_batches(bytes(chunk))
    sections = [(p + HEADER_SIZE, p + h.size) for p, h in batches]
    for where, value in flips:  # only inside records sections: the headers are CRC-checked
        start, end = sections[where % len(sections)]
        chunk[start + where % (end - start)] = value
    try:
        scan_chunk(bytes(chunk), batches)
    except CorruptRecordError:
        pass


def zigzag(v: int) -> bytes:
    z = ((v << 1) ^ (v >> 63)) & (1 << 64) - 1
    out = bytearray()
    while True:  # bounded: 10 bytes at most
        byte, z = z & 0x7F, z >> 7
        out.append(byte | (0x80 if z else 0))
        if not z:
            return bytes(out)


def test_varints_of_every_size() -> None:
    values = [0, 1, -1, 63, -64, 64, 8191, -8192, 8192, 1 << 20, -(1 << 40), (1 << 62),
              -(1 << 63), (1 << 63) - 1]
    encoded = [zigzag(v) for v in values]
    positions = np.cumsum([0] + [len(e) for e in encoded[:-1]])
    buf = np.frombuffer(b"".join(encoded) + bytes(SCAN_PADDING), np.uint8)
    decoded, after = varints(buf, positions)
    assert decoded.tolist() == values
    assert after.tolist() == (positions + [len(e) for e in encoded]).tolist()


def test_key_hashes() -> None:
    keys = [b"", b"a", b"a\x00", b"abcdefgh", b"abcdefgh\x00", b"abcdefghi", b"x" * 100, b"a"]
    h1, h2 = hash_key_bytes(keys)
    pairs = list(zip(h1.tolist(), h2.tolist()))
    assert pairs[1] == pairs[-1]  # equal keys, equal hashes
    assert len(set(pairs[:-1])) == len(keys) - 1  # trailing zeros and lengths count
    # a key hashes the same wherever it lies in a buffer
    buf = np.frombuffer(b"zz" + b"abcdefghi" + bytes(SCAN_PADDING), np.uint8)
    g1, g2 = hash_keys(buf, np.array([2]), np.array([9]))
    assert (int(g1[0]), int(g2[0])) == pairs[5]
    assert hash_key_bytes([b"a"], seed=1)[0][0] != h1[1]


@pytest.mark.parametrize("length", [1, 7, 8, 9, 12, 16, 23])
def test_keys_of_one_length_hash_as_keys_of_mixed_lengths(length: int) -> None:
    # keys of one length take the path without gathers or per-key masks: same hashes
    keys = [bytes([i]) * length for i in range(1, 6)]
    alone = hash_key_bytes(keys)
    mixed = hash_key_bytes([*keys, b"k" * (length + 9)])
    assert alone[0].tolist() == mixed[0][:-1].tolist()
    assert alone[1].tolist() == mixed[1][:-1].tolist()
    # a buffer whose bytes after each key are not zero: the mask must cut them
    buf = np.frombuffer(b"\xff".join(keys) + b"\xff" * SCAN_PADDING, np.uint8)
    starts = np.arange(len(keys), dtype=np.int64) * (length + 1)
    g1, g2 = hash_keys(buf, starts, np.full(len(keys), length, np.int64))
    assert g1.tolist() == alone[0].tolist() and g2.tolist() == alone[1].tolist()
