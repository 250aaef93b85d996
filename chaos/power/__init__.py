"""Power-loss faults: a FUSE layer under a node's data dir that drops what was not fsynced.

`volatile.py` keeps the undo ledger (what a power loss takes back), `fs.py` the passthrough
FUSE filesystem that feeds it, `daemon.py` the process serving one mount, `mount.py` the
harness's side (mount before the node starts, pull the plug, remount, unmount on every exit).
Needs mfusepy (PyPI, the chaos and test extras) and libfuse 3 with fusermount3 (Debian's
fuse3; `make chaos-tools` installs it); `fuse_missing()` says what is absent.
"""

from __future__ import annotations

import ctypes.util
import os
import shutil
from typing import Final

from common.extras import missing_extra_message

FUSERMOUNT: Final = "fusermount3"
APT_INSTALL: Final = "apt-get install fuse3"


def fuse_missing() -> str | None:
    """Why power-loss faults cannot run here (worded as the tests' skip reasons are), or None."""
    message = missing_extra_message("chaos", ("mfusepy",))
    if message is not None:
        return f"power-loss faults {message}"
    if shutil.which(FUSERMOUNT) is None or ctypes.util.find_library("fuse3") is None:
        return f"power-loss faults need libfuse 3 and {FUSERMOUNT}, not installed: {APT_INSTALL}"
    if not os.path.exists("/dev/fuse"):
        return "power-loss faults need /dev/fuse (the kernel's FUSE), not installed: modprobe fuse"
    return None
