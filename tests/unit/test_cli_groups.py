"""tidelog/cli_groups.py and tidelog/group_admin.py: the pure parts (reset plans, assignments)."""

from __future__ import annotations

import struct

import pytest

from tidelog.cli import build_parser
from tidelog.cli_common import UsageError
from tidelog.cli_groups import plan_reset
from tidelog.group_admin import PartitionLag, assigned_partitions

EARLIEST = {0: 10, 1: 0}
LATEST = {0: 100, 1: 50}
COMMITTED = {0: 40}


@pytest.mark.parametrize("kwargs, expected", [
    ({"to_earliest": True}, {0: 10, 1: 0}),
    ({"to_latest": True}, {0: 100, 1: 50}),
    ({"to_offset": 60}, {0: 60, 1: 50}),  # clamped to the log end
    ({"to_offset": 5}, {0: 10, 1: 5}),  # clamped to the log start
    ({"shift_by": -35}, {0: 10, 1: 0}),  # from the committed offset, or the log start without one
    ({"shift_by": 20}, {0: 60, 1: 20}),
    ({"by_time": {0: 70}}, {0: 70, 1: 50}),  # no record at or after the time: the log end
])
def test_plan_reset(kwargs: dict, expected: dict) -> None:
    assert plan_reset([0, 1], COMMITTED, EARLIEST, LATEST, **kwargs) == expected


def test_plan_reset_needs_a_target() -> None:
    with pytest.raises(UsageError):
        plan_reset([0], {}, EARLIEST, LATEST)


def test_assigned_partitions_of_a_consumer_protocol_assignment() -> None:
    def s(t: str) -> bytes:
        return struct.pack(">h", len(t)) + t.encode()
    data = (struct.pack(">hi", 0, 2) + s("a") + struct.pack(">iii", 2, 0, 3) + s("b") + struct.pack(">ii", 1, 1)
            + struct.pack(">i", -1))
    assert assigned_partitions(data) == [("a", 0), ("a", 3), ("b", 1)]
    assert assigned_partitions(b"\x00") == []


def test_lag_is_log_end_minus_committed() -> None:
    assert PartitionLag("t", 0, 40, 100, None).lag == 60
    assert PartitionLag("t", 0, None, 100, None).lag is None


def test_reset_offsets_options_are_kafkas() -> None:
    args = build_parser().parse_args(["groups", "reset-offsets", "--group", "g", "--topic", "t", "--shift-by", "-5",
                                      "--execute"])
    assert (args.group, args.topic, args.shift_by, args.execute) == ("g", "t", -5, True)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["groups", "reset-offsets", "--group", "g", "--topic", "t"])


def test_internal_topics_are_listed_only_when_asked() -> None:
    from tidelog.cli_topics import shown

    topics = [{"name": "__consumer_offsets"}, {"name": "demo"}]
    assert [t["name"] for t in shown(topics, False)] == ["demo"]
    assert [t["name"] for t in shown(topics, True)] == ["__consumer_offsets", "demo"]
    assert build_parser().parse_args(["topics", "list", "--include-internal"]).include_internal
