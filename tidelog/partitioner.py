"""Kafka's Java default partitioner for keyed records: murmur2, made positive, modulo.

`partition_for_key(key, n) == Utils.toPositive(Utils.murmur2(key)) % n`, which is what
`BuiltInPartitioner.partitionForKey` (and librdkafka's `murmur2_random` partitioner) choose.
`tidelog produce` partitions with it; the Spark writer lets librdkafka hash in C, and its
tests hold that to this module.
"""

from __future__ import annotations

import struct
from typing import Final

SEED: Final = 0x9747B28C
M: Final = 0x5BD1E995
R: Final = 24
MASK32: Final = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2`: the 32-bit hash as Java's signed int."""
    length = len(data)
    h = (SEED ^ length) & MASK32
    whole = length & ~3
    for (k,) in struct.iter_unpack("<I", data[:whole]):
        k = (k * M) & MASK32
        k ^= k >> R
        k = (k * M) & MASK32
        h = (h * M) & MASK32
        h ^= k
    tail = length & 3  # Java's switch falls through: 3 takes in bytes 2, 1 and 0
    if tail >= 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * M) & MASK32
    h ^= h >> 13
    h = (h * M) & MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's `Utils.toPositive`: clear the sign bit (not abs(): abs(MIN_VALUE) overflows in Java)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition a Java producer with the default partitioner sends `key` to."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions
