"""One node's process: spawned in its own session, signalled, stopped in role order, reported.

A node is `python -m tidelog controller|broker|combined --config <node dir>/server.properties`
with stdout and stderr appended to `<node dir>/node.log`. Stopping is SIGTERM, a bounded wait,
then SIGKILL for stragglers; one that outlives SIGKILL is reported with what held it (held_by).
A pid read back from cluster.json is signalled only while its command line still names that
node's config file: a recycled pid is never hit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from common.limits import KILL_WAIT
from common.processes import pid_exists
from common.units import SECONDS
from localcluster import cluster_layout as layout
from localcluster.cluster_layout import NodeSpec

STOP_TIMEOUT: Final = 10 * SECONDS  # a controller stops in well under a second; SIGKILL after this
# a broker's controlled shutdown is bounded by controlled.shutdown.timeout.ms (30 s by
# default); give it that long, plus a margin, before SIGKILL makes it a dirty stop
BROKER_STOP_TIMEOUT: Final = 35 * SECONDS
# a combined node: its broker's controlled shutdown, then its controller lingers while other
# brokers finish theirs (tidelog.combined_node.LINGER_MAX, 10 s), then stops
COMBINED_STOP_TIMEOUT: Final = BROKER_STOP_TIMEOUT + 15 * SECONDS
EXIT_POLL_INTERVAL: Final = 0.1 * SECONDS  # a stop looks this often whether its processes exited
STOP_ORDER: Final = (layout.BROKER, layout.COMBINED, layout.CONTROLLER)
LOG_TAIL_LINES: Final = 20
# the checkout this launcher runs from: a node runs `python -m tidelog` from the same sources
SOURCE_ROOT: Final = Path(__file__).resolve().parents[1]


def process_runs(pid: int, config_path: Path) -> bool:
    """True while `pid` is a live (not zombie) process whose command line names `config_path`."""
    proc = Path("/proc") / str(pid)
    if not Path("/proc/self").exists():  # no procfs (macOS): trust the pid alone
        return pid_exists(pid)
    try:
        stat = (proc / "stat").read_text()
        args = (proc / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    state = stat.rpartition(")")[2].split()[:1]  # the field after "(comm)"; comm may hold spaces
    return state != ["Z"] and os.fsencode(str(config_path)) in args


def node_environment() -> dict[str, str]:
    """A node's environment: this process's, with the checkout this launcher runs from first on
    PYTHONPATH (the node runs the same tidelog sources)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SOURCE_ROOT), env.get("PYTHONPATH")]))
    return env


class NodeProcess:
    """One running node: started here (`popen` set) or found again through cluster.json."""

    def __init__(self, spec: NodeSpec, pid: int | None, popen: subprocess.Popen[bytes] | None = None) -> None:
        self.spec, self.pid, self.popen = spec, pid, popen  # pid None: recorded as stopped

    @classmethod
    def spawn(cls, spec: NodeSpec) -> NodeProcess:
        command = [sys.executable, "-m", "tidelog", spec.role, "--config", str(spec.properties_path)]
        env = node_environment()
        with open(spec.log_path, "ab") as log:
            log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} tidelog launcher: "
                      f"starting {' '.join(command)}\n".encode())
            log.flush()
            popen = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                     cwd=spec.directory, env=env, start_new_session=True)
        return cls(spec, popen.pid, popen)

    def running(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return self.pid is not None and process_runs(self.pid, self.spec.properties_path)

    @property
    def exit_status(self) -> int | None:
        """The exit status (negative: killed by that signal); None if unknown or still running."""
        return None if self.popen is None else self.popen.poll()

    def send(self, sig: signal.Signals) -> None:
        """Signal the node's process group (it leads its own session); nothing if it is gone."""
        if self.pid is None or not self.running():  # also: a recorded pid now someone else's
            return
        try:
            if os.getpgid(self.pid) == self.pid:
                os.killpg(self.pid, sig)
            else:
                os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self, timeout: float = STOP_TIMEOUT) -> StopReport:
        """SIGTERM this node alone, SIGKILL after `timeout`."""
        return stop_nodes([self], timeout)[0]

    def kill(self) -> StopReport:
        """SIGKILL this node at once, no SIGTERM first (a crash, for tests and chaos)."""
        if not self.running():
            return StopReport(self.spec, self.pid, "not running", self.exit_status)
        self.send(signal.SIGKILL)
        _wait_all_exit([self], KILL_WAIT)
        if self.running():
            return StopReport(self.spec, self.pid, "did not die", self.exit_status, held_by(self.pid))
        return StopReport(self.spec, self.pid, "killed", self.exit_status)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.spec.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True, slots=True)
