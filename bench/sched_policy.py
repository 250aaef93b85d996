"""Scheduler experiments for the latency benches (issue 35, goal 2): who wins a core on a
loaded 2-core box.

- `shorten_slices(pids, us)`: every thread of those processes asks the kernel's EEVDF
  scheduler (Linux >= 6.12) for a shorter slice (sched_setattr). Its CPU share is unchanged;
  a woken thread with a shorter slice has an earlier virtual deadline and preempts sooner.
- `realtime(pids)`: every thread of those processes runs SCHED_FIFO at priority 1 for the
  block, and back to SCHED_OTHER after it (threads started meanwhile included). A woken
  thread then takes a core from any SCHED_OTHER task at once, so what latency is left is
  the process's own work, the wire, and the wait for the other real-time threads: the
  processes' wait for a core behind everything else is gone. On a real cluster the brokers
  and the clients have machines of their own; this is that, on one box, for as long as the
  real-time threads use less than the box (the kernel's real-time throttling,
  /proc/sys/kernel/sched_rt_runtime_us, keeps 5 % of each second for the rest regardless).
- `fifo_here()`: the calling thread (and the processes it starts: the policy is inherited
  across fork) runs SCHED_FIFO at priority 1.

Each needs root (CAP_SYS_NICE); on refusal it raises OSError naming the thread.
"""

from __future__ import annotations

import ctypes
import os
import struct
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Final

SYS_SCHED_SETATTR: Final = 314  # x86_64
SCHED_ATTR = struct.Struct("=IIQiIQQQII")  # struct sched_attr, SCHED_ATTR_SIZE_VER1 (56 bytes)
FIFO_PRIORITY: Final = 1  # the lowest real-time priority: above every SCHED_OTHER thread, below the kernel's own


def set_slice(tid: int, slice_ns: int) -> None:
    """Ask the kernel's EEVDF scheduler (Linux >= 6.12) for a shorter time slice for thread `tid`:
    sched_setattr with SCHED_OTHER and sched_runtime = the slice (0.1-100 ms). Its CPU share (its
    weight, nice 0) is unchanged; a woken task with a shorter slice has an earlier virtual
    deadline and may preempt the running one, so it waits less for a core after each wakeup."""
    attr = ctypes.create_string_buffer(SCHED_ATTR.pack(SCHED_ATTR.size, os.SCHED_OTHER, 0, 0, 0, slice_ns, 0, 0, 0, 0),
                                       SCHED_ATTR.size)
    if ctypes.CDLL(None, use_errno=True).syscall(SYS_SCHED_SETATTR, tid, attr, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"sched_setattr of thread {tid}: {os.strerror(errno)}")


def threads(pid: int) -> list[int]:
    """The thread ids of process `pid` now (none once it has exited)."""
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except FileNotFoundError:
        return []


def shorten_slices(pids: Iterable[int], slice_us: int) -> None:
    """Every thread of each process gets a `slice_us` slice (threads it starts later inherit it)."""
    for pid in pids:
        for tid in threads(pid):
            set_slice(tid, slice_us * 1000)


def _set_policy(tid: int, policy: int, priority: int) -> None:
    try:
        os.sched_setscheduler(tid, policy, os.sched_param(priority))
    except ProcessLookupError:  # the thread ended meanwhile
        pass
    except PermissionError as exc:
        raise OSError(exc.errno, f"sched_setscheduler of thread {tid}: needs root (CAP_SYS_NICE)") from None


@contextmanager
def realtime(pids: Iterable[int]) -> Iterator[None]:
    """Every thread of each process at SCHED_FIFO `FIFO_PRIORITY` for the block, SCHED_OTHER
    after it (those started meanwhile too: they inherited the policy from their creator)."""
    chosen = list(pids)
    try:
        for pid in chosen:
            for tid in threads(pid):
                _set_policy(tid, os.SCHED_FIFO, FIFO_PRIORITY)
        yield
    finally:
        for pid in chosen:
            for tid in threads(pid):
                _set_policy(tid, os.SCHED_OTHER, 0)


def fifo_here() -> None:
    """The calling thread at SCHED_FIFO `FIFO_PRIORITY` (what it starts inherits the policy)."""
    _set_policy(0, os.SCHED_FIFO, FIFO_PRIORITY)
