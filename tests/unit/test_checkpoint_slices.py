"""`LogManager.checkpoint` on a running event loop: many moved logs are synced and noted a slice
per turn of the loop (CHECKPOINT_SLICE_LOGS), never losing an offset: logs that move meanwhile,
a close in the middle, a failed sync and a log-start write in the middle all end with every
offset in the files, and no recovery point noted before its leader-epoch sync."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.log import log_manager as log_manager_module
from broker.log.log_manager import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LogManager,
)
from broker.log.offset_checkpoints import OffsetCheckpoints
from broker.log.partition_log import PartitionLog
from common.errors import KafkaStorageError
from common.log_config import LogConfig
from common.topic_partition import TopicPartition
from tests.log_helpers import NOW, batch
from tests.unit.test_log_manager import fail_epoch_syncs

SLICE = 2
LOGS = [TopicPartition("t", p) for p in range(5)]  # three slices
WAIT_S = 5.0  # bounds every wait on the writer's thread


@pytest.fixture
def manager(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LogManager]:
    monkeypatch.setattr(log_manager_module, "CHECKPOINT_SLICE_LOGS", SLICE, raising=False)
    manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    manager.create_logs(LOGS, now_ms=NOW)
    manager.checkpoint().result(WAIT_S)  # no loop running: every new log in one go
    yield manager
    if manager._locks:  # still open: LogManager has no public "is open" to ask
        manager.shutdown()


@pytest.fixture
def noted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many logs each `OffsetCheckpoints.note` call noted."""
    sizes: list[int] = []
    real = OffsetCheckpoints.note

    def note(self: OffsetCheckpoints, logs: list[object], dir_of: object) -> None:
        logs = list(logs)
        sizes.append(len(logs))
        real(self, logs, dir_of)  # type: ignore[arg-type]

    monkeypatch.setattr(OffsetCheckpoints, "note", note)
    return sizes


def move_all(manager: LogManager, high_watermark: int) -> None:
    for tp in LOGS:
        partition_log = manager.logs[tp]
        if partition_log.log_end_offset < high_watermark:
            partition_log.append(batch(high_watermark - partition_log.log_end_offset), now_ms=NOW)
        partition_log.update_high_watermark(high_watermark)


def file_entries(manager: LogManager, name: str) -> dict[str, int]:
    lines = (manager.log_dirs[0] / name).read_text().splitlines()[2:]
    return {" ".join(line.split()[:2]): int(line.split()[2]) for line in lines}


def all_at(value: int) -> dict[str, int]:
    return {f"{tp.topic} {tp.partition}": value for tp in LOGS}


async def test_a_pass_on_the_loop_notes_a_slice_per_turn(manager: LogManager, noted: list[int]) -> None:
    move_all(manager, 3)
    written = manager.checkpoint()
    assert noted == []  # the call returns at once: the slices follow on the loop's turns
    await asyncio.sleep(0)
    assert noted == [SLICE]
    await asyncio.wrap_future(written)
    assert noted == [SLICE, SLICE, 1]
    assert file_entries(manager, HIGH_WATERMARK_CHECKPOINT) == all_at(3)


async def test_logs_moving_during_a_pass_are_noted_by_it_or_the_next(manager: LogManager,
                                                                     noted: list[int]) -> None:
    move_all(manager, 3)
    first = manager.checkpoint()
    await asyncio.sleep(0)  # the first slice noted
    move_all(manager, 4)  # the noted ones move again, the others move before they are noted
    joined = manager.checkpoint()  # asked for while the pass runs: it joins it
    assert joined is first
    await asyncio.wrap_future(first)
    await asyncio.wrap_future(manager.checkpoint())  # what moved after being noted
    assert file_entries(manager, HIGH_WATERMARK_CHECKPOINT) == all_at(4)


async def test_a_close_during_a_pass_writes_every_offset_before_its_marker(manager: LogManager,
                                                                           noted: list[int]) -> None:
    move_all(manager, 3)
    running = manager.checkpoint()
    await asyncio.sleep(0)
    manager.shutdown()  # on the loop, the pass half done: the close notes the rest at once
    assert noted == [SLICE, len(LOGS)]  # the rest, and the noted ones the close's flushes moved
    assert running.result(0) is None  # its callers hear the close's write
    assert file_entries(manager, HIGH_WATERMARK_CHECKPOINT) == all_at(3)
    assert file_entries(manager, RECOVERY_POINT_CHECKPOINT) == all_at(3)  # closed: flushed
    assert (manager.log_dirs[0] / CLEAN_SHUTDOWN_FILE).exists()
    await asyncio.sleep(0)  # the slice queued before the close finds the pass ended
    assert noted == [SLICE, len(LOGS)]


