"""A follower's fetcher while partitions are created: CPU per metadata slice, and per idle round.

    python bench/fetcher_rounds.py [--partitions 50000] [--slices 100] [--slice-size 128]
                                   [--idle-rounds 50] [--moves 0]

One real `ReplicaFetcher` (through its `ReplicaFetcherManager`) in this process, following
`--partitions` partitions of one leader; the leader is a fake connection that answers each
Fetch with an empty response (no records: the fetch session keeps every partition) when the
bench releases it, as a leader holding a fetch for replica.fetch.wait.max.ms would. The
partitions are real `Partition`s over a fake log (log end/start offset, no epochs).

Phase 1: `--slices` times, the metadata of `--slice-size` new partitions is applied (added to
the fetcher, as `ReplicaManager.apply_changes` does for a slice of a topic creation), the held
fetch is answered, and the fetcher builds and sends its next Fetch. Printed: CPU (this
process's utime+stime) per slice, from the apply to the next Fetch sent, median and max, and
the partitions each Fetch named. Issue 35: a slice must cost what changed, not every
partition followed (the whole creation of N partitions was O(N^2 / slice)).

Phase 2: `--idle-rounds` rounds with nothing changed (CPU per idle round).

Phase 3 (`--moves N`, none by default): a controlled shutdown of the leader as this follower
sees it: N of the partitions, in slices of `--slice-size`, get a new leader epoch, half of them
led by a third broker (they move to a second fetcher, with its own fake leader) and half led
here (they leave the fetchers). Printed: CPU per moved partition over the whole phase, from
each slice's apply to the old leader's next Fetch (the one forgetting them). The fetchers'
own bookkeeping only: the fake leaders answer no partition and no error.

The load average is printed beside the figures (the box is shared); CPU is the figure to
compare. Nothing is asserted: a measurement, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_common import AnswerChain  # noqa: E402  (bench/ is on sys.path: run as a script)
from broker.replication import replica_fetcher  # noqa: E402
from broker.replication.fetcher_manager import ReplicaFetcherManager  # noqa: E402
from broker.replication.fetcher_state import FetcherSettings  # noqa: E402
from broker.replication.partition import Partition  # noqa: E402
from broker.replication.replication_quota import ReplicationThrottles  # noqa: E402
from common.protocol import fetch  # noqa: E402
from common.topic_partition import TopicPartition  # noqa: E402

BROKER_ID, LEADER_ID, LEADER_EPOCH = 5, 4, 0
NEW_LEADER_ID = 6  # phase 3: where half the moved partitions go (the other half is led here)
SESSION_ID = 77
TOPIC_SIZE = 10_000  # partitions per topic, as bench/partition_scale.py's "big" shape


class FakeEpochCache:
    entries: tuple[Any, ...] = ()


class FakeLog:
    """The offsets a fetcher reads from a follower's log: an empty log."""

    def __init__(self) -> None:
        self.log_end_offset = 0
        self.log_start_offset = 0
        self.high_watermark = 0
        self.leader_epoch_cache = FakeEpochCache()


class FakeReplicas:
    """What a fetcher asks of the replica manager."""

    def __init__(self) -> None:
        self.partitions: dict[TopicPartition, Partition] = {}
        self.throttles = ReplicationThrottles(BROKER_ID, lambda topic: {})
        self.metadata_version = 0  # read by the fetchers before issue 35 (the before figure)
        self.fetchers: ReplicaFetcherManager | None = None

    def follower_partition(self, tp: TopicPartition, leader_epoch: int) -> Partition | None:
        partition = self.partitions.get(tp)
        if partition is None or partition.leader_epoch != leader_epoch:
            return None
        return partition

    def move(self, tps: list[TopicPartition]) -> None:
        """ReplicaManager.apply_changes for a slice of a controlled shutdown of the leader: the
        next leader epoch, led by NEW_LEADER_ID (odd partitions) or by this broker (even)."""
        assert self.fetchers is not None
        to_follow, led_here = [], []
        for tp in tps:
            leader_id = NEW_LEADER_ID if tp.partition % 2 else BROKER_ID
            self.partitions[tp] = Partition(tp, "id", FakeLog(), leader_id, LEADER_EPOCH + 1,  # type: ignore[arg-type]
                                            0, (LEADER_ID, BROKER_ID, 6), (BROKER_ID, 6))
            if leader_id == BROKER_ID:
                led_here.append(tp)
            else:
                to_follow.append((tp, leader_id, LEADER_EPOCH + 1))
        self.fetchers.add_partitions(to_follow)
        self.fetchers.remove_partitions(led_here)

    def apply(self, tps: list[TopicPartition]) -> None:
        """ReplicaManager.apply_changes for new follower partitions."""
        for tp in tps:
            self.partitions[tp] = Partition(tp, "id", FakeLog(), LEADER_ID, LEADER_EPOCH,  # type: ignore[arg-type]
                                            0, (LEADER_ID, BROKER_ID, 6), (LEADER_ID, BROKER_ID, 6))
        self.metadata_version += 1
        assert self.fetchers is not None
        self.fetchers.add_partitions((tp, LEADER_ID, LEADER_EPOCH) for tp in tps)
        changed = getattr(self.fetchers, "registrations_changed", None)
        if changed is not None:  # the registration hook (ISR changes), where the fetcher has it
            changed(tps)


