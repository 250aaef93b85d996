"""Pre-vote and leader stickiness for the metadata quorum (Raft thesis §9.6, KIP-996): pure rules.

Without them a voter that was cut off or starved of CPU (SIGSTOP, a long GC-like stall) comes
back with its election timer expired, starts an election at term + 1, and its RequestVote makes
every voter, the healthy leader included, adopt the higher term and step down: a needless
controller change (seen on a CPU-starved box, issue 28). With them:

- Pre-vote: a voter whose election timer fired first asks the others whether they *would*
  vote for it at term + 1 (`decide_pre_vote`). Nobody changes its term or vote for a pre-vote,
  so nothing is written (the durable term/vote rules of `quorum.durable_journal` are not
  touched). Only with a majority of grants (`PreVoteRound`) does it start the real election.
- Stickiness: a voter that heard from a live leader within `LEADER_CONTACT_WINDOW`, or is the
  leader itself, refuses pre-votes and ignores a real RequestVote with a higher term
  (`ignores_vote_request`) instead of stepping down for it. KIP-996 says the same with
  Kafka's fetch timeout as the window; we use the Raft thesis' minimum election timeout so
  that a real failover is not delayed (a dead leader is unheard for longer than that before
  any follower's timer fires).
- A round counts only while the voter's term is the one it asked from (`PreVoteRound.is_for`):
  a voter that adopts a candidate's term mid-round would otherwise stand at that term + 1,
  a term nobody pre-voted for (seen at a cluster's first election: controller 3 granted
  controller 1's vote for term 1, then won its own round for term 1 and ran for term 2).
- A voter whose term is ahead of the leader's tells it (`tells_leader_of_higher_term`), and
  the leader adopts the term and steps down. Stickiness makes every voter ignore the ahead
  voter's RequestVote, and pysyncobj drops the leader's AppendEntries of a lower term, so
  without this the ahead voter never rejoins: it refuses every AppendEntries, and every
  pre-vote it asks for is refused (the others hear from the leader). This is etcd raft's
  answer (a MsgAppResp at the higher term to a lower-term leader's MsgApp or MsgHeartbeat,
  when check-quorum or pre-vote is on) and KRaft's (a leader seeing a higher epoch in a
  BeginQuorumEpoch answer resigns).

- Silence is counted only while the voter listens (`heard_everything_since`). pysyncobj's tick
  looks at the election deadline before it reads its sockets, so a voter whose own tick ran
  long (a fold slice, applying a chunk, waiting for the GIL or a core) found its timer expired
  with the leader's AppendEntries unread in the socket: it asked for pre-votes for the leader's
  silence that was its own. A voter stalled the same way answered a pre-vote in the middle of
  its poll, before the AppendEntries behind it in the same poll, and granted it. Both happened
  at once because every voter folds at the same log offsets: in a 100,000-partition restart a
  follower that had just folded (longest slice 437 ms) won term 2 from a live leader (issue 35).
  So an expired timer counts only after a poll that ended past it, and pre-votes and vote
  requests are answered once the poll has read everything that arrived with them.
- A leader this voter is still connected to is given `CONNECTED_LEADER_WINDOW`, not
  `LEADER_CONTACT_WINDOW`: a busy leader's own tick runs long too, and with the rule above in
  place a 100,000-partition restart still had followers asking for pre-votes 422 and 504 ms
  after the leader's last AppendEntries, each time as the active controller came out of a
  421 / 823 ms stall (refused only because the other follower had heard from it later). A
  killed or crashed leader's connection closes at once, so its failover keeps the short
  window; a leader gone without closing it (a paused process, a cut link) is replaced after
  the long one, as a KRaft follower waits controller.quorum.fetch.timeout.ms (2 s).

- pysyncobj stands only when these rules say so (`stands_in_this_tick`). Its own candidacy check
  runs inside its tick after a stretch that can stall: once a second its journal writes the
  commit index to a meta file with an fsync, and a starved thread can lose the GIL or its core
  anywhere. A deadline that had not expired when the rules above looked could expire in that
  stretch, and pysyncobj stood at term + 1 with no pre-vote and no poll since; its term, told
  to the leader (above), deposed a leader that heartbeated every other voter. Reproduced with a
  newly added voter's meta write held 1.6 s: term 2 and a step-down in 3 of 3 runs (issue 35,
  test_dynamic_controllers). So pysyncobj's check sees the deadline only in a tick where this
  voter is to stand; in any other it sees none, and the deadline is put back after it.

Everything here takes times as seconds on a monotonic clock passed in; `quorum.metadata_log`
is the shell that reads pysyncobj's state and sends the messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Final

from common.units import SECONDS

# pysyncobj's raftMinTimeout default (election timeouts are drawn from [0.4 s, 1.4 s)); a leader
# sends AppendEntries every 0.1 s, so a follower of a live leader is never this long without one.
LEADER_CONTACT_WINDOW: Final = 0.4 * SECONDS
# The same for a leader this voter still holds a connection to (above): the active controller's
# own check-quorum bound (quorum.metadata_log.LEADER_FALLBACK_TIMEOUT) and Kafka's fetch timeout.
CONNECTED_LEADER_WINDOW: Final = 2.0 * SECONDS
PRE_VOTE_REQUEST: Final = "tidelog_pre_vote"  # message types pysyncobj does not know (it never sees them)
PRE_VOTE_RESPONSE: Final = "tidelog_pre_vote_response"
HIGHER_TERM_NOTICE: Final = "tidelog_higher_term"  # "your AppendEntries' term is behind mine": see below


class PreVoteAnswer(Enum):
    GRANTED = "granted"
    HAS_LEADER = "refused: heard from a live leader"
    IS_LEADER = "refused: this voter is the leader"
    STALE_TERM = "refused: the candidate's term is behind"
    STALE_LOG = "refused: the candidate's log is behind"


@dataclass(frozen=True, slots=True)
class VoterView:
    """What a voter knows when a (pre-)vote request arrives."""

    current_term: int
    last_log_term: int
    last_log_index: int
    is_leader: bool
    since_leader_contact_s: float | None  # None: never heard from a leader since start
    leader_connected: bool = False  # a connection to the leader it last heard from is up


def log_up_to_date(*, candidate_last_term: int, candidate_last_index: int, view: VoterView) -> bool:
    """Raft §5.4.1: the candidate's log is at least as up to date as the voter's."""
    if candidate_last_term != view.last_log_term:
        return candidate_last_term > view.last_log_term
    return candidate_last_index >= view.last_log_index


def has_live_leader(view: VoterView, window_s: float = LEADER_CONTACT_WINDOW,
                    connected_window_s: float = CONNECTED_LEADER_WINDOW) -> bool:
    """The voter leads, or heard from a leader less than `window_s` ago (`connected_window_s`
    while its connection to that leader is up)."""
    if view.is_leader:
        return True
    window = max(window_s, connected_window_s) if view.leader_connected else window_s
    return view.since_leader_contact_s is not None and view.since_leader_contact_s < window


def heard_everything_since(*, deadline: float, listened_at: float) -> bool:
    """Whether an election timer that expired at `deadline` may fire: this voter finished reading
    its sockets (`listened_at`, the end of its last poll) after the deadline, so no AppendEntries
    sent before it can still be waiting there. If not, the leader's silence may be this voter's
    own stall: it reads first, and the timer fires at the next look only if still nothing came."""
    return listened_at >= deadline


def stands_in_this_tick(*, is_voter: bool, prevote: bool, expired: bool, cleared: bool, transfer: bool) -> bool:
    """Whether pysyncobj's candidacy check may see the election deadline in this tick (module
    docstring): a voter's TimeoutNow election (`transfer`, the leader's handover); with pre-vote,
    a round won for the next term (`cleared`); without it, a timer that expired before the
    voter's last poll ended (`expired`, as `heard_everything_since` lets it fire). A non-voter
    never stands (KIP-853: an observer catches up and is added; it does not vote)."""
    if not is_voter:
        return False
    if transfer:
        return True
    return cleared if prevote else expired


def decide_pre_vote(*, proposed_term: int, candidate_last_term: int, candidate_last_index: int,
                    view: VoterView, window_s: float = LEADER_CONTACT_WINDOW) -> PreVoteAnswer:
    """Would this voter vote for the candidate at `proposed_term` (its term + 1)?"""
    if view.is_leader:
        return PreVoteAnswer.IS_LEADER
    if has_live_leader(view, window_s):
        return PreVoteAnswer.HAS_LEADER
    if proposed_term < view.current_term:
        return PreVoteAnswer.STALE_TERM
    if not log_up_to_date(candidate_last_term=candidate_last_term, candidate_last_index=candidate_last_index,
                          view=view):
        return PreVoteAnswer.STALE_LOG
    return PreVoteAnswer.GRANTED


def tells_leader_of_higher_term(*, leader_term: int, current_term: int) -> bool:
    """An AppendEntries from a leader whose term is behind this voter's: answer with the term."""
    return leader_term < current_term


