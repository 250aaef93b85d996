"""The process that serves one power-loss mount: `python -m chaos.power.daemon BACKING MOUNT STATE`.

It serves PowerLossFS in the foreground until the mount goes away (fusermount3 -u). Then, if
STATE/plug-pulled exists, the harness pulled the plug: everything volatile is taken back in
the backing directory and STATE/report.json says what (files cut, bytes dropped, directory
changes undone); otherwise the unmount was orderly and everything is kept. The harness waits
for this process to exit before it uses the backing directory again.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import sys
from pathlib import Path
from typing import Final

FSNAME_PREFIX: Final = "tidelog-powerloss-"  # + the harness's pid: /proc/mounts tells whose mount it is
PLUG_FLAG: Final = "plug-pulled"
REPORT_FILE: Final = "report.json"
TRASH_DIR: Final = "trash"

log = logging.getLogger("chaos.power.daemon")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.power.daemon")
    parser.add_argument("backing", type=Path)
    parser.add_argument("mount", type=Path)
    parser.add_argument("state", type=Path)
    parser.add_argument("--owner", type=int, default=0, help="the harness's pid (tidelog chaos clean reads it)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    faulthandler.enable()  # a crash inside libfuse or ctypes leaves its stack in the daemon's log
    from mfusepy import FUSE  # the chaos extra; the harness checked it (chaos.power.fuse_missing)

    from chaos.power.fs import PowerLossFS
    from chaos.power.volatile import VolatileLedger

    ledger = VolatileLedger(args.backing, args.state / TRASH_DIR)
    log.info("serving %s over %s", args.mount, args.backing)
    # auto_unmount: fusermount3 unmounts if this process dies, so no dead mount is left behind
    FUSE(PowerLossFS(ledger), str(args.mount), foreground=True, nothreads=True, fsname=f"{FSNAME_PREFIX}{args.owner}",
         auto_unmount=True)
    flag = args.state / PLUG_FLAG
    if flag.exists():
        report = ledger.power_loss()
        flag.unlink()
        log.info("power loss of %s: %d files rolled back, %d bytes dropped, %d directory changes undone",
                 args.mount, report.files_rolled_back, report.bytes_dropped, len(report.entries_undone))
        body: dict[str, object] = {"power_loss": True, **report.to_json()}
    else:
        ledger.clean_unmount()
        log.info("unmounted %s in order: every change kept", args.mount)
        body = {"power_loss": False}
    (args.state / REPORT_FILE).write_text(json.dumps(body), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
