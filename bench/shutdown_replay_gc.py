"""The cyclic collector while a surviving broker replays a controlled shutdown (issue 35 goal 1), in one process.

    python bench/shutdown_replay_gc.py [--partitions 100000] [--topics 100] [--walks]

Broker 5 of brokers 4, 5 and 6, as broker.node runs it: its start-up heap frozen and the
`HeapKeeper` spacing full collections, a LogManager in a temp dir, a ReplicaManager whose
fetchers fetch from in-process leaders that answer every Fetch after a pause with an empty
incremental answer (the session keeps its partitions; no records, no errors). It follows the metadata log as the follower loop does, one 1,000-record page at a
time: the page's msgpack bytes decoded (ControllerClient.post), replayed
(MetadataFollowerState.apply_fetch_reply) and what changed here published in slices
(publish_in_slices -> ReplicaManager.apply_changes), the fetchers running in the pauses.

1. the create: `--topics` topics of `--partitions` / `--topics` partitions RF=3, a third led by
   each broker, one KIP-868 transaction per topic (not measured: it builds the heap);
2. the shutdown: broker 4 enters controlled shutdown, every leadership of broker 4 moves to the
   next replica (leader epoch + 1, ISR without 4), in decisions of 5,000 PartitionChange records,
   each a transaction, and broker 4 is fenced (SHUTDOWN_NOW). As the follower loop does
   (MetadataFollower._steer_gc), the cyclic GC is paused from the page that says broker 4 is in
   controlled shutdown to the one that fences it; `--no-pause` keeps it running (the tree before).

Printed for phase 2: the process CPU (every thread) until the fencing page is applied (what the
leaving broker waits for) and after it (0.1 s of fetches, and the pause's end: a
generation-1 collection, or with `--two-walks` a young and a generation-1 one forced, as the next
collections would run them), and,
from gc.callbacks over both, per generation the collections, their CPU (the collecting thread's)
and the objects they freed; `--walks` also
counts the objects each full collection walked (generation 2 at its start: len(gc.get_objects),
which itself costs, so the CPU figures of such a run are not comparable). Compare trees with
PYTHONPATH=<a git worktree of the other tree>. Nothing is asserted: a measurement, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Final

import msgpack

from broker.log.log_manager import LogManager
from broker.metadata_follower import MetadataFollowerState, decode_fetch_reply
from broker.metadata_follower_loop import FETCH_PAGE_RECORDS, publish_in_slices
from broker.replica_manager import ReplicaManager
from broker.replication import replica_fetcher
from broker.replication.fetcher_manager import ReplicaFetcherManager
from broker.replication.fetcher_state import FetcherSettings
from broker.startup_heap import HeapKeeper
from common import rpc
from common.log_config import LogConfig
from common.protocol import fetch
from common.rpc_messages import MetadataFetchReply
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from metadata.records import (
    BeginEpoch,
    BeginTransaction,
    BrokerRegistrationChange,
    EndTransaction,
    Listener,
    Partition,
    PartitionChange,
    Record,
    RegisterBroker,
    Topic,
    record_to_map,
)

BROKERS: Final = (4, 5, 6)
LEAVING, ME = 4, 5
DECISION_RECORDS: Final = 5000  # quorum/controller_result.py MAX_LEADERSHIPS_PER_DECISION
LEADER_PAUSE_S: Final = 0.01  # the fake leaders' pause before each answer (a real one long-polls)
SESSION_ID: Final = 77


class FakeLeader:
    """A leader's connection in this process: every Fetch answered after LEADER_PAUSE_S with an
    empty incremental answer, handed to the fetcher as KafkaConnection.requests does."""

    def __init__(self) -> None:
        self.closed = False
        self.address = "leader"

    def abort(self) -> None:
        self.closed = True

    async def requests(self, api_key: int, version: int, payload: Any, decode: Any, on_answer: Any,
                       **_: Any) -> None:
        while payload is not None:  # until the fetcher stops asking (cancelled at the end)
            await asyncio.sleep(LEADER_PAUSE_S)
            payload = on_answer(fetch.FetchResponse(0, (), 0, SESSION_ID))


@dataclass(slots=True)
class Collections:
    """gc.callbacks' tally per generation."""

    count: list[int] = field(default_factory=lambda: [0, 0, 0])
    cpu_s: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    collected: list[int] = field(default_factory=lambda: [0, 0, 0])
    walked: list[int] = field(default_factory=list)  # generation 2 at each full collection's start (--walks)
    started: float = 0.0
    walks: bool = False

    def callback(self, phase: str, info: dict[str, Any]) -> None:
        generation = info["generation"]
        if phase == "start":
            if self.walks and generation == 2:
                self.walked.append(len(gc.get_objects(2)))
            self.started = time.thread_time()
            return
        self.count[generation] += 1
        self.cpu_s[generation] += time.thread_time() - self.started
        self.collected[generation] += info["collected"]