def adopts_higher_term(*, notice_term: int, current_term: int) -> bool:
    """A higher-term notice this voter acts on: as any Raft message with a higher term, it adopts
    the term as a follower (a leader steps down); an equal or lower one is late and ignored."""
    return notice_term > current_term


def ignores_vote_request(*, request_term: int, view: VoterView, window_s: float = LEADER_CONTACT_WINDOW) -> bool:
    """A real RequestVote this voter drops unseen: a higher term while it has a live leader (or is
    one). Seen, it would adopt the term and, as leader, step down (pysyncobj's rule). A request at
    or below the current term changes nothing in pysyncobj's handling, so it goes through."""
    return request_term > view.current_term and has_live_leader(view, window_s)


@dataclass(slots=True)
class PreVoteRound:
    """One voter's pre-vote for `proposed_term`: the grants it has, itself included."""

    proposed_term: int
    voters: int  # the whole quorum, this voter included
    granted: set[str] = field(default_factory=set)
    refused: dict[str, str] = field(default_factory=dict)  # voter -> why

    def __post_init__(self) -> None:
        if self.voters < 1:
            raise ValueError(f"a quorum has at least one voter, not {self.voters}")

    def on_answer(self, voter: str, proposed_term: int, granted: bool, reason: str = "") -> bool:
        """Count one answer; True once a majority granted. Answers for another round are ignored."""
        if proposed_term != self.proposed_term:
            return False
        if granted:
            self.granted.add(voter)
            self.refused.pop(voter, None)
        else:
            self.refused[voter] = reason
        return self.won

    def is_for(self, current_term: int) -> bool:
        """The round asked for the term after `current_term`: its grants still count."""
        return self.proposed_term == current_term + 1

    @property
    def won(self) -> bool:
        return (len(self.granted) + 1) * 2 > self.voters  # + 1: the candidate votes for itself
