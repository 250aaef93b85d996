"""CPU of the controllers' metadata hot paths at 100,000-partition scale, in this process.

    python bench/metadata_replay_cpu.py [--partitions-per-topic 10000] [--topics 3]

Each figure is process CPU time (time.process_time), so a shared machine's load changes it
less than wall time; the load average is printed beside it anyway. Phases:

1. replaying `--topics` creations of `--partitions-per-topic` partitions as KIP-868
   transactions of ~100-record chunks (what every controller and broker does per create);
2. replaying 1,000 one-record ISR changes in the last topic (one applied batch each);
3. one complete-reassignments pass over the image (the active controller runs one a second);
4. the create rule itself and encoding its records into chunks (the active controller's loop).

To compare with an earlier commit: `git archive REV | tar -x -C /tmp/rev` and run this file
with `PYTHONPATH=/tmp/rev` from outside the tree (so that /tmp/rev's modules are imported).
"""

from __future__ import annotations

import argparse
import os
import random
import time
from typing import Final

from metadata.delta import apply
from metadata.image import EMPTY_IMAGE
from metadata.records import BeginTransaction, EndTransaction, Partition, PartitionChange, RegisterBroker, Record, Topic
from metadata.transactions import ReplayState, replay
from quorum.log_state import transaction_chunks
from quorum.reassignment_control import complete_reassignments
from quorum.topic_control import create_topic

BROKERS: Final = (4, 5, 6)
CHUNK_RECORDS: Final = 100  # ~ what one 16 KiB chunk holds
ISR_CHANGES: Final = 1000


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions-per-topic", type=int, default=10_000)
    parser.add_argument("--topics", type=int, default=3)
    args = parser.parse_args()
    per, topics = args.partitions_per_topic, args.topics
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


if __name__ == "__main__":
    main()
