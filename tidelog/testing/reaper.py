"""Nothing a test cluster started outlives the process that started it, however that process ends.

Three layers, each catching what the one before cannot:

1. `Cluster.stop()` (a `with` block's end, a pytest finalizer): SIGTERM, a bounded wait, SIGKILL.
2. `atexit`: every cluster still registered here is stopped when the interpreter exits normally
   (including after a KeyboardInterrupt unwound the test run without reaching a finalizer).
3. A watchdog process per cluster, `python -P .../tidelog/testing/reaper.py <data dir>`, that reads its
   stdin until EOF. Only the test process holds the pipe's write end, and the kernel closes it
   however that process ends: SIGTERM, SIGKILL, a crash, a killed xdist worker. On EOF the
   watchdog SIGKILLs every node cluster.json still names (only while the pid's command line names
   that node's config: a recycled pid is never hit) and removes the data dir. After a normal stop
   the data dir is gone already and it exits at once.

The watchdog runs in its own session, like the nodes, so a Ctrl-C on the terminal reaches the
test run (which stops its clusters itself) and not the watchdog.
"""

from __future__ import annotations

import atexit
import logging
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from common.limits import KILL_WAIT, POLL_INTERVAL
from common.units import SECONDS
from localcluster.stdin_watchdog import StdinWatchdog

if TYPE_CHECKING:
    from localcluster.launcher import LocalCluster
    from localcluster.node_process import StopReport

WATCHDOG_EXIT_WAIT: Final = 5 * SECONDS  # after a normal stop it has nothing to do

log = logging.getLogger(__name__)


class Stoppable(Protocol):
    def stop(self) -> object: ...


# --- the test process's side --------------------------------------------------------------------


class Watchdog(StdinWatchdog):
    """The watchdog process of one data dir; `close()` after the cluster is stopped and its dir removed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        super().__init__(__file__, [str(root)], exit_wait_s=WATCHDOG_EXIT_WAIT)


_live: set[Stoppable] = set()
_live_lock = threading.Lock()
_atexit_registered = False


def register(cluster: Stoppable) -> None:
    """Stop `cluster` at interpreter exit unless `unregister` was called first."""
    global _atexit_registered
    with _live_lock:
        _live.add(cluster)
        if not _atexit_registered:
            atexit.register(stop_all)
            _atexit_registered = True


def unregister(cluster: Stoppable) -> None:
    with _live_lock:
        _live.discard(cluster)


def stop_all() -> None:
    """Stop every cluster still registered (atexit); one failure does not spare the others."""
    with _live_lock:
        clusters = list(_live)
    for cluster in clusters:
        try:
            cluster.stop()
        except Exception:  # atexit: report and go on with the next cluster
            log.exception("stopping a test cluster at exit failed")


def stop_within(local: LocalCluster, bound: float) -> list[StopReport]:
    """SIGTERM brokers and combined nodes, then controllers; SIGKILL whatever is left when its share
    of `bound` is spent (brokers get two thirds: their controlled shutdown needs the controllers)."""
    from localcluster import (
        cluster_layout as layout,  # not at the top: the watchdog starts light
    )
    from localcluster.node_process import stop_report

    deadline = time.monotonic() + bound
    running = {n.spec.node_id for n in local.nodes if n.running()}
    killed: set[int] = set()
    for node in local.nodes:
        node.send(signal.SIGCONT)  # a paused node would act on SIGTERM only after SIGKILL
    stages = [([n for n in local.nodes if layout.runs_broker(n.spec.role)], deadline - bound / 3),
              ([n for n in local.nodes if n.spec.role == layout.CONTROLLER], deadline)]
    for group, stage_deadline in stages:
        for node in group:
            node.send(signal.SIGTERM)
        while any(n.running() for n in group) and time.monotonic() < stage_deadline:  # bounded
            time.sleep(POLL_INTERVAL)
        for node in group:
            if node.running():
                killed.add(node.spec.node_id)
                node.kill()
    return [stop_report(n, was_running=n.spec.node_id in running, killed=n.spec.node_id in killed)
            for n in local.nodes]


# --- the watchdog's side ----------------------------------------------------------------------


def reap(root: Path) -> int:
    """SIGKILL every node of `root` that still runs and remove `root`; how many nodes were killed."""
    from localcluster.launcher import (
        LocalCluster,  # here: the watchdog's start-up imports nothing else
    )

    if not root.exists():
        return 0
    try:
        cluster = LocalCluster.attach(root)
    except (OSError, RuntimeError):  # LayoutError: a half-written cluster.json; the directory still goes
        cluster = None
    killed = []
    for node in cluster.nodes if cluster is not None else []:
        if node.running():
            node.send(signal.SIGKILL)  # also resumes nothing: SIGKILL ends a SIGSTOPped process too
            killed.append(node)
    deadline = time.monotonic() + KILL_WAIT
    while any(n.running() for n in killed) and time.monotonic() < deadline:  # bounded by the deadline
        time.sleep(POLL_INTERVAL)
    shutil.rmtree(root, ignore_errors=True)
    return len(killed)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tidelog.testing.reaper DATA_DIR  (reads stdin until EOF)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only EOF ends the wait
    while sys.stdin.buffer.read(4096):  # bounded by the parent's life: EOF when it ends
        pass
    reap(Path(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
