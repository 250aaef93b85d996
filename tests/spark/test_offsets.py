"""spark/offsets.py: the Kafka source's JSON shapes, range planning, splitting and rate limits."""

from __future__ import annotations

import json

import pytest

from spark.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    OffsetsError,
    TopicPartition,
    count_records,
    describe_offsets,
    from_json_offsets,
    parse_assign,
    parse_partition_offsets,
    parse_partition_timestamps,
    plan_ranges,
    rate_limit,
    split_ranges,
    to_json_offsets,
)

A0, A1, A2, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("a", 2), TopicPartition("b", 0)


@pytest.mark.parametrize(("text", "expected"), [
    ('{"a": {"0": 23, "1": -1}, "b": {"0": -2}}', {A0: 23, A1: LATEST, B0: EARLIEST}),
    ('{"a": {"2": 0}}', {A2: 0}),
])
def test_parse_partition_offsets(text: str, expected: dict[TopicPartition, int]) -> None:
    assert parse_partition_offsets(text, "startingOffsets") == expected


@pytest.mark.parametrize(("text", "message"), [
    ("{", "option 'startingOffsets' is not valid JSON"),
    ("[]", "must be a non-empty JSON object"),
    ('{"a": [0]}', "topic 'a' must map partitions to offsets"),
    ('{"a": {"x": 1}}', "partition 'x' of topic 'a' is not a partition number"),
    ('{"a": {"0": -3}}', "offset -3 of a-0 is neither"),
    ('{"a": {"0": "5"}}', "the offset of a-0 must be an integer"),
    ('{"a": {"0": true}}', "must be an integer"),
])
def test_bad_partition_offsets_name_the_option(text: str, message: str) -> None:
    with pytest.raises(OffsetsError, match=message):
        parse_partition_offsets(text, "startingOffsets")


def test_parse_timestamps_and_assign() -> None:
    assert parse_partition_timestamps('{"a": {"0": 1700000000000}}', "startingOffsetsByTimestamp") == \
        {A0: 1700000000000}
    assert parse_assign('{"b": [0], "a": [1, 0, 1]}') == (A0, A1, B0)
    for bad, message in (("a,b", "must be a JSON object"), ('{"a": []}', "must list partition numbers"),
                         ('{"a": [-1]}', "not a partition number"), ('{"a": {"0": -1}}', "negative")):
        with pytest.raises(OffsetsError, match=message):
            if "negative" in message:
                parse_partition_timestamps(bad, "startingOffsetsByTimestamp")
            else:
                parse_assign(bad)


def test_json_round_trip_is_sorted_and_stable() -> None:
    offsets = {TopicPartition("b", 0): 1, TopicPartition("a", 10): 5, TopicPartition("a", 2): 7}
    document = to_json_offsets(offsets)
    assert json.dumps(document) == '{"a": {"2": 7, "10": 5}, "b": {"0": 1}}'  # Spark compares the text
    assert from_json_offsets(json.loads(json.dumps(document))) == offsets
    assert describe_offsets(offsets) == "a:2=7,10=5 b:0=1"
    assert describe_offsets({}) == "-"


# (start, end) -> (ranges, data-loss count)
PLAN_CASES = [
    ({A0: 0, A1: 5}, {A0: 10, A1: 5}, [OffsetRange("a", 0, 0, 10)], 0),  # empty range dropped
    ({A0: 3}, {A0: 3, A1: 4}, [], 0),  # only in end: admitted at its log start, read next batch
    ({A0: 3, B0: 2}, {A0: 9}, [OffsetRange("a", 0, 3, 9)], 1),  # b-0 gone
    ({A0: 8}, {A0: 5}, [], 1),  # truncated below our position
    ({}, {}, [], 0),
]


@pytest.mark.parametrize(("start", "end", "ranges", "losses"), PLAN_CASES)
def test_plan_ranges(start: dict[TopicPartition, int], end: dict[TopicPartition, int], ranges: list[OffsetRange],
                     losses: int) -> None:
    plan = plan_ranges(start, end)
    assert list(plan.ranges) == ranges
    assert len(plan.data_loss) == losses


