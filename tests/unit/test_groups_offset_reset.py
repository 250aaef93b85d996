"""groups/offset_reset.py: reset plans clamped as kafka-consumer-groups does, assignments parsed."""

from __future__ import annotations

import struct

import pytest

from groups.offset_reset import ResetTo, assigned_partitions, plan_reset

EARLIEST = {0: 10, 1: 0}
LATEST = {0: 100, 1: 50}
COMMITTED = {0: 40}


@pytest.mark.parametrize("to, value, by_time, expected", [
    (ResetTo.EARLIEST, 0, None, {0: 10, 1: 0}),
    (ResetTo.LATEST, 0, None, {0: 100, 1: 50}),
    (ResetTo.OFFSET, 60, None, {0: 60, 1: 50}),  # clamped to the log end
    (ResetTo.OFFSET, 5, None, {0: 10, 1: 5}),  # clamped to the log start
    (ResetTo.SHIFT, -35, None, {0: 10, 1: 0}),  # from the committed offset, or the log start without one
    (ResetTo.SHIFT, 20, None, {0: 60, 1: 20}),
    (ResetTo.TIMESTAMP, 0, {0: 70}, {0: 70, 1: 50}),  # no record at or after the time: the log end
])
def test_plan_reset(to: ResetTo, value: int, by_time: dict | None, expected: dict) -> None:
    assert plan_reset([0, 1], COMMITTED, EARLIEST, LATEST, to, value, by_time) == expected


def test_only_the_asked_partitions() -> None:
    assert plan_reset([1], COMMITTED, EARLIEST, LATEST, ResetTo.LATEST) == {1: 50}


def test_assigned_partitions_of_a_consumer_protocol_assignment() -> None:
    def s(t: str) -> bytes:
        return struct.pack(">h", len(t)) + t.encode()
    data = (struct.pack(">hi", 0, 2) + s("a") + struct.pack(">iii", 2, 0, 3) + s("b") + struct.pack(">ii", 1, 1)
            + struct.pack(">i", -1))
    assert assigned_partitions(data) == [("a", 0), ("a", 3), ("b", 1)]
    assert assigned_partitions(b"\x00") == []
    assert assigned_partitions(b"") == []
