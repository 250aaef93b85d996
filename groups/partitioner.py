"""Which `__consumer_offsets` partition coordinates a group: Kafka's `partitionFor(groupId)`.

Kafka computes `Utils.abs(groupId.hashCode()) % groupMetadataTopicPartitionCount` where
`hashCode` is Java's String.hashCode over UTF-16 code units and `Utils.abs` maps
Integer.MIN_VALUE to 0 (Java's Math.abs would leave it negative). Tools that compute the
coordinator themselves (kafka-consumer-groups, monitoring) must agree with us.
"""

from __future__ import annotations

from typing import Final

from common.config import default_int

GROUP_METADATA_TOPIC_NAME: Final = "__consumer_offsets"
DEFAULT_OFFSETS_TOPIC_PARTITIONS: Final = default_int("offsets.topic.num.partitions")

_INT32_MIN: Final = -(2**31)


def java_string_hash_code(value: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 units, as an int32."""
    h = 0
    data = value.encode("utf-16-be")
    for i in range(0, len(data), 2):  # one UTF-16 code unit per step, surrogates included
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def kafka_abs(value: int) -> int:
    """Kafka's Utils.abs: the absolute value, and 0 for Integer.MIN_VALUE."""
    return 0 if value == _INT32_MIN else abs(value)


def coordinator_partition(group_id: str, partition_count: int) -> int:
    """The partition of `__consumer_offsets` whose leader coordinates `group_id`."""
    if partition_count <= 0:
        raise ValueError(f"partition count must be positive, got {partition_count}")
    return kafka_abs(java_string_hash_code(group_id)) % partition_count