def test_plan_names_the_partition_in_each_loss() -> None:
    plan = plan_ranges({A0: 8, B0: 1}, {A0: 5})
    assert any("a-0" in m and "truncated" in m for m in plan.data_loss)
    assert any("b-0" in m and "gone" in m for m in plan.data_loss)


@pytest.mark.parametrize(("ranges", "min_partitions", "max_records", "expected"), [
    ([OffsetRange("a", 0, 0, 100)], None, None, [(0, 100)]),
    ([OffsetRange("a", 0, 0, 100)], 4, None, [(0, 25), (25, 50), (50, 75), (75, 100)]),
    ([OffsetRange("a", 0, 0, 10)], 3, None, [(0, 4), (4, 7), (7, 10)]),
    ([OffsetRange("a", 0, 0, 2)], 5, None, [(0, 1), (1, 2)]),  # never an empty piece
    ([OffsetRange("a", 0, 0, 100)], None, 30, [(0, 25), (25, 50), (50, 75), (75, 100)]),
    ([OffsetRange("a", 0, 0, 100), OffsetRange("a", 1, 0, 0)], 1, None, [(0, 100)]),  # empty dropped
])
def test_split_ranges(ranges: list[OffsetRange], min_partitions: int | None, max_records: int | None,
                      expected: list[tuple[int, int]]) -> None:
    assert [(r.start, r.end) for r in split_ranges(ranges, min_partitions, max_records)] == expected


def test_split_in_proportion_and_contiguous() -> None:
    ranges = [OffsetRange("a", 0, 10, 910), OffsetRange("a", 1, 0, 100)]
    pieces = split_ranges(ranges, 10)
    assert len(pieces) >= 10
    assert sum(1 for p in pieces if p.partition == 0) == 9 and sum(1 for p in pieces if p.partition == 1) == 1
    for r in ranges:  # the pieces of a range tile it exactly
        mine = [p for p in pieces if p.partition == r.partition]
        assert mine[0].start == r.start and mine[-1].end == r.end
        assert all(x.end == y.start for x, y in zip(mine, mine[1:]))


@pytest.mark.parametrize(("start", "latest", "limit", "expected"), [
    ({A0: 0, A1: 0}, {A0: 50, A1: 50}, 1000, {A0: 50, A1: 50}),  # under the limit: everything
    ({A0: 0, A1: 0}, {A0: 300, A1: 100}, 100, {A0: 75, A1: 25}),  # in proportion
    ({A0: 0, A1: 0, A2: 0}, {A0: 10, A1: 10, A2: 10}, 2, {A0: 1, A1: 1, A2: 0}),  # exact, ties in order
    ({A0: 5, A1: 7}, {A0: 5, A1: 100}, 10, {A0: 5, A1: 17}),  # nothing new in a-0
    ({A0: 0}, {A0: 100, B0: 0}, 10, {A0: 10, B0: 0}),  # a new partition keeps its (start) offset
    ({A0: 9}, {A0: 4}, 10, {A0: 4}),  # truncated: passed through for planning to report
])
def test_rate_limit(start: dict[TopicPartition, int], latest: dict[TopicPartition, int], limit: int,
                    expected: dict[TopicPartition, int]) -> None:
    end = rate_limit(start, latest, limit)
    assert end == expected
    assert count_records(start, end) <= limit


def test_rate_limit_never_exceeds_and_drains() -> None:
    start = {A0: 0, A1: 0, A2: 0}
    latest = {A0: 1000, A1: 7, A2: 3}
    seen = 0
    for _ in range(200):  # bounded; drains in 102 batches of <= 10
        end = rate_limit(start, latest, 10)
        admitted = count_records(start, end)
        assert admitted <= 10
        seen += admitted
        if end == start:
            break
        start = end
    assert start == latest and seen == 1010


def test_offset_range_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        OffsetRange("a", 0, 5, 4)
    with pytest.raises(ValueError):
        rate_limit({}, {}, 0)
