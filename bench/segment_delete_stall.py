"""How long retention's deletion of old segments blocks the thread that runs it (the event loop).

A log of `--segments` full segments of `--segment-mib` MiB each (appended, then fsynced, so
their blocks are allocated as a broker's are) has every inactive segment removed by retention
(the log start moved to the log end, `file.delete.delay.ms` 0): `delete_old_segments` is the
event loop's turn. Printed: that turn's wall time and the calling thread's CPU time, then how
long until the files were gone (the flusher's threads stopped: what a removal thread still
had to do). On a filesystem mounted with `discard` an unlink waits for its discards, so the
turn's wall time is the figure (the CPU is small either way).

`--topic-partitions N`: a topic deletion instead. A log manager holds N logs of `--segments`
segments each; the turn is `LogManager.delete_log` of every one of them, as a metadata apply
that deletes the topic runs it on the event loop (`ReplicaRoles`), and "gone" is when the log
manager's shutdown has returned and no partition directory is left.

    python bench/segment_delete_stall.py [--segment-mib 64] [--segments 4] [--rounds 3] [--dir DIR]
    python bench/segment_delete_stall.py --topic-partitions 16 --segment-mib 16 --segments 2
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from broker.log.flusher import SegmentFlusher
from broker.log.log_manager import LogManager
from broker.log.partition_log import PartitionLog
from common.log_config import LogConfig
from common.records import build_batch
from common.topic_partition import TopicPartition
from common.units import MIB


def run_once(directory: Path, segment_mib: int, segments: int, batch: bytes) -> tuple[float, float, float]:
    """(the retention turn's wall ms, its thread's CPU ms, wall ms until the files are gone)."""
    shutil.rmtree(directory, ignore_errors=True)
    config = LogConfig(segment_bytes=segment_mib * MIB, file_delete_delay_ms=0, retention_ms=-1)
    flusher = SegmentFlusher()
    log = PartitionLog(directory / "bench-0", config, now_ms=0, flusher=flusher)
    per_segment = segment_mib * MIB // len(batch)
    for i in range(per_segment * segments + 1):  # the last one rolls into a new active segment
        log.append(batch, now_ms=i, leader_epoch=0)
    log.flush()
    log.wait_for_flushes()
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(log.log_end_offset - 1)
    start_wall, start_cpu = time.perf_counter(), time.thread_time()
    deleted = log.delete_old_segments(now_ms=10**12)
    turn_wall, turn_cpu = time.perf_counter() - start_wall, time.thread_time() - start_cpu
    flusher.shutdown()
    gone = time.perf_counter() - start_wall
    assert deleted == segments, (deleted, segments)
    assert not list((directory / "bench-0").glob("*.deleted")), "files left"
    log.close()
    return turn_wall * 1e3, turn_cpu * 1e3, gone * 1e3


def run_topic_delete(directory: Path, partitions: int, segment_mib: int, segments: int,
                     batch: bytes) -> tuple[float, float, float]:
    """(the deletion turn's wall ms, its thread's CPU ms, wall ms until the directories are gone)."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    config = LogConfig(segment_bytes=segment_mib * MIB, retention_ms=-1)
    manager = LogManager([directory], config, now_ms=0)
    tps = [TopicPartition("bench", i) for i in range(partitions)]
    per_segment = segment_mib * MIB // len(batch)
    for tp in tps:
        log = manager.get_or_create_log(tp, now_ms=0)
        for i in range(per_segment * segments):  # full segments; the last stays active
            log.append(batch, now_ms=i, leader_epoch=0)
        log.wait_for_flushes()  # the rolled ones are durable; the active one is not, as on a broker
    start_wall, start_cpu = time.perf_counter(), time.thread_time()
    for tp in tps:
        manager.delete_log(tp)
    turn_wall, turn_cpu = time.perf_counter() - start_wall, time.thread_time() - start_cpu
    manager.shutdown()
    gone = time.perf_counter() - start_wall
    assert not [p for p in directory.iterdir() if p.is_dir()], "directories left"
    return turn_wall * 1e3, turn_cpu * 1e3, gone * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segment-mib", type=int, default=64)
    parser.add_argument("--segments", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="on the brokers' filesystem")
    parser.add_argument("--topic-partitions", type=int, default=0,
                        help="delete a topic of this many partitions instead (0: retention)")
    args = parser.parse_args()
    batch = build_batch([(None, os.urandom(1000)) for _ in range(1000)])  # ~1 MB
    base = Path(tempfile.mkdtemp(prefix="segment-delete-", dir=args.dir))
    try:
        for round_ in range(args.rounds):
            if args.topic_partitions:
                turn, cpu, gone = run_topic_delete(base / "data", args.topic_partitions,
                                                   args.segment_mib, args.segments, batch)
                what = f"a topic of {args.topic_partitions} x {args.segments} x {args.segment_mib} MiB"
            else:
                turn, cpu, gone = run_once(base / "log", args.segment_mib, args.segments, batch)
                what = f"{args.segments} x {args.segment_mib} MiB"
            with open("/proc/loadavg") as f:
                load = f.read().split()[0]
            print(f"round {round_}: {what}: the loop's turn "
                  f"{turn:.1f} ms wall, {cpu:.1f} ms CPU; files gone after {gone:.1f} ms (load {load})")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
