"""Where both cores went during a window: CPU and run-queue wait per process and per thread, box-wide.

Issue 35 (goal 2): a broker's loop that waits 600 ms of every second for a core says the cores
are busy, not with what. This sampler reads every process on the machine from /proc at the
window's start, every `SCAN_PERIOD_S` during it (so a process that exits inside the window
keeps its last-seen counts) and at its end:

- CPU: utime + stime of the process (/proc/PID/stat, dead threads included) and of each
  thread (/proc/PID/task/TID/stat);
- run delay: the time each thread was ready to run with no core free
  (/proc/PID/task/TID/schedstat, field 2, ns), summed per process;
- the box: busy and idle jiffies of /proc/stat, so what no sampled process accounts for
  (processes that started and ended between two scans, the kernel's softirq work for loopback
  traffic charged to nobody) is a line of its own.

The caller names the processes it knows (`labels`: pid -> "broker 2", "load producer", ...);
every other descendant of `root_pid` is "bench child (comm)", and everything else on the box
("other work on the machine": other engineers' processes on a shared box) is summed into one
line, with its largest few named.

    sampler = BoxSampler(root_pid=os.getpid())
    sampler.start()
    ...                                      # the window
    sampler.stop()
    rows = sampler.rows({pid: "broker 2", ...}, split_threads={pid_of_broker_2, ...})
    print_rows(rows, sampler)

Nothing here is asserted; a measurement. Reading /proc costs the bench's own process CPU, which
is in its line.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

CLK_TCK: Final = os.sysconf("SC_CLK_TCK")
SCAN_PERIOD_S: Final = 0.5  # a whole-box /proc scan; twice a second keeps its own cost small
TOP_THREADS: Final = 4  # a labelled process's busiest threads named in its detail
TOP_OTHERS: Final = 3  # the largest processes outside the bench named in its "other work" line
KTHREADD_PID: Final = 2  # the kernel's threads are its children


@dataclass(slots=True)
class ThreadRead:
    comm: str
    cpu_ticks: int
    run_wait_ns: int
    switches: tuple[int, int] | None = None  # (voluntary, involuntary) context switches; read at the window's ends only


@dataclass(slots=True)
class ProcessRead:
    """One process at one scan."""

    comm: str
    ppid: int
    cpu_ticks: int  # utime + stime of the whole process, exited threads included
    started: int  # clock ticks after boot: tells a reused pid from the same process
    threads: dict[int, ThreadRead] = field(default_factory=dict)


def _stat_fields(text: str) -> tuple[str, list[str]]:
    """(comm, the fields after it) of a /proc stat line; comm may hold spaces and parentheses."""
    head, _, rest = text.rpartition(")")
    return head.partition("(")[2], rest.split()


def _switches(task: Path) -> tuple[int, int]:
    """(voluntary, involuntary) context switches of a thread: it slept, or was preempted."""
    found = dict(line.split(":", 1) for line in (task / "status").read_text().splitlines() if "ctxt_switches" in line)
    return int(found["voluntary_ctxt_switches"]), int(found["nonvoluntary_ctxt_switches"])


def read_process(pid: int, *, switches: bool = False) -> ProcessRead | None:
    """`pid` and its threads now (with their context switches when `switches`: a costlier
    read, done at the window's ends); None when it is gone (or unreadable) meanwhile."""
    base = Path(f"/proc/{pid}")
    try:
        comm, fields = _stat_fields((base / "stat").read_text())
        read = ProcessRead(comm, int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[19]))
        for tid_name in os.listdir(base / "task"):
            task = base / "task" / tid_name
            try:
                t_comm, t_fields = _stat_fields((task / "stat").read_text())
                run_wait = int((task / "schedstat").read_text().split()[1])
            except (OSError, IndexError, ValueError):  # the thread ended between listdir and read
                continue
            read.threads[int(tid_name)] = ThreadRead(t_comm, int(t_fields[11]) + int(t_fields[12]), run_wait)
            if switches:
                try:
                    read.threads[int(tid_name)].switches = _switches(task)
                except (OSError, KeyError, ValueError):  # ended meanwhile: no figure for it
                    pass
    except (OSError, IndexError, ValueError):  # the process ended mid-read
        return None
    return read


