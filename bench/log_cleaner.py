"""Log cleaner throughput beside raw read+write of the same bytes, and produce throughput
while the cleaner runs against idle (`make bench-cleaner`).

1. Cleaning: a log of `--mib` MiB of 100 B or 1 KiB records (batches of ~16 KiB, keys
   drawn from 10 % as many distinct keys as records) is rolled so every segment is
   cleanable, then compacted by `Cleaner.clean` (map, filter, write `.cleaned`, fsync,
   swap). The raw side reads the same segment files in 1 MiB preads and writes as many
   bytes to a new file, then fsyncs. MB/s are of dirty log processed; the ratio is
   cleaner / raw (goal >= 30 %).
2. Produce while cleaning (bench/cleaner_produce.py): kcat produces `--records` 100 B
   records to a real broker, into a compacted topic that is never cleaned, then into one
   the cleaner cleans again and again; the ratio is cleaning / idle (goal >= 80 %).
   `--in-process` adds the older in-process measure: `PartitionLog.append` beside a
   cleaner process and beside a cleaner thread of the same process (sharing the GIL).

    python bench/log_cleaner.py [--mib 64] [--rounds 3] [--records N] [--dir DIR]
                                [--no-produce]

Each figure is the median of `--rounds` runs (cleaner and raw alike).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import cleaner_produce  # bench/, beside this script
from cleaner_produce import report

from broker.log.compaction import OffsetMap
from broker.log.log_cleaner import Cleaner, LogSnapshot, abort, snapshot_log
from broker.log.partition_log import PartitionLog
from common.record_batch import CompressionType
from common.records import build_batch
from common.log_config import LogConfig
from common.units import KIB, MIB

NOW = 1_700_000_000_000
BATCH_BYTES = 16 * KIB
CONFIG = LogConfig(segment_bytes=16 * MIB, cleanup_policy=("compact",))


def build_log(directory: Path, total: int, record_size: int, codec: CompressionType,
              seed: int = 1) -> PartitionLog:
    """A compacted-topic log of about `total` bytes, every segment inactive."""
    shutil.rmtree(directory, ignore_errors=True)
    log = PartitionLog(directory / "bench-0", CONFIG, now_ms=NOW)
    rng = random.Random(seed)
    per_batch = max(1, BATCH_BYTES // record_size)
    records_total = max(per_batch, total // record_size)
    keys = max(1, records_total // 10)
    value_size = max(1, record_size - 30)
    while log.size_in_bytes < total:  # bounded: every append grows the log
        # each value random (as real payloads, it does not compress away)
        batch = build_batch([(b"key-%08d" % rng.randrange(keys), rng.randbytes(value_size))
                             for _ in range(per_batch)], base_timestamp=NOW, compression=codec)
        log.append(batch, now_ms=NOW)
    log.roll(NOW)
    log.update_high_watermark(log.log_end_offset)
    log.flush()
    return log


def time_clean(log: PartitionLog) -> tuple[float, float, int, int]:
    """(seconds, CPU seconds, bytes before, bytes after) of one full cleaning."""
    before = log.size_in_bytes
    cleaner = Cleaner(OffsetMap.for_buffer(128 * MIB))
    start, cpu = time.perf_counter(), time.process_time()
    cleaner.clean(log, first_dirty=0, first_uncleanable=log.active_segment.base_offset,
                  now_ms=NOW)
    return (time.perf_counter() - start, time.process_time() - cpu, before,
            log.size_in_bytes)


def time_raw(log: PartitionLog, out: Path) -> float:
    """Seconds to pread every segment in 1 MiB chunks and write as many bytes, fsynced."""
    start = time.perf_counter()
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for segment in log.segments:
            position = 0
            handle = segment.file()  # held: the descriptor stays open while we read
            while position < segment.size:  # bounded: each read moves forward
                chunk = os.pread(handle.fd, MIB, position)
                os.write(fd, chunk)
                position += len(chunk)
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - start


def produce_rate(log: PartitionLog, seconds: float) -> float:
    """MB/s appended to `log` in `seconds`."""
    batch = build_batch([(b"key-%04d" % i, b"x" * 70) for i in range(160)], base_timestamp=NOW)
    appended = 0
    deadline = time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < deadline:  # bounded by the deadline
        for _ in range(50):
            log.append(batch, now_ms=NOW, leader_epoch=0)
        appended += 50 * len(batch)
    return appended / MIB / (time.perf_counter() - start)


def _clean_forever(snap: LogSnapshot, end: int, stop: Any) -> None:
    cleaner = Cleaner(OffsetMap.for_buffer(128 * MIB))
    while not stop.is_set():  # bounded by `stop`
        prepared = cleaner.prepare(snap, first_dirty=0, first_uncleanable=end, now_ms=NOW)
        if prepared is not None:
            abort(prepared)


def produce_while_cleaning(root: Path, mib: int, seconds: float) -> dict[str, float]:
    dirty = build_log(root / "dirty", mib * MIB, 100, CompressionType.NONE)
    snap, _ = snapshot_log(dirty)
    end = dirty.active_segment.base_offset
    rates = {"idle": produce_rate(PartitionLog(root / "p0" / "bench-0", LogConfig(), now_ms=NOW),
                                  seconds)}
    context = multiprocessing.get_context("spawn")
    for i, (name, make_stop, make_worker) in enumerate((
            ("cleaner process", context.Event, context.Process),
            ("cleaner thread", threading.Event, threading.Thread))):
        stop = make_stop()
        worker = make_worker(target=_clean_forever, args=(snap, end, stop))
        worker.start()
        try:
            time.sleep(1.0)  # a spawned process imports first
            rates[name] = produce_rate(
                PartitionLog(root / f"p{i + 1}" / "bench-0", LogConfig(), now_ms=NOW), seconds)
        finally:
            stop.set()
            worker.join(timeout=120)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--records", type=int, default=1_000_000,
                        help="records kcat produces per phase (100 B each)")
    parser.add_argument("--no-produce", action="store_true",
                        help="goal 1 only (no kcat, no broker)")
    parser.add_argument("--in-process", action="store_true",
                        help="also PartitionLog.append beside a cleaner process and thread")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-cleaner-", dir=args.dir))
    try:
        print("goal 1: cleaner MB/s of dirty log >= 30 % of raw read+write of the same bytes")
        print(f"{'records':>16} {'log MiB':>8} {'after MiB':>9} {'cleaner MB/s':>12} "
              f"{'raw r+w MB/s':>12} {'ratio':>6} {'MB/CPU-s':>9}")
        for record_size, codec in ((100, CompressionType.NONE), (1024, CompressionType.NONE),
                                   (100, CompressionType.LZ4)):
            cleans, raws, cpus = [], [], []
            before = after = 0
            for _ in range(args.rounds):
                log = build_log(root / "clean", args.mib * MIB, record_size, codec)
                raws.append(time_raw(log, root / "raw.bin"))
                seconds, cpu, before, after = time_clean(log)
                log.close()
                cleans.append(seconds)
                cpus.append(cpu)
            # medians: the machine is shared, and a best-of would flatter both sides
            label = f"{record_size} B {codec.name.lower()}"
            clean_rate = before / MIB / statistics.median(cleans)
            raw_rate = before / MIB / statistics.median(raws)
            print(f"{label:>16} {before / MIB:8.1f} {after / MIB:9.2f} {clean_rate:12.1f} "
                  f"{raw_rate:12.1f} {clean_rate / raw_rate:6.1%} "
                  f"{before / MIB / statistics.median(cpus):9.1f}", flush=True)
        if args.no_produce:
            return
        print("goal 2: produce MB/s while the cleaner runs >= 80 % of idle")
        print(report(cleaner_produce.produce_while_cleaning(
            root / "kcat", records=args.records, rounds=args.rounds)), flush=True)
        if args.in_process:
            rates = produce_while_cleaning(root / "produce", args.mib, args.seconds)
            idle = rates.pop("idle")
            print(f"in-process PartitionLog.append MB/s idle {idle:.1f}; " + "; ".join(
                f"beside a {name} {rate:.1f} ({rate / idle:.0%})" for name, rate in rates.items()))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
