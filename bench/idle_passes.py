"""The CPU of an idle broker's periodic passes over its logs, in one process.

    python bench/idle_passes.py [--partitions 30000] [--passes 5]

One LogManager holding `--partitions` empty logs (a tenth of a topic of 10 partitions
compacted), then the CPU (process time, every thread) of each periodic pass when nothing moved
and when one log moved: the recovery-point / high-watermark / log-start checkpoint (every
log.flush.offset.checkpoint.interval.ms), a replica fetcher's log-start check over every log
(every LOG_START_CHECK_S) and the cleaner's choice of a log to clean (every
log.cleaner.backoff.ms); the write of the log-start file right after a DeleteRecords; and
the isr-expiration pass (every replica.lag.time.max.ms / 2) of a broker leading every log.
At 100,000 partitions each pass a broker pays while idle must cost what changed, not the
partition count (issue 35). Compare two commits with
`PYTHONPATH=<a worktree of the other> python bench/idle_passes.py`. Nothing is asserted: a
measurement, not a test.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Final

from broker.log.cleaner_manager import CleanerConfig, LogCleanerManager
from broker.log.log_manager import LogManager
from broker.replica_manager import ReplicaManager
from broker.replication.high_watermark import FollowerState
from broker.replication.partition import Partition
from broker.replication.replica_fetcher import ReplicaFetcher
from common.log_config import LogConfig
from common.topic_partition import TopicPartition

NOW_MS: Final = 1_700_000_000_000
PARTITIONS_PER_TOPIC: Final = 1000
COMPACTED: Final = TopicPartition("compacted", 0)
LEADER: Final = 1
LAG_MS: Final = 30_000  # replica.lag.time.max.ms's default


def cpu_ms_per_call(fn: Callable[[], Any], calls: int) -> float:
    """The process CPU (every thread) of one call of `fn`, in ms, averaged over `calls`."""
    start = time.process_time()
    for _ in range(calls):  # bounded by --passes
        fn()
    return (time.process_time() - start) * 1000 / calls


def checkpointed(manager: LogManager) -> None:
    """One checkpoint pass, its files written: since the writes left the event loop for the
    checkpoint writer's thread, `checkpoint()` returns before them (an older tree's, None, after)."""
    written = manager.checkpoint()
    if written is not None:
        written.result()


def fetcher_view(manager: LogManager) -> Any:
    """What `ReplicaFetcher._check_log_starts` reads of a fetcher following every log."""
    return SimpleNamespace(
        _rounds=SimpleNamespace(session=SimpleNamespace(wanted={
            tp: SimpleNamespace(log_start_offset=lg.log_start_offset) for tp, lg in manager.logs.items()}),
            touch=lambda tp: None),
        _replicas=SimpleNamespace(log_manager=manager, partitions={
            tp: SimpleNamespace(log=lg) for tp, lg in manager.logs.items()}),
        _log_starts_checked=0.0, _log_start_moves_seen=-1)


def isr_expiration_rows(manager: LogManager, passes: int) -> list[tuple[str, float]]:
    """The isr-expiration pass (every replica.lag.time.max.ms / 2) of a broker leading every
    log with two followers in each ISR, idle: the followers' fetch sessions leave idle
    partitions out, so their caught-up times go stale while they stay at the leader's LEO."""
    clock = [NOW_MS]
    replicas = ReplicaManager(LEADER, manager, now_ms=lambda: clock[0], replica_lag_time_max_ms=LAG_MS)
    schedule = getattr(replicas.isr, "expiration", None)  # not in older trees
    for tp, partition_log in manager.logs.items():
        partition = Partition(tp, "T" * 22, partition_log, LEADER, 1, 1, (LEADER, 2, 3), (LEADER, 2, 3))
        # a new leadership (Partition.become_leader's reset), as apply_changes schedules it
        partition.follower_states = {r: FollowerState(last_caught_up_ms=NOW_MS) for r in (2, 3)}
        replicas.partitions[tp] = partition
        if schedule is not None:
            replicas.isr.schedule_shrink_check(partition, NOW_MS)
        for follower in (2, 3):  # each follower's first fetch, at the leader's LEO
            partition.record_follower_fetch(follower, 0, NOW_MS)

    def next_pass() -> None:
        clock[0] += LAG_MS // 2
        replicas.maybe_shrink_isr()

    # the first three passes: the one where the leaderships' first lag runs out is the dearest
    first = max(cpu_ms_per_call(next_pass, 1) for _ in range(3))
    rows = [("isr-expiration pass, the lag after new leaderships", first),
            ("isr-expiration pass, idle", cpu_ms_per_call(next_pass, passes))]
    tps = list(manager.logs)
    appended = tps[:: 100]  # a partition in a hundred gets a fetch (its LEO moved) between passes

    def fetched_then_pass() -> None:
        for tp in appended:
            partition = replicas.partitions[tp]
            partition.record_follower_fetch(2, 0, clock[0])
            if schedule is not None:
                schedule.moved(partition, clock[0])
        next_pass()

    rows.append(("isr-expiration pass, 1 % of partitions fetched", cpu_ms_per_call(fetched_then_pass, passes)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=30_000)
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args()
    compacted = LogConfig(cleanup_policy=("compact",))
    with tempfile.TemporaryDirectory(prefix="tidelog-idle-passes-") as tmp:
        manager = LogManager([Path(tmp)], LogConfig(), now_ms=NOW_MS,
                             topic_configs={COMPACTED.topic: compacted})
        try:
            tps = [TopicPartition(f"t{i // PARTITIONS_PER_TOPIC}", i % PARTITIONS_PER_TOPIC)
                   for i in range(args.partitions)]
            tps += [TopicPartition(COMPACTED.topic, p) for p in range(10)]
            started = time.monotonic()
            manager.create_logs(tps, now_ms=NOW_MS)
            print(f"{len(manager.logs)} logs created in {time.monotonic() - started:.1f} s")
            cleaner = LogCleanerManager(manager, CleanerConfig(), now_ms=lambda: NOW_MS)
            view = fetcher_view(manager)
            one = manager.logs[tps[len(tps) // 2]]
            moving = [0]

            def move_one() -> None:
                moving[0] += 1
                one.truncate_fully_and_start_at(moving[0])  # moves its three offsets and log start

            def check_log_starts() -> None:
                ReplicaFetcher._check_log_starts(view, 1.0)

            def moved_then(pass_: Callable[[], object]) -> Callable[[], None]:
                def both() -> None:
                    move_one()
                    pass_()
                return both

            rows = [("checkpoint, first pass (every log new)", cpu_ms_per_call(lambda: checkpointed(manager), 1))]
            rows.append(("checkpoint, nothing moved", cpu_ms_per_call(lambda: checkpointed(manager), args.passes)))
            rows.append(("checkpoint, one log moved",
                         cpu_ms_per_call(moved_then(lambda: checkpointed(manager)), args.passes)))
            check_log_starts()  # a first look walks every log, as after any move
            rows.append(("fetcher log-start check, nothing moved",
                         cpu_ms_per_call(check_log_starts, args.passes)))
            rows.append(("fetcher log-start check, one log start moved",
                         cpu_ms_per_call(moved_then(check_log_starts), args.passes)))
            rows.append(("cleaner choice (10 compacted logs)",
                         cpu_ms_per_call(lambda: cleaner.grab_filthiest(NOW_MS), args.passes)))
            rows.append(("log-start write after a DeleteRecords",
                         cpu_ms_per_call(moved_then(lambda: manager.checkpoint_log_start_offsets(
                             one.topic_partition)), args.passes)))
            rows.extend(isr_expiration_rows(manager, args.passes))
        finally:
            manager.shutdown()
    load = os.getloadavg()[0]
    print(f"{'pass over ' + str(args.partitions + 10) + ' logs':<48} {'CPU ms':>9}   [load {load:.1f}]")
    for name, ms in rows:
        print(f"{name:<48} {ms:9.2f}")


if __name__ == "__main__":
    main()