def pages(records: list[Record], first_offset: int) -> list[bytes]:
    """The records as the controller's metadata-fetch replies carry them: msgpack bytes of
    FETCH_PAGE_RECORDS records each."""
    maps = [(first_offset + i, record_to_map(r)) for i, r in enumerate(records)]
    last = maps[-1][0]
    return [msgpack.packb(rpc.encode_reply(MetadataFetchReply(tuple(maps[i:i + FETCH_PAGE_RECORDS]), last, 0)),
                          use_bin_type=True) for i in range(0, len(maps), FETCH_PAGE_RECORDS)]


def transactions(records: list[Record], size: int, name: str) -> list[Record]:
    """`records` in KIP-868 transactions of `size` (a create per topic, a shutdown decision)."""
    out: list[Record] = []
    for i in range(0, len(records), size):
        out += [BeginTransaction(name), *records[i:i + size], EndTransaction()]
    return out


def cluster(partitions: int, topics: int) -> tuple[list[Record], list[Record], list[Record]]:
    """The brokers' registrations, the create of every topic, and broker 4's leaderships moving."""
    start: list[Record] = [BeginEpoch(1)]
    start += [RegisterBroker(b, f"inc-{b}", (Listener("PLAINTEXT", "127.0.0.1", 1),)) for b in BROKERS]
    start += [BrokerRegistrationChange(b, i, fenced=False) for i, b in enumerate(BROKERS, start=1)]
    create: list[Record] = []
    moves: list[Record] = []
    per = partitions // topics
    for t in range(topics):
        topic_id = f"T{t:05d}"
        create += [BeginTransaction("create"), Topic(f"t{t:05d}", topic_id)]
        for p in range(per):
            k = t * per + p
            replicas = BROKERS[k % 3:] + BROKERS[:k % 3]  # a third led by each broker
            create.append(Partition(topic_id, p, replicas, replicas, leader=replicas[0], leader_epoch=1))
            if replicas[0] == LEAVING:
                moves.append(PartitionChange(topic_id, p, leader=replicas[1], isr=replicas[1:]))
        create.append(EndTransaction())
    epoch = BROKERS.index(LEAVING) + 1
    return start, create, [BrokerRegistrationChange(LEAVING, epoch, in_controlled_shutdown=True),
                           *transactions(moves, DECISION_RECORDS, "shutdown"),
                           BrokerRegistrationChange(LEAVING, epoch, fenced=True)]


def steer_gc(follower: MetadataFollowerState, pause: bool, collect_at_resume: bool = True) -> None:
    """MetadataFollower._steer_gc once published, without its time bound: paused while another
    broker is in controlled shutdown, and what the pause left young walked once at its end."""
    shutting_down = pause and follower.another_broker_shutting_down
    if shutting_down and gc.isenabled():
        gc.disable()
    elif not shutting_down and not gc.isenabled():
        gc.enable()
        if collect_at_resume:
            gc.collect(1)


