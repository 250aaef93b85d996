"""Retention removes deleted segments' files on the flusher's removal thread, not the loop's turn.

An unlink on a `discard` mount waits for the disk (80-95 ms for 256 MiB here), so the event
loop only takes the segment out of the log (renamed `.deleted` when it left,
`file.delete.delay.ms` before); the unlinks, and the close of the cache's descriptor after
them, run on the `log-delete` thread (`segment_removal`). A send in progress keeps its
descriptor and reads its bytes; a file that cannot be removed is one error line naming it.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest

from broker.log.flusher import SegmentFlusher
from broker.log.partition_log import PartitionLog
from common.log_config import LogConfig
from common.records import build_batch

BATCH = build_batch([(b"k", b"v" * 1000)], base_timestamp=1_700_000_000_000)
# Each batch rolls the segment before it: four segments, three of them retention's.
CONFIG = LogConfig(segment_bytes=len(BATCH), file_delete_delay_ms=0, index_interval_bytes=1)


def _log_with_old_segments(directory: Path, flusher: SegmentFlusher) -> PartitionLog:
    log = PartitionLog(directory / "t-0", CONFIG, now_ms=0, new=True, flusher=flusher)
    for i in range(4):
        log.append(BATCH, now_ms=i)
    log.wait_for_flushes()
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(log.log_end_offset - 1)
    return log


class Unlinks:
    """os.unlink, noting each path with the name of the thread that removed it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, fail: str | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        real = os.unlink

        def unlink(path: os.PathLike[str] | str, *args: object, **kwargs: object) -> None:
            name = os.fspath(path)
            self.calls.append((os.path.basename(name), threading.current_thread().name))
            if fail is not None and name.endswith(fail):
                raise PermissionError(13, "Permission denied", name)
            real(path, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "unlink", unlink)


def test_retention_unlinks_on_the_removal_thread_and_a_send_in_progress_still_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    flusher = SegmentFlusher()
    log = _log_with_old_segments(tmp_path, flusher)
    oldest = log.segments[0]
    sending = oldest.file()  # a send in progress holds the descriptor (SlicedSend does)
    unlinks = Unlinks(monkeypatch)
    try:
        assert log.delete_old_segments(now_ms=10**12) == 3
        on_loop = [name for name, thread in unlinks.calls if thread == threading.current_thread().name]
        assert on_loop == []  # ae00ac0: every file of the three segments, unlinked in this turn
    finally:
        flusher.shutdown()  # waits for the removals in flight
    removed = {name for name, _ in unlinks.calls}
    assert "00000000000000000000.log.deleted" in removed
    assert all(thread.startswith("log-delete") for _, thread in unlinks.calls)
    assert not list(log.directory.glob("*.deleted"))
    assert os.pread(sending.fd, len(BATCH), 0) == BATCH  # gone from the directory, still read
    log.close()


def test_a_file_that_cannot_be_removed_is_one_line_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    flusher = SegmentFlusher()
    log = _log_with_old_segments(tmp_path, flusher)
    Unlinks(monkeypatch, fail="00000000000000000000.log.deleted")
    caplog.set_level(logging.ERROR)
    try:
        assert log.delete_old_segments(now_ms=10**12) == 3  # ae00ac0: the PermissionError here
    finally:
        flusher.shutdown()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert "00000000000000000000.log.deleted" in errors[0] and "Permission denied" in errors[0]
    # the others went: only the file that failed is left for the next start's load
    assert [p.name for p in log.directory.glob("*.deleted")] == ["00000000000000000000.log.deleted"]
    log.close()
