"""The metadata quorum's Raft state machine: a pysyncobj `SyncObj` holding `MetadataLogState`.

One replicated method, `_append_chunk(data, epoch)`, carries a chunk of encoded records and
the controller epoch it was decided under; every voter applies it in log order through
`MetadataLogState.apply_chunk` (dense offsets, epoch fencing, `metadata.delta.apply`).

pysyncobj 0.3.17 facts this module relies on (read in its source, checked by our tests):
- Replicated methods and their callbacks run on pysyncobj's tick thread; a callback gets
  (the method's return value on this voter, FAIL_REASON). A lost command may never call
  back, so every append here has a timeout whose outcome is UNKNOWN.
- With `serializer`/`deserializer` set, pysyncobj writes no pickle of our object: at log
  compaction it calls our serializer synchronously on the tick thread (no fork), right
  after applying entry `last_applied`, with its own bookkeeping (the last two Raft entries
  and the cluster) that our dump must hand back, and renames the file at once after it
  returns (so the file must be complete and fsynced by then). The journal then drops the
  entries the dump covers; journal (mmap'd file) + dump restore everything on restart, and a
  follower too far behind is sent the dump file itself.
- So the serializer does no O(partitions) work: it writes the base snapshot as it is and the
  chunks after it (memcpy speed). The fold that moves the base forward starts after the dump
  and needs no replay (`MetadataLogState.begin_fold`: an image kept at a chunk boundary);
  its snapshot is encoded a slice per tick (`quorum.fold_encoder`) and installed under the
  lock; the next dump writes it. Folding inside the serializer, replaying ~350,000 records
  and encoding, held every controller for 37 s at 100,000 partitions (issue 35).
- pysyncobj's own journal fsyncs nothing (an mmap'd file, a term/vote file renamed from an
  un-fsynced temp file). We hand it `quorum.durable_journal.DurableJournal` instead (same
  file format) and gate the transport (`quorum.durability_gate`): with
  `controller.quorum.fsync=true` (the default) an entry is fsynced before this voter
  acknowledges it or, as leader, counts it toward a commit (one fsync per tick pass, KRaft's
  batching); the term and vote are durable before a vote is answered or asked for; the dump
  is fsynced here, renamed by pysyncobj, and the directory fsynced before the journal drops
  the entries it covers. With fsync off a killed process still loses nothing the kernel has,
  a power loss may.
- `password` makes pysyncobj encrypt and authenticate every message (Fernet, needs the
  `cryptography` package); without it any peer could send pickles we would load.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

import msgpack
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated
from pysyncobj.encryptor import HAS_CRYPTO
from pysyncobj.monotonic import monotonic as pysyncobj_monotonic
from pysyncobj.syncobj import _RAFT_STATE, SyncObjException

from common.metadata_version import metadata_version
from common.units import SECONDS
from metadata.codec import MetadataRecordError
from metadata.feature_support import describe_levels, unsupported_levels
from metadata.image import MetadataImage
from metadata.records import AbortTransaction, Record, encode_records
from quorum.bound_transport import BoundTCPTransport
from quorum.durability_gate import DurabilityGate
from quorum.durable_journal import DurableJournal, journal_for_syncobj
from quorum.fold_encoder import FOLD_SLICE_TIME, FoldEncoder
from quorum.log_state import (
    AppendOutcome,
    MetadataLogState,
    OutcomeKind,
    transaction_chunks,
)
from quorum.prevote import (
    CONNECTED_LEADER_WINDOW,
    HIGHER_TERM_NOTICE,
    LEADER_CONTACT_WINDOW,
    PRE_VOTE_REQUEST,
    PRE_VOTE_RESPONSE,
    PreVoteAnswer,
    PreVoteRound,
    VoterView,
    adopts_higher_term,
    decide_pre_vote,
    heard_everything_since,
    ignores_vote_request,
    stands_in_this_tick,
    tells_leader_of_higher_term,
)
from quorum.quorum_describe import FollowerProgress, OffsetIndex, QuorumDescription, describe
from quorum.quorum_settings import QuorumBindError, QuorumSettings, QuorumStatus
from quorum.voter_changes import TRANSFER_FLAG, VoterMembership, dump_voters, start_voters, static_voters
from quorum.voter_set import VoterSet
from quorum.directory_id import load_or_create

logger = logging.getLogger(__name__)

JOURNAL_FILE: Final = "quorum.journal"
DUMP_FILE: Final = "quorum.dump"
# design.md: ~1 ms commits without batching; reconnect and step down quickly.
CONNECTION_RETRY_TIME: Final = 0.5 * SECONDS
LEADER_FALLBACK_TIMEOUT: Final = 2 * SECONDS
BIND_RETRY_TIME: Final = 1 * SECONDS
BIND_RETRIES: Final = 5  # then the node fails to start instead of retrying for ever
COMMANDS_QUEUE_MAX: Final = 1000  # pysyncobj's queue of not-yet-appended commands
PIPELINE_WINDOW: Final = 4  # chunks of one transaction in flight at once
CHUNK_COMMIT_BUDGET: Final = 0.25 * SECONDS  # per chunk of a transaction, at the least
LOG_COMPACTION_MIN_TIME: Final = 300 * SECONDS  # or this long, whichever comes first
# An election timer that expired while this voter was not reading its sockets is held this long
# (quorum.prevote.heard_everything_since): one tick period (pysyncobj's autoTickPeriod), so it is
# still ahead when pysyncobj looks at it in this tick, and the poll after that look reads first.
LISTEN_HOLD: Final = 0.05 * SECONDS
NO_ELECTION: Final = math.inf  # pysyncobj's election deadline while its tick must not stand (quorum.prevote)
DUMP_FORMAT: Final = "tidelog-quorum-dump"
DUMP_VERSION: Final = 1  # 1: with the voter set (KIP-853, quorum.voter_changes); 0 is still read
_DUMP_KEYS: Final = frozenset({"format", "version", "state", "raft_last", "raft_prev", "cluster"})
_DUMP_KEYS_V1: Final = _DUMP_KEYS | {"voters"}
_FAIL_NAMES: Final = {v: k for k, v in vars(FAIL_REASON).items() if k.isupper()}


def _raft_entry(value: Any) -> tuple[bytes, int, int]:
    """A Raft entry as pysyncobj's journal holds it: (command, index, term)."""
    if (not isinstance(value, list) or len(value) != 3 or not isinstance(value[0], bytes)
            or type(value[1]) is not int or type(value[2]) is not int):
        raise MetadataRecordError(f"not a raft entry: {value!r:.80}")
    return value[0], value[1], value[2]