async def follow(follower: MetadataFollowerState, replicas: ReplicaManager, raw_pages: list[bytes],
                 pause: bool = False) -> None:
    """The metadata follower loop's part per page: decode, replay, publish in slices."""
    for raw in raw_pages:  # bounded by the pages
        steer_gc(follower, pause)
        fetched = decode_fetch_reply(msgpack.unpackb(raw, raw=False, strict_map_key=True))
        changes = follower.apply_fetch_reply(fetched)
        if changes is not None:
            await publish_in_slices(changes, follower.image, replicas.apply_changes)
        await asyncio.sleep(0)


async def run(args: argparse.Namespace) -> None:
    start, create, shutdown = cluster(args.partitions, args.topics)
    image = apply(EMPTY_IMAGE, enumerate(start))
    leaders: dict[int, FakeLeader] = {}

    async def connection(fetcher: replica_fetcher.ReplicaFetcher) -> Any:
        return leaders.setdefault(fetcher.leader_id, FakeLeader())
    replica_fetcher.ReplicaFetcher._connection = connection  # type: ignore[method-assign,assignment]
    with tempfile.TemporaryDirectory(prefix="replay-shutdown-gc-") as tmp:
        log_manager = LogManager([tmp], LogConfig(), now_ms=int(time.time() * 1000))
        replicas = ReplicaManager(ME, log_manager, now_ms=lambda: int(time.time() * 1000))
        follower = MetadataFollowerState(ME, image=image)
        fetchers = ReplicaFetcherManager(replicas, FetcherSettings(ME), image=lambda: follower.image)
        replicas.fetchers = fetchers
        heap = HeapKeeper(ME)
        heap.freeze_startup_heap()  # as broker.node after its first publish
        tally = Collections(walks=args.walks)
        try:
            began = time.process_time()
            await follow(follower, replicas, pages(create, image.offset + 1))
            await asyncio.sleep(0.1)  # the fetchers' rounds after the last slice
            print(f"created {args.partitions} partitions on broker {ME} in {time.process_time() - began:.1f} s CPU; "
                  f"{heap.stats.full_collections} full collections, "
                  f"{0 if heap.stats.policy is None else heap.stats.policy.frozen} objects frozen "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
            shutdown_pages = pages(shutdown, follower.image.offset + 1)
            moved = sum(isinstance(r, PartitionChange) for r in shutdown)
            gc.callbacks.append(tally.callback)
            began = time.process_time()
            await follow(follower, replicas, shutdown_pages, pause=not args.no_pause)
            cpu = time.process_time() - began
            steer_gc(follower, not args.no_pause, not args.two_walks)  # the fencing page applied: collect again
            await asyncio.sleep(0.1)
            if args.two_walks:
                # What the pause deferred, as the next collections would walk it (they run when
                # the net allocations say, which frees of the old image's objects put off).
                gc.collect(0)
                gc.collect(1)
            after_cpu = time.process_time() - began - cpu
            gc.callbacks.remove(tally.callback)
            led = sum(p.leader_id == ME for p in replicas.partitions.values())
        finally:
            heap.stop()
            await fetchers.shutdown()
            log_manager.shutdown()
    gc_cpu = sum(tally.cpu_s)
    print(f"shutdown: {moved} leaderships of broker {LEAVING} moved, {len(shutdown_pages)} pages: "
          f"broker {ME} leads {led} of {len(replicas.partitions)}; {cpu:.2f} s CPU until broker {LEAVING} is fenced, "
          f"{after_cpu:.2f} s after; the collector {gc_cpu:.2f} s over both; "
          f"{'GC running' if args.no_pause else 'GC paused'} (load {os.getloadavg()[0]:.1f})")
    for generation in range(3):
        print(f"  generation {generation}: {tally.count[generation]:5d} collections, "
              f"{tally.cpu_s[generation] * 1000:7.1f} ms CPU, {tally.collected[generation]:7d} objects freed")
    if tally.walked:
        print(f"  full collections walked {tally.walked} objects of generation 2 (and the young ones)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--walks", action="store_true", help="count what each full collection walks (costs CPU)")
    parser.add_argument("--no-pause", action="store_true",
                        help="the collector runs during the shutdown (the tree before the pause)")
    parser.add_argument("--two-walks", action="store_true",
                        help="at the pause's end no generation-1 collection: a young and a generation-1 one later")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
