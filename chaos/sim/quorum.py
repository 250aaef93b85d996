"""A Raft model of the metadata log: voters, a leader per epoch, majority commits, crashes.

Enough Raft for the control plane (the real pysyncobj is covered by the process tests): a
voter is the active controller while it is the leader of the current epoch; an append
commits at once when the leader is up and reaches a majority of up voters over the network,
and otherwise does not commit at all (the caller's write times out, nothing is appended).
A leader that lost its majority stays "leader" in its own eyes but can commit nothing, which
is what the real BeginEpoch fencing achieves. Every committed batch goes through the ONE real
replay path, `metadata.delta.apply`, and `on_commit` lets the invariants see each batch.

A new leader is elected after `election_timeout_ms` without a working leader, among the up
voters that reach a majority (every voter holds the whole committed log here, so any may
win); it first commits `BeginEpoch(epoch)`, as the real active controller does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the caller owns the generator: no global random here
    from random import Random

from collections.abc import Callable, Sequence

from chaos.sim.network import Network
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.records import BeginEpoch, Record

ELECTION_TIMEOUT_MS = 300  # pysyncobj's leaderFallbackTimeout scaled to the simulation

OnCommit = Callable[[MetadataImage, MetadataImage, Sequence[tuple[int, Record]]], None]


class MetadataQuorum:
    """The replicated metadata log as the voters see it together."""

    def __init__(self, voters: Sequence[str], network: Network, rng: Random, on_commit: OnCommit) -> None:
        self.voters = tuple(voters)
        self.up: set[str] = set(voters)  # running and not paused
        self.leader: str | None = None
        self.epoch = 0
        self.log: list[Record] = []
        self.image: MetadataImage = EMPTY_IMAGE
        self._network = network
        self._rng = rng
        self._on_commit = on_commit
        self._leaderless_since_ms: int | None = -ELECTION_TIMEOUT_MS  # the first tick elects

    def _reaches_majority(self, voter: str) -> bool:
        reachable = sum(1 for v in self.voters if v in self.up and self._network.connected(voter, v))
        return reachable * 2 > len(self.voters)

    def can_commit(self, voter: str) -> bool:
        return voter == self.leader and voter in self.up and self._reaches_majority(voter)

    def is_active(self, voter: str) -> bool:
        """Whether `voter` believes it is the active controller (it may be deposed unknowingly)."""
        return voter == self.leader and voter in self.up

    def append(self, voter: str, records: Sequence[Record]) -> int | None:
        """Commit `records` as `voter`'s decision: the last offset, or None (nothing appended)."""
        if not self.can_commit(voter):
            return None
        if not records:
            return self.image.offset
        first = len(self.log)
        batch = [(first + i, record) for i, record in enumerate(records)]
        before = self.image
        self.image = apply(before, batch)  # the one replay path; raises on a record it refuses
        self.log.extend(records)
        self._on_commit(before, self.image, batch)
        return self.image.offset

    def committed_from(self, offset: int, limit: int) -> list[tuple[int, Record]]:
        """Committed (offset, record) pairs from `offset` on, at most `limit` of them."""
        end = min(len(self.log), offset + limit)
        return [(o, self.log[o]) for o in range(max(0, offset), end)]

    def tick(self, now_ms: int) -> str | None:
        """Run the election rule at `now_ms`; the newly elected leader, if any."""
        if self.leader is not None and self.can_commit(self.leader):
            self._leaderless_since_ms = None
            return None
        if self._leaderless_since_ms is None:
            self._leaderless_since_ms = now_ms
            return None
        if now_ms - self._leaderless_since_ms < ELECTION_TIMEOUT_MS:
            return None
        candidates = [v for v in self.voters if v in self.up and v != self.leader and self._reaches_majority(v)]
        if not candidates:
            return None
        self.leader = self._rng.choice(candidates)
        self.epoch += 1
        self._leaderless_since_ms = None
        self.append(self.leader, [BeginEpoch(self.epoch)])
        return self.leader
