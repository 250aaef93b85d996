"""The harness's side of a power-loss mount: mount, pull the plug, remount, unmount.

    mount = PowerMount.create(node_dir / "metadata", state=root / ".power" / "controller-1")
    ...                                    # the node runs on it
    report = mount.pull_plug()             # the node already SIGKILLed: volatile writes gone
    mount.unmount()                        # at the end: the files go back under the node's dir

The directory keeps its path: its contents move to STATE/backing and the FUSE mount takes its
place, so the node needs no other configuration. Whoever creates a mount unmounts it: `unmount`
in a finally or an ExitStack, and an atexit hook for every mount of this process still there
(lazily, so a busy one goes as soon as its last user does).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Final

from chaos.power import FUSERMOUNT
from chaos.power.daemon import FSNAME_PREFIX, PLUG_FLAG, REPORT_FILE
from common.processes import pid_exists
from common.waiting import WaitTimeout, wait_until

log = logging.getLogger(__name__)

MOUNT_TIMEOUT_S: Final = 10.0  # daemon start to the mount being visible
EXIT_TIMEOUT_S: Final = 30.0  # unmount to the daemon done rolling back (a big ledger takes a while)
BACKING_DIR: Final = "backing"
DAEMON_LOG: Final = "daemon.log"

_live: set[PowerMount] = set()


def _unmount_leftovers() -> None:
    for mount in list(_live):
        mount.unmount(lazy=True)


atexit.register(_unmount_leftovers)


class PowerMountError(RuntimeError):
    """A mount that did not come up or go away; the message has the daemon's last lines."""


