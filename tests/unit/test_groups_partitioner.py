"""groups/partitioner.py: Java's String.hashCode and Kafka's Utils.abs decide the coordinator."""

from __future__ import annotations

import pytest

from groups.partitioner import coordinator_partition, java_string_hash_code, kafka_abs


@pytest.mark.parametrize("value, expected", [
    ("", 0),
    ("hello", 99162322),
    ("Aa", 2112), ("BB", 2112),  # Java's classic collision
    ("polygenelubricants", -2**31),  # hashes to Integer.MIN_VALUE
    ("my-group", -1906497762),
    ("\U0001F600", 0xD83D * 31 + 0xDE00),  # a surrogate pair counts as two UTF-16 units
    ("é", 0xE9),
])
def test_java_string_hash_code(value: str, expected: int) -> None:
    assert java_string_hash_code(value) == expected


@pytest.mark.parametrize("value, expected", [(5, 5), (-5, 5), (0, 0), (-2**31, 0), (2**31 - 1, 2**31 - 1)])
def test_kafka_abs_maps_min_value_to_zero(value: int, expected: int) -> None:
    assert kafka_abs(value) == expected


@pytest.mark.parametrize("group, partitions, expected", [
    ("polygenelubricants", 50, 0),  # Math.abs would give a negative partition
    ("my-group", 50, 1906497762 % 50),
    ("hello", 50, 99162322 % 50),
    ("anything", 1, 0),
])
def test_coordinator_partition(group: str, partitions: int, expected: int) -> None:
    assert coordinator_partition(group, partitions) == expected


def test_coordinator_partition_needs_partitions() -> None:
    with pytest.raises(ValueError):
        coordinator_partition("g", 0)
