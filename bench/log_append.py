"""Append and read throughput of the partition log beside raw file I/O of the same bytes.

For each batch size the same prepared batch is appended N times through
`PartitionLog.append` (CRC check, offset assignment, epoch stamping, index upkeep) and,
in the same run, written N times with `os.write` to a plain file; then both are read back
in 1 MiB fetches (`PartitionLog.read` + `os.pread` of the slice against plain `os.pread`).
Neither side fsyncs. Each figure is the best of `--rounds` runs; the ratio is log / raw.
`--cpu`: timed by the process's CPU time (user and kernel), not the wall clock, so the figures
are MB per CPU second, which other work on a shared box moves much less. `--user`: by its user
time alone (whole clock ticks: take 'us/append' over several runs), the Python work per batch:
on this VM the kernel's copy into the page cache costs 7-15x more on a page the host has to back
again (free page reporting and DAMON's pageout return freed and cold memory to it) than on one it
still backs, so the kernel's share moves with the box's memory history, not with the code (issue 35).

    python bench/log_append.py [--total-mib 256] [--rounds 3] [--dir DIR] [--cpu | --user]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from broker.log.partition_log import PartitionLog
from common.records import build_batch
from common.log_config import LogConfig
from common.units import KIB, MIB

FETCH_BYTES = 1 * MIB


def user_time() -> float:
    """The process's user CPU seconds (getrusage: every thread; the bench runs one)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_utime


def make_batch(size: int) -> bytes:
    """A CreateTime batch of about `size` bytes made of ~1 KiB records."""
    value_size = min(size, 1000)
    count = max(1, size // (value_size + 24))
    records = [(b"key-%06d" % i, os.urandom(value_size - 70 if size <= KIB else value_size))
               for i in range(count)]
    return build_batch(records, base_timestamp=1_700_000_000_000)


CHUNK_BYTES = 8 * MIB  # raw and log alternate in chunks of this size, so both see the
# same page-cache and writeback conditions


def bench_case(directory: Path, batch: bytes, count: int,
               clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Seconds spent by each side, appending/writing then reading, interleaved by chunk."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    log = PartitionLog(directory / "bench-0", LogConfig(), now_ms=0)
    raw_fd = os.open(directory / "raw.bin", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    per_chunk = max(1, CHUNK_BYTES // len(batch))
    times = {"log_write": 0.0, "raw_write": 0.0, "log_read": 0.0, "raw_read": 0.0}
    done = 0
    while done < count:
        n = min(per_chunk, count - done)
        start = clock()
        for _ in range(n):
            os.write(raw_fd, batch)
        times["raw_write"] += clock() - start
        start = clock()
        for i in range(n):
            log.append(batch, now_ms=done + i, leader_epoch=0)
        times["log_write"] += clock() - start
        done += n

    # Every batch holds the same number of records, so a consumer's next offset follows
    # from how many whole batches a fetch returned: the bench does no parsing of its own.
    records_per_batch = log.log_end_offset // count
    offset, position, size = 0, 0, os.fstat(raw_fd).st_size
    while position < size:
        start = clock()
        for _ in range(max(1, CHUNK_BYTES // FETCH_BYTES)):
            position += len(os.pread(raw_fd, FETCH_BYTES, position))
        times["raw_read"] += clock() - start
        start = clock()
        for _ in range(max(1, CHUNK_BYTES // FETCH_BYTES)):
            if offset >= log.log_end_offset:
                break
            data = log.read(offset, FETCH_BYTES)
            chunk = data.read_bytes()
            offset += max(1, len(chunk) // len(batch)) * records_per_batch
        times["log_read"] += clock() - start
    os.close(raw_fd)
    log.close()
    shutil.rmtree(directory, ignore_errors=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-mib", type=int, default=256, help="bytes appended per case")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    clocks = parser.add_mutually_exclusive_group()
    clocks.add_argument("--cpu", action="store_true", help="time by process CPU, not the wall clock")
    clocks.add_argument("--user", action="store_true", help="time by the process's user CPU alone")
    args = parser.parse_args()
    clock = user_time if args.user else time.process_time if args.cpu else time.perf_counter
    root = Path(tempfile.mkdtemp(prefix="tidelog-bench-", dir=args.dir))
    print(f"tidelog log bench: {args.total_mib} MiB per case, best of {args.rounds}, "
          f"{'user CPU' if args.user else 'CPU' if args.cpu else 'wall'} time, scratch {root}")
    print(f"{'batch':>8} {'log MB/s':>10} {'raw MB/s':>10} {'append':>7} "
          f"{'log rd MB/s':>12} {'raw rd MB/s':>12} {'read':>6} {'us/append':>10}")
    try:
        for size in (1 * KIB, 16 * KIB, 1 * MIB):
            batch = make_batch(size)
            count = max(1, args.total_mib * MIB // len(batch))
            total = count * len(batch)
            runs = [bench_case(root / "case", batch, count, clock) for _ in range(args.rounds)]
            log_w, raw_w, log_r, raw_r = (min(r[k] for r in runs) for k in
                                          ("log_write", "raw_write", "log_read", "raw_read"))
            # --user reads whole clock ticks: a side may read 0 s (the kernel did its work), and
            # then has no rate (inf) and no ratio (0 %)
            mbs = lambda s: total / s / 1e6 if s > 0 else float("inf")  # noqa: E731
            ratio = lambda a, b: a / b if b > 0 else 0.0  # noqa: E731
            print(f"{len(batch):>8} {mbs(log_w):>10.0f} {mbs(raw_w):>10.0f} "
                  f"{ratio(raw_w, log_w):>7.0%} {mbs(log_r):>12.0f} {mbs(raw_r):>12.0f} "
                  f"{ratio(raw_r, log_r):>6.0%} {log_w / count * 1e6:>10.1f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
