"""Dynamic controllers (KIP-853) where they meet pysyncobj: the voter set a controller starts
with, membership entries, observers that catch up before they join, and the add/remove
operations the admin API and AddRaftVoter/RemoveRaftVoter call. The rules are
`quorum.voter_set`'s; this is the shell `quorum.metadata_log.MetadataLog` mixes in.

pysyncobj 0.3.17 facts relied on (read in its source):
- With `dynamicMembershipChange` a membership entry changes the voter set when it is appended
  (leader and followers alike) and is undone when a truncation drops it; the leader refuses one
  (REQUEST_DENIED, nothing appended) before its term's no-op is applied. It applies the entries
  once more when they commit, "required only after node restarts" — we compute the set from
  the dump and the journal before SyncObj starts instead (`start_voters`), so the apply-time
  pass is skipped (`_SyncObj__doApplyCommand`): it would briefly re-add a voter a later entry
  removed. pysyncobj's own check for an uncommitted change never fires (`__changeClusterIDx` is
  never set), so `LeaderView.pending_change` comes from the journal's uncommitted tail.
- The leader replicates to `__readonlyNodes` too and never counts them toward a commit or its
  check-quorum: an observer is one of those on the leader (a learner), fed AppendEntries and
  snapshots like a follower, until its membership entry moves it among the voters. Its transport
  connects to it every `connectionRetryTime` while it is down, for as long as it knows the node;
  `quorum.voter_set.forgets_observer` decides when it stops knowing an observer (Kafka's rule:
  never answered once no add is catching it up, or silent for the observer session timeout).
- A node refuses peer connections from addresses it does not know, so a joining controller
  starts with the voters it is configured with (or its log names) as partners and never stands
  for election while it is not a voter (its election deadline is pushed on every tick).
- pysyncobj cannot remove the leader itself (REQUEST_DENIED): removing the active controller
  hands leadership to a caught-up voter first (Raft's TimeoutNow), then the new leader removes it.

Every pysyncobj attribute touched here is read or written on the tick thread (`on_tick`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final, TypeVar

import msgpack
from pysyncobj import FAIL_REASON, SyncObj
from pysyncobj import pickle as syncobj_pickle
from pysyncobj.monotonic import monotonic as pysyncobj_monotonic
from pysyncobj.node import TCPNode
from pysyncobj.syncobj import _COMMAND_TYPE, _RAFT_STATE

from common.units import SECONDS
from quorum.voter_set import (
    ADD,
    OBSERVER_SESSION_TIMEOUT,
    REMOVE,
    ZERO_DIRECTORY_ID,
    LeaderView,
    VoterChangeError,
    VoterEntry,
    VoterSet,
    apply_membership,
    caught_up,
    check_add,
    check_remove,
    forgets_observer,
    parse_membership,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")
MEMBERSHIP_BYTE: Final = bytes([_COMMAND_TYPE.MEMBERSHIP])
CATCH_UP_POLL: Final = 0.05 * SECONDS  # how often an add looks at the observer's progress
LIVE_WINDOW: Final = 2 * SECONDS  # a voter answered within this: it counts as reachable (check-quorum's window)
HANDOVER_WAIT: Final = 3 * SECONDS  # removing the leader: how long it waits for another to lead
TRANSFER_FLAG: Final = "tidelog_transfer"  # on a RequestVote a TimeoutNow started (`_flag_transfer_votes`)
MAX_TICK_CALLS: Final = 64  # queued calls onto the tick thread; more is a bug (one change at a time)


def membership_request(command: bytes) -> Any:
    """The pysyncobj membership request a journal command holds, or None."""
    if command[:1] != MEMBERSHIP_BYTE:
        return None
    try:
        return syncobj_pickle.loads(command[1:])
    except Exception:  # pickled by pysyncobj itself; a bad one is not a voter change
        return None


def dump_voters(path: Path) -> VoterSet | None:
    """The voter set a dump file holds, None when there is no dump or it predates voter sets."""
    try:
        with open(path, "rb") as f:
            m = msgpack.unpackb(f.read(), raw=False, strict_map_key=True)
    except FileNotFoundError:
        return None
    voters = m.get("voters") if isinstance(m, dict) else None
    return None if voters is None else VoterSet.from_list(voters)


def start_voters(static: VoterSet, from_dump: VoterSet | None, journal: Iterable[tuple[bytes, int, int]]) -> VoterSet:
    """The voter set a controller starts with: the dump's (else the static config's) with every
    membership entry of the journal replayed; replaying is idempotent, so entries the dump
    already covers change nothing."""
    voters = static if from_dump is None else from_dump
    for command, _idx, _term in journal:
        parsed = parse_membership(membership_request(command))
        if parsed is not None:
            voters = apply_membership(voters, parsed[0], parsed[1], parsed[2])
    return voters


def static_voters(voters: dict[int, str]) -> VoterSet:
    """`controller.quorum.voters` as a voter set: nobody recorded their directory ids."""
    return VoterSet.of(VoterEntry(i, ZERO_DIRECTORY_ID, address) for i, address in sorted(voters.items()))


class VoterMembership:
    """Mixed into MetadataLog (before SyncObj): its voter set and the changes to it."""

    _voters: VoterSet
    _node_id: int
    _learners: dict[str, VoterEntry]  # raft address -> observer the leader replicates to (leader only)
    _adding: str | None  # the raft address of the observer an add is catching up (tick thread)
    _tick_calls: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]]
    _change_lock: asyncio.Lock | None

    def _init_membership(self, node_id: int, voters: VoterSet,
                         observer_session_timeout: float = OBSERVER_SESSION_TIMEOUT) -> None:
        self._node_id = node_id
        self._voters = voters
        self._transfer_term: int | None = None  # the term of an election a TimeoutNow starts here (tick thread)
        self._learners = {}
        self._adding = None
        self._observer_session_timeout = observer_session_timeout
        self._tick_calls = queue.SimpleQueue()
        self._change_lock = None

    # -- reads (any thread) ------------------------------------------------------------

    def voter_set(self) -> VoterSet:
        """The voters as this controller's log has them (appended, maybe not yet committed)."""
        return self._voters

    def is_voter(self) -> bool:
        return self._node_id in self._voters

    def learn_peers(self, addresses: Iterable[str]) -> list[str]:
        """An observer told of the current voters (by the leader that is about to catch it up):
        connect to them, or accept them, as pysyncobj's address order says; a voter named after
        this controller's config was written would otherwise be a stranger whose connections it
        refuses. Tick thread; the addresses it did not know."""
        if self.is_voter():
            return []
        transport = self._SyncObj__transport  # type: ignore[attr-defined]
        known: dict[str, Any] = transport._nodeAddrToNode
        new = sorted(a for a in set(addresses) if a not in known and a != self._SyncObj__selfNode.address)  # type: ignore[attr-defined]
        for address in new:
            transport.addNode(TCPNode(address))
        if new:
            logger.info("Observer %d: the leader names voters at %s, unknown to its config", self._node_id,
                        ", ".join(new))
        return new

    def learners(self) -> list[VoterEntry]:
        """The observers the leader replicates to: one an add is catching up, one whose add failed
        and that still answers, a removed voter (empty on any other controller)."""
        return sorted(self._learners.values(), key=lambda v: v.node_id)

    # -- the tick thread ---------------------------------------------------------------

    def _queue_tick_call(self, fn: Callable[[], Any]) -> None:
        """Run `fn` on the tick thread, nobody waiting (a `finally` that must not await)."""
        self._tick_calls.put((fn, concurrent.futures.Future()))

    def _run_tick_calls(self) -> None:
        """Run the calls queued for the tick thread (at the start of each tick)."""
        for _ in range(MAX_TICK_CALLS):
            try:
                fn, future = self._tick_calls.get_nowait()
            except queue.Empty:
                return
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the waiting coroutine
                future.set_exception(exc)

    async def on_tick(self, fn: Callable[[], T]) -> T:
        """Run `fn` on pysyncobj's tick thread (where its state may be read and changed)."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._tick_calls.put((fn, future))
        return await asyncio.wrap_future(future)

    def _hold_candidacy(self) -> None:
        """A non-voter never stands for election: push pysyncobj's election deadline."""
        if not self.is_voter():
            self._SyncObj__raftElectionDeadline = pysyncobj_monotonic() + LIVE_WINDOW

    def _SyncObj__doChangeCluster(self, request: Any, reverse: bool = False) -> bool:  # pysyncobj's, overridden
        parsed = parse_membership(request)
        leader = self._SyncObj__raftState == _RAFT_STATE.LEADER  # type: ignore[attr-defined]
        if parsed is not None and leader and not reverse and parsed[0] == ADD and parsed[1] in self._learners:
            self._drop_learner(parsed[1], keep_connection=False)  # pysyncobj reconnects it as a voter
        changed = bool(SyncObj._SyncObj__doChangeCluster(self, request, reverse))
        if parsed is None or (leader and not reverse and not changed):
            return changed  # the leader refused it: nothing is appended
        kind, address, entry = parsed
        before = self._voters
        self._voters = apply_membership(before, kind, address, entry, reverse=reverse)
        if leader and not reverse and kind == REMOVE and entry is not None and entry.node_id != self._node_id:
            # keep feeding the removed controller as an observer (Kafka's removed voters keep
            # fetching): it learns of its removal, stops standing for election, and a broker still
            # pointed at it reads a current log rather than one that stopped at its removal
            self._start_learner(entry)
        if self._voters != before:
            logger.info("Voter set %s: %s voter %s at %s (%s), now voters %s", "rolled back" if reverse else
                        "changed", "added" if (kind == ADD) != reverse else "removed",
                        entry.node_id if entry else "?", address, "truncated entry" if reverse else "appended entry",
                        self._voters.ids)
        return changed

    def _SyncObj__doApplyCommand(self, command: bytes) -> Any:  # pysyncobj's, overridden (module docstring)
        if command[:1] == MEMBERSHIP_BYTE:
            return None
        return SyncObj._SyncObj__doApplyCommand(self, command)

    def _leader_view(self) -> LeaderView:
        is_leader = self._SyncObj__raftState == _RAFT_STATE.LEADER  # type: ignore[attr-defined]
        noop = self._SyncObj__noopIDx  # type: ignore[attr-defined]
        applied: int = self.raftLastApplied  # type: ignore[attr-defined]
        leader = self._SyncObj__raftLeader  # type: ignore[attr-defined]
        leader_entry = None if leader is None else self._voters.by_address(getattr(leader, "address", ""))
        return LeaderView(is_leader=is_leader, committed_in_term=is_leader and noop is not None and applied >= noop,
                          pending_change=self._pending_change(),
                          leader_id=None if leader_entry is None else leader_entry.node_id)

    def _pending_change(self) -> bool:
        """A membership entry past the commit index (the uncommitted tail, newest first)."""
        journal = self._SyncObj__raftLog  # type: ignore[attr-defined]
        commit: int = self._SyncObj__raftCommitIndex  # type: ignore[attr-defined]
        for i in range(len(journal) - 1, -1, -1):  # bounded by the uncommitted tail
            command, idx, _term = journal[i]
            if idx <= commit:
                return False
            if command[:1] == MEMBERSHIP_BYTE:
                return True
        return False

    def _live_voters(self) -> set[int]:
        deadline = pysyncobj_monotonic() - LIVE_WINDOW
        times: dict[Any, float] = self._SyncObj__lastResponseTime  # type: ignore[attr-defined]
        live = {self._node_id}
        for node, when in times.items():
            entry = self._voters.by_address(getattr(node, "address", ""))
            if entry is not None and when > deadline:
                live.add(entry.node_id)
        return live

    def _start_learner(self, entry: VoterEntry, *, adding: bool = False) -> int:
        """Replicate to `entry` as an observer (not counted); the leader's last log index."""
        last: int = self._SyncObj__getCurrentLogIndex()  # type: ignore[attr-defined]
        if adding:
            self._adding = entry.raft_address
        if entry.raft_address not in self._learners:
            node = TCPNode(entry.raft_address)
            self._learners[entry.raft_address] = entry
            self._SyncObj__readonlyNodes.add(node)  # type: ignore[attr-defined]
            self._SyncObj__raftNextIndex[node] = last + 1  # type: ignore[attr-defined]
            self._SyncObj__raftMatchIndex[node] = 0  # type: ignore[attr-defined]
            self._SyncObj__transport.addNode(node)  # type: ignore[attr-defined]
            logger.info("Replicating to observer %d (directory id %s) at %s; leader log ends at raft index %d",
                        entry.node_id, entry.directory_id, entry.raft_address, last)
        return last

    def _learner_match(self, raft_address: str) -> int:
        match: int = self._SyncObj__raftMatchIndex.get(TCPNode(raft_address), 0)  # type: ignore[attr-defined]
        return match

    def _drop_learner(self, raft_address: str, *, keep_connection: bool = False) -> None:
        entry = self._learners.pop(raft_address, None)
        if entry is None:
            return
        node = TCPNode(raft_address)
        self._SyncObj__readonlyNodes.discard(node)  # type: ignore[attr-defined]
        if node not in self._SyncObj__otherNodes and not keep_connection:  # type: ignore[attr-defined]
            self._SyncObj__transport.dropNode(node)  # type: ignore[attr-defined]
            self._SyncObj__connectedNodes.discard(node)  # type: ignore[attr-defined]
            self._SyncObj__raftNextIndex.pop(node, None)  # type: ignore[attr-defined]
            self._SyncObj__raftMatchIndex.pop(node, None)  # type: ignore[attr-defined]
            self._SyncObj__lastResponseTime.pop(node, None)  # type: ignore[attr-defined]

    def _forget_silent_observers(self) -> None:
        """Every tick on the leader: stop replicating to the observers `forgets_observer` lets go
        (no connection attempts, no AppendEntries, out of DescribeQuorum); an add catches one up
        again. pysyncobj notes the last answer (next_node_idx) of every node it sends to."""
        if not self._learners:
            return
        now = pysyncobj_monotonic()
        answered: dict[Any, float] = self._SyncObj__lastResponseTime  # type: ignore[attr-defined]
        for address, entry in sorted(self._learners.items()):  # bounded: one per add or removal
            why = forgets_observer(adding=address == self._adding, last_answer_s=answered.get(TCPNode(address)),
                                   now_s=now, timeout_s=self._observer_session_timeout)
            if why is not None:
                self._drop_learner(address)
                logger.info("Stopped replicating to observer %d (directory id %s) at %s: %s; an add catches "
                            "it up again", entry.node_id, entry.directory_id, address, why)

    def _end_add(self, raft_address: str) -> None:
        """An add is over, committed or not: its observer is judged like any other from now on."""
        if self._adding == raft_address:
            self._adding = None
        self._forget_silent_observers()

    def _mark_transfer_election(self) -> None:
        """Before pysyncobj's tick: a TimeoutNow's election starts in it at term + 1."""
        if self._SyncObj__transferInProgress:  # type: ignore[attr-defined]
            self._transfer_term = self.raftCurrentTerm + 1  # type: ignore[attr-defined]

    def _flag_transfer_votes(self) -> None:
        """Vote requests of an election a TimeoutNow started carry TRANSFER_FLAG: pre-vote's
        stickiness must not ignore them (the Raft thesis exempts them with such a flag), or a
        handover could never win while the old leader and its followers are alive. pysyncobj
        sends through its transport's `send`, wrapped here once."""
        transport = self._SyncObj__transport  # type: ignore[attr-defined]
        send = transport.send

        def flagged(node: Any, message: Any) -> Any:
            if isinstance(message, dict) and message.get("type") == "request_vote" \
                    and message.get("term") == self._transfer_term:
                message = {**message, TRANSFER_FLAG: True}
            return send(node, message)

        transport.send = flagged

    def _transfer_leadership(self) -> bool:
        """TimeoutNow to the most caught-up connected voter (pysyncobj's choice); False if none."""
        match: dict[Any, int] = self._SyncObj__raftMatchIndex  # type: ignore[attr-defined]
        connected = self._SyncObj__connectedNodes  # type: ignore[attr-defined]
        last: int = self._SyncObj__getCurrentLogIndex()  # type: ignore[attr-defined]
        candidates = sorted((match.get(n, 0), n.id, n) for n in self._SyncObj__otherNodes  # type: ignore[attr-defined]
                            if n in connected and match.get(n, 0) == last)
        if not candidates:
            return False
        target = candidates[-1][2]
        self.transferLeadership(target, None)  # type: ignore[attr-defined]
        return True

    def _drop_learners(self) -> None:
        """On losing leadership: a new leader starts afresh (an add is retried there)."""
        for address in list(self._learners):
            self._drop_learner(address)

    def _submit_membership(self, kind: str, entry: VoterEntry, done: Callable[[int], None]) -> None:
        node = TCPNode(entry.raft_address)
        command = syncobj_pickle.dumps([kind, node.id, node, entry.to_map()])
        self._applyCommand(command, lambda _result, error: done(error), _COMMAND_TYPE.MEMBERSHIP)  # type: ignore[attr-defined]

    # -- the operations (the event loop) -------------------------------------------------

    def _voter_change_lock(self) -> asyncio.Lock:
        if self._change_lock is None:
            self._change_lock = asyncio.Lock()
        return self._change_lock

    async def _append_membership(self, kind: str, entry: VoterEntry, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()

        def settle(error: int) -> None:
            if not future.done():  # the waiter may have timed out
                future.set_result(error)

        def done(error: int) -> None:
            loop.call_soon_threadsafe(settle, error)

        await self.on_tick(lambda: self._submit_membership(kind, entry, done))
        try:
            async with asyncio.timeout(timeout_s):
                error = await future
        except TimeoutError:
            raise VoterChangeError("REQUEST_TIMED_OUT", f"the voter change ({kind} {entry.node_id}) did not "
                                   f"commit within {timeout_s:.1f} s; describe the quorum before retrying") from None
        if error == FAIL_REASON.REQUEST_DENIED:
            raise VoterChangeError("REQUEST_TIMED_OUT", "the leader refused the voter change (its term's first "
                                   "entry is not applied yet, or the set already holds it): retry")
        if error != FAIL_REASON.SUCCESS:
            raise VoterChangeError("NOT_LEADER_OR_FOLLOWER" if error in (FAIL_REASON.NOT_LEADER,
                                   FAIL_REASON.LEADER_CHANGED) else "REQUEST_TIMED_OUT",
                                   f"the voter change ({kind} {entry.node_id}) failed: pysyncobj error {error}")

    async def add_voter(self, entry: VoterEntry, *, timeout_s: float) -> VoterSet:
        """AddRaftVoter on the leader: catch the observer up, then append its entry and wait for the
        commit. VoterChangeError (Kafka's error) leaves the voter set as it was."""
        async with self._voter_change_lock():
            check_add(self._voters, entry, await self.on_tick(self._leader_view))
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_s
            try:
                target = await self.on_tick(lambda: self._start_learner(entry, adding=True))
                while not caught_up(await self.on_tick(lambda: self._learner_match(entry.raft_address)), target):
                    if loop.time() >= deadline:  # bounded by the deadline
                        match = await self.on_tick(lambda: self._learner_match(entry.raft_address))
                        raise VoterChangeError("REQUEST_TIMED_OUT", f"observer {entry.node_id} at "
                                               f"{entry.raft_address} is lagging behind: it replicated up to raft "
                                               f"index {match} of {target} within {timeout_s:.1f} s (is it "
                                               "running, with this quorum's password?)")
                    await asyncio.sleep(CATCH_UP_POLL)
                check_add(self._voters, entry, await self.on_tick(self._leader_view))  # still leader, nothing pending
                await self._append_membership(ADD, entry, max(deadline - loop.time(), CATCH_UP_POLL))
            finally:  # timed out, refused or cancelled too: it stays an observer only while it answers
                self._queue_tick_call(lambda: self._end_add(entry.raft_address))
            logger.info("Added voter %d (directory id %s) at %s: voters %s", entry.node_id, entry.directory_id,
                        entry.raft_address, self._voters.ids)
            return self._voters

    async def remove_voter(self, node_id: int, directory_id: str, *, timeout_s: float) -> VoterSet:
        """RemoveRaftVoter on the leader. Removing the leader itself hands leadership over first and
        answers NOT_LEADER_OR_FOLLOWER: the caller retries at the new leader."""
        async with self._voter_change_lock():
            view, live = await self.on_tick(lambda: (self._leader_view(), self._live_voters()))
            target = check_remove(self._voters, node_id, directory_id, view, live=live)
            if target.node_id == self._node_id:
                await self._hand_over(timeout_s)
                raise VoterChangeError("NOT_LEADER_OR_FOLLOWER", f"controller {node_id} led the quorum and handed "
                                       "leadership over before its removal: retry at the new leader")
            await self._append_membership(REMOVE, target, timeout_s)
            logger.info("Removed voter %d (directory id %s) at %s: voters %s", target.node_id, target.directory_id,
                        target.raft_address, self._voters.ids)
            return self._voters

    async def _hand_over(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(timeout_s, HANDOVER_WAIT)
        logger.info("Handing leadership of the metadata quorum over: controller %d is being removed", self._node_id)
        while self._isLeader():  # type: ignore[attr-defined]
            if loop.time() >= deadline:  # bounded by the deadline
                raise VoterChangeError("REQUEST_TIMED_OUT", f"controller {self._node_id} leads the quorum and no "
                                       "caught-up voter took leadership over: retry")
            await self.on_tick(self._transfer_leadership)
            await asyncio.sleep(CATCH_UP_POLL * 4)
