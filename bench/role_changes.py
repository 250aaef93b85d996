"""A broker's CPU per role change, in one process, with its replica fetchers: issue 35 goal 1.

    python bench/role_changes.py [--partitions 10000] [--topics 100] [--runs 3] [--profile N]

Broker 5 of brokers 4, 5 and 6 hosts `--partitions` RF=3 partitions (replicas in the six
orders, logs in a temp dir, one ReplicaManager with a ReplicaFetcherManager whose fetchers
never get to run: no network). It follows brokers 4 and 6 in epoch 1. Then broker 4 leaves
every ISR and its leaderships move to the next replica (epoch 2), applied in the metadata
follower's slices: broker 5 becomes leader of a sixth of the partitions, follows broker 6 in a
new epoch for another sixth (stop fetching from 4, start from 6), and sees an ISR change for
the rest. Each run starts from a fresh directory.

It prints, per run, the process CPU (all threads) and wall time of that apply, per role change
(new leaderships plus followers of a new leader epoch), beside the load average, and the range
over the runs. `--profile N`: the last run under cProfile, its N costliest functions by own
time (the CPU figures of a profiled run are not comparable). Run it against an earlier commit
with `PYTHONPATH=<a git archive of it>`. bench/controlled_shutdown.py --in-process measures the
same apply without fetchers.

Nothing is asserted: a measurement, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import itertools
import os
import pstats
import tempfile
import time
from dataclasses import dataclass
from typing import Final

from broker.log.log_manager import LogManager
from broker.metadata_follower_loop import PUBLISH_SLICE_PARTITIONS
from broker.replica_manager import ReplicaManager
from broker.replication.fetcher_manager import ReplicaFetcherManager
from broker.replication.fetcher_state import FetcherSettings
from common.log_config import LogConfig
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.local_changes import changes_for_broker, split_changes
from metadata.records import (
    BeginEpoch,
    BrokerRegistrationChange,
    Listener,
    Partition,
    Record,
    RegisterBroker,
    Topic,
)

LEAVING, ME = 4, 5
BROKERS: Final = (4, 5, 6)


def images(partitions: int, topics: int) -> tuple[MetadataImage, MetadataImage]:
    """The cluster before (epoch 1, every replica in the ISR) and after broker 4 left."""
    orders = list(itertools.permutations(BROKERS))
    before: list[Record] = [BeginEpoch(1)]
    before += [RegisterBroker(b, f"inc-{b}", (Listener("PLAINTEXT", "127.0.0.1", 1),)) for b in BROKERS]
    before += [BrokerRegistrationChange(b, i, fenced=False)  # broker epoch: its registration's offset
               for i, b in enumerate(BROKERS, start=1)]
    after: list[Record] = []
    for t in range(topics):
        topic_id = f"T{t:05d}"
        before.append(Topic(f"t{t:05d}", topic_id))
        for p in range(partitions // topics):
            replicas = orders[(t + p) % len(orders)]
            before.append(Partition(topic_id, p, replicas, replicas, leader=replicas[0], leader_epoch=1))
            isr = tuple(r for r in replicas if r != LEAVING)
            moved = replicas[0] == LEAVING
            after.append(Partition(topic_id, p, replicas, isr, leader=isr[0] if moved else replicas[0],
                                   partition_epoch=1, leader_epoch=2 if moved else 1))
    first = apply(EMPTY_IMAGE, enumerate(before))
    return first, apply(first, enumerate(after, start=first.offset + 1))


@dataclass(frozen=True, slots=True)
class Run:
    roles: int  # new leaderships and followers of a new leader epoch
    changed: int  # partitions in the change set
    cpu_s: float  # of the apply, every thread of this process
    wall_s: float
    checkpoint_s: float  # the next recovery-point checkpoint after it (the fsyncs it still owes)


async def one_run(before: MetadataImage, after: MetadataImage, profile: cProfile.Profile | None = None,
                  *, with_fetchers: bool = True) -> Run:
    """Broker 5 applying `after` over `before` (`with_fetchers=False`: the roles alone, as
    bench/controlled_shutdown.py --in-process measures them)."""
    now_ms = int(time.time() * 1000)
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-role-changes-") as tmp:
        log_manager = LogManager([tmp], LogConfig(), now_ms=now_ms)
        replicas = ReplicaManager(ME, log_manager, now_ms=lambda: int(time.time() * 1000))
        fetchers = ReplicaFetcherManager(replicas, FetcherSettings(ME), image=lambda: after)
        if with_fetchers:
            replicas.fetchers = fetchers
        try:
            for piece in split_changes(changes_for_broker(EMPTY_IMAGE, before, ME), PUBLISH_SLICE_PARTITIONS):
                replicas.apply_changes(piece, before)
            log_manager.checkpoint()  # nothing owed before the measured apply
            changes = changes_for_broker(before, after, ME)
            roles = sum(p.partition.leader_epoch == 2 for p in (*changes.leaders, *changes.followers))
            if profile is not None:
                profile.enable()
            cpu, wall = time.process_time(), time.monotonic()
            # No await in between: the fetchers' tasks never run (no network), as a metadata
            # apply on the event loop is not interrupted by them either.
            for piece in split_changes(changes, PUBLISH_SLICE_PARTITIONS):
                replicas.apply_changes(piece, after)
            cpu, wall = time.process_time() - cpu, time.monotonic() - wall
            if profile is not None:
                profile.disable()
            synced = time.monotonic()
            log_manager.checkpoint()
            synced = time.monotonic() - synced
        finally:
            await fetchers.shutdown()
            log_manager.shutdown()
    return Run(roles, len(changes.leaders) + len(changes.followers), cpu, wall, synced)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="profile the last run; print its N costliest functions (own time)")
    args = parser.parse_args()
    before, after = images(args.partitions, args.topics)
    per_change: list[float] = []
    for run in range(1, args.runs + 1):
        profile = cProfile.Profile() if args.profile and run == args.runs else None
        result = asyncio.run(one_run(before, after, profile))
        if profile is None:
            per_change.append(result.cpu_s / result.roles * 1000)
        print(f"run {run}{' (profiled)' if profile else ''}: broker {ME} takes {result.roles} roles of broker "
              f"{LEAVING} ({args.partitions} partitions, {args.topics} topics): CPU {result.cpu_s:.2f} s "
              f"({result.cpu_s / result.roles * 1000:.3f} ms per role change), wall {result.wall_s:.2f} s "
              f"(load {os.getloadavg()[0]:.2f})", flush=True)
        if profile is not None:
            pstats.Stats(profile).sort_stats("tottime").print_stats(args.profile)
    if per_change:
        print(f"CPU per role change over {len(per_change)} runs: {min(per_change):.3f}-{max(per_change):.3f} ms "
              f"(load {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
