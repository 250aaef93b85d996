"""Tests for broker/log/log_manager.py over one or two tmp log dirs: placement of new logs,
the per-directory checkpoint files and clean-shutdown marker, reopening, the directory
lock, deletion, leftovers, recovery after a corrupt checkpoint, topic configs and
retention."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.log.log_manager import (
    CLEAN_SHUTDOWN_FILE,
    DELETE_DIR_SUFFIX,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LogManager,
)
from broker.log.leader_epochs import EpochEntry
from broker.log.partition_log import PartitionLog
from broker.log.segment import LogSegment, RecoveryResult
from broker.log.segment_removal import SegmentRemoval
from common.topic_partition import TopicPartition
from common.errors import KafkaStorageError
from common.record_batch import iter_batches
from common.records import build_batch, decode_records
from common.log_config import LogConfig

NOW = 1_700_000_000_000
ORDERS_0 = TopicPartition("orders", 0)
ORDERS_1 = TopicPartition("orders", 1)
PAYMENTS_0 = TopicPartition("payments", 0)


def batch(i: int, ts: int = NOW) -> bytes:
    """A one-record producer batch; every batch has the same size."""
    return build_batch([(b"key-%03d" % i, b"value-%03d" % i)], timestamps=[ts + i])


BATCH_SIZE = len(batch(0))
# Two batches fill a segment, so batches 2k and 2k+1 share segment k.
SMALL = LogConfig(segment_bytes=2 * BATCH_SIZE + 1, file_delete_delay_ms=0)


def fill(partition_log: PartitionLog, count: int) -> None:
    start = partition_log.log_end_offset
    for i in range(start, start + count):
        partition_log.append(batch(i), now_ms=NOW, leader_epoch=0)


def values(partition_log: PartitionLog) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record from the log start offset to the log end."""
    out = []
    offset = partition_log.log_start_offset
    while offset < partition_log.log_end_offset:
        data = partition_log.read(offset, 1 << 20).read_bytes()
        for pos, header in iter_batches(data):
            out += [(r.offset, r.value) for r in decode_records(data, pos, header)]
            offset = header.next_offset
    return out


def expected_values(start: int, end: int) -> list[tuple[int, bytes | None]]:
    return [(i, b"value-%03d" % i) for i in range(start, end)]


@pytest.fixture
def dirs(tmp_path: Path) -> list[Path]:
    return [tmp_path / "data-a", tmp_path / "data-b"]


@pytest.fixture
def managers() -> Iterator[list[LogManager]]:
    """Managers a test opened; those still holding their locks are shut down at the end."""
    opened: list[LogManager] = []
    yield opened
    for manager in opened:
        if manager._locks:  # still open: LogManager has no public "is open" to ask
            manager.shutdown()


def open_manager(managers: list[LogManager], log_dirs: list[Path],
                 config: LogConfig = SMALL, **kwargs: object) -> LogManager:
    manager = LogManager(log_dirs, config, now_ms=NOW, **kwargs)  # type: ignore[arg-type]
    managers.append(manager)
    return manager


# --- placement -------------------------------------------------------------------------

PLACEMENT_CASES = [
    # (logs already in each dir, dir index expected for each new partition, in order)
    pytest.param([0], [0, 0, 0], id="one-dir"),
    pytest.param([0, 0], [0, 1, 0, 1], id="empty-dirs-alternate"),
    pytest.param([2, 0], [1, 1, 0, 1], id="fills-the-emptier-dir-first"),
    pytest.param([1, 3], [0, 0, 0, 1, 0], id="second-dir-fuller-then-ties-go-first"),
]


@pytest.mark.parametrize(("existing", "expected"), PLACEMENT_CASES)
def test_new_log_goes_to_the_dir_with_fewest_logs(managers: list[LogManager], dirs: list[Path],
                                                  existing: list[int],
                                                  expected: list[int]) -> None:
    log_dirs = dirs[: len(existing)]
    for directory, count in zip(log_dirs, existing):
        seed = open_manager(managers, [directory])
        for p in range(count):
            seed.get_or_create_log(TopicPartition(f"seed-{directory.name}", p), now_ms=NOW)
        seed.shutdown()
    manager = open_manager(managers, log_dirs)
    for p, want in enumerate(expected):
        tp = TopicPartition("orders", p)
        partition_log = manager.get_or_create_log(tp, now_ms=NOW)
        assert partition_log.directory == log_dirs[want] / tp.dir_name
        assert partition_log.directory.is_dir()


def test_get_or_create_returns_the_open_log(managers: list[LogManager],
                                            dirs: list[Path]) -> None:
    manager = open_manager(managers, dirs)
    first = manager.get_or_create_log(ORDERS_0, now_ms=NOW)
    fill(first, 3)
    assert manager.get_or_create_log(ORDERS_0, now_ms=NOW) is first
    assert manager.get_log(ORDERS_0) is first
    assert manager.get_log(ORDERS_1) is None
    assert list(manager.partitions()) == [ORDERS_0]
    assert not (dirs[1] / ORDERS_0.dir_name).exists()