def read_box(cmdlines: dict[int, str], *, switches: bool = False) -> dict[int, ProcessRead]:
    """Every process now; the command line of each pid not in `cmdlines` yet is added to it."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            pid = int(name)
            read = read_process(pid, switches=switches)
            if read is not None:
                out[pid] = read
                if pid not in cmdlines:
                    try:
                        cmdlines[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
                            errors="replace").strip()
                    except OSError:
                        cmdlines[pid] = ""
    return out


def box_jiffies() -> tuple[int, int, int, int]:
    """(busy, idle, softirq, steal) jiffies of every CPU since boot (/proc/stat's first line:
    user nice system idle iowait irq softirq steal; iowait counts as idle, guest is inside user)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values[:8]) - idle, idle, values[6], values[7]


class BoxSampler:
    """Every process's CPU and run delay between `start` and `stop` (a thread scans meanwhile)."""

    def __init__(self, root_pid: int) -> None:
        self.root_pid = root_pid
        self.first: dict[int, ProcessRead] = {}
        self.last: dict[int, ProcessRead] = {}  # each pid's latest read, kept after it exits
        self.cmdlines: dict[int, str] = {}  # each pid's command line when first seen
        self.seconds = 0.0
        self.box_busy_s = self.box_idle_s = 0.0
        self.softirq_s = self.steal_s = 0.0  # inside busy: the kernel's softirq work; a VM's lost time
        self._jiffies = (0, 0, 0, 0)
        self._started = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="box-sampler", daemon=True)

    def start(self) -> None:
        self._jiffies = box_jiffies()
        self._started = time.monotonic()
        self.first = read_box(self.cmdlines, switches=True)
        self.last = dict(self.first)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.last.update(read_box(self.cmdlines, switches=True))
        self.seconds = time.monotonic() - self._started
        self.box_busy_s, self.box_idle_s, self.softirq_s, self.steal_s = (
            (now - then) / CLK_TCK for now, then in zip(box_jiffies(), self._jiffies))

    def _run(self) -> None:
        while not self._stop.wait(SCAN_PERIOD_S):  # until stopped at the window's end
            self.last.update(read_box(self.cmdlines))

    def in_tree(self, pid: int) -> bool:
        """Whether `pid` descends from the bench (by the parents last seen)."""
        seen: set[int] = set()
        while pid > 1 and pid not in seen:  # bounded: each step climbs one parent, cycles cut
            if pid == self.root_pid:
                return True
            seen.add(pid)
            read = self.last.get(pid)
            if read is None:
                return False
            pid = read.ppid
        return False

    def delta(self, pid: int) -> tuple[float, float, dict[int, tuple[str, float, float, tuple[int, int] | None]]]:
        """(CPU s, run delay s, {tid: (comm, CPU s, run delay s, (sleeps, times preempted))}) of
        `pid` in the window; a process born inside it counts from zero. The context switches
        (voluntary: it slept; involuntary: it was preempted) are None for a thread not read at
        both ends (one that ended inside the window)."""
        end = self.last[pid]
        begin = self.first.get(pid)
        if begin is not None and begin.started != end.started:  # the pid was reused
            begin = None
        threads = {}
        for tid, t in end.threads.items():
            b = begin.threads.get(tid) if begin is not None else None
            preempted = None
            if t.switches is not None and (b is None or b.switches is not None):
                since = b.switches if b is not None and b.switches is not None else (0, 0)
                preempted = (t.switches[0] - since[0], t.switches[1] - since[1])
            threads[tid] = (t.comm, (t.cpu_ticks - (b.cpu_ticks if b else 0)) / CLK_TCK,
                            (t.run_wait_ns - (b.run_wait_ns if b else 0)) / 1e9, preempted)
        cpu = (end.cpu_ticks - (begin.cpu_ticks if begin is not None else 0)) / CLK_TCK
        return cpu, sum(t[2] for t in threads.values()), threads

    def rows(self, labels: Mapping[int, str]) -> list[dict[str, Any]]:
        """One row per labelled process (with its threads by name), per other bench child, one
        for the rest of the box, one for what no process accounts for."""
        seconds = max(self.seconds, 1e-9)
        rows: list[dict[str, Any]] = []
        other_cpu = other_wait = kernel_cpu = 0.0
        others: list[tuple[float, str]] = []
        kernel: list[tuple[float, str]] = []
        for pid in sorted(self.last):
            cpu, wait, threads = self.delta(pid)
            if pid in labels or self.in_tree(pid):
                row: dict[str, Any] = {
                    "process": labels.get(pid, f"bench child ({self.last[pid].comm})"), "pid": pid,
                    "cpu_pct": 100 * cpu / seconds, "run_wait_ms_s": 1000 * wait / seconds,
                    "threads": len(threads)}
                if pid in labels:
                    row["by_thread"] = by_thread(pid, threads, seconds)
                if cpu > 0 or pid in labels:
                    rows.append(row)
            elif self.last[pid].ppid == KTHREADD_PID or pid == KTHREADD_PID:
                kernel_cpu += cpu  # writeback of the brokers' dirty pages is here, with anyone else's
                if cpu > 0:
                    kernel.append((cpu, self.last[pid].comm))
            else:
                other_cpu += cpu
                other_wait += wait
                if cpu > 0:
                    others.append((cpu, self.last[pid].comm))
        def named(found: list[tuple[float, str]]) -> str:
            return ", ".join(f"{comm} {100 * cpu / seconds:.0f}%" for cpu, comm in sorted(found, reverse=True)[:TOP_OTHERS])

        rows.append({"process": "other work on the machine", "pid": None, "cpu_pct": 100 * other_cpu / seconds,
                     "run_wait_ms_s": 1000 * other_wait / seconds, "threads": None, "largest": named(others) or "-"})
        rows.append({"process": "kernel threads (writeback, ...)", "pid": None, "cpu_pct": 100 * kernel_cpu / seconds,
                     "run_wait_ms_s": None, "threads": None, "largest": named(kernel) or "-"})
        seen = sum(r["cpu_pct"] for r in rows)
        rows.append({"process": "unaccounted (short-lived, kernel)", "pid": None,
                     "cpu_pct": 100 * self.box_busy_s / seconds - seen, "run_wait_ms_s": None, "threads": None})
        return rows


