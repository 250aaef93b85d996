"""Tests for broker/log/checkpoint_file.py: Kafka's `version / count / entry lines` format,
one table driving writer and reader, every corruption naming its line, the atomic
replace (no `.tmp` left behind, an old file replaced whole), and the writer's thread (one write
of a file at a time, the newest content last, errors to every waiter)."""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import Future
from pathlib import Path

import pytest

from broker.log.checkpoint_file import (
    CheckpointFile,
    CheckpointWriter,
    CorruptCheckpointError,
    all_done,
    write_atomically,
)
from common.errors import KafkaStorageError

Entry = tuple[str, int, int]  # topic, partition, offset: the per-directory offset files
NAME = "recovery-point-offset-checkpoint"


def checkpoint(directory: Path) -> CheckpointFile[Entry]:
    return CheckpointFile(
        directory / NAME,
        lambda e: e,
        lambda fields: (fields[0], int(fields[1]), int(fields[2])),
    )


# --- one table drives writer and reader ------------------------------------------------

ROUND_TRIPS = [
    pytest.param([], "0\n0\n", id="empty"),
    pytest.param([("orders", 0, 42)], "0\n1\norders 0 42\n", id="one"),
    pytest.param(
        [("orders", 0, 42), ("orders", 1, 0), ("payments-eu", 12, 2**63 - 1)],
        "0\n3\norders 0 42\norders 1 0\npayments-eu 12 9223372036854775807\n",
        id="three",
    ),
]


@pytest.mark.parametrize(("entries", "text"), ROUND_TRIPS)
def test_write(tmp_path: Path, entries: list[Entry], text: str) -> None:
    checkpoint(tmp_path).write(entries)
    assert (tmp_path / NAME).read_text() == text


@pytest.mark.parametrize(("entries", "text"), ROUND_TRIPS)
def test_read(tmp_path: Path, entries: list[Entry], text: str) -> None:
    (tmp_path / NAME).write_text(text)
    assert checkpoint(tmp_path).read() == entries


@pytest.mark.parametrize(("entries", "text"), ROUND_TRIPS)
def test_round_trip(tmp_path: Path, entries: list[Entry], text: str) -> None:
    checkpoint(tmp_path).write(entries)
    assert checkpoint(tmp_path).read() == entries


def test_write_accepts_any_iterable(tmp_path: Path) -> None:
    checkpoint(tmp_path).write((("t", p, 10 * p) for p in range(3)))
    assert checkpoint(tmp_path).read() == [("t", 0, 0), ("t", 1, 10), ("t", 2, 20)]


def test_reads_crlf_and_extra_spaces(tmp_path: Path) -> None:
    (tmp_path / NAME).write_text("0\r\n1\r\norders  0\t42\r\n")
    assert checkpoint(tmp_path).read() == [("orders", 0, 42)]


def test_missing_file_reads_as_no_entries(tmp_path: Path) -> None:
    assert checkpoint(tmp_path).read() == []
    assert not (tmp_path / NAME).exists()


# --- corruption ------------------------------------------------------------------------

CORRUPTIONS = [
    # (file text, line the error must name)
    pytest.param("1\n0\n", 1, id="unknown-version"),
    pytest.param("v0\n0\n", 1, id="version-not-a-number"),
    pytest.param("0\nthree\na 0 1\n", 2, id="count-not-a-number"),
    pytest.param("0\n\n", 2, id="count-blank"),
    pytest.param("0\n2\na 0 1\n", 2, id="count-says-more-than-there-are"),
    pytest.param("0\n1\na 0 1\nb 0 2\n", 2, id="count-says-fewer-than-there-are"),
    pytest.param("0\n1\na 0 x\n", 3, id="offset-not-a-number"),
    pytest.param("0\n2\na 0 1\nb 0\n", 4, id="missing-field"),
    pytest.param("0\n3\na 0 1\nb 1 2\n\n", 5, id="blank-entry-line"),
]