class PowerMount:
    def __init__(self, mountpoint: Path, state: Path) -> None:
        self.mountpoint, self.state = mountpoint, state
        self.backing = state / BACKING_DIR
        self.daemon: subprocess.Popen[bytes] | None = None
        self.plugs_pulled = 0
        self._pulled_at = 0.0

    def __hash__(self) -> int:
        return id(self)

    @classmethod
    def create(cls, mountpoint: Path, state: Path) -> PowerMount:
        """Move `mountpoint`'s contents aside and mount the layer over them (at `mountpoint`)."""
        mount = cls(mountpoint, state)
        mountpoint.mkdir(parents=True, exist_ok=True)
        mount.backing.mkdir(parents=True, exist_ok=True)
        for entry in sorted(mountpoint.iterdir()):
            entry.rename(mount.backing / entry.name)
        mount._start()
        return mount

    def _start(self) -> None:
        self.spawn()
        self.wait_mounted()

    def spawn(self) -> None:
        """Start the daemon; `wait_mounted` waits for its mount (a layer of several nodes starts
        every daemon first, then waits for all: a few hundred ms in all instead of each)."""
        (self.state / REPORT_FILE).unlink(missing_ok=True)
        with open(self.state / DAEMON_LOG, "ab") as out:
            self.daemon = subprocess.Popen(
                [sys.executable, "-m", "chaos.power.daemon", str(self.backing), str(self.mountpoint), str(self.state),
                 f"--owner={os.getpid()}"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
        _live.add(self)

    def wait_mounted(self) -> None:
        try:
            wait_until(f"the power-loss mount at {self.mountpoint}", self._mounted, MOUNT_TIMEOUT_S, poll_s=0.02)
        except WaitTimeout:
            self.unmount(lazy=True)
            raise PowerMountError(f"the power-loss layer never mounted at {self.mountpoint}: {self._log_tail()}")

    def _mounted(self) -> bool:
        if self.daemon is not None and self.daemon.poll() is not None:
            raise PowerMountError(f"the power-loss daemon for {self.mountpoint} exited with "
                                  f"{self.daemon.returncode}: {self._log_tail()}")
        return os.path.ismount(self.mountpoint)

    def _log_tail(self) -> str:
        try:
            return " | ".join((self.state / DAEMON_LOG).read_text(errors="replace").splitlines()[-5:])
        except OSError:
            return "(no daemon log)"

    def _fusermount(self, lazy: bool) -> bool:
        """Unmount; False when the mount was busy (a lazy retry detaches it anyway)."""
        if not os.path.ismount(self.mountpoint):
            return True
        args = [FUSERMOUNT, "-u", *(["-z"] if lazy else []), str(self.mountpoint)]
        done = subprocess.run(args, capture_output=True, text=True, check=False)
        if done.returncode != 0 and not lazy:
            log.warning("%s failed (%s); detaching it lazily", " ".join(args), done.stderr.strip())
            return self._fusermount(lazy=True)
        return done.returncode == 0

    def _wait_daemon(self) -> dict[str, Any]:
        daemon, self.daemon = self.daemon, None
        if daemon is not None:
            try:
                daemon.wait(EXIT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
                raise PowerMountError(f"the power-loss daemon for {self.mountpoint} did not finish within "
                                      f"{EXIT_TIMEOUT_S:.0f} s of its unmount: {self._log_tail()}") from None
        try:
            return dict(json.loads((self.state / REPORT_FILE).read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            status = "" if daemon is None else f", exit status {daemon.returncode}"
            raise PowerMountError(f"no report from the power-loss daemon for {self.mountpoint} ({exc}{status}): "
                                  f"{self._log_tail()}") from None

    def pull_plug(self) -> dict[str, Any]:
        """Drop every volatile change (the node using it must already be dead) and mount again."""
        self.begin_pull()
        report = self.finish_pull()
        self._start()
        return report

    def begin_pull(self) -> None:
        """The plug: the daemon rolls back once its mount is gone (`finish_pull` waits for it)."""
        (self.state / PLUG_FLAG).touch()
        self._pulled_at = time.monotonic()
        self._fusermount(lazy=False)

    def finish_pull(self) -> dict[str, Any]:
        """What the daemon took back; the layer stays unmounted until `spawn`/`pull_plug` mounts it."""
        report = self._wait_daemon()
        if not report.get("power_loss"):
            raise PowerMountError(f"the power-loss daemon for {self.mountpoint} did not roll back: {report}")
        self.plugs_pulled += 1
        report["rollback_s"] = round(time.monotonic() - self._pulled_at, 3)
        return report

    def ensure_mounted(self) -> None:
        """After a pull (or one that failed half way): the daemon started again over whatever the
        backing holds; `wait_mounted` waits for the mount."""
        if self.daemon is None and self in _live:
            self._fusermount(lazy=True)
            self.spawn()

    def unmount(self, *, lazy: bool = False) -> None:
        """Unmount in order (everything kept) and put the files back under the mountpoint."""
        if self not in _live:
            return
        _live.discard(self)
        (self.state / PLUG_FLAG).unlink(missing_ok=True)
        self._fusermount(lazy)
        try:
            self._wait_daemon()
        except PowerMountError as exc:
            log.warning("%s", exc)
        if os.path.ismount(self.mountpoint):
            log.warning("%s is still mounted (busy); it goes once its last user does", self.mountpoint)
            return
        for entry in sorted(self.backing.iterdir()):
            entry.rename(self.mountpoint / entry.name)

    def __enter__(self) -> PowerMount:
        return self

    def __exit__(self, *exc: object) -> None:
        self.unmount()


def leftovers(mounts_file: Path = Path("/proc/mounts")) -> list[tuple[str, int]]:
    """(mountpoint, owner pid) of every power-loss mount on this machine."""
    found = []
    for line in mounts_file.read_text(encoding="utf-8").splitlines():
        fields = line.split()
        if len(fields) > 1 and fields[0].startswith(FSNAME_PREFIX):
            owner = fields[0][len(FSNAME_PREFIX):]
            # /proc/mounts escapes a space in a path as \040
            found.append((fields[1].replace("\\040", " "), int(owner) if owner.isdigit() else 0))
    return found


def clean_leftovers(*, everything: bool = False) -> list[str]:
    """Unmount (lazily) the power-loss mounts a crashed run left: those whose harness is gone,
    or all of them with `everything`. The files stay in the mount's backing directory."""
    removed = []
    for mountpoint, owner in leftovers():
        if everything or not pid_exists(owner):
            subprocess.run([FUSERMOUNT, "-u", "-z", mountpoint], capture_output=True, check=False)
            removed.append(f"power-loss mount {mountpoint}")
    return removed
