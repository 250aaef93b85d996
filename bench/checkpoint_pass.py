"""The event loop's share of one offset-checkpoint pass when every log's offsets moved.

    python bench/checkpoint_pass.py [--partitions 100000] [--passes 3]

One LogManager holding `--partitions` empty logs in one dir; before each pass every log's
recovery point, high watermark and log start offset move (set on the log and reported to its
`LogChanges`, as a broker taking over a third of 100,000 leaderships sees), then
`LogManager.checkpoint()` runs inside an asyncio loop beside a 1 ms ticker. The first row,
`new`, is the pass right after the logs were created: every log is new to the files, whose line
order is built for them (as after a broker's start). Per pass:

- `loop CPU ms`: the CPU of the loop's thread from the `checkpoint()` call until the three
  files are written (time.thread_time): the call, and the slices a pass of many logs runs on
  the loop's later turns (CHECKPOINT_SLICE_LOGS), with the ticker's own few microseconds a tick;
- `pass CPU ms`: the process's CPU (every thread) until the three files are written;
- `max tick gap ms`: the longest the ticker waited beyond its 1 ms while the files were being
  written: the longest block a request in flight waited for (wall time: it also counts the
  other work on the box; read it beside the load);
- `max tick CPU ms`: the most CPU the loop's thread used between two ticks: the same block in
  CPU time, which the box's other work moves far less than the wall time.

Compare two commits with `PYTHONPATH=<a worktree of the other> python bench/checkpoint_pass.py`
(a tree whose `checkpoint()` writes synchronously returns None: its pass ends with the call).
Nothing is asserted: a measurement, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Final

from broker.log.log_manager import LogManager
from common.log_config import LogConfig
from common.topic_partition import TopicPartition

NOW_MS: Final = 1_700_000_000_000
PARTITIONS_PER_TOPIC: Final = 1000
TICK_S: Final = 0.001


def move_every_offset(manager: LogManager, offset: int) -> None:
    """Every log's three checkpointed offsets move to `offset` (no I/O: the files are what
    is measured, not how the logs got there)."""
    changes = manager.changes
    for partition_log in manager.logs.values():  # bounded by --partitions
        partition_log.log_start_offset = partition_log.high_watermark = offset
        partition_log._recovery_point = offset
        changes.moved(partition_log)


async def one_pass(manager: LogManager) -> tuple[float, float, float, float]:
    """(loop CPU ms, pass CPU ms, max tick gap ms, max tick CPU ms) of one checkpoint pass."""
    gaps: list[float] = []
    cpu_gaps: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        last, last_cpu = time.monotonic(), time.thread_time()
        while not done.is_set():  # bounded by the pass
            await asyncio.sleep(TICK_S)
            now, now_cpu = time.monotonic(), time.thread_time()
            gaps.append(now - last - TICK_S)
            cpu_gaps.append(now_cpu - last_cpu)
            last, last_cpu = now, now_cpu

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.01)  # the ticker runs before the pass starts
    cpu, loop_cpu = time.process_time(), time.thread_time()
    result = manager.checkpoint()
    if isinstance(result, Future):
        await asyncio.wrap_future(result)
    loop_cpu = time.thread_time() - loop_cpu
    cpu = time.process_time() - cpu
    await asyncio.sleep(TICK_S * 2)  # the tick that waited for the pass's end counts
    done.set()
    await ticker
    return loop_cpu * 1000, cpu * 1000, max(gaps) * 1000, max(cpu_gaps) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--dir", default=None, help="parent of the temporary log dir")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ckpt-pass-", dir=args.dir) as tmp:
        manager = LogManager([Path(tmp)], LogConfig(), now_ms=NOW_MS)
        try:
            tps = [TopicPartition(f"t{i // PARTITIONS_PER_TOPIC}", i % PARTITIONS_PER_TOPIC)
                   for i in range(args.partitions)]
            started = time.monotonic()
            manager.create_logs(tps, now_ms=NOW_MS)
            print(f"{len(manager.logs)} logs created in {time.monotonic() - started:.1f} s")
            rows = [asyncio.run(one_pass(manager))]  # the first pass: every log new to the files
            for n in range(args.passes):  # bounded by --passes
                move_every_offset(manager, n + 1)
                rows.append(asyncio.run(one_pass(manager)))
        finally:
            manager.shutdown()
    print(f"{'pass':<6} {'loop CPU ms':>12} {'pass CPU ms':>12} {'max tick gap ms':>16} {'max tick CPU ms':>16}"
          f"   [load {' '.join(f'{x:.2f}' for x in os.getloadavg())}]")
    for n, (loop_ms, pass_ms, gap_ms, gap_cpu_ms) in enumerate(rows):
        print(f"{n or 'new':<6} {loop_ms:12.1f} {pass_ms:12.1f} {gap_ms:16.1f} {gap_cpu_ms:16.1f}")


if __name__ == "__main__":
    main()