def by_thread(pid: int, threads: Mapping[int, tuple[str, float, float, tuple[int, int] | None]], seconds: float
              ) -> list[tuple[str, float, float, float, float]]:
    """(thread name, CPU %, run wait ms/s, sleeps/s, times preempted/s) of a process's threads
    summed by name (the main thread as "main": a Python process's threads all share its name),
    busiest first. Each sleep ends in a wakeup that may wait for a core (the run wait)."""
    named: dict[str, list[float]] = {}
    for tid, (comm, cpu, wait, switches) in threads.items():
        sums = named.setdefault("main" if tid == pid else comm, [0.0, 0.0, 0.0, 0.0])
        sums[0] += cpu
        sums[1] += wait
        sums[2] += switches[0] if switches else 0
        sums[3] += switches[1] if switches else 0
    return sorted(((name, 100 * cpu / seconds, 1000 * wait / seconds, sleeps / seconds, preempted / seconds)
                   for name, (cpu, wait, sleeps, preempted) in named.items()), key=lambda t: -t[1])


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_rows(label: str, rows: list[dict[str, Any]], sampler: BoxSampler) -> None:
    seconds = max(sampler.seconds, 1e-9)
    cores = os.cpu_count() or 1
    print(f"  {label}: both cores over {sampler.seconds:.1f} s ({cores} CPUs: {100 * cores} % in all; "
          f"busy {100 * sampler.box_busy_s / seconds:.0f} % (softirq {100 * sampler.softirq_s / seconds:.1f} %, "
          f"steal {100 * sampler.steal_s / seconds:.1f} %), idle {100 * sampler.box_idle_s / seconds:.0f} %; "
          f"load average {os.getloadavg()[0]:.2f})")
    print(f"  {'process':<38} {'pid':>7} {'cpu %':>6} {'run wait ms/s':>13} {'thr':>4}  "
          "busiest threads: name cpu %/run wait ms/s/sleeps per s/preempted per s")
    for r in rows:
        detail = r.get("largest", "")
        if "by_thread" in r:  # name cpu %/run wait ms/s/sleeps per s/preempted per s of its busiest threads
            detail = ", ".join(f"{name} {cpu:.1f}%/{wait:.0f}/{sleeps:,.0f}/{preempted:,.0f}"
                               for name, cpu, wait, sleeps, preempted in r["by_thread"][:TOP_THREADS])
        print(f"  {r['process']:<38} {_num(r['pid'], 'd'):>7} {r['cpu_pct']:>6.1f} {_num(r['run_wait_ms_s'], '.0f'):>13}"
              f" {_num(r['threads'], 'd'):>4}  {detail}")
