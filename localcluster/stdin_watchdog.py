"""The launcher's side of a watchdog process: `python -P <script> <args>` in its own session,
reading its stdin until EOF. Only its creator holds the pipe's write end and the kernel closes
it however the creator ends, so the script cleans up after a SIGKILL too (tidelog.testing.reaper
for test clusters, tidelog.hosts.watchdog for namespaced ones).

By path, not `-m`: a package's __init__ could import a whole client side while the nodes start;
-P keeps the script's directory off sys.path. Its own session: a Ctrl-C on the terminal reaches
the creator, which stops its cluster itself, and not the watchdog.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from common.limits import KILL_WAIT

SOURCE_ROOT = str(Path(__file__).resolve().parents[1])  # the nodes' and the scripts' sources


class StdinWatchdog:
    """One watchdog process; `close()` once what it guards is stopped and removed."""

    def __init__(self, script: str, args: Sequence[str], *, exit_wait_s: float) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [SOURCE_ROOT, env.get("PYTHONPATH")]))
        self._exit_wait_s = exit_wait_s
        self._popen = subprocess.Popen([sys.executable, "-P", script, *args], stdin=subprocess.PIPE,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                                       start_new_session=True)

    @property
    def pid(self) -> int:
        return self._popen.pid

    def close(self) -> None:
        """EOF to the watchdog and a bounded wait for it (SIGKILL after the bound)."""
        if self._popen.stdin is not None and not self._popen.stdin.closed:
            self._popen.stdin.close()
        try:
            self._popen.wait(self._exit_wait_s)
        except subprocess.TimeoutExpired:
            self._popen.kill()
            self._popen.wait(KILL_WAIT)
