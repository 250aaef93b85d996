"""The metadata quorum's voter set and KIP-853's rules for changing it: pure.

Kafka keeps the voter set in VotersRecord control records of the metadata log; we keep it in
pysyncobj's own membership entries (`['add'|'rem', address, node]`, applied by pysyncobj when
appended, undone when truncated), each carrying one `VoterEntry` as a plain map after
pysyncobj's three fields (pysyncobj reads only those three). `quorum.metadata_log` replays the
entries onto a `VoterSet` from the dump's set (or the static `controller.quorum.voters`) at
start, so a restarted controller comes back with the voter set its log holds.

The checks are Kafka's (AddVoterHandler, RemoveVoterHandler, VoterSet),
each a `VoterChangeError` with Kafka's error name:
- only the leader changes the set (NOT_LEADER_OR_FOLLOWER), and only after it committed an
  entry of its own term and while no earlier change is uncommitted (REQUEST_TIMED_OUT: one
  voter change at a time, each committed by a majority of the set it makes);
- an added voter's id must not be a voter already, whatever its directory id (DUPLICATE_VOTER);
  it must answer as that id and directory id and be caught up (REQUEST_TIMED_OUT otherwise);
- a removed voter must be one, with that directory id (VOTER_NOT_FOUND), and the last
  voter is never removed (VOTER_NOT_FOUND, as Kafka's VoterSet.removeVoter refuses it).
Beyond Kafka, a removal that would leave the remaining voters without a live majority is
refused up front (REQUEST_TIMED_OUT; Kafka would append it and let the commit time out, leaving
an uncommitted change behind): the quorum stays as it was.

Observers (`forgets_observer`): Kafka's leader knows an observer only by its fetches, forgets one
that has not fetched for OBSERVER_SESSION_TIMEOUT (LeaderState.clearInactiveObservers) and never
knew one that never fetched; an AddRaftVoter that timed out leaves a fetching node an observer.
Ours pushes (pysyncobj replicates to its observers), so the same rule decides when the leader
stops connecting and sending to one.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

ZERO_DIRECTORY_ID: Final = "AAAAAAAAAAAAAAAAAAAAAA"  # Kafka's Uuid.ZERO_UUID in its base64 form
_DIRECTORY_ID: Final = re.compile(r"[A-Za-z0-9_-]{22}")
_ADDRESS: Final = re.compile(r"(?P<host>[A-Za-z0-9._-]+):(?P<port>[0-9]{1,5})")
ADD: Final = "add"  # pysyncobj's membership entry kinds
REMOVE: Final = "rem"
MAX_VOTERS: Final = 9  # one entry a change; beyond this a Raft quorum only gets slower
OBSERVER_SESSION_TIMEOUT: Final = 300.0  # seconds; Kafka's LeaderState.OBSERVER_SESSION_TIMEOUT_MS


class VoterChangeError(Exception):
    """A refused voter change: Kafka's error name and a message for the operator."""

    def __init__(self, error: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.error = error
        self.message = message
        self.field = field  # the request field at fault, when one is


def directory_id_from_bytes(raw: bytes) -> str:
    """Kafka's Uuid.toString: url-safe base64 of the 16 bytes, unpadded."""
    if len(raw) != 16:
        raise ValueError(f"a directory id is 16 bytes, not {len(raw)}")
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def directory_id_bytes(directory_id: str) -> bytes:
    return base64.urlsafe_b64decode(directory_id + "==")


def check_directory_id(value: object, field: str = "directory_id") -> str:
    if not isinstance(value, str) or not _DIRECTORY_ID.fullmatch(value) or len(directory_id_bytes(value)) != 16:
        raise VoterChangeError("INVALID_REQUEST", f"{field} must be a Kafka Uuid (22 url-safe base64 "
                               f"characters), got {value!r:.60}", field)
    return value


def check_address(value: object, field: str) -> str:
    match = _ADDRESS.fullmatch(value) if isinstance(value, str) else None
    if match is None or not 0 < int(match["port"]) <= 65535:
        raise VoterChangeError("INVALID_REQUEST", f"{field} must be host:port, got {value!r:.80}", field)
    return str(value)


@dataclass(frozen=True, slots=True)
class VoterEntry:
    """One voter: Kafka's ReplicaKey (id, directory id) and its two endpoints."""

    node_id: int
    directory_id: str  # ZERO_DIRECTORY_ID: a voter of the static config, whose directory id nobody recorded
    raft_address: str  # host:port of its quorum listener (pysyncobj's node id)
    api_address: str | None = None  # host:port of its HTTP API; None: the static controller.api.voters

    def __post_init__(self) -> None:
        if type(self.node_id) is not int or self.node_id < 0:
            raise VoterChangeError("INVALID_REQUEST", f"voter id must be a non-negative integer, got "
                                   f"{self.node_id!r}", "voter_id")
        check_directory_id(self.directory_id)
        check_address(self.raft_address, "raft_address")
        if self.api_address is not None:
            check_address(self.api_address, "api_address")

    def to_map(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "directory_id": self.directory_id, "raft_address": self.raft_address,
                "api_address": self.api_address}

    @classmethod
    def from_map(cls, m: object) -> VoterEntry:
        """From `to_map`'s form; ValueError when it is not one."""
        if not isinstance(m, Mapping) or set(m) != {"node_id", "directory_id", "raft_address", "api_address"}:
            raise ValueError(f"not a voter entry: {m!r:.120}")
        try:
            return cls(m["node_id"], m["directory_id"], m["raft_address"], m["api_address"])
        except VoterChangeError as exc:
            raise ValueError(str(exc)) from None

    def matches(self, directory_id: str) -> bool:
        """Kafka's ReplicaKey match, where a voter of unknown directory id matches any."""
        return self.directory_id in (directory_id, ZERO_DIRECTORY_ID)


@dataclass(frozen=True, slots=True)
class VoterSet:
    """The voters by node id; every operation returns a new set."""

    voters: tuple[VoterEntry, ...]

    def __post_init__(self) -> None:
        ids = [v.node_id for v in self.voters]
        addresses = [v.raft_address for v in self.voters]
        if len(set(ids)) != len(ids) or len(set(addresses)) != len(addresses):
            raise ValueError(f"a voter set names an id or an address twice: {self.voters}")
        object.__setattr__(self, "voters", tuple(sorted(self.voters, key=lambda v: v.node_id)))

    @classmethod
    def of(cls, voters: Iterable[VoterEntry]) -> VoterSet:
        return cls(tuple(voters))

    def __iter__(self) -> Iterator[VoterEntry]:
        return iter(self.voters)

    def __len__(self) -> int:
        return len(self.voters)

    def __contains__(self, node_id: object) -> bool:
        return any(v.node_id == node_id for v in self.voters)

    @property
    def ids(self) -> list[int]:
        return [v.node_id for v in self.voters]

    def get(self, node_id: int) -> VoterEntry | None:
        return next((v for v in self.voters if v.node_id == node_id), None)

    def by_address(self, raft_address: str) -> VoterEntry | None:
        return next((v for v in self.voters if v.raft_address == raft_address), None)

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def with_voter(self, entry: VoterEntry) -> VoterSet:
        """The set with `entry` added, or replacing the voter of its id (an update)."""
        return VoterSet(tuple(v for v in self.voters if v.node_id != entry.node_id) + (entry,))

    def without(self, node_id: int) -> VoterSet:
        return VoterSet(tuple(v for v in self.voters if v.node_id != node_id))

    def to_list(self) -> list[dict[str, Any]]:
        return [v.to_map() for v in self.voters]

    @classmethod
    def from_list(cls, items: object) -> VoterSet:
        if not isinstance(items, list):
            raise ValueError(f"not a voter list: {items!r:.120}")
        return cls(tuple(VoterEntry.from_map(m) for m in items))


# -- membership entries -------------------------------------------------------------------


def apply_membership(voters: VoterSet, kind: str, raft_address: str, entry: VoterEntry | None, *,
                     reverse: bool = False) -> VoterSet:
    """The set after one membership entry (or before it, `reverse`: a truncated entry undone). An
    entry without our map (pysyncobj's own) adds a voter of unknown id and directory: never
    written by tidelog, tolerated so that the set follows pysyncobj's whatever wrote the log."""
    adding = (kind == ADD) != reverse
    if adding:
        if entry is None or voters.by_address(raft_address) is not None:
            return voters
        return voters.with_voter(entry)
    old = voters.by_address(raft_address)
    return voters if old is None else voters.without(old.node_id)


def parse_membership(request: object) -> tuple[str, str, VoterEntry | None] | None:
    """(kind, raft address, our entry or None) of a pysyncobj membership request, else None."""
    if not isinstance(request, (list, tuple)) or len(request) < 2 or request[0] not in (ADD, REMOVE) \
            or not isinstance(request[1], str):
        return None
    entry = None
    if len(request) >= 4:
        try:
            entry = VoterEntry.from_map(request[3])
        except ValueError:
            entry = None
    return request[0], request[1], entry


# -- the rules ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaderView:
    """What the leader knows when a change is asked for."""

    is_leader: bool
    committed_in_term: bool  # an entry of its own term (its no-op) is committed
    pending_change: bool  # a membership entry is appended but not committed
    leader_id: int | None = None


def _check_leader(leader: LeaderView) -> None:
    if not leader.is_leader:
        raise VoterChangeError("NOT_LEADER_OR_FOLLOWER", "this controller does not lead the metadata quorum"
                               + ("" if leader.leader_id is None else f"; controller {leader.leader_id} does"))
    if not leader.committed_in_term:
        raise VoterChangeError("REQUEST_TIMED_OUT", "the leader has not yet committed an entry of its term "
                               "(it fences earlier voter changes first): retry")
    if leader.pending_change:
        raise VoterChangeError("REQUEST_TIMED_OUT", "an earlier voter change is not committed yet: one "
                               "change at a time, retry")


def check_add(voters: VoterSet, new: VoterEntry, leader: LeaderView) -> None:
    """AddVoterHandler's checks before it contacts the new voter."""
    _check_leader(leader)
    if new.node_id in voters:
        current = voters.get(new.node_id)
        assert current is not None
        raise VoterChangeError("DUPLICATE_VOTER", f"voter id {new.node_id} is already a voter (directory id "
                               f"{current.directory_id}); remove it before adding it again", "voter_id")
    if new.directory_id == ZERO_DIRECTORY_ID:
        raise VoterChangeError("INVALID_REQUEST", "an added voter needs its directory id (the "
                               "directory.id of its metadata dir's meta.properties)", "directory_id")
    clash = voters.by_address(new.raft_address)
    if clash is not None:
        raise VoterChangeError("INVALID_REQUEST", f"voter {clash.node_id} already listens on "
                               f"{new.raft_address}", "raft_address")
    if len(voters) >= MAX_VOTERS:
        raise VoterChangeError("INVALID_REQUEST", f"the quorum has {len(voters)} voters, the most it takes "
                               f"is {MAX_VOTERS}", "voter_id")


def check_identity(new: VoterEntry, answered_id: int, answered_directory_id: str) -> None:
    """The new voter answered (Kafka: ApiVersions) as itself: its id and directory id."""
    if answered_id != new.node_id or answered_directory_id != new.directory_id:
        raise VoterChangeError("REQUEST_TIMED_OUT", f"the controller at {new.raft_address} is node "
                               f"{answered_id} with directory id {answered_directory_id}, not voter "
                               f"{new.node_id} with directory id {new.directory_id}: no such observer to add",
                               "directory_id" if answered_id == new.node_id else "voter_id")


def caught_up(match_index: int, leader_end: int) -> bool:
    """Kafka's isReplicaCaughtUp: the observer replicated the leader's log up to its end."""
    return match_index >= leader_end


def check_remove(voters: VoterSet, node_id: int, directory_id: str, leader: LeaderView, *,
                 live: Iterable[int]) -> VoterEntry:
    """RemoveVoterHandler's checks; the voter to remove. `live`: the voters the leader heard from
    recently, itself included."""
    _check_leader(leader)
    current = voters.get(node_id)
    if current is None or not current.matches(directory_id):
        raise VoterChangeError("VOTER_NOT_FOUND", f"no voter {node_id} with directory id {directory_id} in "
                               f"the voter set {voters.ids}", "voter_id" if current is None else "directory_id")
    if len(voters) == 1:
        raise VoterChangeError("VOTER_NOT_FOUND", f"voter {node_id} is the last voter: a quorum needs one",
                               "voter_id")
    remaining = voters.without(node_id)
    alive = sorted(set(live) & set(remaining.ids))
    if len(alive) < remaining.majority:
        raise VoterChangeError("REQUEST_TIMED_OUT", f"removing voter {node_id} would leave voters "
                               f"{remaining.ids} with only {alive} reachable, short of a majority of "
                               f"{remaining.majority}: the change could never commit", "voter_id")
    return current


def forgets_observer(*, adding: bool, last_answer_s: float | None, now_s: float,
                     timeout_s: float = OBSERVER_SESSION_TIMEOUT) -> str | None:
    """Why the leader stops replicating to an observer now, or None to keep it. `adding`: an add
    is catching it up (its own deadline bounds that); `last_answer_s`: when it last answered the
    leader (its last fetch, in Kafka's terms; as a voter too, for a removed one), None if never."""
    if adding:
        return None
    if last_answer_s is None:
        return "it never answered (no add is catching it up any more)"
    silent = now_s - last_answer_s
    if silent >= timeout_s:
        return f"no answer for {silent:.0f} s (observer session timeout {timeout_s:.0f} s)"
    return None
