"""A broker's CPU per role change, in one process, with its replica fetchers: issue 35 goal 1.

    python bench/role_changes.py [--partitions 10000] [--topics 100] [--runs 3] [--profile N] [--fetch]

Broker 5 of brokers 4, 5 and 6 hosts `--partitions` RF=3 partitions (replicas in the six
orders, logs in a temp dir, one ReplicaManager with a ReplicaFetcherManager whose fetchers
never get to run: no network). It follows brokers 4 and 6 in epoch 1. Then broker 4 leaves
every ISR and its leaderships move to the next replica (epoch 2), applied in the metadata
follower's slices: broker 5 becomes leader of a sixth of the partitions, follows broker 6 in a
new epoch for another sixth (stop fetching from 4, start from 6), and sees an ISR change for
the rest. Each run starts from a fresh directory. `--leaders-only`: only the partitions broker 4
led change (a controlled shutdown's first pass, the part its shutdown waits for).

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
from typing import Any, Final

from bench_common import AnswerChain  # bench/ is on sys.path: run as a script
from broker.log.log_manager import LogManager
from broker.metadata_follower_loop import PUBLISH_SLICE_PARTITIONS, PUBLISH_SLICE_PAUSE
from broker.replica_manager import ReplicaManager
from broker.replication import replica_fetcher
from broker.replication.fetcher_manager import ReplicaFetcherManager
from broker.replication.fetcher_state import FetcherSettings
from common.protocol import fetch
from common.protocol.api_keys import ApiKey
from common.log_config import LogConfig
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.local_changes import LocalReplicaChanges, changes_for_broker, split_changes
from metadata.records import (
    BeginEpoch,
    BrokerRegistrationChange,
    Listener,
    Partition,
    Record,
    RegisterBroker,
    Topic,
)

try:  # the metadata follower's own publish, where the tree has it (run against an older commit too)
    from broker.metadata_follower_loop import publish_in_slices
except ImportError:  # before it: a pause after every slice
    async def publish_in_slices(changes: LocalReplicaChanges, image: MetadataImage, on_changes: Any) -> None:
        for piece in split_changes(changes, PUBLISH_SLICE_PARTITIONS):
            on_changes(piece, image)
            await asyncio.sleep(PUBLISH_SLICE_PAUSE)


LEAVING, ME = 4, 5
BROKERS: Final = (4, 5, 6)


def images(partitions: int, topics: int, *, leaders_only: bool = False) -> tuple[MetadataImage, MetadataImage]:
    """The cluster before (epoch 1, every replica in the ISR) and after broker 4 left
    (`leaders_only`: after a controlled shutdown's first pass, which moves only its leaderships)."""
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
            if leaders_only and not moved:
                continue
            after.append(Partition(topic_id, p, replicas, isr, leader=isr[0] if moved else replicas[0],
                                   partition_epoch=1, leader_epoch=2 if moved else 1))
    first = apply(EMPTY_IMAGE, enumerate(before))
    return first, apply(first, enumerate(after, start=first.offset + 1))


class FakeLeader(AnswerChain):
    """A leader's connection in this process: a Fetch naming partitions is answered at once
    (each with an empty answer), one naming none is held until `release()` (a long poll)."""

    SESSION_ID: Final = 77

    def __init__(self) -> None:
        self.closed = False
        self.cpu_s = 0.0  # spent here decoding requests and encoding answers (not the broker's)
        self.fetches = 0
        self.idle_in_row = 0  # Fetches in a row that named no partition
        self._release = asyncio.Event()

    def abort(self) -> None:
        self.closed = True

    def release(self) -> None:
        self._release.set()

    async def request(self, api_key: int, version: int, payload: Any, decode: Any, **_: Any) -> Any:
        if api_key != ApiKey.FETCH:
            raise AssertionError(f"the bench's logs are empty: no {api_key} expected")
        self.fetches += 1
        cpu = time.process_time()
        request = fetch.decode_fetch_request(memoryview(b"".join(payload)), version)
        topics = tuple(fetch.FetchTopicResponse(t.topic, tuple(
            fetch.FetchPartitionResponse(p.partition, 0, 0, b"", log_start_offset=0) for p in t.partitions))
            for t in request.topics)
        body = b"".join(fetch.encode_fetch_response(fetch.FetchResponse(0, topics, 0, self.SESSION_ID), version))
        self.cpu_s += time.process_time() - cpu
        self.idle_in_row = 0 if topics or request.forgotten_topics_data else self.idle_in_row + 1
        if not topics:
            self._release.clear()
            try:
                async with asyncio.timeout(0.5):
                    await self._release.wait()
            except TimeoutError:
                pass
        return decode(memoryview(body), version)


@dataclass(frozen=True, slots=True)
class Run:
    roles: int  # new leaderships and followers of a new leader epoch
    changed: int  # partitions in the change set
    cpu_s: float  # of the apply, every thread of this process
    wall_s: float
    checkpoint_s: float  # the next recovery-point checkpoint after it (the fsyncs it still owes)
    fetches: int = 0  # Fetch requests the fetchers sent during it (--fetch)


async def one_run(before: MetadataImage, after: MetadataImage, profile: cProfile.Profile | None = None,
                  *, with_fetchers: bool = True, fetch_rounds: bool = False) -> Run:
    """Broker 5 applying `after` over `before` (`with_fetchers=False`: the roles alone, as
    bench/controlled_shutdown.py --in-process measures them; `fetch_rounds`: the fetchers run
    against fake leaders, see --fetch)."""
    now_ms = int(time.time() * 1000)
    leaders: dict[int, FakeLeader] = {}
    if fetch_rounds:
        async def connection(fetcher: replica_fetcher.ReplicaFetcher) -> Any:
            return leaders.setdefault(fetcher.leader_id, FakeLeader())
        replica_fetcher.ReplicaFetcher._connection = connection  # type: ignore[method-assign,assignment]
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-role-changes-") as tmp:
        log_manager = LogManager([tmp], LogConfig(), now_ms=now_ms)
        replicas = ReplicaManager(ME, log_manager, now_ms=lambda: int(time.time() * 1000))
        fetchers = ReplicaFetcherManager(replicas, FetcherSettings(ME), image=lambda: after)
        if with_fetchers:
            replicas.fetchers = fetchers
        try:
            for piece in split_changes(changes_for_broker(EMPTY_IMAGE, before, ME), PUBLISH_SLICE_PARTITIONS):
                replicas.apply_changes(piece, before)
            if fetch_rounds:
                await settle(leaders, fetchers)
            checkpoint(log_manager)  # nothing owed before the measured apply
            changes = changes_for_broker(before, after, ME)
            roles = sum(p.partition.leader_epoch == 2 for p in (*changes.leaders, *changes.followers))
            if profile is not None:
                profile.enable()
            leader_cpu = sum(leader.cpu_s for leader in leaders.values())
            fetches = sum(leader.fetches for leader in leaders.values())
            cpu, wall = time.process_time(), time.monotonic()
            if fetch_rounds:  # as the metadata follower publishes: the fetchers run in its pauses
                def apply_and_release(piece: LocalReplicaChanges, image: MetadataImage) -> None:
                    replicas.apply_changes(piece, image)
                    for leader in leaders.values():
                        leader.release()
                await publish_in_slices(changes, after, apply_and_release)
                await settle(leaders, fetchers)
            else:  # no await in between: the fetchers' tasks never run (no network)
                for piece in split_changes(changes, PUBLISH_SLICE_PARTITIONS):
                    replicas.apply_changes(piece, after)
            cpu, wall = time.process_time() - cpu, time.monotonic() - wall
            cpu -= sum(leader.cpu_s for leader in leaders.values()) - leader_cpu
            fetches = sum(leader.fetches for leader in leaders.values()) - fetches
            if profile is not None:
                profile.disable()
            synced = time.monotonic()
            checkpoint(log_manager)
            synced = time.monotonic() - synced
        finally:
            await fetchers.shutdown()
            log_manager.shutdown()
    return Run(roles, len(changes.leaders) + len(changes.followers), cpu, wall, synced, fetches)


def checkpoint(log_manager: LogManager) -> None:
    """A whole checkpoint pass, its writer thread's part included (since b18db6c the pass returns
    a future and writes the offset files after; before, it returned when done): otherwise the
    writer's CPU lands in the measured apply."""
    done: Any = log_manager.checkpoint()
    if done is not None:
        done.result()


async def settle(leaders: dict[int, FakeLeader], fetchers: ReplicaFetcherManager) -> None:
    """Let the fetchers run until they only long-poll (two Fetches in a row naming nothing)."""
    for leader in leaders.values():
        leader.idle_in_row = 0
    for _ in range(10_000):  # bounded: a fetcher settles within a few rounds of the last slice
        for leader in leaders.values():
            leader.release()
        await asyncio.sleep(0.005)
        if all(leader.idle_in_row >= 2 or i not in fetchers.fetchers for i, leader in leaders.items()):
            return
    raise RuntimeError(f"the fetchers did not settle: {[(i, l.fetches, l.idle_in_row, l.closed) for i, l in leaders.items()]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="profile the last run; print its N costliest functions (own time)")
    parser.add_argument("--leaders-only", action="store_true",
                        help="move only broker 4's leaderships (a controlled shutdown's first pass), "
                        "not its other ISR seats")
    parser.add_argument("--fetch", action="store_true",
                        help="the fetchers run against fake leaders between the slices (see above)")
    args = parser.parse_args()
    before, after = images(args.partitions, args.topics, leaders_only=args.leaders_only)
    per_change: list[float] = []
    for run in range(1, args.runs + 1):
        profile = cProfile.Profile() if args.profile and run == args.runs else None
        result = asyncio.run(one_run(before, after, profile, fetch_rounds=args.fetch))
        if profile is None:
            per_change.append(result.cpu_s / result.roles * 1000)
        print(f"run {run}{' (profiled)' if profile else ''}: broker {ME} takes {result.roles} roles of broker "
              f"{LEAVING} ({args.partitions} partitions, {args.topics} topics): CPU {result.cpu_s:.2f} s "
              f"({result.cpu_s / result.roles * 1000:.3f} ms per role change), wall {result.wall_s:.2f} s, "
              f"{result.fetches} Fetches "
              f"(load {os.getloadavg()[0]:.2f})", flush=True)
        if profile is not None:
            pstats.Stats(profile).sort_stats("tottime").print_stats(args.profile)
    if per_change:
        print(f"CPU per role change over {len(per_change)} runs: {min(per_change):.3f}-{max(per_change):.3f} ms "
              f"(load {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
