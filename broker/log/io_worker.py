"""One thread of the log's file I/O, off the event loop: the thread behind the flusher, the early
writeback, the removal of deleted files and the checkpoint writer.

    worker = IoWorker("log-delete")          # no thread yet
    future = worker.submit(job, what="removing /data/t-0.1f2e-delete")   # the thread starts
    ... worker.close()                       # waits for the jobs in flight (bounded), then stops

Each of them is one thread on purpose, not one thread for all: a roll's fsync queued behind a
topic deletion's unlinks (which wait for the disk's discards, ~0.35 ms per MiB on this box) or
behind a 100,000-line checkpoint would hold the log's recovery point, and the loop's waits on
it, that long. Measured: a roll's flush submitted just after deleting a topic of 16 x 32 MiB
ended after 5-7 ms on its own thread, 414-546 ms on the removal thread (3 runs each, load
5.8-7.0).

Jobs run in submission order. The worker adds no queue bound: each user bounds what it submits
(a flush, a writeback hand-off, a checkpoint write in flight per log or file; a removal per
deleted segment or log). A job's failure goes to its future; `what` says that no one reads it
there, and the worker reports it as one error line naming the job instead.

The thread is a daemon: a job stuck on a disk that stopped answering must not hold the
process's exit (a ThreadPoolExecutor's threads are joined at exit, without a bound). `close`
is the orderly wait, and says when it gave up.
"""

from __future__ import annotations

import ctypes
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Final, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
CLOSE_WAIT_S: Final = 60.0  # seconds a close waits for the jobs in flight (local file syscalls)
PR_SET_NAME: Final = 15  # <linux/prctl.h>: the calling thread's name, as ps, top -H and perf show it
OS_NAME_BYTES: Final = 15  # the kernel keeps 15 bytes and a NUL


class _Job:
    __slots__ = ("run", "future", "what")

    def __init__(self, run: Callable[[], Any], future: Future[Any], what: str | None) -> None:
        self.run, self.future, self.what = run, future, what


class IoWorker:
    """Jobs on one thread of its own, started at the first `submit`. Thread-safe `submit`."""

    def __init__(self, name: str) -> None:
        """`name`: the thread's (and its error lines'), e.g. "log-flush"."""
        self.name = name
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._unfinished = 0  # jobs submitted and not ended (under _lock)

    @property
    def started(self) -> bool:
        """Whether a thread runs (a job was submitted since the start or the last close)."""
        return self._thread is not None

    def submit(self, run: Callable[[], T], *, what: str | None = None) -> Future[T]:
        """Run `run()` on the thread after the jobs submitted before. The future ends with its
        result or its exception. `what` (a phrase naming the job, "removing <path>"): nobody
        waits for this future, so a failure is logged here, one error line naming it; None: the
        caller reads the future and reports a failure itself."""
        future: Future[T] = Future()
        job = _Job(run, future, what)
        with self._lock:
            if self._thread is None:
                self._jobs = queue.SimpleQueue()
                self._thread = threading.Thread(target=self._serve, args=(self._jobs,),
                                                name=self.name, daemon=True)
                self._thread.start()
            self._jobs.put(job)
            self._unfinished += 1
        return future

    def _serve(self, jobs: queue.SimpleQueue[_Job | None]) -> None:
        name_os_thread(self.name)
        while (job := jobs.get()) is not None:  # bounded by close's sentinel
            try:
                if job.future.set_running_or_notify_cancel():  # else cancelled while queued
                    self._run(job)
            finally:
                with self._lock:
                    self._unfinished -= 1
            del job  # a job's references (a pinned descriptor) go now, not at the next job's

    def _run(self, job: _Job) -> None:
        try:
            result = job.run()
        except BaseException as e:  # noqa: BLE001 - the job's future carries it; the thread goes on
            if job.what is not None:
                log.error("%s: %s failed: %s", self.name, job.what, e, exc_info=not isinstance(e, OSError))
            job.future.set_exception(e)
        else:
            job.future.set_result(result)

    def close(self, timeout_s: float | None = None) -> bool:
        """Wait up to `timeout_s` (default CLOSE_WAIT_S) for the jobs submitted so far, then stop
        the thread (a later `submit` starts a new one). False, with one error line, when jobs
        were still running: they go on in the background, and the process may exit under them."""
        if timeout_s is None:
            timeout_s = CLOSE_WAIT_S
        with self._lock:
            thread, self._thread = self._thread, None
            if thread is None:
                return True
            self._jobs.put(None)
        thread.join(timeout_s)
        with self._lock:
            left = self._unfinished
        if left:  # (a thread with none left is only reading the stop)
            log.error("%s: %d jobs still running after %.0f s at close; not waiting for them",
                      self.name, left, timeout_s)
            return False
        return True


def _libc_prctl() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


# Looked up once: a CDLL made per thread is cyclic garbage when the thread's frame goes (the
# collector's work, and a deleted topic's first removal would leave some).
_PRCTL: Final = _libc_prctl()


def name_os_thread(name: str) -> None:
    """Give the calling thread `name` in the kernel too (Python 3.11 names none), so that top -H,
    perf and /proc tell the log's threads from the event loop. Nothing where prctl is missing."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_NAME, ctypes.c_char_p(name.encode()[:OS_NAME_BYTES]), 0, 0, 0)
