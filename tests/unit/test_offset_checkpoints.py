"""broker/log/offset_checkpoints.py through the LogManager: the offset checkpoint files are
written on the checkpoint writer's thread from a snapshot taken on the caller's (a pass returns
before they are on disk), newest content last, a failed write owed again, and a close that
waits for them before the clean-shutdown marker. (What each pass writes: test_log_changes.py.)"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.log import log_manager as log_manager_module
from broker.log.log_manager import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    LogManager,
)
from common.errors import KafkaStorageError
from common.log_config import LogConfig
from common.topic_partition import TopicPartition
from tests.log_helpers import NOW, batch

A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)
WAIT_S = 5.0  # bounds every wait on the writer's thread: a hang fails the test, not the run


class HeldRenames:
    """`os.replace` onto a file named `held` waits for `release` (the writer's last step of a
    write); every rename onto it is counted, and one may be made to fail."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, held: str) -> None:
        self.held, self.release, self.entered = held, threading.Event(), threading.Event()
        self.renames = 0
        self.fail_next = False
        real = os.replace

        def replace(src: str | Path, dst: str | Path) -> None:
            if Path(dst).name == self.held:
                self.renames += 1
                self.entered.set()
                if self.fail_next:
                    self.fail_next = False
                    raise OSError(28, "No space left on device")
                self.release.wait(WAIT_S)  # bounded: a tree writing on the caller's thread goes on
            real(src, dst)

        monkeypatch.setattr(os, "replace", replace)


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[LogManager]:
    manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    yield manager
    manager.shutdown()


def filled(manager: LogManager) -> None:
    for tp in (A0, A1):
        partition_log = manager.get_or_create_log(tp, now_ms=NOW)
        partition_log.append(batch(10), now_ms=NOW)
        partition_log.update_high_watermark(4)
    manager.checkpoint().result(WAIT_S)


def high_watermarks(manager: LogManager) -> str:
    return (manager.log_dirs[0] / HIGH_WATERMARK_CHECKPOINT).read_text()


def test_a_pass_returns_before_its_files_are_written(manager: LogManager,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    filled(manager)
    held = HeldRenames(monkeypatch, HIGH_WATERMARK_CHECKPOINT)
    manager.logs[A0].update_high_watermark(7)
    written = manager.checkpoint()
    assert held.entered.wait(WAIT_S)
    assert not written.done() and high_watermarks(manager) == "0\n2\na 0 4\na 1 4\n"
    held.release.set()
    written.result(WAIT_S)
    assert high_watermarks(manager) == "0\n2\na 0 7\na 1 4\n"


def test_passes_while_a_write_is_in_flight_write_once_more_with_the_newest_offsets(
        manager: LogManager, monkeypatch: pytest.MonkeyPatch) -> None:
    filled(manager)
    held = HeldRenames(monkeypatch, HIGH_WATERMARK_CHECKPOINT)
    manager.logs[A0].update_high_watermark(5)
    first = manager.checkpoint()
    assert held.entered.wait(WAIT_S)  # in flight
    manager.logs[A0].update_high_watermark(6)
    manager.checkpoint()  # queued behind it
    manager.logs[A0].update_high_watermark(7)
    last = manager.checkpoint()  # replaces the queued one
    held.release.set()
    first.result(WAIT_S)
    last.result(WAIT_S)
    assert held.renames == 2 and high_watermarks(manager) == "0\n2\na 0 7\na 1 4\n"


def test_a_failed_write_is_reported_and_written_again_at_the_next_pass(
        manager: LogManager, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    filled(manager)
    held = HeldRenames(monkeypatch, HIGH_WATERMARK_CHECKPOINT)
    held.release.set()
    held.fail_next = True
    manager.logs[A1].update_high_watermark(9)
    with caplog.at_level(logging.ERROR):
        with pytest.raises(KafkaStorageError, match="No space left on device"):
            manager.checkpoint().result(WAIT_S)
    assert any(HIGH_WATERMARK_CHECKPOINT in r.getMessage() and "No space left" in r.getMessage()
               for r in caplog.records)
    assert high_watermarks(manager) == "0\n2\na 0 4\na 1 4\n"
    manager.checkpoint().result(WAIT_S)  # nothing moved since: the failed file is still owed
    assert high_watermarks(manager) == "0\n2\na 0 4\na 1 9\n"


def held_at_close(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[LogManager, HeldRenames]:
    """A manager the test closes itself, whose high-watermark file owes a write that is held."""
    manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    filled(manager)
    held = HeldRenames(monkeypatch, HIGH_WATERMARK_CHECKPOINT)
    manager.logs[A0].update_high_watermark(8)
    return manager, held


def test_close_waits_for_the_writes_in_flight_before_the_clean_shutdown_marker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager, held = held_at_close(tmp_path, monkeypatch)
    in_flight = manager.checkpoint()
    assert held.entered.wait(WAIT_S)
    closing = threading.Thread(target=manager.shutdown)
    closing.start()
    closing.join(0.2)
    assert closing.is_alive() and not (manager.log_dirs[0] / CLEAN_SHUTDOWN_FILE).exists()
    held.release.set()
    closing.join(WAIT_S)
    assert in_flight.done() and (manager.log_dirs[0] / CLEAN_SHUTDOWN_FILE).exists()
    assert high_watermarks(manager) == "0\n2\na 0 8\na 1 4\n"


def test_a_close_whose_writes_do_not_end_in_time_leaves_no_clean_shutdown_marker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    manager, held = held_at_close(tmp_path, monkeypatch)
    monkeypatch.setattr(log_manager_module, "CHECKPOINT_WAIT_S", 0.2)
    try:
        with pytest.raises(KafkaStorageError, match="not written after 0.2 s"):
            manager.shutdown()
        assert not (manager.log_dirs[0] / CLEAN_SHUTDOWN_FILE).exists()
    finally:
        held.release.set()


def test_a_log_start_write_before_the_first_pass_after_a_start_keeps_every_log(tmp_path: Path) -> None:
    """After a start every log is new to the files until the first periodic pass: a write of
    the log-start file for one DeleteRecords then must not drop the others' starts."""
    first = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    for tp, start in ((A0, 2), (A1, 3)):
        partition_log = first.get_or_create_log(tp, now_ms=NOW)
        partition_log.append(batch(10), now_ms=NOW)
        partition_log.update_high_watermark(10)
        partition_log.maybe_increment_log_start_offset(start)
    first.shutdown()  # its files hold both starts
    manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW)
    try:
        manager.logs[A0].maybe_increment_log_start_offset(4)
        written = manager.checkpoint_log_start_offsets(A0)
        if written is not None:  # a tree writing on the caller's thread returned None
            written.result(WAIT_S)
        assert (tmp_path / "logs" / LOG_START_OFFSET_CHECKPOINT).read_text() == "0\n2\na 0 4\na 1 3\n"
    finally:
        manager.shutdown()
