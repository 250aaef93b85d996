"""A broker's own stop and start with many logs, in one process per phase (no cluster, no sockets).

    python bench/log_close.py [--partitions 30000 100000] [--data-every 10] [--teardown] [--dir /tmp/x]

For each partition count, three processes run one after another over the same log directory,
as a broker's stop and starts do:

1. build: `LogManager.create_logs` of N partitions in topics of 1,000, a leader epoch in every
   third (the broker leads a third of RF=3 partitions on 3 brokers), a small batch appended
   to every `--data-every`th log with a producer-snapshot source (as a partition sets it), one
   periodic checkpoint pass; then a small batch more in those logs (an unflushed tail, as
   flush.messages never asks) and the clean stop timed: `LogManager.shutdown()` (close every
   log, checkpoints, the clean-shutdown marker) and then the process's exit: the broker's
   `exit_process`, or with `--teardown` a return from main (the interpreter frees the heap
   object by object, as `tidelog broker` did before it).
2. load with the marker: `LogManager(...)` timed (a start after a clean stop), then a batch
   more in the same logs and the process SIGKILLs itself (nothing closed: a crash).
3. load without the marker: `LogManager(...)` timed (the start after that crash: the unflushed
   tails are rescanned), then a clean stop.

Each phase prints its process CPU (utime + stime), the thread's CPU and wall seconds, beside the
load average; the exit is timed by this parent from the child's "done" line to its reaping, its
CPU from the child's rusage. RSS is the child's peak. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.log.log_manager import LogManager  # noqa: E402
from broker.log.producer_snapshot import encode_snapshot  # noqa: E402
from common.log_config import LogConfig  # noqa: E402
from common.records import build_batch  # noqa: E402
from common.topic_partition import TopicPartition  # noqa: E402

try:
    from broker.startup_heap import collection_paused
except ImportError:  # a commit before it (to measure the before figures): the collector runs
    from contextlib import nullcontext as collection_paused  # type: ignore[assignment]

PER_TOPIC: Final = 1_000
LED_EVERY: Final = 3  # a third of RF=3 partitions on 3 brokers are led here
NOW_MS: Final = 1_700_000_000_000
BATCH: Final = build_batch([(b"key-%d" % i, b"v" * 100) for i in range(5)], base_timestamp=NOW_MS)
CHILD_TIMEOUT_S: Final = 600


def load() -> str:
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def partitions_of(count: int) -> list[TopicPartition]:
    return [TopicPartition(f"bench-{i // PER_TOPIC:05d}", i % PER_TOPIC) for i in range(count)]


def timed(name: str, fn: object) -> dict[str, float | str]:
    """Run `fn()`; its process CPU, thread CPU and wall seconds."""
    cpu, thread, wall = time.process_time(), time.thread_time(), time.perf_counter()
    fn()  # type: ignore[operator]
    return {"phase": name, "cpu_s": time.process_time() - cpu, "thread_s": time.thread_time() - thread,
            "wall_s": time.perf_counter() - wall}


def append_some(manager: LogManager, data_every: int) -> None:
    """A small batch appended to every `data_every`th log, with a producer-snapshot source."""
    snapshot = encode_snapshot(())
    for i, tp in enumerate(sorted(manager.logs, key=lambda t: (t.topic, t.partition))):
        if data_every and i % data_every == 0:
            partition_log = manager.logs[tp]
            partition_log.append(BATCH, now_ms=NOW_MS)
            partition_log.snapshot_source = lambda: snapshot


def checkpointed(manager: LogManager) -> None:
    """One periodic checkpoint pass, its files written: its writes run on the checkpoint
    writer's thread after `checkpoint()` returns (an older tree's returns None, after them)."""
    written = manager.checkpoint()
    if written is not None:
        written.result()


def say(figures: dict[str, float | str]) -> None:
    figures["load"] = load()
    figures["maxrss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(figures), flush=True)


def child(phase: str, count: int, root: Path, data_every: int, teardown: bool) -> int:
    logging.basicConfig(level=logging.WARNING)
    dirs = [root / "logs"]
    if phase == "build":
        manager = LogManager(dirs, LogConfig(), now_ms=NOW_MS)
        tps = partitions_of(count)
        manager.create_logs(tps, now_ms=NOW_MS)
        for i, tp in enumerate(tps):
            if i % LED_EVERY == 0:
                manager.logs[tp].leader_epoch_cache.assign(1, 0)
        append_some(manager, data_every)
        for partition_log in manager.logs.values():
            partition_log.flush()  # as the periodic flush.ms/roll flushes would have, long ago
        checkpointed(manager)
        append_some(manager, data_every)  # the unflushed tail a stop owes
        say(timed("close", manager.shutdown))
        print("done", flush=True)
        if teardown:
            return 0
        from broker.process_exit import exit_process
        exit_process(0)
    clean = phase == "load-marker"
    holder: list[LogManager] = []

    def load_logs() -> None:
        with collection_paused():  # as broker.node loads them
            holder.append(LogManager(dirs, LogConfig(), now_ms=NOW_MS))
    say(timed("load with marker" if clean else "load without marker", load_logs))
    manager = holder[0]
    if clean:
        append_some(manager, data_every)
        checkpointed(manager)  # on disk before the crash, as a pass a minute before it would be
        append_some(manager, data_every)
        os.kill(os.getpid(), signal.SIGKILL)
    manager.shutdown()
    return 0


def run_child(args: list[str]) -> list[dict[str, float | str]]:
    """Run one phase's process; its figures, with its exit's wall and CPU seconds when it says done."""
    proc = subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    figures: list[dict[str, float | str]] = []
    done_at = cpu_at_done = None
    for line in proc.stdout:  # bounded: the child prints a few lines and ends
        if line.startswith("{"):
            figures.append(json.loads(line))
        elif line.strip() == "done":
            done_at = time.perf_counter()
            with open(f"/proc/{proc.pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            cpu_at_done = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if done_at is not None and cpu_at_done is not None:
        figures.append({"phase": "exit after close", "wall_s": time.perf_counter() - done_at,
                        "cpu_s": usage.ru_utime + usage.ru_stime - cpu_at_done,
                        "exit_code": proc.returncode, "load": load()})
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[30_000, 100_000])
    parser.add_argument("--data-every", type=int, default=10,
                        help="every Nth log holds data (0: none)")
    parser.add_argument("--teardown", action="store_true",
                        help="end the build process by returning from main (the interpreter's teardown)")
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--child", choices=("build", "load-marker", "load-crash"), help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.exit(child(args.child, args.partitions[0], args.root, args.data_every, args.teardown))
    for count in args.partitions:
        root = Path(tempfile.mkdtemp(prefix="log-close-", dir=args.dir))
        try:
            common = ["--partitions", str(count), "--data-every", str(args.data_every), "--root", str(root)]
            rows = run_child(["--child", "build", *common, *(["--teardown"] if args.teardown else [])])
            rows += run_child(["--child", "load-marker", *common])
            rows += run_child(["--child", "load-crash", *common])
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(f"{count} logs, data in every {args.data_every}th, {load()}")
        print(f"  {'phase':22} {'cpu s':>8} {'thread s':>9} {'wall s':>8} {'peak RSS MiB':>13}")
        for row in rows:
            print(f"  {row['phase']:22} {row['cpu_s']:8.2f} {row.get('thread_s', float('nan')):9.2f} "
                  f"{row['wall_s']:8.2f} {row.get('maxrss_mib', float('nan')):13.0f}"
                  + (f"  exit code {row['exit_code']}" if "exit_code" in row else ""))


if __name__ == "__main__":
    main()