class StopReport:
    node: NodeSpec
    pid: int | None
    outcome: str  # "stopped", "killed" (needed SIGKILL), "not running", "did not die"
    exit_status: int | None
    held: str = ""  # "did not die": what held the process then (held_by)

    def describe(self) -> str:
        status = "" if self.exit_status is None else f", exit status {self.exit_status}"
        pid = "" if self.pid is None else f" (pid {self.pid})"
        held = f" ({self.held})" if self.held else ""
        return f"{self.node.label}{pid}: {self.outcome}{status}{held}"


def held_by(pid: int | None) -> str:
    """What keeps a SIGKILLed process's pid alive, from /proc, for the stop report: "zombie" (it has
    exited; its parent, named with its state and wchan, has not reaped it yet) or the threads still in
    the kernel with their state and wchan (D: an uninterruptible wait, such as an fsync, that
    SIGKILL cannot end; the leader shows Z while another thread is held). "" without procfs."""
    if pid is None:
        return ""
    proc = Path("/proc") / str(pid)
    threads = []
    try:
        ppid = int((proc / "stat").read_text().rpartition(")")[2].split()[1])
        for task in sorted((proc / "task").iterdir(), key=lambda t: int(t.name)):  # bounded by its threads
            state = (task / "stat").read_text().rpartition(")")[2].split()[0]
            if state not in ("Z", "X"):
                threads.append(f"thread {task.name} {state}{_waiting_in(task)}")
    except (OSError, ValueError, IndexError):  # gone meanwhile, or no procfs
        return ""
    if threads:
        return "; ".join(threads)
    return f"zombie, not reaped by its parent {_described(ppid)}"


def _described(pid: int) -> str:
    """`pid (comm) state S in wchan` of a live process, for a report."""
    proc = Path("/proc") / str(pid)
    try:
        comm, _, rest = (proc / "stat").read_text().partition(" (")[2].rpartition(")")
        return f"pid {pid} ({comm}) {rest.split()[0]}{_waiting_in(proc)}"
    except OSError:
        return f"pid {pid} (gone)"


def _waiting_in(task: Path) -> str:
    """" in <kernel function>" where a sleeping task waits (its wchan); "" for a running one."""
    wchan = (task / "wchan").read_text().strip()
    return "" if wchan in ("", "0") else f" in {wchan}"


def _wait_all_exit(nodes: Sequence[NodeProcess], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(n.running() for n in nodes):  # bounded by the deadline
        time.sleep(EXIT_POLL_INTERVAL)


def stop_nodes(nodes: Sequence[NodeProcess], timeout: float = STOP_TIMEOUT) -> list[StopReport]:
    """SIGTERM every node, wait up to `timeout`, SIGKILL what is left; one report per node.

    All nodes of a role stop together; brokers go before the controllers they need for a
    controlled shutdown, combined nodes in between (all at once: each keeps its controller up
    while another's broker is still shutting down, so the quorum lasts until the last one).
    """
    was_running = {n.spec.node_id: n.running() for n in nodes}
    killed: set[int] = set()
    for role in STOP_ORDER:
        group = [n for n in nodes if n.spec.role == role and was_running[n.spec.node_id]]
        for node in group:
            node.send(signal.SIGTERM)
        least = {layout.BROKER: BROKER_STOP_TIMEOUT, layout.COMBINED: COMBINED_STOP_TIMEOUT}.get(role, 0)
        _wait_all_exit(group, max(timeout, least))
        stragglers = [n for n in group if n.running()]
        for node in stragglers:
            node.send(signal.SIGKILL)
            killed.add(node.spec.node_id)
        _wait_all_exit(stragglers, KILL_WAIT)
    ordered = sorted(nodes, key=lambda n: STOP_ORDER.index(n.spec.role))
    return [stop_report(n, was_running=was_running[n.spec.node_id], killed=n.spec.node_id in killed)
            for n in ordered]


def stop_report(node: NodeProcess, *, was_running: bool, killed: bool) -> StopReport:
    """How one node's stop ended, in the words `tidelog down` prints."""
    if not was_running:
        outcome = "not running"
    elif node.running():
        return StopReport(node.spec, node.pid, "did not die", node.exit_status, held_by(node.pid))
    else:
        outcome = "killed after ignoring SIGTERM" if killed else "stopped"
    return StopReport(node.spec, node.pid, outcome, node.exit_status)
