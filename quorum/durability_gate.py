"""Hold a voter's outgoing Raft messages until what they report is on stable storage.

A Raft message states facts about the sender's durable state: an AppendEntries response
("I have these entries"), a vote or a vote request (already durable: `DurableJournal`
writes the term and vote before pysyncobj sends them), and the leader's AppendEntries whose
commit index counts its own entries. pysyncobj sends each message the moment it decides it,
from its tick thread. The gate sits in the transport (`quorum.bound_transport`): while the
journal has unsynced writes, messages are held in order; `flush()` — called by
`quorum.metadata_log` at the points of each tick where a pass of work ends — fsyncs the
journal once and then sends everything held. That is KRaft's batching: entries appended in
one pass (one tick of commands on the leader, one poll of AppendEntries on a follower) share
one fsync, and no acknowledgement leaves before it.

The leader counts its own log toward a commit in the tick after it appended, and every tick
begins with a flush, so its own match index is durable too.

No bound on the held queue: it only holds what one tick sent, and pysyncobj bounds a tick's
sending by its appendEntriesPeriod budget and commandsQueueSize.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Protocol


class Syncable(Protocol):
    @property
    def dirty(self) -> bool: ...

    def sync(self) -> None: ...


Send = Callable[[Any, Any], object]


class DurabilityGate:
    """Messages wait here while `journal.dirty`; `flush()` syncs once and sends them, in order."""

    def __init__(self, journal: Syncable) -> None:
        self._journal = journal
        self._held: deque[tuple[Any, Any]] = deque()
        self._send: Send | None = None
        self.held_total = 0  # messages that waited for an fsync (for tests and the bench)

    def attach(self, send: Send) -> None:
        """The transport's own send, used by `flush()`."""
        self._send = send

    def hold(self, node: Any, message: Any) -> bool:
        """Keep (node, message) for the next flush if the journal is dirty or others wait (order)."""
        if not self._held and not self._journal.dirty:
            return False
        self._held.append((node, message))
        self.held_total += 1
        return True

    def flush(self) -> None:
        """One fsync for everything written so far, then the held messages go out."""
        self._journal.sync()
        send = self._send
        while self._held:  # bounded by one tick's messages (module docstring)
            node, message = self._held.popleft()
            if send is not None:
                send(node, message)