# --- shutdown, checkpoints, reopening --------------------------------------------------

def populate(manager: LogManager) -> dict[TopicPartition, PartitionLog]:
    """orders-0 (dir a): 7 batches, log start 2, HW 5; orders-1 (dir b): 3 batches, HW 3;
    payments-0 (dir a): empty."""
    logs = {tp: manager.get_or_create_log(tp, now_ms=NOW)
            for tp in (ORDERS_0, ORDERS_1, PAYMENTS_0)}
    fill(logs[ORDERS_0], 7)
    fill(logs[ORDERS_1], 3)
    logs[ORDERS_0].update_high_watermark(5)
    logs[ORDERS_0].maybe_increment_log_start_offset(2)
    logs[ORDERS_1].update_high_watermark(3)
    return logs


# (dir index, checkpoint file, text)
SHUTDOWN_CHECKPOINTS = [
    pytest.param(0, RECOVERY_POINT_CHECKPOINT, "0\n2\norders 0 7\npayments 0 0\n",
                 id="a-recovery-point"),
    pytest.param(0, HIGH_WATERMARK_CHECKPOINT, "0\n2\norders 0 5\npayments 0 0\n",
                 id="a-high-watermark"),
    pytest.param(0, LOG_START_OFFSET_CHECKPOINT, "0\n2\norders 0 2\npayments 0 0\n",
                 id="a-log-start-offset"),
    pytest.param(1, RECOVERY_POINT_CHECKPOINT, "0\n1\norders 1 3\n", id="b-recovery-point"),
    pytest.param(1, HIGH_WATERMARK_CHECKPOINT, "0\n1\norders 1 3\n", id="b-high-watermark"),
    pytest.param(1, LOG_START_OFFSET_CHECKPOINT, "0\n1\norders 1 0\n", id="b-log-start-offset"),
]


@pytest.mark.parametrize(("index", "name", "text"), SHUTDOWN_CHECKPOINTS)
def test_shutdown_writes_checkpoints_and_marker(managers: list[LogManager], dirs: list[Path],
                                                index: int, name: str, text: str) -> None:
    manager = open_manager(managers, dirs)
    populate(manager)
    manager.shutdown()
    assert (dirs[index] / name).read_text() == text
    assert (dirs[index] / CLEAN_SHUTDOWN_FILE).exists()


def test_reopen_after_clean_shutdown(managers: list[LogManager], dirs: list[Path]) -> None:
    manager = open_manager(managers, dirs)
    before = {tp: (lg.log_end_offset, lg.log_start_offset, lg.high_watermark, values(lg))
              for tp, lg in populate(manager).items()}
    manager.shutdown()

    reopened = open_manager(managers, dirs)
    assert sorted(reopened.partitions()) == sorted(before)
    after = {tp: (lg.log_end_offset, lg.log_start_offset, lg.high_watermark, values(lg))
             for tp, lg in reopened.logs.items()}
    assert after == before
    assert after[ORDERS_0] == (7, 2, 5, expected_values(2, 7))
    assert reopened.logs[ORDERS_0].recovery_point == 7
    assert reopened.logs[ORDERS_0].directory.parent == dirs[0]
    assert reopened.logs[ORDERS_1].directory.parent == dirs[1]
    for directory in dirs:
        assert not (directory / CLEAN_SHUTDOWN_FILE).exists()


def test_reopened_logs_keep_appending_and_checkpointing(managers: list[LogManager],
                                                        dirs: list[Path]) -> None:
    manager = open_manager(managers, dirs)
    populate(manager)
    manager.shutdown()
    reopened = open_manager(managers, dirs)
    fill(reopened.logs[ORDERS_1], 2)
    reopened.shutdown()
    assert (dirs[1] / RECOVERY_POINT_CHECKPOINT).read_text() == "0\n1\norders 1 5\n"
    third = open_manager(managers, dirs)
    assert values(third.logs[ORDERS_1]) == expected_values(0, 5)


# --- the directory lock ----------------------------------------------------------------

def test_second_manager_on_an_open_dir_is_refused(managers: list[LogManager],
                                                  dirs: list[Path]) -> None:
    first = open_manager(managers, dirs[:1])
    with pytest.raises(KafkaStorageError, match="in use"):
        LogManager(dirs[:1], SMALL, now_ms=NOW)
    first.shutdown()
    open_manager(managers, dirs[:1])  # the lock went with the shutdown


def test_refused_manager_releases_the_dirs_it_had_locked(managers: list[LogManager],
                                                         dirs: list[Path]) -> None:
    """A LogManager that fails on its second dir must not keep the first one locked."""
    open_manager(managers, dirs[1:])
    with pytest.raises(KafkaStorageError, match="in use"):
        LogManager(dirs, SMALL, now_ms=NOW)
    open_manager(managers, dirs[:1])  # dir a is free again


