"""One controller's Raft state as written and as durable: what a power loss keeps (issue 28).

The real voter (`quorum.durable_journal`) `pwrite`s each appended entry and makes every write
so far durable with one fsync per pass (`sync()`); `quorum.durability_gate` holds the
voter's acknowledgements until then. A truncation is cut and fsynced at once, so no stale
entry survives past the end. The term and vote are written to a temporary file, fsynced and
renamed before `setCurrentTerm` returns, i.e. before a vote is answered or a candidacy
starts. With `controller.quorum.fsync=false` the same files are written and nothing is
fsynced: they reach the disk only when the kernel writes its dirty pages back.

Here a voter keeps both copies: `log`/`term`/`voted_for` as written (the page cache, which
a killed process does not lose) and `disk_*` as on stable storage. `sync_log()` and
`sync_meta()` are the fsyncs, `write_back()` is the kernel's flusher, `lose_power()` drops
everything not on disk. Which of them the quorum calls, and when, is the durability rule
(`chaos.sim.quorum`); this class only keeps the two copies apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from metadata.records import Record

Entry = tuple[int, Record]  # (the Raft term that appended it, the metadata record)


@dataclass(slots=True)
class VoterStorage:
    """A voter's log, term and vote, written and durable (module docstring)."""

    name: str
    term: int = 0
    voted_for: str | None = None
    log: list[Entry] = field(default_factory=list)
    disk_term: int = 0
    disk_voted_for: str | None = None
    disk_log: list[Entry] = field(default_factory=list)
    synced: int = 0  # log[:synced] == disk_log[:synced]: what a sync need not write again

    @property
    def last_term(self) -> int:
        return self.log[-1][0] if self.log else 0

    @property
    def dirty(self) -> bool:
        """Whether a power loss now would lose something (log or term/vote)."""
        return (self.synced != len(self.log) or len(self.disk_log) != len(self.log)
                or (self.term, self.voted_for) != (self.disk_term, self.disk_voted_for))

    def write_entries(self, start: int, entries: Sequence[Entry], *, cut_durably: bool) -> None:
        """Replace the log from index `start` on by `entries` (pwrites, not yet durable).

        A cut of existing entries is fsynced at once when `cut_durably` (DurableJournal._cut)."""
        if start < len(self.log):
            del self.log[start:]
            self.synced = min(self.synced, start)
            if cut_durably:
                del self.disk_log[start:]
        self.log.extend(entries)

    def vote(self, term: int, voted_for: str | None) -> None:
        """setCurrentTerm(term, votedForNodeId): written; durable only with `sync_meta()`."""
        self.term, self.voted_for = term, voted_for

    def sync_log(self) -> None:
        """One fsync of the journal: every entry written so far is durable."""
        del self.disk_log[self.synced:]
        self.disk_log.extend(self.log[self.synced:])
        self.synced = len(self.log)

    def sync_meta(self) -> None:
        """The term/vote file fsynced, renamed and its directory fsynced."""
        self.disk_term, self.disk_voted_for = self.term, self.voted_for

    def write_back(self) -> None:
        """The kernel writes the dirty pages of both files back (no fsync needed for that)."""
        self.sync_log()
        self.sync_meta()

    def lose_power(self) -> tuple[int, int]:
        """Drop what is not on stable storage; (entries lost, terms forgotten)."""
        lost = len(self.log) - len(self.disk_log)
        forgotten = self.term - self.disk_term
        self.log = list(self.disk_log)
        self.synced = len(self.log)
        self.term, self.voted_for = self.disk_term, self.disk_voted_for
        return lost, forgotten