def _resolve(future: asyncio.Future[AppendOutcome], outcome: AppendOutcome) -> None:
    if not future.done():  # the waiter may have timed out already
        future.set_result(outcome)


class MetadataLog(VoterMembership, SyncObj):
    """One voter of the metadata quorum; the committed log and image are read under a lock."""

    def __init__(self, settings: QuorumSettings) -> None:
        if not settings.password.value:  # QuorumSettings refuses this too; never start without it
            raise ValueError("a controller quorum voter needs a cluster password")
        if not HAS_CRYPTO:
            raise ImportError("the controller quorum needs the 'cryptography' package "
                              "(pysyncobj encrypts with the cluster password through it)")
        # Our state exists before SyncObj.__init__: its tick thread starts in there and may
        # load the dump and apply journal entries before it returns.
        self._settings = settings
        self._lock = threading.Lock()
        self._log_state = MetadataLogState(fold_spacing=settings.fold_spacing)
        self._fold: FoldEncoder | None = None  # a fold's snapshot being encoded (tick thread only)
        self._dump_offset = -1
        self._fatal: str | None = None
        self._listeners: list[Callable[[], None]] = []
        self._apply_listeners: list[Callable[[], None]] = []
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        if not settings.fsync:
            logger.warning("controller.quorum.fsync=false: the metadata journal, the term/vote file and "
                           "the dump are not fsynced; a power loss may lose acknowledged metadata or a "
                           "cast vote")
        self._journal = DurableJournal(settings.data_dir / JOURNAL_FILE, dump_path=settings.data_dir / DUMP_FILE,
                                       durable=settings.fsync)
        # KIP-853: the voter set is the log's (dump + membership entries), the static config only
        # until the log says otherwise (quorum.voter_changes)
        self.directory_id = load_or_create(settings.data_dir, durable=settings.fsync)
        self.raft_address = settings.me.address
        self._startup_dump = (settings.data_dir / DUMP_FILE).exists()
        try:
            voters = start_voters(static_voters({i: v.address for i, v in settings.voters.items()}),
                                  dump_voters(settings.data_dir / DUMP_FILE), self._journal)
        except (ValueError, OSError, msgpack.UnpackException) as exc:
            self._journal._destroy()
            raise OSError(f"cannot read the voter set from {settings.data_dir}: {exc}") from exc
        self._init_membership(settings.node_id, voters, settings.observer_session_timeout)
        # read by BoundTCPTransport while SyncObj.__init__ builds it
        self.durability_gate = DurabilityGate(self._journal)
        self._progress = FollowerProgress()  # DescribeQuorum's bookkeeping (quorum.quorum_describe)
        self._offsets = OffsetIndex()
        # pre-vote (quorum.prevote): read and written on the tick thread only
        self._prevote = settings.prevote
        self._prevote_round: PreVoteRound | None = None
        self._prevote_logged_term = -1  # a minority voter retries every timeout: one INFO line per term
        self._election_cleared: int | None = None  # the term a won round cleared pysyncobj's candidacy for
        self._told_leader: tuple[str, int] | None = None  # the (stale leader, term) last logged
        self._leader_contact: float | None = None  # pysyncobj's monotonic clock, last leader AppendEntries
        self._ignored_vote: tuple[str, int] | None = None  # the (candidate, term) last logged
        self._leader_term: int | None = None  # the term this voter became leader in
        # pysyncobj's monotonic clock at the end of this voter's last poll (tick thread only)
        self._listened_at = 0.0
        # (the deadline _listen_before_standing set, the expiry it postponed): one poll after
        # that expiry is enough, however long the ticks around it run
        self._held: tuple[float, float] | None = None
        # pre-votes and vote requests read in this tick's poll, answered after it (quorum.prevote):
        # (kind, voter) -> the answer; one per kind and voter, so bounded by the voter count
        self._after_poll: dict[tuple[str, str], Callable[[], None]] = {}
        self.raft_message_observer = self._observe_message
        logger.info("Metadata quorum voter %d: pre-vote %s; check-quorum: the active controller steps down "
                    "after %.1f s without answers from a majority", settings.node_id,
                    "on" if settings.prevote else "OFF (controller.quorum.prevote=false)", LEADER_FALLBACK_TIMEOUT)
        me = settings.me
        conf = SyncObjConf(
            password=settings.password.value,
            journalFile=str(settings.data_dir / JOURNAL_FILE),
            fullDumpFile=str(settings.data_dir / DUMP_FILE),
            serializer=self._write_dump,
            deserializer=self._read_dump,
            bindAddress=me.address,
            appendEntriesUseBatch=False,
            connectionRetryTime=CONNECTION_RETRY_TIME,
            leaderFallbackTimeout=LEADER_FALLBACK_TIMEOUT,
            dynamicMembershipChange=True,  # KIP-853 (quorum.voter_changes)
            commandsQueueSize=COMMANDS_QUEUE_MAX,
            logCompactionMinEntries=settings.compaction_min_entries,
            logCompactionMinTime=LOG_COMPACTION_MIN_TIME,
            bindRetryTime=BIND_RETRY_TIME,
            maxBindRetries=BIND_RETRIES,
            onStateChanged=self._on_state_changed,
        )
        others = [v.raft_address for v in voters if v.node_id != settings.node_id]
        mine = voters.get(settings.node_id)
        if mine is not None and mine.raft_address != me.address:
            logger.warning("The voter set names controller %d at %s, its config at %s: it listens on the latter",
                           settings.node_id, mine.raft_address, me.address)
        logger.info("Metadata quorum: controller %d (directory id %s) starts as %s; voters %s", settings.node_id,
                    self.directory_id, "a voter" if mine is not None else "an observer (not a voter until added)",
                    ", ".join(f"{v.node_id}@{v.raft_address}" for v in voters))
        # outgoing peer connections leave from this voter's own address (chaos cuts links by it)
        with journal_for_syncobj(self._journal):
            super().__init__(me.address, others, conf, transportClass=BoundTCPTransport)
        self._flag_transfer_votes()
        try:
            self.waitBinded()
        except SyncObjException:
            self.destroy()
            raise QuorumBindError(f"cannot bind the quorum listener on {me.address}") from None
        if mine is not None and not others:
            # Kafka's KafkaRaftClient.initialize: the only voter stands at once. No other voter
            # can be heard first, so pysyncobj's election timeout (0.4-1.4 s) would only delay
            # a one-controller cluster's start. The tick thread acts on it at its next tick.
            logger.info("Metadata quorum voter %d is the only voter: standing for election at once",
                        settings.node_id)
            self._SyncObj__raftElectionDeadline = 0

    def _onTick(self, timeToWait: float = 0.0) -> None:  # pysyncobj's name (tick thread)
        # Flush before: the leader counts its own log toward a commit at the start of a tick.
        # Flush after: AppendEntries handled in this tick's poll are answered once fsynced.
        # (The transport flushes once more right before the poll: quorum.bound_transport.)
        self.durability_gate.flush()
        self._run_tick_calls()
        self._forget_silent_observers()
        self._hold_candidacy()
        self._mark_transfer_election()
        self._listen_before_standing()
        if self._prevote and self.is_voter():
            self._pre_vote_tick()
        self._fold_step()
        self._listen_before_standing()  # the fold's slice may have run past the deadline too
        deadline: float = getattr(self, "_SyncObj__raftElectionDeadline")  # mypy needs its type
        # a round won in an earlier poll, or in _pre_vote_tick just now (a quorum of one)
        cleared, self._election_cleared = self._election_cleared == self.raftCurrentTerm + 1, None
        if not stands_in_this_tick(is_voter=self.is_voter(), prevote=self._prevote, cleared=cleared,
                                   expired=deadline < pysyncobj_monotonic(),
                                   transfer=self._SyncObj__transferInProgress):
            self._SyncObj__raftElectionDeadline = NO_ELECTION  # its check cannot fire mid-tick (quorum.prevote)
        try:
            super()._onTick(timeToWait)
        finally:
            if self._SyncObj__raftElectionDeadline == NO_ELECTION:  # not reset by an AppendEntries or a vote
                self._SyncObj__raftElectionDeadline = deadline
        self._listened_at = pysyncobj_monotonic()
        self._answer_after_poll()
        self.durability_gate.flush()

    def _listen_before_standing(self) -> None:
        """An election timer that expired while this voter was busy outside its poll waits for
        one poll: the leader's AppendEntries may be in the socket unread (quorum.prevote)."""
        if self._SyncObj__raftState not in (_RAFT_STATE.FOLLOWER, _RAFT_STATE.CANDIDATE):
            return
        deadline: float = getattr(self, "_SyncObj__raftElectionDeadline")  # mypy needs its type
        now = pysyncobj_monotonic()
        if deadline >= now:
            return
        held, self._held = self._held, None
        expired = held[1] if held is not None and held[0] == deadline else deadline  # not reset since
        if heard_everything_since(deadline=expired, listened_at=self._listened_at):
            return
        contact = self._leader_contact
        logger.debug("Election timer expired %.0f ms ago, %.0f ms after this voter last read its sockets "
                     "(leader last heard %s): reading them before standing", (now - expired) * 1000,
                     (expired - self._listened_at) * 1000,
                     "never" if contact is None else f"{(now - contact) * 1000:.0f} ms ago")
        self._held = (now + LISTEN_HOLD, expired)
        self._SyncObj__raftElectionDeadline = self._held[0]

    def _answer_after_poll(self) -> None:
        """Answer the pre-votes and vote requests this tick's poll read, now that it has read
        every AppendEntries that came with them (quorum.prevote)."""
        pending, self._after_poll = self._after_poll, {}
        for answer in pending.values():  # bounded: one per kind and voter
            answer()

    # -- pre-vote (quorum.prevote holds the rules; this is where they meet pysyncobj) --
    #
    # pysyncobj 0.3.17 has no pre-vote. Its `_onTick` starts a candidacy (term + 1, durable vote
    # for itself, RequestVote to all) as soon as the election deadline has passed, and its
    # `__onMessageReceived` makes any voter, the leader too, adopt a higher term from a
    # RequestVote and step down. We change neither method: the candidacy is held back by
    # moving its deadline before `_onTick` looks at it (below), and a RequestVote we must
    # ignore never reaches pysyncobj (`_observe_message`). The pre-vote messages are our own
    # types, carried by pysyncobj's (encrypted) transport and never delivered to it.

    def _raft_view(self) -> VoterView:
        now = pysyncobj_monotonic()
        contact = self._leader_contact
        leader = self._SyncObj__raftLeader  # pysyncobj's node of the leader it follows; None: none
        return VoterView(
            current_term=self.raftCurrentTerm,
            last_log_term=self._SyncObj__getCurrentLogTerm(),  # pysyncobj 0.3.17's, name-mangled
            last_log_index=self._SyncObj__getCurrentLogIndex(),
            is_leader=self._SyncObj__raftState == _RAFT_STATE.LEADER,
            since_leader_contact_s=None if contact is None else now - contact,
            leader_connected=leader is not None and bool(self.isNodeConnected(leader)))

    def _pre_vote_tick(self) -> None:
        """Before pysyncobj's candidacy check: if the election timer fired, ask first."""
        state = self._SyncObj__raftState
        if state not in (_RAFT_STATE.FOLLOWER, _RAFT_STATE.CANDIDATE):
            return
        deadline: float = getattr(self, "_SyncObj__raftElectionDeadline")  # set below: mypy needs its type
        if deadline >= pysyncobj_monotonic():
            return
        if self._SyncObj__transferInProgress:
            return  # a TimeoutNow from the leader itself: the thesis skips pre-vote for it
        if self._election_cleared == self.raftCurrentTerm + 1:
            return  # a majority granted: pysyncobj's candidacy (term + 1) runs in this tick (_onTick)
        # (a term adopted since the round was won: it would run for another term; ask again)
        if not self._SyncObj__connectedToAnyone():
            return  # pysyncobj would not stand either
        # hold pysyncobj's candidacy back one election timeout; a won round brings it forward
        self._SyncObj__raftElectionDeadline = pysyncobj_monotonic() + self._SyncObj__generateRaftTimeout()
        previous = self._prevote_round
        view = self._raft_view()
        others = list(self._SyncObj__otherNodes)
        round_ = PreVoteRound(proposed_term=view.current_term + 1, voters=len(others) + 1)
        self._prevote_round = round_
        if round_.proposed_term != self._prevote_logged_term:
            self._prevote_logged_term = round_.proposed_term
            lost = "" if previous is None else f"; last round refused by {previous.refused or 'nobody (no answers)'}"
            silent = view.since_leader_contact_s
            logger.info("Election timeout: asking for pre-votes for term %d (last log term %d, index %d; "
                        "leader last heard %s)%s", round_.proposed_term, view.last_log_term, view.last_log_index,
                        "never" if silent is None else f"{silent * 1000:.0f} ms ago", lost)
        if round_.won:  # a quorum of one
            self._clear_election(round_)
            return
        request = {"type": PRE_VOTE_REQUEST, "proposed_term": round_.proposed_term,
                   "last_log_term": view.last_log_term, "last_log_index": view.last_log_index}
        for node in others:  # bounded by the voter count
            self._SyncObj__transport.send(node, request)

    def _clear_election(self, round_: PreVoteRound) -> None:
        logger.info("Pre-vote for term %d won (granted by %s): starting an election",
                    round_.proposed_term, sorted(round_.granted) or "this voter alone")
        self._prevote_round = None
        self._election_cleared = round_.proposed_term
        self._SyncObj__raftElectionDeadline = 0  # pysyncobj's check runs on the next tick

    def _on_pre_vote_message(self, node: Any, message: dict[str, Any]) -> None:
        voter = getattr(node, "address", str(node))
        if message["type"] == PRE_VOTE_REQUEST:
            proposed, last_term, last_index = (message.get(k) for k in
                                               ("proposed_term", "last_log_term", "last_log_index"))
            if not all(type(v) is int for v in (proposed, last_term, last_index)):
                logger.warning("Ignored a malformed pre-vote request from %s: %r", voter, message)
                return
            assert isinstance(proposed, int) and isinstance(last_term, int) and isinstance(last_index, int)
            view = self._raft_view()
            answer = decide_pre_vote(proposed_term=proposed, candidate_last_term=last_term,
                                     candidate_last_index=last_index, view=view)
            if answer is PreVoteAnswer.GRANTED:
                silent = view.since_leader_contact_s
                logger.info("Granted %s a pre-vote for term %d (leader last heard %s)", voter, proposed,
                            "never" if silent is None else f"{silent * 1000:.0f} ms ago")
            else:
                logger.debug("Refused %s a pre-vote for term %d: %s", voter, proposed, answer.value)
            self._SyncObj__transport.send(node, {
                "type": PRE_VOTE_RESPONSE, "proposed_term": proposed, "term": self.raftCurrentTerm,
                "granted": answer is PreVoteAnswer.GRANTED, "reason": answer.value})
            return
        round_ = self._prevote_round
        proposed, granted = message.get("proposed_term"), message.get("granted")
        if round_ is None or type(proposed) is not int or not isinstance(granted, bool):
            return  # a late answer to a finished round
        if self._SyncObj__raftState == _RAFT_STATE.LEADER:
            return
        if not round_.is_for(self.raftCurrentTerm):
            self._prevote_round = None  # the term moved on: the next timeout asks for the new one
            return
        if round_.on_answer(voter, proposed, granted, str(message.get("reason", ""))):
            self._clear_election(round_)

    def _tell_leader_of_higher_term(self, node: Any, leader_term: int) -> None:
        """etcd raft's answer to a lower-term leader (quorum.prevote): once per AppendEntries, so
        at the leader's send rate until it steps down."""
        key = (getattr(node, "address", str(node)), leader_term)
        if key != self._told_leader:
            self._told_leader = key
            logger.info("Told %s, which sends AppendEntries of term %d, that this voter is at term %d: "
                        "it steps down, and an election at a higher term follows", key[0], leader_term,
                        self.raftCurrentTerm)
        self._SyncObj__transport.send(node, {"type": HIGHER_TERM_NOTICE, "term": self.raftCurrentTerm})

    def _on_higher_term_notice(self, node: Any, message: dict[str, Any]) -> None:
        term = message.get("term")
        if type(term) is not int:
            logger.warning("Ignored a malformed higher-term notice from %s: %r", getattr(node, "address", node),
                           message)
            return
        if not adopts_higher_term(notice_term=term, current_term=self.raftCurrentTerm):
            return  # a late one: the term was adopted already
        logger.warning("Voter %s is at term %d, ahead of this voter's %d: adopting it as a follower",
                       getattr(node, "address", node), term, self.raftCurrentTerm)
        # pysyncobj's own rule for a higher-term RequestVote (its __onMessageReceived), which
        # stickiness keeps from reaching it; the state change logs the step-down
        self._SyncObj__setCurrentTerm(term, None)
        self._SyncObj__raftLeader = None
        self._SyncObj__setState(_RAFT_STATE.FOLLOWER)

    def _observe_message(self, node: Any, message: Any, deliver: Callable[[Any, Any], None]) -> None:
        """Every Raft message this voter receives (tick thread): `deliver` is pysyncobj's handler.

        A follower's AppendEntries answer also feeds DescribeQuorum's bookkeeping, and a stale
        one no longer moves the leader's next index back: pysyncobj sets next index to the
        answer's on any success that raises the match index, so an answer to an older
        AppendEntries arriving after newer ones were sent (acks wait for their fsync, which
        makes that common) sent those entries again, and the follower truncated and rewrote
        entries it had already applied (pysyncobj logs it as CRITICAL). Raft ignores such
        answers; so do we, by restoring the next index pysyncobj had before. A refusal
        (success false, reset) still moves it wherever the follower says."""
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == PRE_VOTE_REQUEST:  # ours alone: pysyncobj never sees them
            self._after_poll[kind, getattr(node, "address", str(node))] = \
                lambda: self._on_pre_vote_message(node, message)
            return
        if kind == PRE_VOTE_RESPONSE:
            self._on_pre_vote_message(node, message)
            return
        if kind == "append_entries" and type(message.get("term")) is int \
                and message["term"] >= self.raftCurrentTerm:
            # what pysyncobj accepts as its leader's: the leader is alive, any pre-vote is moot
            self._leader_contact = pysyncobj_monotonic()
            self._prevote_round = None
            self._election_cleared = None
        # whatever this voter's own pre-vote setting: the others' stickiness is what strands it
        if kind == "append_entries" and type(message.get("term")) is int \
                and tells_leader_of_higher_term(leader_term=message["term"], current_term=self.raftCurrentTerm):
            self._tell_leader_of_higher_term(node, message["term"])
        if kind == HIGHER_TERM_NOTICE:
            self._on_higher_term_notice(node, message)
            return  # ours alone
        if kind == "request_vote" and self._prevote and type(message.get("term")) is int \
                and not message.get(TRANSFER_FLAG):
            self._after_poll[kind, getattr(node, "address", str(node))] = \
                lambda: self._on_vote_request(node, message, deliver)
            return
        if kind != "next_node_idx":
            deliver(node, message)
            return
        next_indexes: dict[Any, int] = self._SyncObj__raftNextIndex  # pysyncobj 0.3.17's, name-mangled
        before = next_indexes.get(node)
        deliver(node, message)
        if not self._isLeader():
            return
        if message.get("success") and not message.get("reset") and before is not None \
                and next_indexes.get(node, before) < before:
            next_indexes[node] = before
        next_index = message.get("next_node_idx")
        match = next_index - 1 if message.get("success") and isinstance(next_index, int) else None
        last_index = self._journal[-1][1] if len(self._journal) else 0
        self._progress.on_response(getattr(node, "address", str(node)), self.raftCurrentTerm, match,
                                   last_index, int(time.time() * 1000))

    def _on_vote_request(self, node: Any, message: dict[str, Any], deliver: Callable[[Any, Any], None]) -> None:
        """A RequestVote (not a leader's handover), after the poll that read it."""
        if not ignores_vote_request(request_term=message["term"], view=self._raft_view()):
            deliver(node, message)
            return
        # KIP-996: a voter with a live leader ignores it (delivered, pysyncobj would adopt the
        # term and the leader would step down for a candidate that cannot win)
        key = (getattr(node, "address", str(node)), message["term"])
        if key != self._ignored_vote:
            self._ignored_vote = key
            logger.warning("Ignored a vote request from %s for term %d: this voter %s (term %d)",
                           key[0], key[1], "is the leader" if self._isLeader() else
                           f"heard from the leader within {LEADER_CONTACT_WINDOW:.1f} s "
                           f"({CONNECTED_LEADER_WINDOW:.1f} s while connected to it)", self.raftCurrentTerm)

    def describe_quorum(self, observers: Sequence[tuple[int, int, int]]) -> QuorumDescription | None:
        """DescribeQuorum's answer if this voter is the Raft leader, else None; `observers` as
        `quorum.quorum_describe.describe` takes them."""
        leader, term = self.leadership()
        if not leader:
            return None
        with self._lock:
            high_watermark = self._log_state.last_offset + 1
        followers = {voter.node_id: self._progress.of(voter.raft_address, term)
                     for voter in self._voters if voter.node_id != self._settings.node_id}
        observers = list(observers)
        for learner in self.learners():  # controllers catching up before they join (KIP-853)
            progress = self._progress.of(learner.raft_address, term)
            if progress is not None:
                end = (high_watermark if progress.match_index >= self.raftLastApplied
                       else self._offsets.end_offset(progress.match_index))
                observers.append((learner.node_id, progress.last_response_ms, end - 1 if end >= 0 else -1))
        return describe(leader_id=self._settings.node_id, term=term, high_watermark=high_watermark,
                        last_applied_index=self.raftLastApplied, followers=followers, offsets=self._offsets,
                        observers=observers, now_ms=int(time.time() * 1000),
                        directory_ids={v.node_id: v.directory_id for v in [*self._voters, *self.learners()]})

    def durability(self) -> tuple[bool, int, int]:
        """(fsync on, fsync batches so far, entries they made durable): for logs and the bench."""
        return self._journal.durable, self._journal.syncs, self._journal.synced_entries

    # -- the replicated state machine (tick thread) ----------------------------------

    # The journal stores a call as (method id, args) and pysyncobj numbers the replicated
    # methods by sorted (ver, name): another @replicated method would renumber this one and
    # make old journals call the wrong method. Change the record format, not this signature.
    @replicated
    def _append_chunk(self, data: bytes, epoch: int) -> AppendOutcome:
        """Apply one committed chunk: on every voter, in log order, on the tick thread."""
        try:
            with self._lock:
                features = self._log_state.image.features
                outcome = self._log_state.apply_chunk(data, epoch)
                end_offset = self._log_state.last_offset + 1
                image = self._log_state.image
        except Exception as exc:  # a bug: stop this voter rather than let its state diverge
            self._fail(f"applying a chunk failed: {exc!r}")
            raise
        if image.features is not features:  # a FeatureLevel record (or a transaction holding one) applied
            self._check_features(image, f"a committed chunk of epoch {epoch}")
        # pysyncobj counts an entry applied after this returns: this is entry raftLastApplied + 1
        self._offsets.record(self.raftLastApplied + 1, end_offset)
        if not outcome.committed:  # every voter decides the same; each says so in its log
            logger.warning("Did not apply a committed chunk of epoch %s: %s: %s",
                           epoch, outcome.kind.value, outcome.reason)
        self._applied()
        return outcome

    def _write_dump(self, path: str, raft: tuple[Any, Any, Any]) -> None:
        """pysyncobj's serializer: our state plus its bookkeeping, as plain msgpack."""
        last, prev, cluster = raft
        with self._lock:  # references only: the event loop takes this lock too
            parts, offset = self._log_state.dump_parts(), self._log_state.last_offset
            start = self._log_state.log_start_offset
        state = parts.encode()  # bytes the state already holds: memcpy speed (~10 ms for 12 MB)
        payload = msgpack.packb({
            "format": DUMP_FORMAT, "version": DUMP_VERSION, "state": state,
            "raft_last": list(last), "raft_prev": list(prev),
            "cluster": sorted(getattr(node, "address", str(node)) for node in cluster),
            "voters": self._voters.to_list(),  # pysyncobj's cluster with ids and directory ids
        }, use_bin_type=True)
        with open(path, "wb") as f:
            f.write(payload)
            if self._settings.fsync:  # pysyncobj renames it next; the journal fsyncs the directory
                f.flush()             # before it drops the entries this dump covers
                os.fsync(f.fileno())
        self._dump_offset = offset
        logger.info("Wrote metadata log dump at offset %d, raft index %d (%d bytes, log start offset %d)",
                    offset, last[1], len(payload), start)
        self._begin_fold("after the dump")

    def _begin_fold(self, why: str) -> None:
        """Start encoding the snapshot of the newest fold point that leaves `retained_records`
        records (tick thread); the next dump is written from it."""
        with self._lock:
            state = self._log_state
            point = state.begin_fold(self._settings.retained_records)
            start, last = state.log_start_offset, state.last_offset
        if self._fold is not None and self._fold.point is point:
            return  # already being encoded (a dump while a fold it would choose runs)
        self._fold = None if point is None else FoldEncoder(state, point)
        if point is not None:
            logger.info("Folding the metadata log at offset %d %s (log start offset %d, last offset %d): "
                        "encoding its snapshot between ticks", point.offset, why, start, last)

    def _fold_step(self) -> None:
        """Encode a slice of the fold's snapshot; install it once complete (tick thread). Without a
        dump, fold once the log holds `fold_trigger_records` records after its base: the next dump
        (and a broker's fetch behind the log start) then gets a recent snapshot, and the chunks
        held in memory stay bounded."""
        fold = self._fold
        if fold is None:
            with self._lock:
                held = self._log_state.last_offset + 1 - self._log_state.log_start_offset
            if held >= self._settings.fold_trigger_records:
                self._begin_fold(f"with {held} records after the base")
            return
        try:
            snapshot = fold.step(FOLD_SLICE_TIME)
        except Exception:  # a bug: give up this fold, keep the tick thread (the next dump retries)
            self._fold = None
            logger.exception("Encoding the metadata log fold at offset %d failed", fold.point.offset)
            return
        if snapshot is None:
            return
        self._fold = None
        with self._lock:
            folded = fold.state is self._log_state and fold.state.finish_fold(fold.point, snapshot)
        if folded:
            logger.info("Folded the metadata log at offset %d: snapshot of %d bytes encoded in %d slices "
                        "(%.2f s CPU, longest slice %.0f ms)", fold.point.offset, len(snapshot), fold.slices,
                        fold.cpu_s, fold.longest_slice_s * 1000)
        else:
            logger.info("Dropped the metadata log fold at offset %d: a dump from the leader replaced the log",
                        fold.point.offset)

    def _read_dump(self, path: str) -> tuple[Any, Any, Any]:
        """pysyncobj's deserializer: restore our state, return its bookkeeping."""
        try:
            with open(path, "rb") as f:
                m = msgpack.unpackb(f.read(), raw=False, strict_map_key=True)
            if not isinstance(m, dict) or m.get("format") != DUMP_FORMAT \
                    or (m.get("version"), set(m)) not in ((0, _DUMP_KEYS), (1, _DUMP_KEYS_V1)):
                raise MetadataRecordError(f"not a {DUMP_FORMAT} version 0 or {DUMP_VERSION} file")
            state = MetadataLogState.decode_dump(m["state"], fold_spacing=self._settings.fold_spacing)
            last, prev = _raft_entry(m["raft_last"]), _raft_entry(m["raft_prev"])
            voters = VoterSet.from_list(m["voters"]) if "voters" in m else None
        except (OSError, ValueError, TypeError, msgpack.UnpackException, MetadataRecordError) as exc:
            # pysyncobj would log this and go on with the journal alone: a wrong image.
            self._fail(f"cannot load metadata log dump {path}: {exc}")
            raise
        with self._lock:
            self._log_state = state
        self._check_features(state.image, f"the metadata log dump {path}")
        self._dump_offset = state.last_offset
        self._offsets.record(last[1], state.last_offset + 1)
        logger.info("Loaded metadata log dump: offset %d, controller epoch %d, raft index %d",
                    state.last_offset, state.image.controller_epoch, last[1])
        self._applied()
        if self._startup_dump:
            # our own dump at start: the voter set already holds it and the journal's later
            # membership entries (__init__); pysyncobj would reset its partners to the dump's
            self._startup_dump = False
        elif voters is not None:  # a dump the leader sent: its voter set replaces ours
            self._voters = voters
            logger.info("Voter set from the leader's dump: voters %s", voters.ids)
        me = self._settings.me.address
        return last, prev, [v.raft_address for v in self._voters if v.raft_address != me]

    def _applied(self) -> None:
        for listener in list(self._apply_listeners):
            try:
                listener()
            except Exception:  # a listener's bug must not stop the tick thread applying the log
                logger.exception("A metadata log apply listener failed")

    def _on_state_changed(self, old: int, new: int) -> None:
        if old == _RAFT_STATE.LEADER and new != _RAFT_STATE.LEADER:
            self._drop_learners()
        if new == _RAFT_STATE.LEADER:
            self._leader_term = self.raftCurrentTerm
        elif old == _RAFT_STATE.LEADER:
            # pysyncobj sets a higher term before it steps down for it: the same term means its
            # leaderFallbackTimeout fired (check-quorum)
            why = (f"check-quorum: no answers from a majority within {LEADER_FALLBACK_TIMEOUT:.1f} s"
                   if self.raftCurrentTerm == self._leader_term else f"saw term {self.raftCurrentTerm}")
            logger.warning("Stepped down as Raft leader of term %s: %s", self._leader_term, why)
        for listener in list(self._listeners):
            listener()

    def _check_features(self, image: MetadataImage, source: str) -> None:
        """Stop this voter when `image` finalizes a feature level this build does not implement,
        as Kafka's controller does (metadata.feature_support). Not a rejection of the chunk: every
        voter that implements the level applies it, and this one's state must not diverge from
        theirs; it stops, and on a restart of the same build its journal or dump stops it again."""
        refused = unsupported_levels(image.features.levels)
        if refused:
            self._fail(f"{source} finalized {describe_levels(refused)} (metadata log offset {image.offset}): this "
                       "controller cannot replay a feature level it does not implement, which a controller of a "
                       "newer build wrote; run a build that supports it")

    def _fail(self, reason: str) -> None:
        if self._fatal is None:  # pysyncobj retries a failed apply every tick: say it once
            logger.critical("Metadata log failed, this controller must stop: %s", reason)
            self._fatal = reason

    # -- appends (any thread but the tick thread) ------------------------------------

    def submit(self, data: bytes, epoch: int, on_done: Callable[[AppendOutcome], None]) -> None:
        """Replicate one chunk; `on_done` gets its outcome on the tick thread, or is never called."""

        def callback(result: object, error: int) -> None:
            if error == FAIL_REASON.SUCCESS and isinstance(result, AppendOutcome):
                on_done(result)
            else:
                name = _FAIL_NAMES.get(error, str(error))
                on_done(AppendOutcome(OutcomeKind.UNKNOWN, epoch, reason=f"pysyncobj {name}"))

        self._append_chunk(data, epoch, callback=callback)

    async def append_chunk(self, data: bytes, epoch: int, timeout_s: float) -> AppendOutcome:
        """Replicate one chunk and wait at most `timeout_s` for its outcome."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[AppendOutcome] = loop.create_future()

        def on_done(outcome: AppendOutcome) -> None:
            try:
                loop.call_soon_threadsafe(_resolve, future, outcome)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass

        self.submit(data, epoch, on_done)
        try:
            async with asyncio.timeout(timeout_s):
                return await future
        except TimeoutError:
            return AppendOutcome(OutcomeKind.UNKNOWN, epoch, reason=f"no outcome within {timeout_s:.3f}s")

    async def append_chunks(self, chunks: Sequence[bytes], epoch: int, timeout_s: float) -> list[AppendOutcome]:
        """Replicate chunks with up to PIPELINE_WINDOW of them in flight (their order in the log is
        the order given: one leader, one term, pysyncobj's FIFO queue); every outcome, UNKNOWN
        for those without one within `timeout_s`. The window is bounded because every voter
        applies entries on its tick thread: a flood of them delayed the followers' answers past
        LEADER_FALLBACK_TIMEOUT and the leader stepped down (measured: a term a second)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        futures: list[asyncio.Future[AppendOutcome]] = []
        for i, chunk in enumerate(chunks):  # bounded by the chunk count
            if i >= PIPELINE_WINDOW:
                await asyncio.wait([futures[i - PIPELINE_WINDOW]], timeout=max(deadline - loop.time(), 0.0))
                if not futures[i - PIPELINE_WINDOW].done():
                    break  # out of time: the rest is never sent
            future: asyncio.Future[AppendOutcome] = loop.create_future()

            def on_done(outcome: AppendOutcome, future: asyncio.Future[AppendOutcome] = future) -> None:
                try:
                    loop.call_soon_threadsafe(_resolve, future, outcome)
                except RuntimeError:  # the loop is closed: nobody waits any more
                    pass

            self.submit(chunk, epoch, on_done)
            futures.append(future)
        if futures:
            await asyncio.wait(futures, timeout=max(deadline - loop.time(), 0.0))
        unknown = AppendOutcome(OutcomeKind.UNKNOWN, epoch, reason=f"no outcome within {timeout_s:.3f}s")
        return [f.result() if f.done() else unknown for f in futures] + [unknown] * (len(chunks) - len(futures))

    async def append(self, records: Sequence[Record], epoch: int, timeout_s: float, *,
                     atomic: bool = True, name: str | None = None) -> AppendOutcome:
        """Append records under `epoch`, all or nothing: one chunk, or a transaction of several.

        A list larger than one chunk is framed by BeginTransaction ... EndTransaction (KIP-868,
        `quorum.log_state.transaction_chunks`); nothing of it is published before EndTransaction
        commits. The chunk with BeginTransaction is appended first and alone (were it refused,
        a chunk after it would apply outside any transaction); the body is pipelined
        (PIPELINE_WINDOW chunks in flight); the chunk with EndTransaction goes last, once every
        body chunk is known COMMITTED, so a refused body chunk can never be published. `atomic` is kept for callers that say so; every
        append is atomic now. The outcome names offsets only when everything committed. A
        REJECTED chunk (only a bug does that) makes this writer abort its transaction; FENCED or
        UNKNOWN leaves it open for the next active controller (`quorum.active_controller`) to
        abort, unless the End still commits.
        """
        # the form the applied image's metadata.version lets every node read: an upgrade's
        # FeatureLevel switches it for the first append after the upgrade is applied
        chunks = transaction_chunks(records, name, metadata_version=metadata_version(self.image().features.levels))
        if not chunks:
            raise ValueError("nothing to append")
        loop = asyncio.get_running_loop()
        # A transaction of 100 chunks takes longer than one decision: a caller's deadline sized
        # for one (a heartbeat's, a fence's) would time it out half way, and an UNKNOWN append
        # makes the controller renounce. Leadership loss still ends the wait at once
        # (ActiveController polls it); this only keeps a healthy leader from giving up.
        deadline = loop.time() + max(timeout_s, len(chunks) * CHUNK_COMMIT_BUDGET)

        def left() -> float:
            return max(deadline - loop.time(), 0.0)

        first = await self.append_chunk(chunks[0], epoch, left())
        if len(chunks) == 1 or not first.committed:
            return first if first.committed else self._stopped(first, 0, records, chunks)
        outcomes = await self.append_chunks(chunks[1:-1], epoch, left())
        failed = next(((i, o) for i, o in enumerate(outcomes, start=1) if not o.committed), None)
        if failed is None:
            last = await self.append_chunk(chunks[-1], epoch, left())
            if last.committed:
                logger.info("Committed a metadata transaction of %d records in %d chunks at offsets %s..%s, "
                            "epoch %d", len(records), len(chunks), first.first_offset, last.last_offset, epoch)
                return AppendOutcome(OutcomeKind.COMMITTED, epoch, first.first_offset, last.last_offset)
            failed = (len(chunks) - 1, last)
        at, outcome = failed
        if outcome.kind is OutcomeKind.REJECTED:  # still the active controller: close what it opened
            abort = encode_records([AbortTransaction(f"chunk {at} rejected: {outcome.reason}"[:200])])
            await self.append_chunk(abort, epoch, left())
        return self._stopped(outcome, at, records, chunks)

    @staticmethod
    def _stopped(outcome: AppendOutcome, at: int, records: Sequence[Record], chunks: Sequence[bytes]) -> AppendOutcome:
        logger.warning("Metadata append of %d records in %d chunks stopped at chunk %d at epoch %d: %s %s",
                       len(records), len(chunks), at, outcome.epoch, outcome.kind.value, outcome.reason)
        return dataclasses.replace(outcome, first_offset=None, last_offset=None)

    def in_transaction(self) -> bool:
        """Whether the applied log ends inside an open metadata transaction."""
        with self._lock:
            return self._log_state.in_transaction

    # -- reads (any thread) ----------------------------------------------------------

    def leadership(self) -> tuple[bool, int]:
        """(is Raft leader, current term), the two read so that they belong together."""
        term = self.raftCurrentTerm
        leader = self._isLeader()
        now = self.raftCurrentTerm
        return leader and term == now, now

    def leader_address(self) -> str | None:
        leader = self._getLeader()
        return None if leader is None else getattr(leader, "address", str(leader))

    def image(self) -> MetadataImage:
        with self._lock:
            return self._log_state.image

    def base_snapshot(self) -> tuple[int, bytes]:
        """The base snapshot's offset and bytes, encoded once when the log was folded: what a
        fetch behind the log start is sent (Kafka's FetchSnapshot), before the records after it."""
        with self._lock:
            state = self._log_state
            return state.log_start_offset - 1, state.base_snapshot

    def records_from(self, offset: int, max_records: int) -> list[tuple[int, Record]]:
        """Committed (offset, record) pairs from `offset`; IndexError if it is only in the snapshot."""
        with self._lock:
            return self._log_state.records_from(offset, max_records)

    def record_maps_from(self, offset: int, max_records: int) -> list[tuple[int, dict[str, Any]]]:
        """`records_from` as record maps (what a metadata fetch sends)."""
        with self._lock:
            return self._log_state.record_maps_from(offset, max_records)

    def status(self) -> QuorumStatus:
        leader, term = self.leadership()
        with self._lock:
            state = self._log_state
            start, last, image = state.log_start_offset, state.last_offset, state.image
        return QuorumStatus(
            node_id=self._settings.node_id, is_leader=leader, term=term,
            leader=self.leader_address(), commit_index=self.raftCommitIndex,
            last_applied=self.raftLastApplied, ready=self.isReady(), log_start_offset=start,
            last_offset=last, dump_offset=self._dump_offset, image=image)

    def fatal_error(self) -> str | None:
        """Why this voter must stop (a dump it cannot load, a failed apply), or None."""
        return self._fatal

    def add_state_listener(self, listener: Callable[[], None]) -> None:
        """Call `listener()` on the tick thread when the Raft role changes (a hint: poll `leadership`)."""
        self._listeners.append(listener)

    def remove_state_listener(self, listener: Callable[[], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def add_apply_listener(self, listener: Callable[[], None]) -> None:
        """Call `listener()` on the tick thread after every applied chunk or loaded dump (the
        image may have moved: read it)."""
        self._apply_listeners.append(listener)

    def remove_apply_listener(self, listener: Callable[[], None]) -> None:
        if listener in self._apply_listeners:
            self._apply_listeners.remove(listener)

    def close(self) -> None:
        """Stop the tick thread and close the sockets and the journal."""
        self.destroy_synchronous()