# --- deletion and leftovers ------------------------------------------------------------

def test_delete_log_removes_the_partition_directory(managers: list[LogManager],
                                                    dirs: list[Path]) -> None:
    manager = open_manager(managers, dirs)
    logs = populate(manager)
    doomed = logs[ORDERS_0].directory
    manager.delete_log(ORDERS_0)
    assert not doomed.exists()
    manager.flusher.remover.shutdown()  # the renamed directory goes on the removal thread
    assert sorted(p.name for p in dirs[0].iterdir() if p.is_dir()) == [PAYMENTS_0.dir_name]
    assert manager.get_log(ORDERS_0) is None
    manager.delete_log(ORDERS_0)  # unknown partition: nothing to do
    assert values(logs[ORDERS_1]) == expected_values(0, 3)
    manager.shutdown()
    assert (dirs[0] / RECOVERY_POINT_CHECKPOINT).read_text() == "0\n1\npayments 0 0\n"
    assert sorted(open_manager(managers, dirs).partitions()) == [ORDERS_1, PAYMENTS_0]


def test_deleted_partition_can_be_created_again_empty(managers: list[LogManager],
                                                      dirs: list[Path]) -> None:
    manager = open_manager(managers, dirs[:1])
    fill(manager.get_or_create_log(ORDERS_0, now_ms=NOW), 3)
    manager.delete_log(ORDERS_0)
    again = manager.get_or_create_log(ORDERS_0, now_ms=NOW)
    assert again.log_end_offset == 0
    assert again.leader_epoch_cache.entries == []


