"""The watchdog of a netns cluster: nothing it made outlives the process that made it.

The pattern of tidelog/testing/reaper.py: `python -P .../tidelog/hosts/watchdog.py <data dir>
[--remove-data]` reads its stdin until EOF; only its creator holds the pipe's write end, and the
kernel closes it however the creator ends (Ctrl-C, SIGTERM, SIGKILL, a crash). On EOF it SIGKILLs
every node the data dir's cluster.json still names (only while the pid's command line names that
node's config: a recycled pid is never hit), deletes every namespace recorded there, and with
--remove-data (tests) removes the data dir. After a clean stop there is nothing left to do.
"""

from __future__ import annotations

import shutil
import signal
import sys
from pathlib import Path
from typing import Final

from common.units import SECONDS
from localcluster.stdin_watchdog import StdinWatchdog

WATCHDOG_EXIT_WAIT: Final = 10 * SECONDS  # it may have namespaces to delete


class NetnsWatchdog(StdinWatchdog):
    """The watchdog process of one data dir; `close()` once the cluster is stopped and removed."""

    def __init__(self, root: Path, *, remove_data: bool) -> None:
        super().__init__(__file__, [str(root), *(["--remove-data"] if remove_data else [])],
                         exit_wait_s=WATCHDOG_EXIT_WAIT)


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2) or argv[1:] not in ([], ["--remove-data"]):
        print("usage: watchdog.py DATA_DIR [--remove-data]  (reads stdin until EOF)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only EOF ends the wait
    while sys.stdin.buffer.read(4096):  # bounded by the creator's life: EOF when it ends
        pass
    from tidelog.hosts.cluster import remove_recorded  # here: the wait above starts light

    root = Path(argv[0])
    if root.exists():
        for error in remove_recorded(root):
            print(error, file=sys.stderr)
        if argv[1:]:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
