"""tidelog/partitioner.py against Kafka's own vectors (UtilsTest.testMurmur2) and the partition rule."""

from __future__ import annotations

import pytest

from tidelog.partitioner import murmur2, partition_for_key, to_positive

# org.apache.kafka.common.utils.UtilsTest#testMurmur2
KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("key", "expected"), KAFKA_VECTORS)
def test_murmur2_matches_kafka(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


@pytest.mark.parametrize(("number", "expected"),
                         [(0, 0), (5, 5), (-1, 0x7FFFFFFF), (-2**31, 0), (2**31 - 1, 2**31 - 1)])
def test_to_positive_clears_the_sign_bit(number: int, expected: int) -> None:
    assert to_positive(number) == expected


@pytest.mark.parametrize(("key", "partitions", "expected"), [
    (b"21", 3, (-973932308 & 0x7FFFFFFF) % 3),
    (b"foobar", 10, (-790332482 & 0x7FFFFFFF) % 10),
    (b"abc", 7, 479470107 % 7),
    (b"", 4, to_positive(murmur2(b"")) % 4),
])
def test_partition_for_key(key: bytes, partitions: int, expected: int) -> None:
    assert partition_for_key(key, partitions) == expected


def test_every_tail_length_and_range() -> None:
    for length in range(0, 12):  # 0-3 byte tails over several whole words
        h = murmur2(bytes(range(length)))
        assert -2**31 <= h < 2**31
        assert 0 <= partition_for_key(bytes(range(length)), 6) < 6


def test_no_partitions_is_an_error() -> None:
    with pytest.raises(ValueError, match="num_partitions"):
        partition_for_key(b"k", 0)
