"""A Raft model of the metadata log: voters, a leader per term, majority commits, crashes and
power loss over what each voter wrote but did not yet make durable (issue 28).

Enough Raft for the control plane (the real pysyncobj is covered by the process tests): a
voter is the active controller while it is the leader of the current term (the controller
epoch); an append commits at once when the leader is up and reaches a majority of up voters
over the network, and otherwise does not commit at all (the caller's write times out,
nothing is appended). A leader that lost its majority stays "leader" in its own eyes but can
commit nothing, which is what the real BeginEpoch fencing achieves. Every committed batch
goes through the ONE real replay path, `metadata.delta.apply`, and `on_commit` lets the
invariants see each batch.

Each voter keeps its own log, term and vote (`chaos.sim.voter_storage`), as written and as
durable. An append is written by the leader and by every follower it reaches (a follower
first cuts what conflicts with the leader's log, as AppendEntries' consistency check does).
The durability rule is `quorum.durable_journal` + `quorum.durability_gate`'s, chosen by
`fsync` (`controller.quorum.fsync`):
- fsync on: a follower fsyncs what it wrote before it acknowledges, the leader fsyncs its
  own entries before it counts them toward the commit (the flush at the start of its next
  tick), a cut is fsynced at once, and the term and vote are durable before a vote is
  answered or a candidacy starts;
- fsync off (pre-issue-28): the same writes, acknowledged and counted at once; they reach
  the disk only when the kernel writes its dirty pages back (`write_back`, every
  WRITEBACK_INTERVAL_MS).
A power loss (`lose_power`) drops what is not on disk and the voter restarts as a follower
(pysyncobj starts every node as one); a crash (SIGKILL) loses nothing, the page cache stays.

A new leader is elected after `election_timeout_ms` without a working leader, among the up
voters that reach a majority and would win its vote: a candidate asks at one term above the
highest it can reach (a rejected candidacy's retry, folded into one), and a voter grants it
when the candidate's log is at least as up to date as its own (Raft §5.4.1). The new leader
first commits `BeginEpoch(term)`, as the real active controller does; `on_elected` lets the
invariants check election safety and leader completeness before it leads.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the caller owns the generator: no global random here
    from random import Random

from collections.abc import Callable, Sequence

from chaos.sim.network import Network
from chaos.sim.voter_storage import VoterStorage
from metadata.delta import apply
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.records import BeginEpoch, Record

logger = logging.getLogger(__name__)

ELECTION_TIMEOUT_MS = 300  # pysyncobj's leaderFallbackTimeout scaled to the simulation
# The kernel's flusher wakes every 5 s (vm.dirty_writeback_centisecs) and writes back pages
# dirty for 30 s (dirty_expire_centisecs): scaled like the election timeout, and without the
# 30 s age, which would only leave more unsynced (a violation found with it is a real one).
WRITEBACK_INTERVAL_MS = 750

OnCommit = Callable[[MetadataImage, MetadataImage, Sequence[tuple[int, Record]]], None]
OnElected = Callable[[str, int, Sequence[Record]], None]  # (leader, term, the leader's log)


def _no_check(leader: str, term: int, log: Sequence[Record]) -> None:
    return None


class MetadataQuorum:
    """The replicated metadata log: each voter's storage, and the committed log they agree on."""

    def __init__(self, voters: Sequence[str], network: Network, rng: Random, on_commit: OnCommit, *,
                 fsync: bool = True, on_elected: OnElected = _no_check) -> None:
        self.voters = tuple(voters)
        self.up: set[str] = set(voters)  # running and not paused
        self.leader: str | None = None
        self.epoch = 0  # the current leader's term
        self.log: list[Record] = []  # committed: the leader's log
        self.image: MetadataImage = EMPTY_IMAGE
        self.fsync = fsync
        self.storage = {v: VoterStorage(v) for v in self.voters}
        self._network = network
        self._rng = rng
        self._on_commit = on_commit
        self._on_elected = on_elected
        self._leaderless_since_ms: int | None = -ELECTION_TIMEOUT_MS  # the first tick elects

    def _reachable(self, voter: str) -> list[str]:
        """The up voters `voter` reaches, itself included, sorted (one seed, one order)."""
        return [v for v in self.voters if v in self.up and self._network.connected(voter, v)]

    def _reaches_majority(self, voter: str) -> bool:
        return len(self._reachable(voter)) * 2 > len(self.voters)

    def can_commit(self, voter: str) -> bool:
        return voter == self.leader and voter in self.up and self._reaches_majority(voter)

    def is_active(self, voter: str) -> bool:
        """Whether `voter` believes it is the active controller (it may be deposed unknowingly)."""
        return voter == self.leader and voter in self.up

    # ---- replication -------------------------------------------------------------------------

    def append(self, voter: str, records: Sequence[Record]) -> int | None:
        """Commit `records` as `voter`'s decision: the last offset, or None (nothing appended)."""
        if not self.can_commit(voter):
            return None
        if not records:
            return self.image.offset
        leader = self.storage[voter]
        first = len(self.log)
        leader.write_entries(first, [(self.epoch, r) for r in records], cut_durably=self.fsync)
        self._replicate(voter)  # followers write, and with fsync sync, before acknowledging
        if self.fsync:  # the leader counts its own entries after the flush that starts its next tick
            leader.sync_log()
        batch = [(first + i, record) for i, record in enumerate(records)]
        before = self.image
        self.image = apply(before, batch)  # the one replay path; raises on a record it refuses
        self.log.extend(records)
        self._on_commit(before, self.image, batch)
        return self.image.offset

    def _replicate(self, leader_name: str) -> None:
        """AppendEntries to every follower the leader reaches: cut the conflicting suffix (the
        highest index whose term matches, as the prevLogIndex/prevLogTerm check finds it) and
        write the leader's entries after it."""
        leader = self.storage[leader_name]
        for name in self._reachable(leader_name):
            if name == leader_name:
                continue
            follower = self.storage[name]
            if follower.term < leader.term:  # a higher term in an AppendEntries is adopted
                self._vote(follower, leader.term, None)
            match = min(len(follower.log), len(leader.log))
            while match > 0 and follower.log[match - 1][0] != leader.log[match - 1][0]:  # bounded by match
                match -= 1
            if match == len(follower.log) == len(leader.log):
                continue
            follower.write_entries(match, leader.log[match:], cut_durably=self.fsync)
            if self.fsync:  # durability_gate: the acknowledgement waits for this fsync
                follower.sync_log()

    def _vote(self, storage: VoterStorage, term: int, voted_for: str | None) -> None:
        storage.vote(term, voted_for)
        if self.fsync:  # DurableJournal.setCurrentTerm: durable before the vote is answered or asked
            storage.sync_meta()

    def committed_from(self, offset: int, limit: int) -> list[tuple[int, Record]]:
        """Committed (offset, record) pairs from `offset` on, at most `limit` of them."""
        end = min(len(self.log), offset + limit)
        return [(o, self.log[o]) for o in range(max(0, offset), end)]

    # ---- storage faults ----------------------------------------------------------------------

    def write_back(self) -> None:
        """The kernel's flusher on every voter's machine (a crashed process's pages included)."""
        for name in self.voters:
            self.storage[name].write_back()

    def lose_power(self, voter: str) -> tuple[int, int]:
        """`voter`'s machine loses power: it is down and keeps only its durable state;
        (entries lost, terms forgotten)."""
        self.up.discard(voter)
        storage = self.storage[voter]
        before = (len(storage.log), storage.term)
        lost, forgotten = storage.lose_power()
        logger.info("Controller %s lost power: log end %d -> %d, term %d -> %d (fsync %s)", voter, before[0],
                    len(storage.log), before[1], storage.term, "on" if self.fsync else "off")
        if voter == self.leader:  # it restarts as a follower
            self.leader = None
        return lost, forgotten

    # ---- elections ---------------------------------------------------------------------------

    def _candidacy(self, candidate: str) -> tuple[int, list[str]]:
        """(the term `candidate` would ask at, the reachable voters that would grant it)."""
        me = self.storage[candidate]
        reachable = self._reachable(candidate)
        term = 1 + max(self.storage[v].term for v in reachable)
        mine = (me.last_term, len(me.log))
        granting = [v for v in reachable
                    if mine >= (self.storage[v].last_term, len(self.storage[v].log))]
        return term, granting

    def _electable(self, candidate: str) -> bool:
        return len(self._candidacy(candidate)[1]) * 2 > len(self.voters)

    def _elect(self, candidate: str) -> None:
        term, granting = self._candidacy(candidate)
        self._vote(self.storage[candidate], term, candidate)  # durable before the RequestVotes
        for name in self._reachable(candidate):
            if name != candidate:  # each voter adopts the term; those whose log is not newer grant
                self._vote(self.storage[name], term, candidate if name in granting else None)
        leader_log = [record for _, record in self.storage[candidate].log]
        self._on_elected(candidate, term, leader_log)
        self.leader, self.epoch = candidate, term
        logger.info("Controller %s elected leader of term %d with %d of %d votes (log end %d)", candidate, term,
                    len(granting), len(self.voters), len(leader_log))
        if len(leader_log) != len(self.log) or any(a is not b for a, b in zip(leader_log, self.log)):
            # the new leader's log is what is committed now: only when committed entries were lost
            self.log = leader_log
            self.image = apply(EMPTY_IMAGE, list(enumerate(leader_log))) if leader_log else EMPTY_IMAGE

    def tick(self, now_ms: int) -> str | None:
        """Run the election rule at `now_ms`; the newly elected leader, if any."""
        if self.leader is not None and self.can_commit(self.leader):
            self._leaderless_since_ms = None
            self._replicate(self.leader)  # the heartbeat AppendEntries: a restarted voter catches up
            return None
        if self._leaderless_since_ms is None:
            self._leaderless_since_ms = now_ms
            return None
        if now_ms - self._leaderless_since_ms < ELECTION_TIMEOUT_MS:
            return None
        candidates = [v for v in self.voters if v in self.up and v != self.leader and self._reaches_majority(v)
                      and self._electable(v)]
        if not candidates:
            return None
        self._elect(self._rng.choice(candidates))
        self._leaderless_since_ms = None
        assert self.leader is not None
        self.append(self.leader, [BeginEpoch(self.epoch)])
        return self.leader
