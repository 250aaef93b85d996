"""`--tidelog-reuse`: one test cluster kept running between pytest runs, so an edit-test loop pays
its start once.

A reusable cluster lives in a slot, `<tmp>/tidelog-reuse-<uid>/<key>/` ($TIDELOG_REUSE_DIR/<key>/), keyed by everything that
makes two clusters interchangeable: the cluster's spec (shape and configs), the checkout its nodes
run from, and the pytest-xdist worker (each worker keeps its own). The slot holds:

    lease         flock'ed by the one test session using the cluster; another session that finds
                  it taken starts a private cluster instead of sharing one
    last_used     its mtime: when a session last let go of the cluster
    cluster/      the cluster's data dir (cluster.json names its node pids)
    watchdog      flock'ed by the slot's idle watchdog for its whole life (one per slot)

The idle watchdog (`python -P reuse.py SLOT MINUTES`, in its own session, detached from every test
run) looks every IDLE_CHECK_INTERVAL: once no session holds the lease and the cluster has been
idle MINUTES, it takes the lease, SIGKILLs the nodes, removes the slot and exits; it also exits
when the slot or its cluster is gone (`tidelog.testing.reuse.clear_all()` or by hand).

Between runs the cluster is cleaned as the plugin's recover() leaves it after a test: every fault
undone, then every topic but the internal ones deleted, so a run starts as on a fresh cluster
(consumer groups and committed offsets of deleted topics go with them; ACLs and SCRAM users a
test made stay). A cluster that cannot be cleaned or is not healthy is stopped and started anew.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Final

from common.units import SECONDS

IDLE_CHECK_INTERVAL: Final = 5 * SECONDS  # how often the idle watchdog looks; its bound on being late
DEFAULT_IDLE_MINUTES: Final = 15.0  # the ini option tidelog_reuse_idle_minutes
LEASE, LAST_USED, CLUSTER_DIR, WATCHDOG_LOCK = "lease", "last_used", "cluster", "watchdog"
SOURCE_ROOT: Final = Path(__file__).resolve().parents[2]  # the nodes run from this checkout
REUSE_DIR_ENV: Final = "TIDELOG_REUSE_DIR"

log = logging.getLogger(__name__)


def reuse_root() -> Path:
    """Where the slots live: $TIDELOG_REUSE_DIR, else a per-user directory of the temp dir."""
    chosen = os.environ.get(REUSE_DIR_ENV)
    return Path(chosen) if chosen else Path(tempfile.gettempdir()) / f"tidelog-reuse-{os.getuid()}"


def slot_key(spec_repr: str) -> str:
    """A short name for a slot: the spec, the checkout and the xdist worker, hashed."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    digest = hashlib.sha256(f"{spec_repr}\0{SOURCE_ROOT}\0{worker}".encode()).hexdigest()[:16]
    return digest


def _try_lock(path: Path) -> IO[bytes] | None:
    """An open file holding an exclusive flock on `path`, or None if someone else holds it."""
    handle = open(path, "ab")  # noqa: SIM115  # held open as long as the lock is
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


class Slot:
    """One reusable cluster's directory, leased by this process until `release()`."""

    def __init__(self, directory: Path, lease: IO[bytes]) -> None:
        self.directory, self._lease = directory, lease

    @classmethod
    def claim(cls, key: str, root: Path | None = None) -> Slot | None:
        """The slot `key`, leased to this process; None when another test session holds it."""
        directory = (root or reuse_root()) / key
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        lease = _try_lock(directory / LEASE)
        return None if lease is None else cls(directory, lease)

    @property
    def cluster_root(self) -> Path:
        return self.directory / CLUSTER_DIR

    def clear_cluster(self) -> None:
        """SIGKILL whatever cluster.json still names and remove the cluster's dir."""
        from tidelog.testing.reaper import reap

        reap(self.cluster_root)

    def release(self) -> None:
        """Let go of the lease; the idle clock starts now."""
        (self.directory / LAST_USED).touch()
        self._lease.close()

    def ensure_watchdog(self, idle_minutes: float) -> None:
        """Start the slot's idle watchdog unless one runs (it holds the watchdog lock)."""
        probe = _try_lock(self.directory / WATCHDOG_LOCK)
        if probe is None:
            return  # one runs; it reads the idle bound it was started with
        probe.close()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SOURCE_ROOT), env.get("PYTHONPATH")]))
        subprocess.Popen([sys.executable, "-P", __file__, str(self.directory), str(idle_minutes)],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env=env, start_new_session=True)  # outlives this run: that is its job
        log.info("tidelog reuse: idle watchdog for %s started (stops the cluster after %.1f idle minutes)",
                 self.directory, idle_minutes)


def clear_all(root: Path | None = None) -> int:
    """Stop every reusable cluster no session holds and remove its slot; how many were removed."""
    removed = 0
    base = root or reuse_root()
    for directory in sorted(base.iterdir()) if base.exists() else []:  # bounded by the slots
        lease = _try_lock(directory / LEASE)
        if lease is None:
            continue
        try:
            Slot(directory, lease).clear_cluster()
            shutil.rmtree(directory, ignore_errors=True)
            removed += 1
        finally:
            lease.close()
    return removed


# --- the idle watchdog's side ----------------------------------------------------------------


def idle_for(directory: Path, now: float) -> float:
    try:
        return now - (directory / LAST_USED).stat().st_mtime
    except FileNotFoundError:
        return 0.0  # never released yet: the first session still holds it


def watch(directory: Path, idle_minutes: float) -> str:
    """Until the slot is idle for `idle_minutes` (then stop its cluster and remove it) or gone;
    says which."""
    mine = _try_lock(directory / WATCHDOG_LOCK)
    if mine is None:
        return "another watchdog watches this slot"
    while True:  # bounded by the idle bound once no session comes back, or by the slot's removal
        time.sleep(IDLE_CHECK_INTERVAL)
        if not (directory / CLUSTER_DIR).exists():
            shutil.rmtree(directory, ignore_errors=True)
            return "the cluster is gone"
        if idle_for(directory, time.time()) < idle_minutes * 60:
            continue
        lease = _try_lock(directory / LEASE)
        if lease is None:
            continue  # a session uses it now
        try:
            Slot(directory, lease).clear_cluster()
            shutil.rmtree(directory, ignore_errors=True)
        finally:
            lease.close()
            mine.close()
        return f"idle for {idle_minutes} minutes: stopped"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -P reuse.py SLOT_DIR IDLE_MINUTES", file=sys.stderr)
        return 2
    watch(Path(argv[0]), float(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
