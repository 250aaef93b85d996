"""A controller's metadata log dump at 100,000 partitions, in this process: what holds the lock
and the Raft tick thread, for how long, and what memory the kept fold points cost.

    python bench/metadata_dump.py [--topics 100] [--partitions-per-topic 1000] [--changes 250000]
                                  [--dir DIR]

The committed log is built as a real one is (`MetadataLogState.apply_chunk`): the creations of
`bench/metadata_catchup.py`'s `controller_log` (RF=3 on brokers 4..6), then `--changes` ISR and
leader changes as controlled shutdowns and restarts make them, broker after broker: the shutting
down broker leaves every ISR and leadership (decisions of 1,000 partitions), comes back (a new
registration, unfenced), rejoins every ISR (AlterPartition batches of 5,000) and takes its
preferred leaderships back (1,000 per decision). Decisions larger than one chunk are
transactions, as the controller writes them.

Then pysyncobj's first dump of that log (`quorum.metadata_log.MetadataLog._write_dump`'s steps,
with RETAINED_RECORDS kept), timed as CPU and wall, split into what runs under the state's lock
(which the controller's event loop takes too) and what runs on the tick thread outside it (the
payload, the write, the fsync); and, on a tree with fold points, the fold after it: the snapshot
encoded in FOLD_SLICE_TIME slices (the longest slice is how long one tick is held) and installed,
then the second dump, which writes the folded snapshot. RSS is this process's, with an estimate
of what the kept fold points hold beyond the current image.

To compare with an earlier commit: `git archive REV | tar -x -C /tmp/rev` and run this file with
`PYTHONPATH=/tmp/rev` from outside the tree (the older tree folds inside the dump).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import msgpack

from bench.metadata_catchup import BROKERS, EPOCH, controller_log, register
from metadata.image import MetadataImage
from metadata.records import NO_LEADER_CHANGE, BrokerRegistrationChange, PartitionChange, Record
from quorum.log_state import MetadataLogState, transaction_chunks
from quorum import quorum_settings
from quorum.quorum_settings import RETAINED_RECORDS

# an older tree (PYTHONPATH=/tmp/rev) has no fold trigger: it folds only inside the dump
FOLD_TRIGGER_RECORDS: Final[int] = getattr(quorum_settings, "FOLD_TRIGGER_RECORDS", 0)

SHUTDOWN_DECISION: Final = 1_000  # partitions per controlled-shutdown decision (MAX_PARTITIONS_PER_DECISION)
ALTER_BATCH: Final = 5_000  # partitions per AlterPartition request of a restarted broker
ELECTION_DECISION: Final = 1_000  # preferred leaders per decision (MAX_ELECTIONS_PER_IMBALANCE)


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class Timer:
    """CPU (this thread's) and wall seconds of one step."""

    def __init__(self) -> None:
        self.cpu = self.wall = 0.0

    @contextmanager
    def run(self) -> Iterator[None]:
        cpu, wall = time.thread_time(), time.perf_counter()
        try:
            yield
        finally:
            self.cpu += time.thread_time() - cpu
            self.wall += time.perf_counter() - wall

    def __str__(self) -> str:
        return f"{self.wall:6.3f} s wall, {self.cpu:6.3f} s CPU"


class Folds:
    """The folds a controller starts between dumps (quorum.metadata_log: FOLD_TRIGGER_RECORDS
    records after the base), run at once here; their cost is reported apart from the build's."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.count = 0
        self.cpu_s = 0.0
        self.longest_slice_s = 0.0

    def after_commit(self, log: MetadataLogState) -> None:
        if self.enabled and log.last_offset + 1 - log.log_start_offset >= FOLD_TRIGGER_RECORDS:
            encoder = fold_between_ticks(log, quiet=True)
            if encoder is not None:
                self.count += 1
                self.cpu_s += encoder.cpu_s
                self.longest_slice_s = max(self.longest_slice_s, encoder.longest_slice_s)


FOLDS = Folds(False)


def commit(log: MetadataLogState, records: list[Record], name: str) -> None:
    for chunk in transaction_chunks(records, name):  # bounded by the records
        outcome = log.apply_chunk(chunk, EPOCH)
        assert outcome.committed, outcome
        FOLDS.after_commit(log)


def decisions(log: MetadataLogState, changes: list[PartitionChange], size: int, name: str, budget: list[int]) -> None:
    """Commit `changes` in decisions of `size`, stopping once `budget[0]` changes are spent."""
    for i in range(0, len(changes), size):  # bounded by the changes
        batch = changes[i:i + min(size, budget[0])]
        if not batch:
            return
        commit(log, list(batch), name)
        budget[0] -= len(batch)


def shutdown_and_restart(log: MetadataLogState, broker: int, budget: list[int]) -> None:
    """The records a controlled shutdown and a restart of `broker` make, up to `budget[0]` changes."""
    image = log.image
    epoch = image.cluster.brokers[broker].broker_epoch
    commit(log, [BrokerRegistrationChange(broker, epoch, in_controlled_shutdown=True)], "shutdown")
    leaving = []
    for topic in image.topics.by_id.values():  # bounded by the partitions
        for p in topic.partitions.values():
            if broker in p.isr and len(p.isr) > 1:
                isr = tuple(r for r in p.isr if r != broker)
                leaving.append(PartitionChange(p.topic_id, p.partition_id, isr=isr,
                                               leader=isr[0] if p.leader == broker else NO_LEADER_CHANGE))
    decisions(log, leaving, SHUTDOWN_DECISION, f"controlled shutdown of broker {broker}", budget)
    commit(log, [BrokerRegistrationChange(broker, epoch, fenced=True, in_controlled_shutdown=False)], "fence")
    new_epoch = log.last_offset + 1
    commit(log, [register(broker)], "register")
    commit(log, [BrokerRegistrationChange(broker, new_epoch, fenced=False)], "unfence")
    image = log.image
    joining, preferred = [], []
    for topic in image.topics.by_id.values():  # bounded by the partitions
        for p in topic.partitions.values():
            if broker not in p.isr:
                joining.append(PartitionChange(p.topic_id, p.partition_id, isr=tuple(sorted((*p.isr, broker)))))
            if p.replicas[0] == broker and p.leader != broker:
                preferred.append(PartitionChange(p.topic_id, p.partition_id, leader=broker))
    decisions(log, joining, ALTER_BATCH, f"broker {broker} rejoins the ISRs", budget)
    decisions(log, preferred, ELECTION_DECISION, f"preferred leaders of broker {broker}", budget)


def history(topics: int, per_topic: int, changes: int) -> MetadataLogState:
    log = controller_log(topics, per_topic)
    budget = [changes]
    for i in range(changes):  # bounded: each round spends at least one change or ends
        before = budget[0]
        shutdown_and_restart(log, BROKERS[i % len(BROKERS)], budget)
        if budget[0] <= 0 or budget[0] == before:
            break
    return log


def held_by_points(points: tuple[Any, ...], current: MetadataImage) -> float:
    """MiB the fold points' images hold beyond the current image (partition dicts and
    registrations they do not share with it): an estimate from sys.getsizeof."""
    seen: set[int] = set()
    total = 0
    for point in points:  # bounded: MAX_FOLD_POINTS
        for topic_id, topic in point.image.topics.by_id.items():
            now = current.topics.by_id.get(topic_id)
            if now is not None and now.partitions is topic.partitions:
                continue
            if id(topic.partitions) not in seen:
                seen.add(id(topic.partitions))
                total += sys.getsizeof(topic.partitions) + sys.getsizeof(topic)
            for pid, p in topic.partitions.items():
                if (now is None or now.partitions.get(pid) is not p) and id(p) not in seen:
                    seen.add(id(p))
                    total += sys.getsizeof(p) + sys.getsizeof(p.isr)
    return total / 2**20


def dump(log: MetadataLogState, path: Path, fold_inside: bool) -> tuple[Timer, Timer, int]:
    """`MetadataLog._write_dump`'s steps: (under the lock, outside it on the tick thread, bytes)."""
    locked, outside = Timer(), Timer()
    with locked.run():
        if fold_inside:  # the tree before fold points folded and encoded here
            log.fold(RETAINED_RECORDS)
            state = log.encode_dump()
        else:
            parts = log.dump_parts()
    with outside.run():
        if not fold_inside:
            state = parts.encode()
        payload = msgpack.packb({"format": "tidelog-quorum-dump", "version": 1, "state": state,
                                 "raft_last": [b"", 1, 1], "raft_prev": [b"", 0, 1], "cluster": [], "voters": []},
                                use_bin_type=True)
        with open(path, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
    return locked, outside, len(payload)


def fold_between_ticks(log: MetadataLogState, quiet: bool = False) -> Any:
    """Begin a fold, encode it slice by slice as the tick thread does, install it; its encoder."""
    from quorum.fold_encoder import FOLD_SLICE_TIME, FoldEncoder
    begin, install = Timer(), Timer()
    with begin.run():
        point = log.begin_fold(RETAINED_RECORDS)
    if point is None:
        if not quiet:
            print("no fold point far enough behind the head", flush=True)
        return None
    if not quiet:
        print(f"fold points kept: {len(log.fold_points)} at offsets {[p.offset for p in log.fold_points]}; "
          f"they hold ~{held_by_points(log.fold_points, log.image):.1f} MiB beyond the current image "
          f"(estimate); RSS {rss_mib():.0f} MiB", flush=True)
    encoder = FoldEncoder(log, point)
    wall = time.perf_counter()
    snapshot = None
    while snapshot is None:  # bounded: each step encodes at least one topic
        snapshot = encoder.step(FOLD_SLICE_TIME)
    wall = time.perf_counter() - wall
    with install.run():
        assert log.finish_fold(point, snapshot)
    if quiet:
        return encoder
    print(f"fold at offset {point.offset}: begin_fold (lock) {begin}; snapshot {len(snapshot) / 2**20:.1f} MiB "
          f"encoded in {encoder.slices} slices of {FOLD_SLICE_TIME * 1000:.0f} ms: {encoder.cpu_s:.3f} s CPU, "
          f"{wall:.3f} s wall, longest slice {encoder.longest_slice_s * 1000:.1f} ms; finish_fold (lock) "
          f"{install} ({load()})", flush=True)
    return encoder


def timed(what: str, call: Callable[[], Any]) -> Any:
    cpu, wall = time.process_time(), time.perf_counter()
    result = call()
    print(f"{what}: {time.perf_counter() - wall:.1f} s wall, {time.process_time() - cpu:.1f} s CPU ({load()})",
          flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--partitions-per-topic", type=int, default=1000)
    parser.add_argument("--changes", type=int, default=250_000, help="ISR and leader changes after the creations")
    parser.add_argument("--dir", type=Path, help="where the dump files go (default: a temp dir, deleted at exit)")
    args = parser.parse_args()
    fold_points = hasattr(MetadataLogState, "begin_fold")
    FOLDS.enabled = fold_points
    print(f"{'fold points (fold after the dump, between ticks)' if fold_points else 'fold inside the dump'}; "
          f"{threading.active_count()} thread(s)", flush=True)
    log = timed(f"log of {args.topics} x {args.partitions_per_topic} partitions and {args.changes} changes built",
                lambda: history(args.topics, args.partitions_per_topic, args.changes))
    print(f"log: offsets {log.log_start_offset}..{log.last_offset}, {len(log.chunks)} chunks; RSS {rss_mib():.0f} MiB",
          flush=True)
    if fold_points:
        print(f"folds started by {FOLD_TRIGGER_RECORDS} records after the base, during the build: {FOLDS.count}, "
              f"{FOLDS.cpu_s:.3f} s CPU, longest slice {FOLDS.longest_slice_s * 1000:.1f} ms", flush=True)
    with tempfile.TemporaryDirectory(prefix="metadata-dump-", dir=args.dir) as tmp:
        for round_ in (1, 2):
            locked, outside, size = dump(log, Path(tmp) / "quorum.dump.tmp", fold_inside=not fold_points)
            print(f"dump {round_}: {size / 2**20:.1f} MiB, log start offset {log.log_start_offset}; under the lock "
                  f"{locked}; outside it (payload, write, fsync) {outside}; tick thread held "
                  f"{locked.wall + outside.wall:.3f} s ({load()}); RSS {rss_mib():.0f} MiB", flush=True)
            if fold_points and round_ == 1:
                fold_between_ticks(log)
    print(f"RSS at the end {rss_mib():.0f} MiB", flush=True)


if __name__ == "__main__":
    main()
