"""spark/admission.py (Spark's Kafka-source admission rules, pure) and how the stream reader
maps PySpark's read limits onto them, with a fake resolver and a fake clock (no JVM)."""

from __future__ import annotations

from typing import Any

import pytest

from spark.admission import ALL_AVAILABLE, Admission, Limits, admit, backlog
from spark.offsets import TopicPartition, from_json_offsets, to_json_offsets
from spark.options import parse_source_options

pytest.importorskip("pyspark")

A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)
START = {A0: 10, A1: 0}
MIN5_MAX8 = Limits(min_rows=5, max_rows=8, max_trigger_delay_ms=1_000)

# (limits, latest, now_ms, last_trigger_ms, expected admission)
CASES = [
    # no limits: everything
    (ALL_AVAILABLE, {A0: 30, A1: 4}, 0, 0, Admission({A0: 30, A1: 4}, 0)),
    # the cap shares by backlog (20 : 4 of 8 -> 6.67 : 1.33 -> 7 : 1)
    (Limits(max_rows=8), {A0: 30, A1: 4}, 0, 0, Admission({A0: 17, A1: 1}, 0)),
    # below the minimum, delay not passed: held back, start unchanged, last trigger kept
    (MIN5_MAX8, {A0: 12, A1: 2}, 1_500, 1_000, Admission(START, 1_000, delayed=True)),
    # the minimum reached: runs, capped, the trigger time moves
    (MIN5_MAX8, {A0: 30, A1: 4}, 1_500, 1_000, Admission({A0: 17, A1: 1}, 1_500)),
    (MIN5_MAX8, {A0: 13, A1: 2}, 1_500, 1_000, Admission({A0: 13, A1: 2}, 1_500)),
    # the delay passed (exactly): runs with what there is
    (MIN5_MAX8, {A0: 11, A1: 0}, 2_000, 1_000, Admission({A0: 11, A1: 0}, 2_000)),
    # the first trigger of a source always runs (last trigger at 0, as in Spark)
    (MIN5_MAX8, {A0: 11, A1: 0}, 1_700_000_000_000, 0, Admission({A0: 11, A1: 0}, 1_700_000_000_000)),
    # a log gone back counts nothing toward the minimum
    (MIN5_MAX8, {A0: 2, A1: 4}, 1_500, 1_000, Admission(START, 1_000, delayed=True)),
]


@pytest.mark.parametrize(("limits", "latest", "now_ms", "last_ms", "expected"), CASES)
def test_admit(limits: Limits, latest: dict[TopicPartition, int], now_ms: int, last_ms: int,
               expected: Admission) -> None:
    assert admit(START, latest, limits, now_ms=now_ms, last_trigger_ms=last_ms) == expected


def test_backlog_and_limit_checks() -> None:
    assert backlog(START, {A0: 15, A1: 3, TopicPartition("b", 0): 99}) == 8  # a partition not started: none
    with pytest.raises(ValueError, match="min_rows must be positive"):
        Limits(min_rows=0)
    with pytest.raises(ValueError, match="max_trigger_delay_ms must not be negative"):
        Limits(max_trigger_delay_ms=-1)


class FakeResolver:
    """The offsets a stream reader's look-ups return; no cluster."""

    def __init__(self, latest: dict[TopicPartition, int]) -> None:
        self.latest_offsets = latest
        self.uncertain_topics: set[str] = set()

    def partitions(self) -> list[TopicPartition]:
        return sorted(self.latest_offsets)

    def latest(self, tps: list[TopicPartition], *, lenient: bool = False) -> dict[TopicPartition, int]:
        return {tp: self.latest_offsets[tp] for tp in tps}

    def earliest(self, tps: list[TopicPartition], *, lenient: bool = False) -> dict[TopicPartition, int]:
        return dict.fromkeys(tps, 0)


class FakeClock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


def reader(options: dict[str, str], latest: dict[TopicPartition, int]) -> tuple[Any, FakeClock]:
    from pyspark.sql.types import StructType

    from spark.stream_reader import TidelogStreamReader

    clock = FakeClock()
    parsed = parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a", **options}, streaming=True)
    stream = TidelogStreamReader(parsed, StructType(), clock=clock)
    stream._resolver = FakeResolver(latest)  # type: ignore[assignment]  # duck-typed: partitions, latest, earliest
    return stream, clock


def test_default_read_limits_are_what_pyspark_can_carry() -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

    latest = {A0: 100}
    assert reader({}, latest)[0].getDefaultReadLimit() == ReadAllAvailable()
    assert reader({"maxOffsetsPerTrigger": "7"}, latest)[0].getDefaultReadLimit() == ReadMaxRows(7)
    assert reader({"minOffsetsPerTrigger": "5", "maxOffsetsPerTrigger": "7"},
                  latest)[0].getDefaultReadLimit() == ReadMinRows(5)


def test_reader_holds_back_then_runs_after_the_delay_capped() -> None:
    stream, clock = reader({"minOffsetsPerTrigger": "50", "maxOffsetsPerTrigger": "40", "maxTriggerDelay": "10s"},
                           {A0: 100, A1: 100})
    limit = stream.getDefaultReadLimit()
    start = to_json_offsets({A0: 0, A1: 0})
    first = stream.latestOffset(start, limit)  # the first trigger runs, capped at 40
    assert from_json_offsets(first) == {A0: 20, A1: 20}
    stream._resolver.latest_offsets = {A0: 30, A1: 30}  # 20 wait, below 50
    clock.now_ms += 9_999
    assert stream.latestOffset(first, limit) == first  # held back: Spark runs no batch
    assert stream.reportLatestOffset() == to_json_offsets({A0: 30, A1: 30})  # progress still shows the backlog
    clock.now_ms += 1
    assert from_json_offsets(stream.latestOffset(first, limit)) == {A0: 30, A1: 30}  # 10 s since the last batch


def test_engine_read_all_available_and_available_now_ignore_the_minimum() -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMinRows

    stream, clock = reader({"minOffsetsPerTrigger": "50", "maxOffsetsPerTrigger": "40"}, {A0: 10})
    start = to_json_offsets({A0: 0})
    stream.latestOffset(start, ReadMinRows(50))  # the first trigger, which always runs
    assert stream.latestOffset(start, ReadMinRows(50)) == start  # 10 < 50: held back
    assert from_json_offsets(stream.latestOffset(start, ReadAllAvailable())) == {A0: 10}
    stream.prepareForTriggerAvailableNow()  # a held-back trigger would end the run early: only the cap
    assert from_json_offsets(stream.latestOffset(start, ReadMinRows(50))) == {A0: 10}
