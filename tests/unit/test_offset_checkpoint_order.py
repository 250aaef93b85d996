"""broker/log/offset_checkpoints.py's file order: each dir's lines by topic, then partition as
an int, kept by topic, so that a log coming or going re-sorts only its topic's lines (the first
pass after a create or a start sorted 100,000 lines in the turn that wrote the files), and the
sorting can be spread over a pass's turns (`sort_new_lines`)."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable, cast

import pytest

from broker.log.offset_checkpoints import OffsetCheckpoints
from broker.log.partition_log import PartitionLog
from common.topic_partition import TopicPartition

NAMES = ("recovery", "hw", "log-start")
DIR = Path("/nonexistent/logs")  # the writer below never touches the disk


class FakeLog:
    """What OffsetCheckpoints reads of a log, counting the reads of its topic-partition."""

    reads = 0

    def __init__(self, topic: str, partition: int, offset: int = 0) -> None:
        self._tp = TopicPartition(topic, partition)
        self.recovery_point = self.high_watermark = self.log_start_offset = offset

    @property
    def topic_partition(self) -> TopicPartition:
        FakeLog.reads += 1
        return self._tp


class Files:
    """A CheckpointWriter that renders each file on the caller's thread and keeps it."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def submit(self, path: Path, render: Callable[[], bytes]) -> Future[None]:
        self.data[path.name] = render()
        done: Future[None] = Future()
        done.set_result(None)
        return done

    def close(self, *, wait: bool = True) -> None:
        pass

    def lines(self, name: str) -> list[str]:
        return self.data[name].decode().splitlines()[2:]  # after the version and the count


@pytest.fixture
def files() -> Files:
    return Files()


@pytest.fixture
def checkpoints(files: Files) -> OffsetCheckpoints:
    return OffsetCheckpoints([DIR], NAMES, writer=cast(Any, files))


def note(checkpoints: OffsetCheckpoints, logs: list[FakeLog]) -> None:
    checkpoints.note(cast(list[PartitionLog], logs), lambda lg: DIR)


def test_lines_are_by_topic_then_partition_as_an_int(checkpoints: OffsetCheckpoints, files: Files) -> None:
    logs = [FakeLog(t, p, offset=p) for t in ("b", "a", "a.b") for p in (10, 2, 1)]
    note(checkpoints, logs)
    checkpoints.write()
    assert files.lines("hw") == [f"{t} {p} {p}" for t in ("a", "a.b", "b") for p in (1, 2, 10)]


def test_a_new_log_resorts_only_its_topic_and_a_forgotten_one_leaves(checkpoints: OffsetCheckpoints,
                                                                      files: Files) -> None:
    big = [FakeLog("big", p) for p in range(500)]
    small = [FakeLog("small", p) for p in (0, 2)]
    note(checkpoints, big + small)
    checkpoints.write()
    FakeLog.reads = 0
    note(checkpoints, [FakeLog("small", 1)])
    checkpoints.write()
    assert FakeLog.reads <= 2 * 3  # small's logs only, not big's 500
    assert files.lines("hw")[-3:] == ["small 0 0", "small 1 0", "small 2 0"]
    checkpoints.forget(cast(PartitionLog, small[0]), DIR)
    checkpoints.write()
    assert len(files.lines("hw")) == 502 and files.lines("hw")[-2:] == ["small 1 0", "small 2 0"]


def test_new_lines_sorted_a_few_per_call_then_written_in_order(checkpoints: OffsetCheckpoints,
                                                               files: Files) -> None:
    logs = [FakeLog(f"t{t}", p) for t in range(5) for p in range(10)]
    note(checkpoints, logs[::-1])
    calls = 1
    while not checkpoints.sort_new_lines(10):  # bounded: 5 topics of 10 lines
        calls += 1
    assert calls == 5  # a topic per call
    checkpoints.forget(cast(PartitionLog, logs[7]), DIR)  # t0's, after its sort
    FakeLog.reads = 0
    checkpoints.write()
    assert FakeLog.reads == 10  # only t0 is sorted again
    assert files.lines("recovery") == [f"t{t} {p} 0" for t in range(5) for p in range(10) if (t, p) != (0, 7)]
