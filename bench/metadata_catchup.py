"""A new broker's metadata catch-up at 100,000 partitions, in this process, stage by stage.

    python bench/metadata_catchup.py [--topics 100] [--partitions-per-topic 1000]
                                     [--source log|snapshot] [--gc paused|on] [--profile FILE]

What `bench/partition_scale.py`'s phase 5 times between a new broker's "follows the metadata
log" and "caught up with the metadata log" lines, without a cluster:

- the controllers' committed log is built as a real one is (`quorum.log_state.MetadataLogState`
  applying the chunks of `--topics` creations through `quorum.topic_control.create_topic`, RF=3
  on brokers 4..6, then broker 7's registration);
- `--source log` (a controller that has not dumped yet, as at 100,000 partitions: about 1,100
  Raft entries, below controller.quorum's 5,000 between dumps): the broker fetches every record
  from offset 0 in pages of `broker.metadata_follower_loop.FETCH_PAGE_RECORDS`;
  `--source snapshot`: the log is folded first (a dump keeping the newest RETAINED_RECORDS as
  records), so the first fetch answers a snapshot and the rest is the tail;
- every fetch goes through what the real one does, each stage timed apart: the controller's
  `_fetch` body (records from its chunks, or the snapshot it encodes), the reply's msgpack body,
  the broker's decode of that body, `common.rpc`'s reply decode and `MetadataFollowerState.
  on_fetch_reply` (record checks, replay, this broker's changes); then the first publish's
  change set (`changes_for_broker` from the empty image) and the checkpoint written after it;
- the cyclic GC is paused during the catch-up as the follower pauses it (`--gc on` for a tree
  from before that);
- the last line is the fetch-and-apply CPU critical path, one page after the other, and with the
  follower asking for page n+1 before it applies page n (controller and broker on a core each).

HTTP itself is left out (aiohttp moves a page in well under a millisecond of CPU on loopback;
the body's msgpack packing and unpacking are its cost, and are timed). Every figure is CPU
time of this process (time.process_time) beside wall time and the load average, since the
machine is shared; `--profile F` writes a cProfile of the broker-side stages to F.

To compare with an earlier commit: `git archive REV | tar -x -C /tmp/rev` and run this file with
`PYTHONPATH=/tmp/rev` from outside the tree (so that /tmp/rev's modules are imported).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import msgpack

from broker.metadata_checkpoint import write_checkpoint
from broker.metadata_follower import MetadataFollowerState
from broker.metadata_follower_loop import FETCH_PAGE_RECORDS
from common import rpc, rpc_messages
from metadata.codec import Listener
from metadata.local_changes import changes_for_broker
from metadata.image import EMPTY_IMAGE
from metadata.records import BeginEpoch, BrokerRegistrationChange, RegisterBroker, encode_records
from metadata.snapshot import encode_snapshot
from quorum.log_state import MetadataLogState, transaction_chunks
from quorum.quorum_settings import RETAINED_RECORDS
from quorum.topic_control import create_topic

BROKERS: Final = (4, 5, 6)
NEW_BROKER: Final = 7
EPOCH: Final = 1
MAX_PAGES: Final = 10_000  # a bound on the fetch loop: far more than 100,000 records need


class Stages:
    """CPU and wall seconds per named stage, summed over calls."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self.wall: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        cpu, wall = time.process_time(), time.perf_counter()
        try:
            yield
        finally:
            self.cpu[name] = self.cpu.get(name, 0.0) + time.process_time() - cpu
            self.wall[name] = self.wall.get(name, 0.0) + time.perf_counter() - wall


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def register(broker: int) -> RegisterBroker:
    return RegisterBroker(broker, f"incarnation-{broker}", (Listener("PLAINTEXT", f"127.0.0.{broker}", 9092),))


def controller_log(topics: int, per_topic: int) -> MetadataLogState:
    """The committed log of a cluster where `topics` x `per_topic` partitions were created on
    brokers 4..6, and broker 7 registered last."""
    log = MetadataLogState()
    assert log.apply_chunk(encode_records([BeginEpoch(EPOCH)]), EPOCH).committed
    for broker in BROKERS:
        broker_epoch = log.last_offset + 1  # a RegisterBroker's broker epoch is its offset
        unfence = BrokerRegistrationChange(broker, broker_epoch, fenced=False)
        assert log.apply_chunk(encode_records([register(broker), unfence]), EPOCH).committed
    rng = random.Random(35)
    for t in range(topics):  # bounded by --topics
        created = create_topic(log.image, name=f"topic-{t:04d}", partitions=per_topic, replication_factor=3,
                               configs={}, topic_id=f"id-{t:04d}", rng=rng)
        for chunk in transaction_chunks(created.records, f"create topic-{t:04d}"):
            outcome = log.apply_chunk(chunk, EPOCH)
            assert outcome.committed, outcome
    assert log.apply_chunk(encode_records([register(NEW_BROKER)]), EPOCH).committed
    return log


def serve(log: MetadataLogState, offset: int, stages: Stages) -> bytes:
    """The controller's answer to a metadata-fetch from `offset`, as the HTTP body it sends (the
    controller's process collects as usual, whatever the broker does)."""
    paused = not gc.isenabled()
    gc.enable()
    try:
        return _serve(log, offset, stages)
    finally:
        if paused:
            gc.disable()


