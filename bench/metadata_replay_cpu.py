"""CPU of the controllers' metadata hot paths at 100,000-partition scale, in this process.

    python bench/metadata_replay_cpu.py [--partitions-per-topic 10000] [--topics 3]

Each figure is process CPU time (time.process_time), so a shared machine's load changes it
less than wall time; the load average is printed beside it anyway. Phases:

1. replaying `--topics` creations of `--partitions-per-topic` partitions as KIP-868
   transactions of ~100-record chunks (what every controller and broker does per create);
2. replaying 1,000 one-record ISR changes in the last topic (one applied batch each);
3. one complete-reassignments pass over the image (the active controller runs one a second);
4. the create rule itself and encoding its records into chunks (the active controller's loop);
5. `--leader-moves N` (issue 35's controlled shutdown at 100,000 partitions, instead of 1-4): an
   image of `--topics` x `--partitions-per-topic` RF=3 partitions, a third led by each broker,
   and N of broker 4's leaderships moved away (leader = the next ISR member, ISR without 4) in
   decisions of 5,000 PartitionChange records, each a KIP-868 transaction of 16 KiB chunks:
   a controller's `MetadataLogState.apply_chunk` per chunk, and a broker's (broker 5)
   `MetadataFollowerState.apply_fetch_reply` per 1,000-record page including its local
   changes; CPU per record, decode and apply apart.

To compare with an earlier commit: `git archive REV | tar -x -C /tmp/rev` and run this file
with `PYTHONPATH=/tmp/rev` from outside the tree (so that /tmp/rev's modules are imported).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import time
from typing import Final

from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from broker.metadata_follower import MetadataFollowerState
from common.rpc_messages import MetadataFetchReply
from metadata.records import BeginEpoch, decode_record_maps, decode_records, record_from_map
from metadata.records import BeginTransaction, EndTransaction, Partition, PartitionChange, RegisterBroker, Record, Topic
from metadata.transactions import ReplayState, replay
from metadata.snapshot import encode_snapshot
from quorum.log_state import MetadataLogState, transaction_chunks
from quorum.reassignment_control import complete_reassignments
from quorum.topic_control import create_topic

BROKERS: Final = (4, 5, 6)
CHUNK_RECORDS: Final = 100  # ~ what one 16 KiB chunk holds
ISR_CHANGES: Final = 1000
DECISION_RECORDS: Final = 5000  # quorum/controller_result.py MAX_LEADERSHIPS_PER_DECISION
FETCH_PAGE_RECORDS: Final = 1000  # broker/metadata_follower_loop.py FETCH_PAGE_RECORDS
LEAVING, FOLLOWER = 4, 5


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions-per-topic", type=int, default=10_000)
    parser.add_argument("--topics", type=int, default=3)
    parser.add_argument("--leader-moves", type=int, default=0,
                        help="run phase 5 alone: this many leader moves (e.g. 33000 with --topics 100 "
                             "--partitions-per-topic 1000)")
    parser.add_argument("--runs", type=int, default=1, help="repeat phase 5 this many times")
    args = parser.parse_args()
    per, topics = args.partitions_per_topic, args.topics
    if args.leader_moves:
        leader_moves(topics, per, args.leader_moves, args.runs)
        return
    image = apply(EMPTY_IMAGE, enumerate(RegisterBroker(b, f"inc-{b}", (), fenced=False) for b in BROKERS))
    state, offset = ReplayState(image), image.offset

    started = time.process_time()
    for t in range(topics):  # bounded by --topics
        records: list[Record] = [BeginTransaction("create"), Topic(f"big{t}", f"id{t}")]
        records += [Partition(f"id{t}", p, BROKERS, BROKERS, leader=BROKERS[0]) for p in range(per)]
        records.append(EndTransaction())
        for i in range(0, len(records), CHUNK_RECORDS):
            chunk = [(offset + 1 + j, r) for j, r in enumerate(records[i:i + CHUNK_RECORDS])]
            offset += len(chunk)
            state = replay(state, chunk)
    print(f"replay {topics} x {per} partitions in {CHUNK_RECORDS}-record chunks: "
          f"{time.process_time() - started:.2f} s CPU ({load()})")

    started = time.process_time()
    for p in range(min(ISR_CHANGES, per)):
        offset += 1
        state = replay(state, [(offset, PartitionChange(f"id{topics - 1}", p, isr=BROKERS[:2]))])
    print(f"replay one ISR change in a {per}-partition topic: "
          f"{(time.process_time() - started) / min(ISR_CHANGES, per) * 1000:.3f} ms CPU each ({load()})")

    started = time.process_time()
    complete_reassignments(state.image)
    print(f"complete-reassignments pass over {topics * per} partitions: "
          f"{(time.process_time() - started) * 1000:.2f} ms CPU ({load()})")

    started = time.process_time()
    created = create_topic(image, name="new", partitions=per, replication_factor=len(BROKERS), configs={},
                           topic_id="new-topic-id", rng=random.Random(1))
    ruled = time.process_time()
    chunks = transaction_chunks(created.records)
    print(f"create rule for {per} partitions: {ruled - started:.3f} s CPU, its {len(chunks)} chunks encoded: "
          f"{time.process_time() - ruled:.3f} s CPU ({load()})")


def leader_moves(topics: int, per: int, moves: int, runs: int) -> None:
    """Phase 5: see the module's docstring. The image is built once; each run replays the same
    records from it (on a shared machine, the lowest of several runs is the figure to compare)."""
    image = apply(EMPTY_IMAGE, enumerate([BeginEpoch(1), *(RegisterBroker(b, f"inc-{b}", (), fenced=False)
                                                            for b in BROKERS)]))
    records: list[Record] = []
    changes: list[Record] = []
    for t in range(topics):
        records.append(Topic(f"t{t}", f"id{t}"))
        for p in range(per):
            k = t * per + p
            replicas = BROKERS[k % 3:] + BROKERS[:k % 3]  # a third led by each broker
            records.append(Partition(f"id{t}", p, replicas, replicas, leader=replicas[0]))
            if replicas[0] == LEAVING and len(changes) < moves:
                changes.append(PartitionChange(f"id{t}", p, leader=replicas[1], isr=replicas[1:]))
    image = apply(image, enumerate(records, start=image.offset + 1))
    chunks = [chunk for i in range(0, len(changes), DECISION_RECORDS)
              for chunk in transaction_chunks(changes[i:i + DECISION_RECORDS], "shutdown")]
    maps = [(image.offset + 1 + k, m) for k, m in enumerate(m for c in chunks for m in decode_record_maps(c))]
    pages = [tuple(maps[i:i + FETCH_PAGE_RECORDS]) for i in range(0, len(maps), FETCH_PAGE_RECORDS)]
    snapshot = encode_snapshot(image)
    n = len(changes)
    # As broker.node does after its first publish: the start-up heap (here the image and the
    # records) is frozen, so a full collection does not scan it (it made runs differ by 2x).
    gc.collect()
    gc.freeze()
    print(f"{n} leader moves of broker {LEAVING} on {topics * per} partitions: {len(chunks)} chunks, "
          f"{len(pages)} fetch pages; CPU per leader move:")
    for _ in range(runs):  # bounded by --runs
        controller = MetadataLogState(snapshot)
        started = time.process_time()
        for chunk in chunks:
            decode_records(chunk)
        decoded = time.process_time()
        for chunk in chunks:
            outcome = controller.apply_chunk(chunk, 1)
            assert outcome.committed, outcome.reason
        done = time.process_time()
        decode = (decoded - started) / n * 1e6
        print(f"  controller apply_chunk: {(done - decoded) / n * 1e6:5.1f} us = decode {decode:4.1f} "
              f"+ apply {(done - decoded) / n * 1e6 - decode:4.1f} ({load()})")

        follower = MetadataFollowerState(FOLLOWER, image=image)
        started = time.process_time()
        for _, m in maps:
            record_from_map(m)
        decoded = time.process_time()
        roles = 0
        for page in pages:
            local = follower.apply_fetch_reply(MetadataFetchReply(page, maps[-1][0], 0))
            roles += 0 if local is None else len(local.leaders) + len(local.followers)
        done = time.process_time()
        assert follower.image.offset == maps[-1][0] and roles == n, roles
        decode = (decoded - started) / n * 1e6
        print(f"  broker {FOLLOWER} apply_fetch_reply: {(done - decoded) / n * 1e6:5.1f} us = decode {decode:4.1f} "
              f"+ apply and local changes {(done - decoded) / n * 1e6 - decode:4.1f} ({load()})")


if __name__ == "__main__":
    main()
