"""broker/log/io_worker.py: the one thread behind each of the log's background file jobs (flushes,
writeback hand-offs, removals, checkpoint writes). Started by the first job, named, in order; a
close waits for the jobs in flight but not forever; a job whose future no one reads is reported
as one error line naming it."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import pytest

from broker.log import io_worker
from broker.log.flusher import FlushWork, SegmentFlusher
from broker.log.io_worker import IoWorker
from broker.log.segment_removal import SegmentRemoval, SegmentRemover

WAIT_S = 10.0  # a test's bound on any wait that should end at once


def worker_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


def test_the_thread_starts_at_the_first_job_named_in_python_and_in_the_kernel() -> None:
    worker = IoWorker("test-io-lazy")
    assert not worker.started and not worker_threads("test-io-lazy")  # nothing runs before a job
    ran_on = worker.submit(lambda: (threading.current_thread().name, threading.get_native_id()))
    name, tid = ran_on.result(WAIT_S)
    assert name == "test-io-lazy" and worker.started
    comm = Path(f"/proc/self/task/{tid}/comm")
    if comm.exists():  # Linux: top -H and perf see the same name
        assert comm.read_text().strip() == "test-io-lazy"
    assert worker.close()
    assert not worker.started and not worker_threads("test-io-lazy")
    assert worker.submit(lambda: 7).result(WAIT_S) == 7  # a job after a close starts it again
    assert worker.close()


def test_jobs_run_in_order_and_a_failed_one_does_not_stop_the_next() -> None:
    worker = IoWorker("test-io-order")
    done: list[int] = []

    def fail() -> None:
        raise OSError(5, "Input/output error")

    futures = [worker.submit(lambda i=i: done.append(i)) for i in range(3)]  # type: ignore[misc]
    failed = worker.submit(fail)  # the caller reads this one: no line
    after = worker.submit(lambda: done.append(3))
    assert worker.close()
    assert done == [0, 1, 2, 3] and all(f.done() for f in futures + [after])
    assert isinstance(failed.exception(), OSError)


def test_close_waits_for_the_jobs_in_flight() -> None:
    worker = IoWorker("test-io-wait")
    gate = threading.Event()
    done: list[str] = []
    worker.submit(lambda: gate.wait(WAIT_S) and done.append("first"))
    worker.submit(lambda: done.append("queued"))
    threading.Timer(0.2, gate.set).start()
    started = time.monotonic()
    assert worker.close()
    assert done == ["first", "queued"] and time.monotonic() - started >= 0.15


def test_close_gives_up_after_its_bound_with_one_error_line(caplog: pytest.LogCaptureFixture) -> None:
    worker = IoWorker("test-io-stuck")
    gate = threading.Event()
    stuck = worker.submit(lambda: gate.wait(WAIT_S))  # a disk that stopped answering
    try:
        with caplog.at_level(logging.ERROR, logger=io_worker.__name__):
            started = time.monotonic()
            assert not worker.close(0.1)
            assert time.monotonic() - started < WAIT_S / 2
        lines = [r.getMessage() for r in caplog.records]
        assert lines == ["test-io-stuck: 1 jobs still running after 0 s at close; not waiting for them"]
    finally:
        gate.set()
    assert stuck.result(WAIT_S) is True  # it went on in the background


def test_a_failed_job_no_one_waits_for_is_one_error_line_naming_it(
        caplog: pytest.LogCaptureFixture) -> None:
    worker = IoWorker("test-io-fail")

    def refuse() -> None:
        raise PermissionError(13, "Permission denied", "/data/orders-0.ab-delete")

    with caplog.at_level(logging.ERROR, logger=io_worker.__name__):
        failed = worker.submit(refuse, what="deleting /data/orders-0.ab-delete")
        quiet = worker.submit(refuse)  # None: its caller reports it
        assert worker.close()
    assert isinstance(failed.exception(), PermissionError) and isinstance(quiet.exception(), PermissionError)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["test-io-fail: deleting /data/orders-0.ab-delete failed: [Errno 13] Permission "
                     "denied: '/data/orders-0.ab-delete'"]


def test_a_removal_that_fails_unexpectedly_is_reported_not_lost(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Not an OSError (a bug in a removal): before, it ended in a future no one read, silently."""
    def broken(path: Path) -> None:
        raise ValueError(f"no removal of {path.name}")

    remover = SegmentRemover(broken)
    with caplog.at_level(logging.ERROR):
        remover.remove(SegmentRemoval((tmp_path / "00000000000000000000.log.deleted",), None), "[t-0] ")
        remover.shutdown()
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(lines) == 1 and "[t-0] removing" in lines[0] and "00000000000000000000.log.deleted" in lines[0] \
        and "no removal of" in lines[0]


def test_a_flusher_shutdown_over_a_stuck_fsync_is_bounded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A disk that stopped answering: the broker's shutdown goes on after the bound, not never."""
    gate = threading.Event()
    flusher = SegmentFlusher(fsync=lambda fd: None if gate.wait(WAIT_S) else None)
    monkeypatch.setattr(io_worker, "CLOSE_WAIT_S", 0.1)
    directory = tmp_path / "t-0"
    directory.mkdir()
    flushed = flusher.submit(FlushWork((), directory))
    stopped = threading.Event()
    closer = threading.Thread(target=lambda: (flusher.shutdown(), stopped.set()), daemon=True)
    try:
        closer.start()
        assert stopped.wait(WAIT_S / 2), "the shutdown waited for the stuck fsync without a bound"
        assert not flushed.done()
    finally:
        gate.set()
    assert flushed.result(WAIT_S) is None
    closer.join(WAIT_S)
    assert os.path.isdir(directory)