@pytest.mark.parametrize(("text", "line"), CORRUPTIONS)
def test_corruption_names_file_and_line(tmp_path: Path, text: str, line: int) -> None:
    path = tmp_path / NAME
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError) as info:
        checkpoint(tmp_path).read()
    assert str(path) in str(info.value)
    assert f"line {line}" in str(info.value)


@pytest.mark.parametrize("data", [
    pytest.param(b"", id="empty-file"),
    pytest.param(b"0\n", id="version-only"),
    pytest.param(b"0\n1\n\xff\xfe 0 1\n", id="not-utf-8"),
])
def test_unreadable_file_is_corrupt(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / NAME
    path.write_bytes(data)
    with pytest.raises(CorruptCheckpointError, match=str(path)):
        checkpoint(tmp_path).read()


def test_corruption_is_a_storage_error() -> None:
    assert issubclass(CorruptCheckpointError, KafkaStorageError)


# --- atomic replace --------------------------------------------------------------------

def test_write_leaves_no_tmp_file(tmp_path: Path) -> None:
    checkpoint(tmp_path).write([("orders", 0, 1)])
    assert sorted(p.name for p in tmp_path.iterdir()) == [NAME]


def test_write_replaces_a_longer_checkpoint_whole(tmp_path: Path) -> None:
    file = checkpoint(tmp_path)
    file.write([("orders", p, 1_000_000 + p) for p in range(50)])
    before = (tmp_path / NAME).stat().st_ino
    file.write([("orders", 0, 7)])
    assert (tmp_path / NAME).read_text() == "0\n1\norders 0 7\n"
    assert (tmp_path / NAME).stat().st_ino != before  # renamed over, never rewritten in place
    assert sorted(p.name for p in tmp_path.iterdir()) == [NAME]


def test_reader_of_the_old_file_sees_it_whole(tmp_path: Path) -> None:
    file = checkpoint(tmp_path)
    old_text = "0\n2\norders 0 10\norders 1 20\n"
    file.write([("orders", 0, 10), ("orders", 1, 20)])
    with open(tmp_path / NAME) as old:
        file.write([("orders", 0, 99)])
        assert old.read() == old_text
    assert file.read() == [("orders", 0, 99)]


def test_stale_tmp_from_a_crash_is_overwritten(tmp_path: Path) -> None:
    (tmp_path / f"{NAME}.tmp").write_text("0\n9\nhalf-written garbage that is much longer")
    checkpoint(tmp_path).write([("orders", 0, 1)])
    assert checkpoint(tmp_path).read() == [("orders", 0, 1)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [NAME]


def test_write_atomically_creates_and_replaces(tmp_path: Path) -> None:
    path = tmp_path / "file"
    write_atomically(path, b"first")
    write_atomically(path, b"2")
    assert path.read_bytes() == b"2"
    assert os.listdir(tmp_path) == ["file"]


def test_write_into_a_missing_directory_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(KafkaStorageError, match="cannot write checkpoint"):
        checkpoint(tmp_path / "gone").write([("orders", 0, 1)])


# --- created in place (a partition's leader-epoch checkpoint) ----------------------------

def in_place(directory: Path) -> CheckpointFile[Entry]:
    return CheckpointFile(directory / NAME, lambda e: e,
                          lambda fields: (fields[0], int(fields[1]), int(fields[2])), in_place=True)


def test_a_new_in_place_checkpoint_is_created_without_a_rename_and_replaced_with_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    renames: list[str] = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: renames.append(str(b)) or real_replace(a, b))
    file = in_place(tmp_path)
    file.write([("orders", 0, 1)], sync=False)
    assert renames == [] and file.read() == [("orders", 0, 1)]
    file.write([("orders", 0, 2)], sync=False)  # it exists now: the old one is kept until the rename
    assert renames == [str(tmp_path / NAME)] and file.read() == [("orders", 0, 2)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [NAME]


def test_an_in_place_checkpoint_larger_than_a_page_is_renamed_into_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    renames: list[str] = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: renames.append(str(b)) or real_replace(a, b))
    entries = [("orders", p, 10**15 + p) for p in range(300)]  # > IN_PLACE_MAX_BYTES
    in_place(tmp_path).write(entries)
    assert renames == [str(tmp_path / NAME)] and in_place(tmp_path).read() == entries


def test_an_empty_in_place_checkpoint_reads_as_no_entries(tmp_path: Path) -> None:
    """A crash between its creation and its one write: nothing was ever in it."""
    (tmp_path / NAME).write_bytes(b"")
    assert in_place(tmp_path).read() == []
    with pytest.raises(CorruptCheckpointError):  # a renamed checkpoint is never empty
        checkpoint(tmp_path).read()


def test_a_failed_in_place_write_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(KafkaStorageError, match="No space left"):
        in_place(tmp_path).write([("orders", 0, 1)], sync=False)
    assert list(tmp_path.iterdir()) == []


# --- the writer's thread --------------------------------------------------------------------

WAIT_S = 5.0  # bounds every wait on the writer's thread: a hang fails the test, not the run


class HeldDisk:
    """A stand-in disk whose writes of `held` wait for `release`; what was written, in order."""

    def __init__(self, held: Path) -> None:
        self.held, self.release, self.entered = held, threading.Event(), threading.Event()
        self.written: list[tuple[Path, bytes]] = []

    def write(self, path: Path, data: bytes) -> None:
        if path == self.held:
            self.entered.set()
            assert self.release.wait(WAIT_S)
        self.written.append((path, data))


def test_a_write_asked_for_while_one_is_in_flight_follows_it_and_the_newest_replaces_the_queued(
        tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    disk = HeldDisk(a)
    writer = CheckpointWriter(disk.write)
    try:
        first = writer.submit(a, lambda: b"1")
        assert disk.entered.wait(WAIT_S)  # in flight, held
        second = writer.submit(a, lambda: b"2")
        other = writer.submit(b, lambda: b"b")
        third = writer.submit(a, lambda: b"3")  # replaces "2", still queued
        assert third is second and not first.done()
        disk.release.set()
        for future in (first, second, other):
            future.result(WAIT_S)
        assert disk.written == [(a, b"1"), (a, b"3"), (b, b"b")]  # "2" never lands, nor after "3"
    finally:
        disk.release.set()
        writer.close()


def test_a_failed_write_fails_its_waiters_is_logged_and_the_thread_goes_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def full_disk(path: Path, data: bytes) -> None:
        if data == b"no room":
            raise KafkaStorageError(f"cannot write checkpoint {path}: [Errno 28] No space left on device")
        write_atomically(path, data)

    writer = CheckpointWriter(full_disk)
    path = tmp_path / NAME
    try:
        with caplog.at_level(logging.ERROR, logger="broker.log.checkpoint_file"):
            failed = writer.submit(path, lambda: b"no room")
            with pytest.raises(KafkaStorageError, match="No space left"):
                failed.result(WAIT_S)
        assert any("No space left" in r.getMessage() for r in caplog.records)
        writer.submit(path, lambda: b"0\n0\n").result(WAIT_S)
        assert path.read_bytes() == b"0\n0\n"
    finally:
        writer.close()


def test_a_waiter_cannot_cancel_a_write_the_others_wait_for(tmp_path: Path) -> None:
    disk = HeldDisk(tmp_path / "a")
    writer = CheckpointWriter(disk.write)
    try:
        future = writer.submit(tmp_path / "a", lambda: b"1")
        assert not future.cancel()
        disk.release.set()
        future.result(WAIT_S)
        assert disk.written == [(tmp_path / "a", b"1")]
    finally:
        disk.release.set()
        writer.close()


def done(error: BaseException | None = None) -> Future[None]:
    future: Future[None] = Future()
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
    return future


def test_all_done_ends_with_the_last_and_fails_with_the_first_failure_in_order() -> None:
    assert all_done([]).result(0) is None
    pending: Future[None] = Future()
    combined = all_done([done(), pending])
    assert not combined.done()
    pending.set_result(None)
    assert combined.result(0) is None
    first, second = KafkaStorageError("first"), KafkaStorageError("second")
    with pytest.raises(KafkaStorageError, match="first"):
        all_done([done(), done(first), done(second)]).result(0)
    assert not all_done([done()]).cancel()
