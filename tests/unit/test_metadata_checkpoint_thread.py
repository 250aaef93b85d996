"""broker/metadata_follower_loop.py: the broker's metadata checkpoint is written on a thread of its
own, one write at a time, so its encoding and fsyncs never hold the event loop (and the requests
on it); the last one, when stopping, waits for the one in flight and then is written."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from broker import metadata_follower_loop
from broker.follower_settings import FollowerSettings
from broker.metadata_checkpoint import read_offset_file, write_checkpoint
from broker.metadata_follower_loop import MetadataFollower
from common.errors import KafkaStorageError
from metadata.image import MetadataImage

GATE_S = 5.0  # how long a held write waits for the test to let it go (bounds a synchronous write)


def follower(tmp_path: Path) -> MetadataFollower:
    settings = FollowerSettings(broker_id=4, incarnation_id="inc", listeners=(), log_dir=tmp_path,
                                checkpoint_interval_ms=0)
    return MetadataFollower(settings, client=None, on_changes=lambda changes, image: None,  # type: ignore[arg-type]
                            clock=lambda: 0)


class HeldWrites:
    """write_checkpoint that waits for `gate` before writing, noting where it ran."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.started = threading.Event()
        self.writes: list[tuple[int, bool, bool]] = []  # (offset, on the main thread, the gate opened in time)

    def __call__(self, log_dir: Path, image: MetadataImage) -> None:
        self.started.set()
        opened = self.gate.wait(GATE_S)
        self.writes.append((image.offset, threading.current_thread() is threading.main_thread(), opened))
        write_checkpoint(log_dir, image)


def test_a_checkpoint_is_written_off_the_loop_one_at_a_time_and_the_last_waits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    held = HeldWrites()
    monkeypatch.setattr(metadata_follower_loop, "write_checkpoint", held)
    f = follower(tmp_path)
    f.state.image = MetadataImage(offset=5)
    f._checkpoint()  # returns while the write waits for the gate: it is not on the caller's thread
    assert held.started.wait(GATE_S)
    assert held.writes == []
    f.state.image = MetadataImage(offset=6)
    f._checkpoint()  # one in flight: no second writer on the same .tmp file
    held.gate.set()
    f._checkpoint(force=True)  # stopping: the one in flight, then the last image
    assert held.writes == [(5, False, True), (6, False, True)]
    assert read_offset_file(tmp_path) == 6
    assert not f.state.checkpoint_due(0)  # the state knows offset 6 is on disk


def test_a_failed_checkpoint_is_logged_and_written_again_later(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    def full_disk(log_dir: Path, image: MetadataImage) -> None:
        calls.append(image.offset)
        if len(calls) == 1:
            raise KafkaStorageError("cannot write checkpoint: No space left on device")
        write_checkpoint(log_dir, image)
    monkeypatch.setattr(metadata_follower_loop, "write_checkpoint", full_disk)
    f = follower(tmp_path)
    f.state.image = MetadataImage(offset=7)
    with caplog.at_level(logging.WARNING, logger="broker.metadata_follower_loop"):
        f._checkpoint(force=True)
    assert "Broker 4: could not checkpoint the metadata offset 7: cannot write checkpoint: No space left" \
        in caplog.text
    assert read_offset_file(tmp_path) is None and f.state.checkpoint_due(0)
    f._checkpoint(force=True)
    assert calls == [7, 7] and read_offset_file(tmp_path) == 7


def test_the_last_checkpoint_before_stopping_says_what_it_took(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """A stop waits for it (the whole image encoded): its own line splits a controlled shutdown's
    "logs closed" step; nothing to write, no line."""
    f = follower(tmp_path)
    f.state.image = MetadataImage(offset=6)
    with caplog.at_level(logging.INFO, logger="broker.metadata_follower_loop"):
        f._checkpoint(force=True)
        f._checkpoint(force=True)  # already on disk
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("Broker 4: wrote the metadata checkpoint at offset 6 before "
                                                   "stopping in "), lines
    assert read_offset_file(tmp_path) == 6
