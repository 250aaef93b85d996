"""The stop report of a node that outlived SIGKILL (localcluster.node_process.held_by): what held it, so
that a "did not die" says whether its parent had not reaped it (and what that parent was doing) or a
thread of it was still in the kernel (its state and wchan; D: an uninterruptible wait)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.waiting import wait_until
from localcluster import node_process
from localcluster.cluster_layout import CONTROLLER, NodeSpec
from localcluster.node_process import held_by, stop_report
from tidelog.testing.zygote import ForkedNode


@pytest.fixture
def zombie() -> Iterator[int]:
    """A child of this process that has exited and that this process reaps only after the test."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        wait_until("the child to exit", lambda: Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2][1] == "Z", 10)
        yield pid
    finally:
        os.waitpid(pid, 0)


def test_a_zombie_that_outlives_sigkill_names_its_parent(tmp_path: Path, zombie: int,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node_process, "KILL_WAIT", 0.2)
    spec = NodeSpec(node_id=1, role=CONTROLLER, host="127.0.0.1", raft_port=1, admin_port=1, directory=tmp_path)
    node = ForkedNode(spec, zombie)  # running while its pid exists, as a forked node's zygote reaps it
    parent = f"zombie, not reaped by its parent pid {os.getpid()} ({Path('/proc/self/comm').read_text().strip()}) R"
    report = node.kill()
    assert (report.outcome, report.held.startswith(parent)) == ("did not die", True), report
    assert f"controller 1 (pid {zombie}): did not die ({parent}" in report.describe()
    report = stop_report(node, was_running=True, killed=True)
    assert (report.outcome, report.held.startswith(parent)) == ("did not die", True), report


def test_the_threads_still_in_the_kernel_are_named_with_their_state_and_wchan() -> None:
    release = threading.Event()
    waiting = threading.Thread(target=release.wait, name="waits")
    waiting.start()
    try:
        wait_until("the thread to wait", lambda: Path(f"/proc/self/task/{waiting.native_id}/stat").read_text()
                   .rpartition(")")[2][1] == "S", 10)
        # read until it shows the thread in its futex: a scan of a process with many threads (late
        # in the unit suite) can catch the waiter between its stat and its wchan being read
        def names_the_waiter() -> str | None:
            text = held_by(os.getpid())
            return text if f"thread {waiting.native_id} S in futex" in text else None
        held = wait_until("held_by to name the waiting thread in its futex", names_the_waiter, 10)
        assert f"thread {os.getpid()} R" in held  # this one, running: no wchan
    finally:
        release.set()
        waiting.join()


def test_a_pid_that_is_gone_holds_nothing() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    assert held_by(pid) == "" and held_by(None) == ""