async def test_a_failed_sync_in_a_slice_fails_the_pass_and_the_next_pass_writes_its_logs(
        manager: LogManager, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    for tp in LOGS:  # data in a new epoch: each log owes its epoch checkpoint's fsync
        manager.logs[tp].leader_epoch_cache.assign(1, 0)
    move_all(manager, 3)
    real_fsync = fail_epoch_syncs(monkeypatch)
    with caplog.at_level(logging.ERROR):
        with pytest.raises(KafkaStorageError, match="leader-epoch-checkpoint"):
            await asyncio.wrap_future(manager.checkpoint())
    assert any("offset checkpoint pass failed" in r.getMessage() for r in caplog.records)
    assert file_entries(manager, HIGH_WATERMARK_CHECKPOINT) == all_at(0)  # nothing written
    monkeypatch.setattr(os, "fsync", real_fsync)
    await asyncio.wrap_future(manager.checkpoint())  # every log put back: none lost
    assert file_entries(manager, HIGH_WATERMARK_CHECKPOINT) == all_at(3)
    assert not any(lg.leader_epoch_cache.needs_sync for lg in manager.logs.values())


async def test_a_log_start_write_during_a_pass_notes_no_recovery_point_before_its_epoch_sync(
        manager: LogManager, monkeypatch: pytest.MonkeyPatch) -> None:
    """A follower's log start moves while a pass runs: the log-start file is written at once,
    but that log's recovery point (its epoch checkpoint not yet fsynced) waits for a pass that
    syncs it first; the running pass's recovery-point write must not carry it."""
    move_all(manager, 3)
    late = manager.logs[LOGS[0]]
    late.flush()
    await asyncio.wrap_future(manager.checkpoint())
    synced: list[str] = []
    real_fsync = os.fsync

    def recorded(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recorded)
    for tp in LOGS[1:]:
        manager.logs[tp].update_high_watermark(2)  # what the pass takes
    running = manager.checkpoint()
    await asyncio.sleep(0)
    late.leader_epoch_cache.assign(2, 3)  # a new epoch with data, then truncated below it:
    late.append(batch(9), now_ms=NOW)  # its checkpoint rewritten without an fsync,
    late.truncate_to(1)  # the recovery point moved down to 1
    late.truncate_fully_and_start_at(2)  # the leader's log start: recovery point 2, epochs rewritten
    assert late.leader_epoch_cache.needs_sync
    manager.checkpoint_log_start_offsets(late.topic_partition, wait=False).result(WAIT_S)
    await asyncio.wrap_future(running)
    epoch_file = str(late.directory / "leader-epoch-checkpoint")
    recovery_point = file_entries(manager, RECOVERY_POINT_CHECKPOINT)[f"{LOGS[0].topic} {LOGS[0].partition}"]
    assert recovery_point != 2 or epoch_file in synced  # never ahead of its epoch entry's fsync
    await asyncio.wrap_future(manager.checkpoint())  # the next pass: synced, then noted
    assert epoch_file in synced
    assert file_entries(manager, RECOVERY_POINT_CHECKPOINT)[f"{LOGS[0].topic} {LOGS[0].partition}"] == 2


async def test_a_failed_close_during_a_pass_ends_the_pass(manager: LogManager, noted: list[int],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """No slice runs after a close that failed before its whole pass: the dirs are unlocked."""
    move_all(manager, 3)
    running = manager.checkpoint()
    await asyncio.sleep(0)

    def failing_close(_log: PartitionLog) -> None:
        raise KafkaStorageError("cannot fsync: I/O error")

    monkeypatch.setattr(PartitionLog, "close", failing_close)
    with pytest.raises(KafkaStorageError, match="I/O error"):
        manager.shutdown()
    with pytest.raises(KafkaStorageError, match="closed before this offset checkpoint pass ended"):
        running.result(0)
    await asyncio.sleep(0)
    assert noted == [SLICE]
