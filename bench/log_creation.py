"""A broker's CPU per new partition on its metadata apply path, in this process (no sockets).

    python bench/log_creation.py [--partitions 10000] [--per-topic 1000] [--dir /tmp/x]

What a broker does when a topic creation reaches it, for `--partitions` partitions RF=3 on
brokers 1, 2, 3 (this process is broker 1: it hosts every partition and leads a third), in
topics of `--per-topic` partitions created by the controller's own rule:

1. replay: the creation's records replayed into the image in ~100-record chunks (KIP-868
   transactions), as the broker's metadata follower applies them;
2. local changes: `changes_for_broker` and the slicing into PUBLISH_SLICE_PARTITIONS slices;
3. the slices through the real `ReplicaManager.apply_changes` (log directories and files,
   `Partition`s, leader epoch checkpoints, high watermark, fetcher add) with a real
   `ReplicaFetcherManager` whose fetchers never run (no leader to connect to). Inside it:
   `LogManager.create_logs`, the leaders' and followers' role changes, the fetcher add;
4. the next checkpoint pass (`LogManager.checkpoint`: the owed leader-epoch fsyncs and the
   recovery-point/high-watermark/log-start files).

Each stage prints microseconds of CPU per partition: the event loop's thread (thread_time, what
delays heartbeats and requests) and the whole process (process_time: with the I/O pool's threads,
what the two shared cores pay). Issue 35's budget at 100,000 partitions in 60 s with 3 brokers on
2 cores is ~300 us per partition in all. The load average is printed beside the figures; nothing
is asserted. To compare with an earlier commit: `git archive REV | tar -x -C /tmp/rev`, then run
`PYTHONPATH=/tmp/rev python /tmp/rev/bench/log_creation.py` if it has this file, else this file
with PYTHONPATH=/tmp/rev from outside the tree.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.log.log_manager import LogManager  # noqa: E402
from broker.metadata_follower_loop import PUBLISH_SLICE_PARTITIONS  # noqa: E402
from broker.replica_manager import ReplicaManager  # noqa: E402
from broker.replication.fetcher_manager import ReplicaFetcherManager  # noqa: E402
from broker.replication.fetcher_state import FetcherSettings  # noqa: E402
from common.log_config import LogConfig  # noqa: E402
from metadata.delta import apply  # noqa: E402
from metadata.image import EMPTY_IMAGE, MetadataImage  # noqa: E402
from metadata.local_changes import changes_for_broker, split_changes  # noqa: E402
from metadata.records import BeginTransaction, EndTransaction, RegisterBroker, Record  # noqa: E402
from metadata.transactions import ReplayState, replay  # noqa: E402
from quorum.topic_control import create_topic  # noqa: E402

BROKERS: Final = (1, 2, 3)
BROKER_ID: Final = 1
CHUNK_RECORDS: Final = 100  # ~ what one 16 KiB metadata chunk holds
NOW_MS: Final = 1_700_000_000_000
R = TypeVar("R")


class Stages:
    """CPU microseconds per named stage: this thread's and the whole process's."""

    def __init__(self) -> None:
        self.thread: dict[str, float] = {}
        self.process: dict[str, float] = {}
        self.wall: dict[str, float] = {}
        self.partitions: dict[str, int] = {}

    def timed(self, name: str, fn: Callable[[], R], partitions: int = 0) -> R:
        thread, process, wall = time.thread_time(), time.process_time(), time.perf_counter()
        try:
            return fn()
        finally:
            self.wall[name] = self.wall.get(name, 0.0) + time.perf_counter() - wall
            self.thread[name] = self.thread.get(name, 0.0) + time.thread_time() - thread
            self.process[name] = self.process.get(name, 0.0) + time.process_time() - process
            self.partitions[name] = self.partitions.get(name, 0) + partitions

    def wrap(self, owner: object, method: str, name: str, count: Callable[..., int]) -> None:
        """Time every call of `owner.method` as stage `name` (`count(*args)` partitions)."""
        original = getattr(owner, method)

        def timed_call(*args: object, **kwargs: object) -> object:
            return self.timed(name, lambda: original(*args, **kwargs), count(*args))
        setattr(owner, method, timed_call)


def load() -> str:
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def creation_image(partitions: int, per_topic: int) -> tuple[MetadataImage, MetadataImage, tuple[float, float, float]]:
    """The image before and after the creation; replay's thread and process CPU and wall seconds."""
    image = apply(EMPTY_IMAGE, enumerate(RegisterBroker(b, f"inc-{b}", (), fenced=False) for b in BROKERS))
    rng = random.Random(1)
    records: list[Record] = []
    for t in range(-(-partitions // per_topic)):  # bounded by --partitions
        count = min(per_topic, partitions - t * per_topic)
        created = create_topic(image, name=f"bench-{t:05d}", partitions=count, replication_factor=len(BROKERS),
                               configs={}, topic_id=f"id-{t:05d}", rng=rng)
        records += [BeginTransaction("create"), *created.records, EndTransaction()]
    state, offset = ReplayState(image), image.offset
    thread, process, wall = time.thread_time(), time.process_time(), time.perf_counter()
    for i in range(0, len(records), CHUNK_RECORDS):  # bounded by the records
        chunk = [(offset + 1 + j, r) for j, r in enumerate(records[i:i + CHUNK_RECORDS])]
        offset += len(chunk)
        state = replay(state, chunk)
    return image, state.image, (time.thread_time() - thread, time.process_time() - process,
                                time.perf_counter() - wall)


async def run(partitions: int, per_topic: int, root: Path) -> None:
    before, after, replayed = creation_image(partitions, per_topic)
    stages = Stages()
    stages.thread["replay"], stages.process["replay"], stages.wall["replay"] = replayed
    stages.partitions["replay"] = partitions
    log_manager = LogManager([root / "logs"], LogConfig(), now_ms=NOW_MS)
    replicas = ReplicaManager(BROKER_ID, log_manager, now_ms=lambda: NOW_MS)
    fetchers = ReplicaFetcherManager(replicas, FetcherSettings(BROKER_ID), image=lambda: after)
    replicas.fetchers = fetchers
    stages.wrap(log_manager, "create_logs", "  create_logs (dirs, files)", lambda tps, **_: len(tps))
    stages.wrap(replicas.roles, "_become_leaders", "  become leaders", lambda leaders, *_: len(leaders))
    stages.wrap(replicas.roles, "_become_follower", "  become follower", lambda *_: 1)
    stages.wrap(fetchers, "add_partitions", "  fetcher add", lambda start: len(start))
    try:
        changes = stages.timed("local changes", lambda: changes_for_broker(before, after, BROKER_ID), partitions)
        slices = split_changes(changes, PUBLISH_SLICE_PARTITIONS)
        for piece in slices:  # bounded by the change set
            kind = "apply leader slices" if piece.leaders else "apply follower slices"
            stages.timed(kind, lambda: replicas.apply_changes(piece, after),
                         len(piece.leaders) + len(piece.followers))
        stages.timed("checkpoint pass", log_manager.checkpoint, partitions)
        hosted = len(replicas.partitions)
        logs_made = len(log_manager.logs)
        files = sum(len(os.listdir(lg.directory)) for lg in log_manager.logs.values())
    finally:
        for fetcher in list(fetchers.fetchers.values()):
            fetcher.stop()
        log_manager.shutdown()
    total_thread = sum(v for k, v in stages.thread.items() if not k.startswith(" "))
    total_process = sum(v for k, v in stages.process.items() if not k.startswith(" "))
    print(f"broker {BROKER_ID}: {partitions} new partitions RF=3 in topics of {per_topic} "
          f"({len(changes.leaders)} led, {len(changes.followers)} followed; {hosted} hosted, {logs_made} logs, "
          f"{files} files in their directories), slices of {PUBLISH_SLICE_PARTITIONS}; {load()}")
    total_wall = sum(v for k, v in stages.wall.items() if not k.startswith(" "))
    print(f"{'stage':36} {'loop thread us/p':>17} {'process us/p':>13} {'wall s':>8}")
    for name in stages.thread:
        n = stages.partitions[name] or partitions
        print(f"{name:36} {stages.thread[name] / n * 1e6:17.1f} {stages.process[name] / n * 1e6:13.1f} "
              f"{stages.wall[name]:8.2f}")
    print(f"{'total per new partition':36} {total_thread / partitions * 1e6:17.1f} "
          f"{total_process / partitions * 1e6:13.1f} {total_wall:8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--per-topic", type=int, default=1_000)
    parser.add_argument("--dir", type=Path, default=None,
                        help="where the logs go (default: a new directory under the system temp dir)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    root = Path(tempfile.mkdtemp(prefix="log-creation-", dir=args.dir))
    try:
        asyncio.run(run(args.partitions, args.per_topic, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
