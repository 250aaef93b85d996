"""Periodic passes that cost what changed (broker/log/log_changes.py and its users): the log
manager's checkpoint writes only files whose entries moved, a fetcher walks its partitions
only after some log start moved, the cleaner walks only compacted topics."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from broker.log.cleaner_manager import CleanerConfig, LogCleanerManager
from broker.log.log_manager import (
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LogManager,
)
from broker.replication.replica_fetcher import ReplicaFetcher
from common.log_config import LogConfig
from common.topic_partition import TopicPartition
from tests.log_helpers import NOW, batch

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
FILES = (RECOVERY_POINT_CHECKPOINT, HIGH_WATERMARK_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT)
COMPACT = LogConfig(cleanup_policy=("compact",))


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[LogManager]:
    manager = LogManager([tmp_path / "logs"], LogConfig(segment_bytes=300), now_ms=NOW)
    yield manager
    manager.shutdown()


def stamps(directory: Path) -> dict[str, tuple[int, int]]:
    """Each checkpoint file's inode and mtime: a rewrite renames a new file over the old one."""
    return {name: ((st := (directory / name).stat()).st_ino, st.st_mtime_ns) for name in FILES}


def text(directory: Path, name: str) -> str:
    return (directory / name).read_text()


def filled(manager: LogManager) -> None:
    for tp in (B0, A1, A0):
        plog = manager.get_or_create_log(tp, now_ms=NOW)
        for _ in range(4):
            plog.append(batch(3), now_ms=NOW)
        plog.update_high_watermark(plog.log_end_offset)
        plog.wait_for_flushes()  # a roll's background flush moves the recovery point when it returns


def test_a_pass_where_nothing_moved_writes_nothing(manager: LogManager) -> None:
    directory = manager.log_dirs[0]
    filled(manager)
    manager.checkpoint().result()
    assert text(directory, HIGH_WATERMARK_CHECKPOINT) == "0\n3\na 0 12\na 1 12\nb 0 12\n"
    before = stamps(directory)
    manager.checkpoint().result()
    manager.logs[A0].update_high_watermark(12)  # the same value: nothing moved
    manager.checkpoint().result()
    assert stamps(directory) == before


def test_a_pass_rewrites_only_the_files_whose_entries_moved(manager: LogManager) -> None:
    directory = manager.log_dirs[0]
    filled(manager)
    manager.checkpoint().result()
    before = stamps(directory)
    manager.logs[A1].update_high_watermark(5)
    manager.checkpoint().result()
    after = stamps(directory)
    assert after[HIGH_WATERMARK_CHECKPOINT] != before[HIGH_WATERMARK_CHECKPOINT]
    assert after[RECOVERY_POINT_CHECKPOINT] == before[RECOVERY_POINT_CHECKPOINT]
    assert text(directory, HIGH_WATERMARK_CHECKPOINT) == "0\n3\na 0 12\na 1 5\nb 0 12\n"
    manager.logs[B0].maybe_increment_log_start_offset(6)  # DeleteRecords
    manager.logs[A0].flush()
    manager.checkpoint().result()
    assert text(directory, LOG_START_OFFSET_CHECKPOINT) == "0\n3\na 0 0\na 1 0\nb 0 6\n"
    assert text(directory, RECOVERY_POINT_CHECKPOINT).startswith("0\n3\na 0 12\n")
    assert stamps(directory)[HIGH_WATERMARK_CHECKPOINT] == after[HIGH_WATERMARK_CHECKPOINT]


def test_a_deleted_log_leaves_the_files_and_a_truncated_one_is_rewritten(manager: LogManager) -> None:
    directory = manager.log_dirs[0]
    filled(manager)
    manager.checkpoint().result()
    manager.delete_log(A1)
    manager.logs[B0].truncate_to(3)
    manager.checkpoint().result()
    for name in FILES:
        assert "a 1 " not in text(directory, name)
    assert text(directory, HIGH_WATERMARK_CHECKPOINT) == "0\n2\na 0 12\nb 0 3\n"
    manager.get_or_create_log(TopicPartition("a", 5), now_ms=NOW)  # takes its place in the order
    manager.checkpoint().result()
    assert text(directory, HIGH_WATERMARK_CHECKPOINT) == "0\n3\na 0 12\na 5 0\nb 0 3\n"


def test_a_log_start_write_after_delete_records_rewrites_that_file_from_the_kept_lines(
        manager: LogManager) -> None:
    """DeleteRecords writes the log start file at once: from the lines kept for the periodic
    pass (no sort of the dir's logs), leaving the other files and their moves to that pass."""
    directory = manager.log_dirs[0]
    filled(manager)
    manager.checkpoint().result()
    order = manager._offset_checkpoints._order[directory]
    before = stamps(directory)
    manager.logs[A1].update_high_watermark(5)  # moved, not yet checkpointed
    manager.logs[B0].maybe_increment_log_start_offset(6)  # DeleteRecords
    manager.checkpoint_log_start_offsets(B0).result()
    after = stamps(directory)
    assert text(directory, LOG_START_OFFSET_CHECKPOINT) == "0\n3\na 0 0\na 1 0\nb 0 6\n"
    assert after[RECOVERY_POINT_CHECKPOINT] == before[RECOVERY_POINT_CHECKPOINT]
    assert after[HIGH_WATERMARK_CHECKPOINT] == before[HIGH_WATERMARK_CHECKPOINT]
    assert manager._offset_checkpoints._order[directory] is order  # the kept file order, not re-sorted
    manager.checkpoint_log_start_offsets(B0).result()  # nothing more moved: nothing written
    assert stamps(directory)[LOG_START_OFFSET_CHECKPOINT] == after[LOG_START_OFFSET_CHECKPOINT]
    manager.checkpoint().result()
    assert text(directory, HIGH_WATERMARK_CHECKPOINT) == "0\n3\na 0 12\na 1 5\nb 0 12\n"
    assert stamps(directory)[LOG_START_OFFSET_CHECKPOINT] == after[LOG_START_OFFSET_CHECKPOINT]