class FakeLeader(AnswerChain):
    """A connection to the leader that holds each Fetch until `answer()`."""

    def __init__(self) -> None:
        self.closed = False
        self.address = "leader"
        self.fetches: list[int] = []  # bytes of each Fetch sent (its body)
        self.arrived = asyncio.Event()
        self._release = asyncio.Event()

    def abort(self) -> None:
        self.closed = True

    async def request(self, api_key: int, version: int, payload: bytes, decode: Any, **_: Any) -> Any:
        self.fetches.append(sum(len(chunk) for chunk in payload) if isinstance(payload, list) else len(payload))
        self.arrived.set()
        await self._release.wait()
        self._release.clear()
        return fetch.FetchResponse(0, (), 0, SESSION_ID)

    def answer(self) -> None:
        self.arrived.clear()
        self._release.set()


def cpu_s() -> float:
    return time.process_time()  # utime + stime of this process, finer than os.times()' ticks


def tps(start: int, count: int) -> list[TopicPartition]:
    return [TopicPartition(f"t{i // TOPIC_SIZE}", i % TOPIC_SIZE) for i in range(start, start + count)]


async def run(partitions: int, slices: int, slice_size: int, idle_rounds: int, moves: int) -> None:
    leader = FakeLeader()
    leaders = {LEADER_ID: leader, NEW_LEADER_ID: FakeLeader()}

    async def connection(self: Any) -> Any:
        return leaders[self.leader_id]
    replica_fetcher.ReplicaFetcher._connection = connection  # type: ignore[method-assign]
    replicas = FakeReplicas()
    manager = ReplicaFetcherManager(replicas, FetcherSettings(BROKER_ID), image=lambda: None)  # type: ignore[arg-type, return-value]
    replicas.fetchers = manager
    start = time.monotonic()
    for first in range(0, partitions, 1000):  # the partitions followed already, in slices of 1,000
        replicas.apply(tps(first, min(1000, partitions - first)))
        await leader.arrived.wait()
        leader.answer()
    await leader.arrived.wait()
    print(f"setup: {partitions} partitions followed in {time.monotonic() - start:.1f} s; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)

    per_slice, named = [], []
    for i in range(slices):
        before, sent = cpu_s(), len(leader.fetches)
        replicas.apply(tps(partitions + i * slice_size, slice_size))
        leader.answer()
        while len(leader.fetches) == sent:
            await leader.arrived.wait()
        per_slice.append(cpu_s() - before)
        named.append(leader.fetches[-1])
    print(f"{slices} slices of {slice_size} new partitions on top of {partitions}: CPU per slice "
          f"median {statistics.median(per_slice) * 1000:.2f} ms, max {max(per_slice) * 1000:.2f} ms, "
          f"total {sum(per_slice):.2f} s; Fetch size median {statistics.median(named):.0f} B; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)

    per_round = []
    for _ in range(idle_rounds):
        before, sent = cpu_s(), len(leader.fetches)
        leader.answer()
        while len(leader.fetches) == sent:
            await leader.arrived.wait()
        per_round.append(cpu_s() - before)
    print(f"{idle_rounds} idle rounds: CPU per round median {statistics.median(per_round) * 1000:.3f} ms, "
          f"max {max(per_round) * 1000:.3f} ms; Fetch size {leader.fetches[-1]} B; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    if moves:
        await move_phase(replicas, leaders, min(moves, partitions), slice_size)
    await manager.shutdown()


async def move_phase(replicas: FakeReplicas, leaders: dict[int, FakeLeader], moves: int, slice_size: int) -> None:
    old, new = leaders[LEADER_ID], leaders[NEW_LEADER_ID]
    cpu = 0.0
    for first in range(0, moves, slice_size):
        before, sent = cpu_s(), len(old.fetches)
        replicas.move(tps(first, min(slice_size, moves - first)))
        old.answer()
        if new.arrived.is_set():
            new.answer()
        while len(old.fetches) == sent and first + slice_size < moves:  # (its fetcher stops after the last)
            await old.arrived.wait()
        await asyncio.sleep(0)  # the new leader's fetcher sends its Fetch
        cpu += cpu_s() - before
    print(f"{moves} partitions moved in slices of {slice_size} (half to leader {NEW_LEADER_ID}, half led "
          f"here): CPU {cpu:.2f} s, {cpu / moves * 1e6:.1f} us per moved partition; Fetches sent to the "
          f"new leader {len(new.fetches)}; load average {os.getloadavg()[0]:.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=50_000)
    parser.add_argument("--slices", type=int, default=100)
    parser.add_argument("--slice-size", type=int, default=128)
    parser.add_argument("--idle-rounds", type=int, default=50)
    parser.add_argument("--moves", type=int, default=0, help="phase 3: this many followed partitions move")
    args = parser.parse_args()
    asyncio.run(run(args.partitions, args.slices, args.slice_size, args.idle_rounds, args.moves))


if __name__ == "__main__":
    main()
