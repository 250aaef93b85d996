"""Where an offsets reset moves a group (kafka-consumer-groups --reset-offsets), pure.

Shared by `tidelog groups reset-offsets` and the admin API's POST /v1/groups/{id}/offsets:
a target per partition, clamped to [log start offset, log end offset] as Kafka's tool does.
Also the partitions a ConsumerProtocolAssignment names (who owns what, for lag tables).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from common.protocol.primitives import ProtocolError, Reader


class ResetTo(enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    OFFSET = "offset"
    SHIFT = "shift"  # by `value` from the committed offset (the log start without one)
    TIMESTAMP = "timestamp"  # the first offset at or after `value` ms (the log end without one)


def plan_reset(partitions: list[int], committed: Mapping[int, int], earliest: Mapping[int, int],
               latest: Mapping[int, int], to: ResetTo, value: int = 0,
               by_time: Mapping[int, int] | None = None) -> dict[int, int]:
    """New offset per partition. `by_time`: ListOffsets' answer for TIMESTAMP (partition → offset)."""
    plan = {}
    for p in partitions:
        low, high = earliest[p], latest[p]
        if to is ResetTo.EARLIEST:
            target = low
        elif to is ResetTo.LATEST:
            target = high
        elif to is ResetTo.OFFSET:
            target = value
        elif to is ResetTo.SHIFT:
            target = committed.get(p, low) + value
        else:
            target = (by_time or {}).get(p, high)
        plan[p] = min(max(target, low), high)
    return plan


def assigned_partitions(assignment: bytes) -> list[tuple[str, int]]:
    """The (topic, partition) pairs of a ConsumerProtocolAssignment (any version); [] if unreadable."""
    try:
        r = Reader(assignment)
        r.int16()
        out: list[tuple[str, int]] = []
        for _ in range(max(r.int32(), 0)):  # bounded by the bytes: each entry reads at least 6
            topic = r.string()
            out.extend((topic, p) for p in r.int32_array())
        return out
    except ProtocolError:
        return []