def test_a_log_start_write_for_a_log_new_since_the_last_pass_includes_it(manager: LogManager) -> None:
    directory = manager.log_dirs[0]
    filled(manager)
    manager.checkpoint().result()
    fresh = manager.get_or_create_log(TopicPartition("a", 7), now_ms=NOW)
    fresh.truncate_fully_and_start_at(9)  # a follower restarting empty at its leader's start
    manager.checkpoint_log_start_offsets(fresh.topic_partition).result()
    assert text(directory, LOG_START_OFFSET_CHECKPOINT) == "0\n4\na 0 0\na 1 0\na 7 9\nb 0 0\n"


def test_a_failed_write_is_tried_again_at_the_next_pass(manager: LogManager,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    directory = manager.log_dirs[0]
    filled(manager)
    manager.checkpoint().result()
    manager.logs[A0].update_high_watermark(7)
    monkeypatch.setattr(manager, "sync_epoch_checkpoints", _fail)
    with pytest.raises(OSError):
        manager.checkpoint()
    monkeypatch.undo()
    manager.checkpoint().result()
    assert text(directory, HIGH_WATERMARK_CHECKPOINT) == "0\n3\na 0 7\na 1 12\nb 0 12\n"


def _fail(*args: Any) -> int:
    raise OSError("disk gone")


def test_log_start_moves_are_counted(manager: LogManager) -> None:
    filled(manager)
    changes = manager.changes
    counts = [changes.log_start_moves]
    manager.logs[A0].update_high_watermark(3)  # not a log start move
    counts.append(changes.log_start_moves)
    manager.logs[A0].maybe_increment_log_start_offset(3)  # DeleteRecords
    counts.append(changes.log_start_moves)
    manager.logs[A1].config = LogConfig(segment_bytes=300, retention_bytes=1)
    manager.cleanup(NOW)  # retention
    counts.append(changes.log_start_moves)
    manager.logs[B0].truncate_fully_and_start_at(40)
    counts.append(changes.log_start_moves)
    assert counts[0] == counts[1] < counts[2] < counts[3] < counts[4]


def fetcher_view(manager: LogManager, wanted: dict[TopicPartition, int]) -> tuple[Any, list[TopicPartition]]:
    """What `_check_log_starts` reads of a fetcher: its partitions' requested log starts, the
    replica manager's partitions and log manager; the partitions it touched."""
    touched: list[TopicPartition] = []
    rounds = SimpleNamespace(session=SimpleNamespace(wanted={
        tp: SimpleNamespace(log_start_offset=start) for tp, start in wanted.items()}),
        touch=touched.append)
    replicas = SimpleNamespace(log_manager=manager, partitions={
        tp: SimpleNamespace(log=plog) for tp, plog in manager.logs.items()})
    return SimpleNamespace(_rounds=rounds, _replicas=replicas, _log_starts_checked=0.0,
                           _log_start_moves_seen=-1), touched


def test_a_fetcher_notices_a_moved_log_start_within_one_pass(manager: LogManager) -> None:
    filled(manager)
    view, touched = fetcher_view(manager, {A0: 0, A1: 0, B0: 0})
    ReplicaFetcher._check_log_starts(view, 5.0)  # type: ignore[arg-type]
    assert touched == []
    manager.logs[A1].maybe_increment_log_start_offset(4)
    ReplicaFetcher._check_log_starts(view, 10.0)  # type: ignore[arg-type]
    assert touched == [A1]


def test_a_fetcher_does_not_walk_its_partitions_while_no_log_start_moved(manager: LogManager) -> None:
    filled(manager)
    view, touched = fetcher_view(manager, {A0: 0})
    ReplicaFetcher._check_log_starts(view, 5.0)  # type: ignore[arg-type]
    view._replicas.partitions = None  # any walk now fails
    manager.logs[A0].update_high_watermark(2)
    ReplicaFetcher._check_log_starts(view, 10.0)  # type: ignore[arg-type]
    assert touched == []


def test_the_cleaner_walks_the_compacted_logs_as_configs_change(manager: LogManager) -> None:
    cleaners = LogCleanerManager(manager, CleanerConfig(), now_ms=lambda: NOW)
    filled(manager)
    assert cleaners.compacted_logs() == []
    manager.update_topic_config("a", COMPACT)
    assert [tp for tp, _ in cleaners.compacted_logs()] == [A0, A1]
    assert {ltc.tp for ltc in cleaners.dirty_logs(NOW)} == {A0, A1}
    manager.delete_log(A0)
    manager.update_topic_config("b", COMPACT.replace(cleanup_policy=("compact", "delete")))
    assert [tp for tp, _ in cleaners.compacted_logs()] == [A1, B0]
    manager.update_topic_config("a", LogConfig())
    manager.delete_log(B0)
    assert cleaners.compacted_logs() == []
