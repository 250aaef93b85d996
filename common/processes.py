"""Whether a process id names a live process: one answer for every harness that outlives or
watches the processes it started (power-loss mounts, namespaced hosts, local nodes)."""

from __future__ import annotations

import os


def pid_exists(pid: int) -> bool:
    """Signal 0 probes without signalling. A process of another user (PermissionError) exists;
    pid 0 and below name process groups, never one process."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
