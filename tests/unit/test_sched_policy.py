"""bench/sched_policy.py: the SCHED_FIFO experiment of bench/loaded_latency.py --fifo-pairs
sets every thread of a process real-time for the block, threads started meanwhile included,
and gives them all back to SCHED_OTHER after it, also when the block fails."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import sched_policy  # noqa: E402

# A child with two threads now, and a third started once it reads a line.
CHILD = """
import sys, threading, time
threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
print("ready", flush=True)
sys.stdin.readline()
threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
print("started", flush=True)
time.sleep(30)
"""


def policies(pid: int) -> list[int]:
    return sorted(os.sched_getscheduler(tid) for tid in sched_policy.threads(pid))


@pytest.fixture
def child():
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def may_set_realtime() -> bool:
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except PermissionError:
        return False
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    return True


pytestmark = pytest.mark.skipif(not may_set_realtime(), reason="SCHED_FIFO needs root (CAP_SYS_NICE)")


def test_every_thread_is_realtime_in_the_block_and_back_after(child: subprocess.Popen[str]) -> None:
    assert policies(child.pid) == [os.SCHED_OTHER] * 2
    with sched_policy.realtime([child.pid]):
        assert policies(child.pid) == [os.SCHED_FIFO] * 2
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "started"
        assert policies(child.pid) == [os.SCHED_FIFO] * 3  # inherited from the thread that started it
    assert policies(child.pid) == [os.SCHED_OTHER] * 3


def test_a_failing_block_gives_the_threads_back(child: subprocess.Popen[str]) -> None:
    with pytest.raises(RuntimeError), sched_policy.realtime([child.pid]):
        raise RuntimeError("the window failed")
    assert policies(child.pid) == [os.SCHED_OTHER] * 2


def test_a_process_gone_is_left_alone() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    time.sleep(0.01)
    with sched_policy.realtime([proc.pid]):
        pass  # no thread to set: no error


def test_fifo_here_is_inherited_by_what_the_thread_starts() -> None:
    import threading

    seen: dict[str, str] = {}

    def run() -> None:
        sched_policy.fifo_here()
        seen["out"] = subprocess.run([sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"],
                                     capture_output=True, text=True, check=True).stdout.strip()
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen["out"] == str(os.SCHED_FIFO)
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the caller's own thread is untouched
