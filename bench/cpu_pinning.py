"""Which core the broker runs on and which the client: the bulk benches' pinning (sched_setaffinity, as taskset).

On the shared 2-core box an unpinned librdkafka producer takes 1.5-1.65 cores and the broker
what is left, so a phase's rate follows the scheduler as much as either side (issue 35's
findings). Pinned apart -- the broker (every thread) on one core, the client on the other --
each side has at most one core, whoever else runs on the box, and a broker's CPU per GB is
not shared with its client's cache traffic.

    plan = CorePlan.split()                  # None on a 1-core machine: nothing is pinned
    with pinned(plan.broker):                # a process started here inherits the mask
        process = subprocess.Popen(...)
    pin_process(process.pid, plan.broker)    # and every thread it already has (taskset -a)
    with pinned(plan.client):
        c_client.produce(...)

A thread's mask is its own (Linux): `pinned` sets the calling thread's and restores it, so the
bench's other threads keep theirs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class CorePlan:
    broker: frozenset[int]
    client: frozenset[int]

    @classmethod
    def split(cls) -> CorePlan | None:
        """The broker on the first allowed core, the client on the rest; None with a single core."""
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) < 2:
            return None
        return cls(frozenset(cores[:1]), frozenset(cores[1:]))

    def describe(self) -> str:
        return (f"broker (every thread; Tansu the same) on CPU {_cpus(self.broker)}, "
                f"librdkafka (loadgen) on CPU {_cpus(self.client)}")


def _cpus(cpus: frozenset[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


@contextmanager
def pinned(cpus: frozenset[int] | None) -> Iterator[None]:
    """The calling thread on `cpus` (a process it starts inherits them); its mask restored after."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def pin_process(pid: int, cpus: frozenset[int]) -> int:
    """Every thread of `pid` on `cpus` (threads it starts later inherit the mask of the one
    starting them); the number of threads pinned. A thread that ends meanwhile is skipped."""
    count = 0
    for tid in os.listdir(f"/proc/{pid}/task"):  # bounded: the process's threads now
        try:
            os.sched_setaffinity(int(tid), cpus)
            count += 1
        except (ProcessLookupError, FileNotFoundError):
            continue
    return count


def process_cpus(pid: int) -> str:
    """The Cpus_allowed_list of every thread of `pid`, distinct values joined: what the kernel
    holds it to (a check that the pinning took)."""
    found: set[str] = set()
    for tid in os.listdir(f"/proc/{pid}/task"):  # bounded: the process's threads now
        try:
            status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except FileNotFoundError:
            continue
        found.update(line.split(":", 1)[1].strip() for line in status.splitlines()
                     if line.startswith("Cpus_allowed_list:"))
    return " ".join(sorted(found))
