"""DescribeQuorum (Kafka API 55) as the active controller answers it: the leader, its epoch,
the high watermark and each voter's and observer's progress (issue 28).

    progress = FollowerProgress()          # fed by the leader's tick thread (quorum.metadata_log)
    progress.on_response(address, term, match_index, leader_last_index, now_ms)
    offsets = OffsetIndex()                # raft index -> metadata log end offset, as chunks apply
    describe(...) -> QuorumDescription     # pure: the facts above, read at one moment

Kafka's terms, mapped onto pysyncobj's Raft:
- leader epoch: the Raft term (not the controller epoch of BeginEpoch records);
- offsets are metadata record offsets, the ones brokers replay and report: the high watermark
  is one past the last committed record. tidelog numbers records when a chunk is applied, so an
  entry not yet committed has no offset: a voter's log end offset is its Raft match index
  mapped through the applied chunks, at most the high watermark (Kafka's may run ahead);
- a voter's last fetch is when the leader last heard its AppendEntries answer; it is caught up
  when its match index reached the leader's last log index (Kafka: the leader's log end at
  its previous fetch); the leader reports -1 and now, as Kafka's does;
- observers are the brokers (they replay the metadata log without voting): their log end
  offset is one past the metadata offset of their last heartbeat, their last fetch that
  heartbeat; caught up at it when that offset reached the high watermark.
Timestamps are wall-clock milliseconds, -1 when unknown.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from metadata.quorum_description import UNKNOWN, QuorumDescription, ReplicaState

OFFSET_INDEX_MAX: Final = 20_000  # raft entries remembered (then the older half is dropped)


@dataclass(frozen=True, slots=True)
class Progress:
    term: int
    match_index: int
    last_response_ms: int
    last_caught_up_ms: int


class FollowerProgress:
    """What the leader heard from each follower in its term (soft state, not in the log).

    Written on pysyncobj's tick thread, read by the API's: one lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_address: dict[str, Progress] = {}

    def on_response(self, address: str, term: int, match_index: int | None, leader_last_index: int,
                    now_ms: int) -> None:
        """An AppendEntries answer; `match_index` None when it was not a success."""
        with self._lock:
            old = self._by_address.get(address)
            if old is None or old.term != term:
                old = Progress(term, 0, UNKNOWN, UNKNOWN)
            match = old.match_index if match_index is None else max(old.match_index, match_index)
            caught_up = now_ms if match >= leader_last_index else old.last_caught_up_ms
            self._by_address[address] = Progress(term, match, now_ms, caught_up)

    def of(self, address: str, term: int) -> Progress | None:
        with self._lock:
            progress = self._by_address.get(address)
        return progress if progress is not None and progress.term == term else None


class OffsetIndex:
    """Raft index -> the metadata log end offset after applying it (tick thread writes)."""

    def __init__(self, max_entries: int = OFFSET_INDEX_MAX) -> None:
        self._lock = threading.Lock()
        self._indexes: list[int] = []
        self._offsets: list[int] = []
        self._max = max_entries

    def record(self, raft_index: int, end_offset: int) -> None:
        with self._lock:
            if self._indexes and raft_index <= self._indexes[-1]:  # a reloaded dump: start again
                self._indexes, self._offsets = [], []
            self._indexes.append(raft_index)
            self._offsets.append(end_offset)
            if len(self._indexes) > self._max:
                half = len(self._indexes) // 2
                del self._indexes[:half], self._offsets[:half]

    def end_offset(self, raft_index: int) -> int:
        """The log end offset once `raft_index` is applied; UNKNOWN when older than remembered."""
        with self._lock:
            at = bisect.bisect_right(self._indexes, raft_index)
            return self._offsets[at - 1] if at else UNKNOWN


def describe(*, leader_id: int, term: int, high_watermark: int, last_applied_index: int,
             followers: Mapping[int, Progress | None], offsets: OffsetIndex,
             observers: Sequence[tuple[int, int, int]], now_ms: int,
             directory_ids: Mapping[int, str] | None = None) -> QuorumDescription:
    """`followers`: voter id -> its progress in `term` (None: not heard from); `observers`:
    (broker id, last heartbeat wall ms, reported metadata offset) each; `directory_ids`: the
    controllers' (KIP-853), by id."""
    dirs = directory_ids or {}
    voters = [ReplicaState(leader_id, high_watermark, UNKNOWN, now_ms, dirs.get(leader_id))]
    for voter_id in sorted(followers):
        progress = followers[voter_id]
        if progress is None:
            voters.append(ReplicaState(voter_id, UNKNOWN, directory_id=dirs.get(voter_id)))
            continue
        leo = high_watermark if progress.match_index >= last_applied_index \
            else offsets.end_offset(progress.match_index)
        voters.append(ReplicaState(voter_id, leo, progress.last_response_ms, progress.last_caught_up_ms,
                                   dirs.get(voter_id)))
    # By id, the leader among them, as Kafka's answer lists its voter states (a map by id);
    # `tidelog quorum describe --replication` puts the leader first itself, as Kafka's tool.
    voters.sort(key=lambda voter: voter.replica_id)
    watchers = []
    for broker_id, contact_ms, metadata_offset in sorted(observers):
        leo = metadata_offset + 1 if metadata_offset >= 0 else UNKNOWN
        watchers.append(ReplicaState(broker_id, leo, contact_ms, contact_ms if leo >= high_watermark else UNKNOWN,
                                     dirs.get(broker_id)))
    return QuorumDescription(leader_id, term, high_watermark, tuple(voters), tuple(watchers))