def _serve(log: MetadataLogState, offset: int, stages: Stages) -> bytes:
    with stages.stage("controller: records or snapshot"):
        try:
            pairs = log.record_maps_from(offset, FETCH_PAGE_RECORDS)
            reply = rpc_messages.MetadataFetchReply(tuple(pairs), max(log.last_offset, pairs[-1][0] if pairs else -1),
                                                    log.log_start_offset)
        except IndexError:  # folded into the snapshot: the whole image, as quorum.broker_rpc answers
            image = log.image
            reply = rpc_messages.MetadataFetchReply((), image.offset, log.log_start_offset, encode_snapshot(image),
                                                    image.offset)
    with stages.stage("controller: reply body (msgpack)"):
        body: bytes = msgpack.packb(rpc.encode_reply(reply), use_bin_type=True)
    return body


def catch_up(log: MetadataLogState, stages: Stages, checkpoint_dir: Path,
             pages: list[tuple[float, float]]) -> tuple[int, int]:
    """Fetch and apply until the image holds the log's end, appending each page's (controller,
    broker) CPU seconds to `pages`; (bytes fetched, partitions hosted)."""
    state = MetadataFollowerState(NEW_BROKER)
    fetched = 0
    while state.applied_offset < log.last_offset:  # bounded by MAX_PAGES
        if len(pages) >= MAX_PAGES:
            raise RuntimeError(f"not caught up after {len(pages)} fetches (at offset {state.applied_offset})")
        started = time.process_time()
        body = serve(log, state.next_fetch_offset, stages)
        served = time.process_time()
        fetched += len(body)
        with stages.stage("broker: reply body (msgpack)"):
            reply = msgpack.unpackb(body, raw=False, strict_map_key=True)
        with stages.stage("broker: apply (decode, check, replay, changes)"):
            state.on_fetch_reply(reply)
        pages.append((served - started, time.process_time() - served))
    with stages.stage("broker: first publish's change set"):
        changes = changes_for_broker(EMPTY_IMAGE, state.image, NEW_BROKER)
    with stages.stage("broker: checkpoint after publishing"):
        write_checkpoint(checkpoint_dir, state.image)
    return fetched, len(changes.leaders) + len(changes.followers)


def overlapped(pages: list[tuple[float, float]]) -> float:
    """The catch-up's CPU critical path when the broker asks for page n+1 before applying page n
    and the controller and the broker each have a core: the controller's first page, then per
    page the longer of the broker applying it and the controller serving the next."""
    if not pages:
        return 0.0
    return pages[0][0] + sum(max(pages[i][1], pages[i + 1][0]) for i in range(len(pages) - 1)) + pages[-1][1]


def timed(what: str, call: Callable[[], Any]) -> Any:
    cpu = time.process_time()
    result = call()
    print(f"{what}: {time.process_time() - cpu:.2f} s CPU ({load()})", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions-per-topic", type=int, default=1000)
    parser.add_argument("--source", choices=("log", "snapshot"), default="log")
    parser.add_argument("--gc", choices=("paused", "on"), default="paused",
                        help="the cyclic GC during the catch-up (the follower pauses it; 'on' for older trees)")
    parser.add_argument("--profile", type=Path, help="write a cProfile of the catch-up here")
    args = parser.parse_args()
    log = timed(f"controller log of {args.topics} x {args.partitions_per_topic} partitions built",
                lambda: controller_log(args.topics, args.partitions_per_topic))
    if args.source == "snapshot":
        timed(f"folded, keeping {RETAINED_RECORDS} records", lambda: log.fold(RETAINED_RECORDS))
    print(f"log: offsets {log.log_start_offset}..{log.last_offset}, {len(log.chunks)} chunks, "
          f"base snapshot {len(log.base_snapshot) / 2**20:.1f} MiB", flush=True)
    stages = Stages()
    profiler = cProfile.Profile() if args.profile else None
    pages: list[tuple[float, float]] = []
    if args.gc == "paused":  # as broker.metadata_follower_loop does until its first publish
        gc.disable()
    with tempfile.TemporaryDirectory(prefix="metadata-catchup-") as tmp:
        cpu, wall = time.process_time(), time.perf_counter()
        if profiler is not None:
            profiler.enable()
        fetched, hosted = catch_up(log, stages, Path(tmp), pages)
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(args.profile)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        gc.enable()
        checkpoint_bytes = (Path(tmp) / "__metadata_snapshot").stat().st_size
    print(f"catch-up from offset 0 ({args.source}, GC {args.gc}): {len(pages)} fetches, "
          f"{fetched / 2**20:.1f} MiB of replies, {hosted} partitions hosted by broker {NEW_BROKER}; "
          f"checkpoint {checkpoint_bytes / 2**20:.1f} MiB")
    width = max(len(name) for name in stages.cpu)
    for name in stages.cpu:
        print(f"  {name:<{width}}  {stages.cpu[name]:6.2f} s CPU  {stages.wall[name]:6.2f} s wall")
    print(f"  {'total':<{width}}  {cpu:6.2f} s CPU  {wall:6.2f} s wall   ({load()})")
    serial = sum(c + b for c, b in pages)
    print(f"  fetch and apply, CPU critical path: one page after the other {serial:.2f} s; "
          f"asking the next page before applying one, a core each {overlapped(pages):.2f} s")


if __name__ == "__main__":
    main()
