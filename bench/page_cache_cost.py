"""The kernel's CPU per GB written into the page cache, by where its pages come from (issue 35).

A broker's produce is two kernel copies per byte (socket to the request's buffer, buffer to the
page cache), and on this VM the second one's cost depends on the memory it lands on, not on the
broker: the guest runs free page reporting (virtio_mem, page_reporting) and a DAMON pageout
scheme (kdamond, paddr), so memory freed or left cold goes back to the host, and the next touch of
such a page faults on the host, inside the copy. The same `--mib` of 1 MiB writes, four ways:

- a new file (pages from the free lists: mostly handed back to the host);
- the same file overwritten (its pages still in the page cache: no new page);
- a new file right after unlinking the first (the pages just freed, still backed);
- a new file `--settle` seconds after an unlink (the freed pages reported to the host meanwhile).

On the shared 2-core VM (400 MiB, 3 runs, load 0.9-1.2) the kernel spent 1.04-1.46 / 0.11-0.13 /
0.20-0.26 / 1.16-1.63 s per GB: a produce phase that writes onto pages the host must back again
costs ~1 s/GB more broker CPU than one that reuses pages just freed, so bench/produce_consume.py's
later phases read more than its earlier ones whatever their partition count. No fsync; every file
is removed at the end.

    python bench/page_cache_cost.py [--mib 400] [--settle 5] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

from common.units import MIB

WRITE_BYTES = 1 * MIB


def write(path: Path, flags: int, mib: int, data: bytes) -> tuple[float, float]:
    """(kernel, user) CPU seconds of `mib` 1 MiB writes to `path` opened with `flags`."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    fd = os.open(path, flags, 0o644)
    try:
        for _ in range(mib):  # bounded by --mib
            os.write(fd, data)
    finally:
        os.close(fd)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return after.ru_stime - before.ru_stime, after.ru_utime - before.ru_utime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=400, help="MiB written per case")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds between unlink and the last case")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tidelog-page-cache-", dir=args.dir))
    data = os.urandom(WRITE_BYTES)
    gb = args.mib * MIB / 1e9
    first, second = root / "first", root / "second"
    new, old = os.O_WRONLY | os.O_CREAT | os.O_EXCL, os.O_WRONLY
    print(f"{args.mib} MiB in 1 MiB writes per case, scratch {root}; CPU seconds per GB")
    print(f"{'case':<34} {'kernel':>7} {'user':>6}")
    try:
        cases = [("new file", first, new), ("same file overwritten", first, old)]
        for label, path, flags in cases:
            sys_s, user_s = write(path, flags, args.mib, data)
            print(f"{label:<34} {sys_s / gb:>7.2f} {user_s / gb:>6.2f}", flush=True)
        first.unlink()
        sys_s, user_s = write(second, new, args.mib, data)
        print(f"{'new file right after an unlink':<34} {sys_s / gb:>7.2f} {user_s / gb:>6.2f}", flush=True)
        second.unlink()
        time.sleep(args.settle)
        sys_s, user_s = write(first, new, args.mib, data)
        print(f"{f'new file {args.settle:g} s after an unlink':<34} {sys_s / gb:>7.2f} {user_s / gb:>6.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