def _hold_the_removal_thread(manager: LogManager, directory: Path,
                             monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Keep the manager's removal thread on a file of its own until the returned gate opens."""
    gate, real_unlink = threading.Event(), os.unlink

    def unlink(path: str | os.PathLike[str], *args: object, **kwargs: object) -> None:
        if os.fspath(path).endswith("hold-the-removal-thread"):
            gate.wait(10)  # bounded: the test opens it
        real_unlink(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "unlink", unlink)
    (directory / "hold-the-removal-thread").touch()
    manager.flusher.remover.remove(SegmentRemoval((directory / "hold-the-removal-thread",), None), "")
    return gate


def test_a_deleted_log_frees_its_name_at_once_and_goes_on_the_removal_thread(
        managers: list[LogManager], dirs: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The event loop only renames the directory (a topic deletion's unlinks wait for the disk's
    discards) and fsyncs nothing (its data is not flushed to be deleted); the removal thread
    deletes it, and the shutdown waits for that."""
    manager = open_manager(managers, dirs[:1])
    fill(manager.get_or_create_log(ORDERS_0, now_ms=NOW), 3)  # the active segment not flushed
    gate = _hold_the_removal_thread(manager, dirs[0], monkeypatch)
    synced_on: list[str] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced_on.append(threading.current_thread().name)
                        or real_fsync(fd))
    manager.delete_log(ORDERS_0)
    assert threading.current_thread().name not in synced_on
    doomed = [p for p in dirs[0].iterdir() if p.name.endswith(DELETE_DIR_SUFFIX)]
    assert not (dirs[0] / ORDERS_0.dir_name).exists() and len(doomed) == 1  # renamed, not removed yet
    assert doomed[0].name.startswith(f"{ORDERS_0.dir_name}.") and any(doomed[0].iterdir())
    again = manager.get_or_create_log(ORDERS_0, now_ms=NOW)  # a re-created topic: the name is free
    fill(again, 1)
    threading.Timer(0.2, gate.set).start()
    manager.shutdown()  # waits for the removal in flight
    assert not doomed[0].exists()
    assert sorted(p.name for p in dirs[0].iterdir() if p.is_dir()) == [ORDERS_0.dir_name]
    assert open_manager(managers, dirs[:1]).logs[ORDERS_0].log_end_offset == 1


def test_a_deleted_log_directory_that_cannot_be_removed_is_one_error_line(
        managers: list[LogManager], dirs: list[Path], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    manager = open_manager(managers, dirs[:1])
    fill(manager.get_or_create_log(ORDERS_0, now_ms=NOW), 3)

    def refuse(path: Path, *args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(shutil, "rmtree", refuse)
    with caplog.at_level(logging.ERROR):
        manager.delete_log(ORDERS_0)  # the caller (the event loop) hears nothing: the thread reports
        manager.flusher.remover.shutdown()
    doomed = [p for p in dirs[0].iterdir() if p.name.endswith(DELETE_DIR_SUFFIX)]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(doomed) == 1 and len(errors) == 1
    assert str(doomed[0]) in errors[0] and "Permission denied" in errors[0]
    monkeypatch.undo()
    manager.shutdown()
    open_manager(managers, dirs[:1])  # the next start's load removes it
    assert not doomed[0].exists()


def test_load_removes_leftover_delete_dirs(managers: list[LogManager], dirs: list[Path],
                                           caplog: pytest.LogCaptureFixture) -> None:
    manager = open_manager(managers, dirs[:1])
    fill(manager.get_or_create_log(ORDERS_0, now_ms=NOW), 3)
    manager.shutdown()
    leftover = dirs[0] / "orders-1.0123456789abcdef-delete"
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(batch(0))
    stranger = dirs[0] / "not_a_partition"
    stranger.mkdir()
    with caplog.at_level(logging.INFO, logger="broker.log.log_manager"):
        reopened = open_manager(managers, dirs[:1])
    assert not leftover.exists()
    assert stranger.is_dir()  # not ours: left alone, with a warning
    assert any("not_a_partition" in r.getMessage() and r.levelno == logging.WARNING
               for r in caplog.records)
    assert list(reopened.partitions()) == [ORDERS_0]
    assert values(reopened.logs[ORDERS_0]) == expected_values(0, 3)


def test_same_partition_in_two_dirs_is_refused(managers: list[LogManager],
                                               dirs: list[Path]) -> None:
    for directory in dirs:
        manager = open_manager(managers, [directory])
        manager.get_or_create_log(ORDERS_0, now_ms=NOW)
        manager.shutdown()
    with pytest.raises(KafkaStorageError, match="exists in both"):
        LogManager(dirs, SMALL, now_ms=NOW)


# --- recovery after an unclean stop ----------------------------------------------------

@pytest.fixture
def count_recoveries(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Base offsets of the segments that ran a full recovery scan."""
    recovered: list[int] = []
    original = LogSegment.recover

    def recover(segment: LogSegment, *args: object, **kwargs: object) -> RecoveryResult:
        recovered.append(segment.base_offset)
        return original(segment, *args, **kwargs)

    monkeypatch.setattr(LogSegment, "recover", recover)
    return recovered


@pytest.mark.parametrize(("checkpoint_text", "recovered_bases", "error_logged"), [
    pytest.param(None, [8], False, id="valid-checkpoint-recovers-the-active-segment"),
    pytest.param("0\n1\norders 0 nine\n", [0, 2, 4, 6, 8], True, id="bad-line"),
    pytest.param("7\n1\norders 0 9\n", [0, 2, 4, 6, 8], True, id="bad-version"),
    pytest.param("", [0, 2, 4, 6, 8], True, id="empty-file"),
])
def test_corrupt_recovery_point_checkpoint_falls_back_to_full_recovery(
        managers: list[LogManager], dirs: list[Path], caplog: pytest.LogCaptureFixture,
        count_recoveries: list[int], checkpoint_text: str | None,
        recovered_bases: list[int], error_logged: bool) -> None:
    manager = open_manager(managers, dirs[:1])
    fill(manager.get_or_create_log(ORDERS_0, now_ms=NOW), 9)  # segments at 0, 2, 4, 6, 8
    manager.shutdown()
    (dirs[0] / CLEAN_SHUTDOWN_FILE).unlink()  # as if the broker had crashed
    checkpoint = dirs[0] / RECOVERY_POINT_CHECKPOINT
    if checkpoint_text is not None:
        checkpoint.write_text(checkpoint_text)

    with caplog.at_level(logging.INFO):
        reopened = open_manager(managers, dirs[:1])

    assert count_recoveries == recovered_bases
    partition_log = reopened.logs[ORDERS_0]
    assert partition_log.log_end_offset == 9
    assert values(partition_log) == expected_values(0, 9)
    errors = [r for r in caplog.records
              if r.levelno == logging.ERROR and r.name == "broker.log.log_manager"]
    assert bool(errors) == error_logged
    if error_logged:
        assert str(checkpoint) in errors[0].getMessage()


# --- topic configs ---------------------------------------------------------------------

def test_update_topic_config_reaches_open_logs(managers: list[LogManager],
                                               dirs: list[Path]) -> None:
    manager = open_manager(managers, dirs, LogConfig())
    logs = populate(manager)
    small = LogConfig(segment_bytes=BATCH_SIZE + 1)
    manager.update_topic_config("orders", small)
    assert logs[ORDERS_0].config is small
    assert logs[ORDERS_1].config is small
    assert logs[PAYMENTS_0].config == LogConfig()
    assert manager.config_for("orders") is small
    assert manager.get_or_create_log(TopicPartition("orders", 2), now_ms=NOW).config is small
    segments = len(logs[ORDERS_1].segments)
    fill(logs[ORDERS_1], 2)  # one batch per segment now
    assert len(logs[ORDERS_1].segments) == segments + 2


def test_topic_configs_given_at_startup_apply_to_loaded_logs(managers: list[LogManager],
                                                             dirs: list[Path]) -> None:
    manager = open_manager(managers, dirs)
    populate(manager)
    manager.shutdown()
    special = LogConfig(retention_ms=1)
    reopened = open_manager(managers, dirs, topic_configs={"payments": special})
    assert reopened.logs[PAYMENTS_0].config is special
    assert reopened.logs[ORDERS_0].config is SMALL


# --- retention -------------------------------------------------------------------------

RETENTION_CASES = [
    # (retention settings, high watermark, now, segments deleted per log, new log start)
    pytest.param({"retention_ms": 1_000}, 10, NOW + 10_000, 4, 8, id="time-all-old"),
    pytest.param({"retention_ms": 1_000}, 0, NOW + 10_000, 0, 0, id="time-but-hw-at-zero"),
    pytest.param({"retention_ms": 1_000}, 5, NOW + 10_000, 2, 4, id="time-up-to-hw"),
    pytest.param({"retention_ms": 1_000}, 4, NOW + 10_000, 2, 4, id="time-hw-on-segment-base"),
    pytest.param({"retention_ms": 997}, 10, NOW + 1_000, 1, 2, id="time-only-oldest"),
    pytest.param({"retention_ms": -1}, 10, NOW + 10**12, 0, 0, id="time-forever"),
    pytest.param({"retention_ms": -1, "retention_bytes": 6 * BATCH_SIZE}, 10, NOW, 2, 4,
                 id="size-keeps-three-segments"),
    pytest.param({"retention_ms": -1, "retention_bytes": 10 * BATCH_SIZE}, 10, NOW, 0, 0,
                 id="size-within-limit"),
    pytest.param({"retention_ms": -1, "retention_bytes": 0}, 10, NOW, 4, 8,
                 id="size-zero-keeps-the-active-segment"),
]


@pytest.mark.parametrize(("settings", "high_watermark", "now", "deleted", "log_start"),
                         RETENTION_CASES)
def test_cleanup_applies_retention(managers: list[LogManager], dirs: list[Path],
                                   settings: dict[str, int], high_watermark: int, now: int,
                                   deleted: int, log_start: int) -> None:
    manager = open_manager(managers, dirs, SMALL.replace(**settings))
    logs = [manager.get_or_create_log(tp, now_ms=NOW) for tp in (ORDERS_0, ORDERS_1)]
    for partition_log in logs:
        fill(partition_log, 10)  # segments at 0, 2, 4, 6, 8
        partition_log.update_high_watermark(high_watermark)

    assert manager.cleanup(now) == 2 * deleted
    manager.flusher.remover.shutdown()  # the files go on its thread (restarted at its next use)
    for partition_log in logs:
        assert partition_log.log_start_offset == log_start
        assert [s.base_offset for s in partition_log.segments] == list(range(log_start, 10, 2))
        on_disk = sorted(p.name for p in partition_log.directory.glob("*.log*"))
        assert on_disk == [f"{base:020d}.log" for base in range(log_start, 10, 2)]
        assert values(partition_log) == expected_values(log_start, 10)
        assert partition_log.leader_epoch_cache.entries[0].start_offset == log_start
    manager.shutdown()
    assert (dirs[0] / LOG_START_OFFSET_CHECKPOINT).read_text() == \
        f"0\n1\norders 0 {log_start}\n"


# --- many new, empty logs (a 10,000-partition topic) ---------------------------------------

MANY = [TopicPartition("big", p) for p in range(40)]


def test_empty_logs_stop_cleanly_without_index_files_and_reopen_quietly(
        managers: list[LogManager], dirs: list[Path], caplog: pytest.LogCaptureFixture) -> None:
    manager = open_manager(managers, dirs[:1])
    assert manager.create_logs(MANY, now_ms=NOW) == {}
    manager.shutdown()
    files = sorted(p.name for p in (dirs[0] / "big-0").iterdir())
    assert files == []  # never written: no segment file yet, no index files created and fsynced
    with caplog.at_level(logging.WARNING):
        reopened = open_manager(managers, dirs[:1])
    assert not [r for r in caplog.records if "Rebuilding" in r.getMessage()]
    partition_log = reopened.logs[TopicPartition("big", 0)]
    fill(partition_log, 3)  # the indexes start empty and are written once there is data
    reopened.shutdown()
    third = open_manager(managers, dirs[:1])
    assert values(third.logs[TopicPartition("big", 0)]) == expected_values(0, 3)
    assert (dirs[0] / "big-0" / f"{0:020d}.index").exists()


def test_an_empty_segment_ignores_stale_index_files(managers: list[LogManager], dirs: list[Path]) -> None:
    manager = open_manager(managers, dirs[:1])
    manager.create_logs([ORDERS_0], now_ms=NOW)
    manager.shutdown()
    (dirs[0] / "orders-0" / f"{0:020d}.index").write_bytes(b"\x00\x00\x00\x05\x00\x00\x00\x07")
    reopened = open_manager(managers, dirs[:1])
    partition_log = reopened.logs[ORDERS_0]
    assert not (dirs[0] / "orders-0" / f"{0:020d}.index").exists()  # stale: removed on load
    fill(partition_log, 2)
    reopened.shutdown()
    third = open_manager(managers, dirs[:1])
    assert values(third.logs[ORDERS_0]) == expected_values(0, 2)


def test_create_logs_over_an_existing_directory_loads_what_it_holds(
        managers: list[LogManager], dirs: list[Path]) -> None:
    manager = open_manager(managers, dirs[:1])
    fill(manager.get_or_create_log(ORDERS_0, now_ms=NOW), 3)
    manager.shutdown()
    # a directory the manager does not know (copied in by an operator): `new` falls back to loading
    (dirs[0] / "orders-0").rename(dirs[0] / "orders-1")
    reopened = open_manager(managers, dirs[:1])
    reopened.delete_log(ORDERS_1)
    (dirs[0] / "orders-1").mkdir()
    assert reopened.create_logs([ORDERS_1], now_ms=NOW) == {}
    assert reopened.logs[ORDERS_1].log_end_offset == 0


def test_run_parallel_keeps_order_and_every_outcome(managers: list[LogManager], dirs: list[Path]) -> None:
    manager = open_manager(managers, dirs[:1])

    def square_or_fail(n: int) -> int:
        if n == 3:
            raise ValueError("three")
        return n * n

    outcomes = manager.run_parallel(square_or_fail, range(20))  # type: ignore[arg-type]
    assert [o.result() for i, o in enumerate(outcomes) if i != 3] == [n * n for n in range(20) if n != 3]
    assert isinstance(outcomes[3].error, ValueError) and outcomes[3].value is None
    with pytest.raises(ValueError, match="three"):
        outcomes[3].result()
    assert manager.run_parallel(square_or_fail, []) == []


def test_a_log_reopened_after_a_clean_stop_closes_without_fsyncing_its_segments(
        managers: list[LogManager], dirs: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    manager = open_manager(managers, dirs[:1])
    fill(manager.get_or_create_log(ORDERS_0, now_ms=NOW), 5)
    manager.create_logs(MANY[:5], now_ms=NOW)
    manager.shutdown()
    reopened = open_manager(managers, dirs[:1])
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    reopened.shutdown()  # what the clean stop made durable is not synced again, files or indexes
    # each of the three checkpoints (file, then its directory), then the directory with the marker
    assert len(synced) == 3 * 2 + 1


def test_a_clean_stop_closes_only_the_logs_that_owe_a_write(
        managers: list[LogManager], dirs: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    manager = open_manager(managers, dirs[:1], LogConfig())
    manager.create_logs([*MANY[:20], ORDERS_0, ORDERS_1, PAYMENTS_0], now_ms=NOW)
    fill(manager.logs[ORDERS_0], 3)  # unflushed data and a producer snapshot to write
    manager.logs[ORDERS_0].snapshot_source = lambda: b""
    fill(manager.logs[ORDERS_1], 2)
    manager.logs[ORDERS_1].truncate_to(0)  # empty again, but not known to be synced so
    manager.logs[PAYMENTS_0].snapshot_source = lambda: b""  # empty: no snapshot owed
    closed: list[TopicPartition] = []
    real_close = PartitionLog.close
    monkeypatch.setattr(PartitionLog, "close",
                        lambda lg: (closed.append(lg.topic_partition), real_close(lg))[1])
    manager.shutdown()
    assert sorted(closed) == [ORDERS_0, ORDERS_1]
    assert len(manager.files) == 0  # the empty logs' files were let go of too
    assert (dirs[0] / CLEAN_SHUTDOWN_FILE).exists()
    assert sorted(p.name for p in (dirs[0] / "orders-0").iterdir() if p.suffix == ".snapshot") == \
        [f"{3:020d}.snapshot"]
    reopened = open_manager(managers, dirs[:1], LogConfig())
    assert values(reopened.logs[ORDERS_0]) == expected_values(0, 3)
    assert reopened.logs[ORDERS_1].log_end_offset == 0
    assert all(reopened.logs[tp].log_end_offset == 0 for tp in MANY[:20])


def test_logs_load_in_parallel_and_a_failure_refuses_the_start_and_closes_the_others(
        managers: list[LogManager], dirs: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    manager = open_manager(managers, dirs[:1])
    manager.create_logs(MANY, now_ms=NOW)
    fill(manager.logs[MANY[7]], 3)
    manager.shutdown()
    real_init = PartitionLog.__init__

    def refuse_big_5(self: PartitionLog, directory: Path, *args: object, **kwargs: object) -> None:
        if directory.name == "big-5":
            raise KafkaStorageError("big-5 is unreadable")
        real_init(self, directory, *args, **kwargs)  # type: ignore[arg-type]
    monkeypatch.setattr(PartitionLog, "__init__", refuse_big_5)
    with pytest.raises(KafkaStorageError, match="big-5"):
        LogManager(dirs[:1], SMALL, now_ms=NOW)
    monkeypatch.setattr(PartitionLog, "__init__", real_init)
    reopened = open_manager(managers, dirs[:1])  # the refused start released the directory's lock
    assert sorted(reopened.logs) == sorted(MANY)
    assert values(reopened.logs[MANY[7]]) == expected_values(0, 3)


# --- flush.ms: the scan of every log is skipped until one can be due --------------------

def test_flush_due_skips_until_a_log_can_be_due_and_notices_a_shorter_flush_ms(
        managers: list[LogManager], dirs: list[Path]) -> None:
    manager = open_manager(managers, dirs, LogConfig())  # Kafka's default flush.ms: never
    logs = populate(manager)
    fill(logs[ORDERS_0], 1)
    assert manager.flush_due(NOW + 10**9) == 0  # nothing can ever be due: the next calls skip the scan
    assert logs[ORDERS_0].recovery_point == 0
    manager.update_topic_config("orders", LogConfig(flush_ms=100))  # brings the next check forward
    assert manager.flush_due(NOW + 10**9) == 2  # both orders logs hold unflushed data
    assert logs[ORDERS_0].recovery_point == logs[ORDERS_0].log_end_offset
    fill(logs[ORDERS_0], 1)
    assert manager.flush_due(NOW + 10**9 + 50) == 0  # not due again before 100 ms
    assert manager.flush_due(NOW + 10**9 + 100) == 1


def test_a_topic_config_sets_off_no_scan_of_the_other_topics_logs(
        managers: list[LogManager], dirs: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    manager = open_manager(managers, dirs, LogConfig())
    populate(manager)
    assert manager.flush_due(NOW) == 0  # every log at the never-due default
    scanned: list[PartitionLog] = []
    monkeypatch.setattr(PartitionLog, "flush_if_due", lambda log, now_ms: scanned.append(log) or False)
    manager.update_topic_config("new-topic", LogConfig())  # a created topic's config: no logs yet
    manager.update_topic_config("orders", LogConfig(retention_ms=1))  # flush.ms unchanged
    assert manager.flush_due(NOW + 1000) == 0 and scanned == []


def test_a_new_log_with_a_short_flush_ms_is_flushed_after_a_scan_found_none_due(
        managers: list[LogManager], dirs: list[Path]) -> None:
    manager = open_manager(managers, dirs, LogConfig(), topic_configs={"fast": LogConfig(flush_ms=100)})
    populate(manager)
    assert manager.flush_due(NOW) == 0  # every log at the never-due default
    fast = manager.get_or_create_log(TopicPartition("fast", 0), now_ms=NOW)
    fill(fast, 1)
    assert manager.flush_due(NOW + 100) == 1
    assert fast.recovery_point == fast.log_end_offset


def test_update_topic_config_after_a_delete_reaches_the_topics_other_logs(
        managers: list[LogManager], dirs: list[Path]) -> None:
    manager = open_manager(managers, dirs, LogConfig())
    logs = populate(manager)
    manager.delete_log(ORDERS_0)
    small = LogConfig(segment_bytes=BATCH_SIZE + 1)
    manager.update_topic_config("orders", small)
    assert logs[ORDERS_1].config is small
    manager.delete_log(ORDERS_1)
    manager.update_topic_config("orders", LogConfig())  # no log of it left: nothing to touch
    assert logs[PAYMENTS_0].config == LogConfig()


# --- leader-epoch checkpoints: fsynced before the recovery points that could cover them --------

@pytest.mark.parametrize("leaders", [3, len(MANY)])  # on the caller's thread, and on the I/O pool
def test_checkpoint_syncs_the_owed_epoch_checkpoints_before_the_recovery_points(
        managers: list[LogManager], dirs: list[Path], monkeypatch: pytest.MonkeyPatch, leaders: int) -> None:
    manager = open_manager(managers, dirs[:1])
    manager.create_logs(MANY, now_ms=NOW)
    for tp in MANY[:leaders]:  # new leaderships: each rewrites its checkpoint, none fsyncs it
        manager.logs[tp].leader_epoch_cache.assign(7, 0)
        manager.logs[tp].append(batch(0), now_ms=NOW)  # data in epoch 7, not flushed yet
    synced: list[str] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")) or real_fsync(fd))
    manager.checkpoint().result()
    epoch_files = [i for i, path in enumerate(synced) if path.endswith("leader-epoch-checkpoint")]
    recovery_points = [i for i, path in enumerate(synced) if "recovery-point-offset-checkpoint" in path]
    assert len(epoch_files) == leaders and recovery_points
    assert max(epoch_files) < min(recovery_points)  # a recovery point on disk never outruns an epoch entry
    assert not any(lg.leader_epoch_cache.needs_sync for lg in manager.logs.values())
    synced.clear()
    assert manager.sync_epoch_checkpoints() == 0 and synced == []  # nothing owed any more


def fail_epoch_syncs(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """Every fsync of a leader-epoch checkpoint fails with EIO from here on; the real fsync."""
    real_fsync = os.fsync

    def failing(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith("leader-epoch-checkpoint"):
            raise OSError(errno.EIO, "I/O error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing)
    return real_fsync


def test_an_epoch_checkpoint_that_cannot_be_synced_stays_owed_and_fails_the_checkpoint(
        managers: list[LogManager], dirs: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    manager = open_manager(managers, dirs[:1])
    partition_log = manager.get_or_create_log(ORDERS_0, now_ms=NOW)
    partition_log.leader_epoch_cache.assign(2, 0)
    partition_log.append(batch(0), now_ms=NOW)
    real_fsync = fail_epoch_syncs(monkeypatch)
    recovery_points = dirs[0] / "recovery-point-offset-checkpoint"
    before = recovery_points.read_bytes() if recovery_points.exists() else None
    with pytest.raises(KafkaStorageError, match="leader-epoch-checkpoint"):
        manager.checkpoint()
    assert partition_log.leader_epoch_cache.needs_sync  # the next pass tries again
    assert (recovery_points.read_bytes() if recovery_points.exists() else None) == before
    monkeypatch.setattr(os, "fsync", real_fsync)
    manager.checkpoint().result()
    assert not partition_log.leader_epoch_cache.needs_sync


def test_a_new_leadership_of_an_empty_log_owes_no_fsync_until_its_epoch_holds_data(
        managers: list[LogManager], dirs: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Every leader of a new topic: its entry is written (a process crash keeps it), fsynced only
    by the flush that first makes data of its epoch durable."""
    manager = open_manager(managers, dirs[:1])
    manager.create_logs(MANY, now_ms=NOW)
    for tp in MANY:
        manager.logs[tp].leader_epoch_cache.assign(5, 0)
    synced: list[str] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")) or real_fsync(fd))
    manager.checkpoint().result()
    assert not any(path.endswith("leader-epoch-checkpoint") for path in synced)
    assert all(manager.logs[tp].leader_epoch_cache.needs_sync for tp in MANY)
    assert (manager.logs[MANY[0]].directory / "leader-epoch-checkpoint").read_text() == "0\n1\n5 0\n"
    written = manager.logs[MANY[0]]
    written.append(batch(0), now_ms=NOW)
    synced.clear()
    written.flush()
    epoch_file, segment = str(written.directory / "leader-epoch-checkpoint"), str(written.active_segment.log_path)
    assert epoch_file in synced and synced.index(epoch_file) < synced.index(segment)
    assert not written.leader_epoch_cache.needs_sync


def test_logs_whose_first_epoch_checkpoint_a_crash_left_empty_reopen_without_entries(
        managers: list[LogManager], dirs: list[Path]) -> None:
    """SIGKILL between an in-place checkpoint's creation and its one write: the log reopens (no
    data in that epoch, nothing lost), the others keep their entries."""
    manager = open_manager(managers, dirs[:1])
    manager.create_logs(MANY, now_ms=NOW)
    for tp in MANY:
        manager.logs[tp].leader_epoch_cache.assign(5, 0)
    for tp in MANY[1:]:  # data in epoch 5 (an entry with none after it is dropped on load)
        manager.logs[tp].append(batch(0), now_ms=NOW)
    torn = manager.logs[MANY[0]].directory / "leader-epoch-checkpoint"
    torn.write_bytes(b"")
    manager._release_locks()  # the crash: no close, no checkpoint, no clean-shutdown marker
    reopened = open_manager(managers, dirs[:1])
    assert sorted(reopened.partitions(), key=str) == sorted(MANY, key=str)
    assert reopened.logs[MANY[0]].leader_epoch_cache.entries == []
    assert all(reopened.logs[tp].leader_epoch_cache.entries == [EpochEntry(5, 0)]
               and reopened.logs[tp].log_end_offset == 1 for tp in MANY[1:])


@pytest.mark.parametrize("count", [5, len(MANY)])  # on the caller's thread, and on the I/O pool
def test_a_batch_of_new_logs_costs_one_fsync_of_their_log_dir(
        managers: list[LogManager], dirs: list[Path], monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    """A topic of 10 partitions is one directory fsync per log dir, not ten, and on the flusher's
    thread, not the caller's (the event loop)."""
    synced: list[tuple[str, str]] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(
        (os.readlink(f"/proc/self/fd/{fd}"), threading.current_thread().name)) or real_fsync(fd))
    manager = open_manager(managers, dirs[:1])
    (dirs[0] / "big-1").write_text("a file where a partition directory must go")  # this one fails alone
    synced.clear()
    failed = manager.create_logs(MANY[:count], now_ms=NOW)
    assert set(failed) == {TopicPartition("big", 1)} and isinstance(failed[TopicPartition("big", 1)], OSError)
    manager.flusher.shutdown()  # waits for its thread's work
    assert [path for path, _ in synced] == [str(dirs[0])]
    assert all(thread.startswith("log-flush") for _, thread in synced)
    assert sorted(manager.partitions(), key=str) == sorted(set(MANY[:count]) - set(failed), key=str)
