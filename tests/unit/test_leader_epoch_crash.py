"""A new leadership's leader-epoch entry is written lazily (broker/log/leader_epoch_cache.py,
broker/replication/partition.py): in memory at become-leader, in the file at the first append
in that epoch. Crashes right after become-leader and right after that first append must still
give every follower the right truncation point (KIP-101/279) once the leader restarts.

Three replicas A, B, C of one partition. A leads epoch 1 and writes batches; B and C copy a
prefix. C then leads epoch 2 and writes batches nobody copies (a follower holding a later epoch
than any of the next leader's: Kafka's reason to assign at makeLeader). B leads epoch 3 and
maybe appends; B's process may crash (the directory copied while open, as in
test_log_recovery), restart from the copy, and lead again (the same epoch, or the next one, as
the controller decides). A and C then truncate against B's OffsetsForLeaderEpoch answers and
must keep exactly their common prefix with B.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log.leader_epoch_cache import checkpoint_file
from broker.log.leader_epochs import EpochEntry
from broker.log.partition_log import PartitionLog
from broker.replication.partition import Partition
from broker.replication.truncation import AskLeader, TruncateFully, TruncateTo, on_epoch_end_offset, start_truncation
from common.log_config import LogConfig
from common.topic_partition import TopicPartition
from tests.log_helpers import NOW, batch, read_all
from tests.unit.test_log_recovery import crash_copy

SMALL = LogConfig(segment_bytes=1200, index_interval_bytes=150)
TP = TopicPartition("topic", 0)
A, B, C = 1, 2, 3
CRASHES = ("none", "after-become-leader", "after-first-append")
MAX_ASKS = 16  # OffsetsForLeaderEpoch rounds: epochs strictly decrease, there are at most 3


def open_replica(root: Path, name: str) -> PartitionLog:
    return PartitionLog(root / name / "topic-0", SMALL, now_ms=NOW)


def lead(log: PartitionLog, broker_id: int, leader_epoch: int) -> None:
    """Kafka's makeLeader on this replica (`Partition.become_leader`)."""
    Partition(TP, "T", log, broker_id, leader_epoch, 0, (A, B, C), (A, B, C)).become_leader(broker_id, NOW)


def write(log: PartitionLog, batches: int, tag: str) -> None:
    """The leader appends `batches` producer batches in its (latest) epoch."""
    for i in range(batches):
        log.append(batch(1 + i % 3, tag=f"{tag}{i}"), now_ms=NOW)


def copy(source: PartitionLog, target: PartitionLog, batches: int) -> None:
    """A follower appends the leader's first `batches` batches (offsets and epochs kept)."""
    for _, data in read_all(source)[:batches]:
        target.append(data, now_ms=NOW, assign_offsets=False)


def batch_ids(log: PartitionLog) -> list[tuple[int, int, int, bytes]]:
    return [(h.base_offset, h.last_offset, h.partition_leader_epoch, data) for h, data in read_all(log)]


def common_prefix_end(follower: PartitionLog, leader: PartitionLog) -> int:
    """The log end offset of the longest run of identical batches both logs start with."""
    end = 0
    for ours, theirs in zip(batch_ids(follower), batch_ids(leader)):
        if ours != theirs:
            break
        end = ours[1] + 1
    return end


def truncate_against(follower: PartitionLog, leader: PartitionLog) -> None:
    """The fetcher's truncation (`broker.replication.truncation`) with `leader` answering."""
    step = start_truncation(follower.leader_epoch_cache.entries, follower.log_end_offset)
    for _ in range(MAX_ASKS):
        if not isinstance(step, AskLeader):
            break
        if step.truncate_to is not None:
            follower.truncate_to(step.truncate_to)
        step = on_epoch_end_offset(follower.leader_epoch_cache.entries, follower.log_end_offset,
                                   asked_epoch=step.epoch, answer=leader.end_offset_for_epoch(step.epoch))
    else:
        raise AssertionError(f"truncation did not end in {MAX_ASKS} rounds")
    if isinstance(step, TruncateFully):
        follower.truncate_fully_and_start_at(leader.log_start_offset)
    else:
        assert isinstance(step, TruncateTo)
        follower.truncate_to(step.offset)


@settings(max_examples=60, deadline=None)
@given(written=st.integers(1, 5), copied=st.data(), c_writes=st.integers(0, 3),
       b_writes=st.integers(1, 3), crash=st.sampled_from(CRASHES), next_epoch=st.booleans())
def test_followers_truncate_to_their_common_prefix_with_a_restarted_leader(
        tmp_path_factory: pytest.TempPathFactory, written: int, copied: st.DataObject, c_writes: int,
        b_writes: int, crash: str, next_epoch: bool) -> None:
    root = tmp_path_factory.mktemp("replicas")
    logs = {name: open_replica(root, name) for name in "ABC"}
    try:
        a, b, c = logs["A"], logs["B"], logs["C"]
        lead(a, A, 1)
        write(a, written, "a")
        prefix = copied.draw(st.integers(0, written), label="batches B and C copied")
        copy(a, b, prefix)
        copy(a, c, prefix)
        lead(c, C, 2)
        write(c, c_writes, "c")
        lead(b, B, 3)
        if crash != "after-become-leader":
            write(b, b_writes, "b")
        if crash != "none":
            before = batch_ids(b)
            crashed = crash_copy(b, root / "crashed")
            b.close()
            b = logs["B"] = PartitionLog(crashed, SMALL, now_ms=NOW, recovery_point=0)
            # a process crash loses nothing written: every batch, its epoch in the cache
            assert batch_ids(b) == before
            assert all(h.partition_leader_epoch == b.leader_epoch_cache.epoch_for(h.base_offset)
                       for h, _ in read_all(b))
            lead(b, B, 4 if next_epoch else 3)  # the restarted broker leads only through makeLeader
        expected = {name: common_prefix_end(logs[name], b) for name in "AC"}
        for name in "AC":
            truncate_against(logs[name], b)
            assert logs[name].log_end_offset == expected[name], name
            assert batch_ids(logs[name]) == batch_ids(b)[:len(batch_ids(logs[name]))]
    finally:
        for log in logs.values():
            log.close()


def test_become_leader_writes_no_file_and_the_first_append_writes_it_first(tmp_path: Path) -> None:
    """The file lacks a new leadership's entry until its epoch's first batch, and holds it
    before that batch is in the segment (recovery checks each batch's epoch against it)."""
    log = open_replica(tmp_path, "B")
    try:
        lead(log, B, 1)
        write(log, 2, "b")
        written = checkpoint_file(log.directory).read()
        lead(log, B, 5)
        assert log.leader_epoch_cache.latest_epoch == 5  # answers OffsetsForLeaderEpoch at once
        assert checkpoint_file(log.directory).read() == written == [EpochEntry(1, 0)]
        segment_sizes: list[int] = []
        real_append = log.active_segment.append

        def append_seeing_the_file(*args: object, **kwargs: object) -> None:
            segment_sizes.append(len(checkpoint_file(log.directory).read()))
            real_append(*args, **kwargs)  # type: ignore[arg-type]

        log.active_segment.append = append_seeing_the_file  # type: ignore[method-assign]
        write(log, 1, "new")
        assert segment_sizes == [2]  # the entry was in the file when the batch was appended
        assert checkpoint_file(log.directory).read() == [EpochEntry(1, 0), EpochEntry(5, 3)]
        assert not log.leader_epoch_cache.owes_write
    finally:
        log.close()
