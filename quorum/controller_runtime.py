"""The active controller's runtime: decisions, broker sessions, shutdown requests and timers.

    runtime = ControllerRuntime(log, controller, settings)          # clock: monotonic ms by default
    task = asyncio.create_task(runtime.run())                       # the timer heap, until cancelled
    response, outcome = await runtime.decide(rule)                  # one decision through the queue
    runtime.sessions()                                              # this epoch's BrokerHeartbeatManager

One owner for what Kafka's QuorumController keeps beside the metadata log: the decision
queue (`ActiveController`, whose `decide` every caller goes through here), the broker
sessions of the current active epoch (`BrokerHeartbeatManager`, started afresh whenever this
controller (re)becomes active, as Kafka's activate() does), operators' shutdown requests,
and the periodic tasks on one timer heap of (due_ms, seq, task) read from an injected clock:

- fence-expired-brokers: at most one expired broker per pass, as Kafka does; a pass runs when
  the earliest session expires, or every broker.heartbeat.interval.ms / 2. A pass that runs
  much later than it was due means this controller itself stalled (SIGSTOP, a paused VM, a
  GC): the brokers' silence was its own, so their sessions start again instead.
- watch-listeners (`watch_listeners=True`): every pass period, the `ListenerWatch` follows the
  unfenced brokers; when it finds a broker's process gone (its listener closed our idle
  connection and refuses a new one: `quorum.listener_watch` has the safety argument) that
  incarnation is fenced at once instead of after its session, unless it re-registered meanwhile.
- leader-rebalance: every leader.imbalance.check.interval.seconds when
  auto.leader.rebalance.enable (Kafka's), preferred leader elections.
- resume-leaving: starts the batches of partition moves (below) that are queued and not
  running, such as those a new active epoch found left behind by a failover.

Bounded decisions: a rule that moves a broker's partitions (fence, controlled shutdown,
unregistration, re-registration) handles at most `MAX_PARTITIONS_PER_DECISION` of them and
returns the rest as `follow_up`. `decide` hands every committed follow-up to one background
task that queues the next batch (`broker_control.continue_leaving`) as a decision of its own,
behind whatever is queued already: heartbeats of live brokers are served between batches,
and the event loop runs between them too. Kafka bounds its controller events the same way
(MAX_ELECTIONS_PER_IMBALANCE, then it reschedules the rest). Each batch of moves is computed
ahead, on a worker thread, from the image the batch before it will leave
(`broker_control.leaving_after`) while that one commits, and used only if the committed image
is exactly that one (`_NextBatch`); otherwise it is computed again. Until its last batch, the broker
is marked leaving in the sessions, so it is not unfenced half way (a restarted broker that
catches up quickly). When this controller (re)becomes active, the first `sessions()` of the
epoch looks once for brokers a failover left behind (`broker_control.brokers_left_behind`)
and queues their batches. An unfence's elections of leaderless partitions go the same way
(`ElectFollowUp`, `broker_control.continue_electing`), after any moves away.

Stalls: a probe (common/stall_probe.py, as the brokers') fires every `STALL_PROBE_PERIOD` and
logs "Controller N was stalled for X ms" when the event loop ran nothing for `STALL_LOG_MS` or more (it keeps the longest for the log).

The HTTP classes (`quorum.broker_rpc`, `quorum.controller_server`) only decode, call this and
encode. `run_due(now_ms)` runs what is due at `now_ms`, so tests drive it with a fake clock.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

from common.errors import ErrorCode
from common.limits import STALL_LOG_MS
from common.metadata_version import metadata_version
from common.stall_probe import StallProbe
from common.units import SECONDS
from metadata.image import MetadataImage
from metadata.partition_change import Election
from metadata.records import Record
from quorum import admin_api as api
from quorum.active_controller import ActiveController
from quorum.admin_api import ApiSettings
from quorum.broker_control import (
    brokers_left_behind,
    brokers_with_elections_left,
    continue_electing,
    continue_leaving,
    fence_broker,
    fence_if_expired,
    leaving_after,
)
from quorum.controller_result import (
    MAX_PARTITIONS_PER_DECISION,
    ControllerResult,
    ElectFollowUp,
    FollowUp,
    LeaveFollowUp,
    PartitionKey,
)
from quorum.heartbeat_manager import BrokerHeartbeatManager
from quorum.listener_watch import ListenerWatch
from quorum.log_state import AppendOutcome, OutcomeKind, split_records
from quorum.reassignment_control import complete_reassignments
from quorum.replication_control import elect_leaders, more_elections_left
from shutdown.controller_states import ShutdownRequestOutcome, shutdown_request_outcome

if TYPE_CHECKING:
    from quorum.active_controller import QuorumLog

logger = logging.getLogger(__name__)

MAX_TIMER_SLEEP_MS: Final = 1000  # the run loop looks at the heap at least this often
REASSIGNMENT_CHECK_MS: Final = 1000  # how often an active controller looks for completable reassignments
STALL_PROBE_PERIOD: Final = 0.1 * SECONDS  # how often the stall probe wakes
LEAVE_RETRY_MS: Final = 500  # after a batch of partition moves failed, the next try (ms)
PeriodicTask = Callable[[int], Awaitable[int | None]]  # (now_ms) -> next due ms, or None: done


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def _encoded_ahead(image: MetadataImage, records: Sequence[Record], follow_up: LeaveFollowUp) -> ControllerResult[int]:
    """`leaving_after` and its records' chunks, both on the worker thread: encoded on the event
    loop, a batch of 5,000 moved leaderships held it 0.1-0.2 s between two batches of a controlled
    shutdown (nothing in flight meanwhile: the Raft pipeline stood empty). Their form is that of
    `image`'s metadata.version: the batch is used only when the committed image is that one."""
    result = leaving_after(image, records, follow_up)
    if result.splittable and len(result.records) > 1:
        level = metadata_version(image.features.levels)
        result = replace(result, chunks=tuple(split_records(result.records, metadata_version=level)))
    return result


@dataclass(frozen=True, slots=True)
class _NextBatch:
    """A batch of partition moves computed ahead (`broker_control.leaving_after`), from the image
    the batch before it leaves, while that one was being committed. It is what `continue_leaving`
    would return once the committed image is exactly there: the batch before started at
    `first_offset` (nothing came between it and the image it was computed on) and the committed
    image ends at `offset` (nothing came after it)."""

    broker_id: int
    after: PartitionKey | None
    leaders_only: bool
    first_offset: int
    offset: int
    result: asyncio.Future[ControllerResult[int]]


class NotCommittedError(Exception):
    """A decision's records were appended but not committed: FENCED, REJECTED or UNKNOWN."""

    def __init__(self, outcome: AppendOutcome) -> None:
        partial = f" (offsets {outcome.first_offset}..{outcome.last_offset} did commit)" \
            if outcome.first_offset is not None else ""
        super().__init__(f"the records were {outcome.kind.value}: {outcome.reason}{partial}")
        self.outcome = outcome
        self.unknown = outcome.kind is OutcomeKind.UNKNOWN
        # FENCED/REJECTED before any chunk committed: safe to send again (to the active controller)
        self.applied_nothing = not self.unknown and outcome.first_offset is None


class QueueTimeoutError(TimeoutError):
    """A decision's deadline passed while it waited in the decision queue: nothing was appended,
    so sending it again is safe (`quorum.request_routing` does, for a while)."""


async def decide_result(controller: ActiveController, fn: Callable[[MetadataImage], ControllerResult[Any]],
                        timeout_s: float, *, on_committed: Callable[[AppendOutcome], None] | None = None,
                        ) -> tuple[Any, AppendOutcome | None]:
    """Run a rule through `controller.decide`: (its response, the committed outcome or None).

    A result commits atomically unless it is `splittable`: records that fit one chunk
    (`quorum.log_state.MAX_CHUNK_BYTES`, ~200 partition records) as one Raft entry, a longer list
    (a topic with many partitions) as a KIP-868 metadata transaction that nothing sees before its
    EndTransaction commits; a failover in between leaves it to be aborted by the next active
    controller (NotCommittedError, nothing applied; `unknown` when the End may still commit). A
    splittable list (a broker's partitions moving away) goes as plain chunks, and a
    NotCommittedError then names the offsets that did commit. Raises what `decide` raises
    (nothing appended) and the rule's own ControllerApiError.
    """
    responses: list[Any] = []

    def decision(image: MetadataImage) -> ControllerResult[Any]:
        result = fn(image)
        responses.append(result.response)
        return result  # its `atomic` decides how the records are appended

    try:
        outcome = await controller.decide(decision, timeout_s, on_committed=on_committed)
    except TimeoutError as exc:  # ActiveController.decide's only timeout: in the queue, nothing appended
        raise QueueTimeoutError(str(exc)) from None
    if outcome is not None and not outcome.committed:
        raise NotCommittedError(outcome)
    return responses[-1], outcome


class ControllerRuntime:
    """Decisions, soft state and timers of one controller while it is active (see the module doc)."""

    def __init__(self, log: QuorumLog, controller: ActiveController, settings: ApiSettings, *,
                 clock: Callable[[], int] = monotonic_ms, watch_listeners: bool = False) -> None:
        self._log, self._controller, self._settings, self._clock = log, controller, settings, clock
        self._sessions = BrokerHeartbeatManager(settings.session_timeout_ms)
        self._sessions_epoch: int | None = None
        # broker id -> the broker epoch an operator asked to shut down (POST /v1/brokers/{id}/shutdown);
        # soft state of this active epoch, like the sessions; at most one entry per registered broker
        self._shutdown_requests: dict[int, int] = {}
        self._timers: list[tuple[int, int, str]] = []  # (due_ms, seq, name): a heap
        self._tasks: dict[str, PeriodicTask] = {}
        self._seq = 0
        self._wake = asyncio.Event()
        self._fence_period_ms = max(1, settings.heartbeat_interval_ms // 2)
        self._stall_ms = max(settings.heartbeat_interval_ms, settings.session_timeout_ms // 4)
        now = clock()
        self.schedule("fence-expired-brokers", now + self._fence_period_ms, self._fence_expired)
        self.schedule("complete-reassignments", now + self._fence_period_ms, self._complete_reassignments)
        if settings.leader_imbalance_check_interval_s > 0:
            self.schedule("leader-rebalance", now + self._rebalance_period_ms(), self._balance_leaders)
        # broker id -> where its next batch of partition moves starts (None: at the first) and
        # whether it moves only leaderships: the follow-ups one task works through
        # (`_leave_partitions`); at most one per broker id
        self._leaving: dict[int, tuple[PartitionKey | None, bool]] = {}
        # broker id -> where the next batch of its unfence's elections starts (None: at the first);
        # worked through by the same task, after the moves away (`ElectFollowUp`)
        self._electing: dict[int, PartitionKey | None] = {}
        self._leaver: asyncio.Task[None] | None = None
        self._next_batch: _NextBatch | None = None  # the next batch of moves, computed ahead
        self.longest_stall_ms = 0  # the longest event-loop stall the probe saw
        self.schedule("resume-leaving", now, self._resume_leaving)
        self._watch: ListenerWatch | None = None
        if watch_listeners:
            self._watch = ListenerWatch(self._process_gone, local_host=settings.host)
            self.schedule("watch-listeners", now, self._watch_listeners)

    # -- decisions and sessions ---------------------------------------------------------------

    @property
    def is_active(self) -> bool:
        return self._controller.is_active

    async def decide(self, fn: Callable[[MetadataImage], ControllerResult[Any]],
                     timeout_s: float = api.WRITE_TIMEOUT, *,
                     moving: int | None = None, moves_leaders: bool = True) -> tuple[Any, AppendOutcome | None]:
        """`decide_result`, and a committed result's follow_up goes on as later decisions.
        `moving`: the broker whose partitions this decision moves (a batch of `_leave_partitions`);
        `moves_leaders`: False for a batch that moves only its ISR seats (see `_committed_batch`)."""
        follow_ups: list[FollowUp | None] = []
        ahead: list[_NextBatch] = []

        def rule(image: MetadataImage) -> ControllerResult[Any]:
            result = fn(image)
            follow_ups.append(result.follow_up)
            if isinstance(result.follow_up, LeaveFollowUp) and result.splittable and result.records:
                ahead.append(self._compute_ahead(image, result.records, result.follow_up))
            return result

        def committed(outcome: AppendOutcome) -> None:  # before the next decision runs
            if ahead and ahead[-1] is self._next_batch and outcome.first_offset != ahead[-1].first_offset:
                self._drop_ahead()  # something came between: the batch ahead read another image
            follow_up = follow_ups[-1] if follow_ups else None
            leaving = follow_up if isinstance(follow_up, LeaveFollowUp) else None
            broker_id = leaving.broker_id if leaving is not None else moving
            if leaving is not None:
                self.sessions().begin_leaving(leaving.broker_id)
            if broker_id is not None and moves_leaders:
                self._committed_batch(broker_id, outcome)

        try:
            response, outcome = await decide_result(self._controller, rule, timeout_s, on_committed=committed)
        except BaseException:
            if ahead and ahead[-1] is self._next_batch:
                self._drop_ahead()  # not committed: the batch ahead read an image that never was
            raise
        follow_up = follow_ups[-1] if follow_ups else None
        if isinstance(follow_up, LeaveFollowUp):
            self._leave_later(follow_up.broker_id, follow_up.after, follow_up.leaders_only)
        elif isinstance(follow_up, ElectFollowUp):
            self._electing[follow_up.broker_id] = follow_up.after
            self._start_leaver()
        return response, outcome

    def now_ms(self) -> int:
        return self._clock()

    def sessions(self) -> BrokerHeartbeatManager:
        """This epoch's sessions; a controller that (re)becomes active starts them afresh."""
        epoch = self._controller.epoch
        if epoch != self._sessions_epoch:
            self._sessions_epoch = epoch
            self._sessions = BrokerHeartbeatManager(self._settings.session_timeout_ms)
            self._shutdown_requests = {}
            self._leaving = {}  # a new epoch finds what is left from the image, not from the last one
            self._electing = {}
            self._drop_ahead()
            if epoch is not None:
                image = self._log.image()
                self._sessions.begin_sessions(image, self._clock())
                self._find_left_behind(image)
        return self._sessions

    def _find_left_behind(self, image: MetadataImage) -> None:
        """Queue the partition moves a failover cut short (one pass over every partition, once per
        active epoch); `_resume_leaving` starts them."""
        left = brokers_left_behind(image)
        if left:
            logger.info("Broker(s) %s are fenced, shutting down or unregistered but still lead partitions "
                        "or sit in ISRs (a failover cut their moves short): moving those partitions now", left)
        for broker_id in left:
            self._sessions.begin_leaving(broker_id)
            self._leaving[broker_id] = (None, False)
        electing = [b for b in brokers_with_elections_left(image) if b not in self._leaving]
        if electing:
            logger.info("Broker(s) %s are active and in the ISR of leaderless partitions (a failover cut their "
                        "unfence's elections short): electing leaders now", electing)
        self._electing.update(dict.fromkeys(electing))

    def heartbeat_ages(self) -> dict[int, int]:
        """Milliseconds since each broker's last heartbeat; empty unless active."""
        return self.sessions().ages(self._clock()) if self._controller.is_active else {}

    def touch_on_arrival(self, broker_id: int, broker_epoch: int, metadata_offset: int) -> None:
        """A heartbeat from a registered incarnation renews its session when it arrives, not when
        its turn in the decision queue comes (Kafka's BrokerHeartbeatTracker.updateContactTime):
        a queue backed up behind a slow append must not get a live broker fenced."""
        if not self._controller.is_active:
            return
        registration = self._log.image().broker(broker_id)
        if registration is not None and registration.broker_epoch == broker_epoch:
            self.sessions().touch(broker_id, self._clock(), metadata_offset)

    def request_shutdown(self, broker_id: int, broker_epoch: int) -> None:
        """An operator asks this incarnation of the broker to shut down (active controller only):
        its next heartbeats answer shutdown_requested until it heartbeats want_shut_down."""
        self.sessions()  # a new active epoch starts from no requests; this one belongs to it
        self._shutdown_requests[broker_id] = broker_epoch
        logger.info("Operator requested the controlled shutdown of broker %d (broker epoch %d); "
                    "telling it on its next heartbeat", broker_id, broker_epoch)

    def shutdown_requested(self, broker_id: int, broker_epoch: int, want_shut_down: bool) -> bool:
        """What a heartbeat reply says about an operator's request; forgets one obeyed or stale."""
        requested = self._shutdown_requests.get(broker_id)
        if requested is None:
            return False
        outcome = shutdown_request_outcome(requested_epoch=requested, broker_epoch=broker_epoch,
                                           want_shutdown=want_shut_down)
        if not outcome.shutdown_requested:
            del self._shutdown_requests[broker_id]
            reason = ("it began its controlled shutdown" if outcome is ShutdownRequestOutcome.OBEYED
                      else f"it runs as broker epoch {broker_epoch} now")
            logger.info("Shutdown request for broker %d (broker epoch %d) is done: %s", broker_id, requested, reason)
        return outcome.shutdown_requested

    # -- the timer heap ---------------------------------------------------------------------------

    def schedule(self, name: str, due_ms: int, task: PeriodicTask) -> None:
        """Run `task(now_ms)` at `due_ms`; it returns when to run next (None: never again)."""
        self._tasks[name] = task
        self._seq += 1
        heapq.heappush(self._timers, (due_ms, self._seq, name))
        self._wake.set()

    def next_due_ms(self) -> int | None:
        return self._timers[0][0] if self._timers else None

    async def run_due(self, now_ms: int) -> None:
        """Run every task due at `now_ms`, earliest first, and put each back at its next time."""
        while self._timers and self._timers[0][0] <= now_ms:  # bounded: each task once per call
            due, _, name = heapq.heappop(self._timers)
            task = self._tasks[name]
            try:
                following = await task(due)
            except Exception:  # a bug in a periodic task: say so, keep the others running
                logger.exception("Controller task %s failed; it runs again in a period", name)
                following = self._clock() + self._fence_period_ms
            if following is not None:
                self.schedule(name, max(following, now_ms + 1), task)

    async def run(self) -> None:
        """Sleep until the earliest timer, run what is due; until cancelled."""
        probe = StallProbe(asyncio.get_running_loop(), STALL_PROBE_PERIOD, self._on_stall)
        probe.start()
        try:
            while True:  # the controller's lifetime
                due = self.next_due_ms()
                delay_ms = (MAX_TIMER_SLEEP_MS if due is None
                            else min(MAX_TIMER_SLEEP_MS, max(0, due - self._clock())))
                self._wake.clear()
                try:
                    async with asyncio.timeout(delay_ms / 1000):
                        await self._wake.wait()  # a new timer may be earlier
                except TimeoutError:
                    pass
                await self.run_due(self._clock())
        finally:
            probe.stop()
            await self.close()

    async def close(self) -> None:
        """Stop the partition moves and the listener watch's connections (the timers stop with `run`)."""
        if self._leaver is not None:
            self._leaver.cancel()
            await asyncio.gather(self._leaver, return_exceptions=True)
        self._drop_ahead()
        if self._watch is not None:
            await self._watch.close()

    def _on_stall(self, stalled_ms: float) -> None:
        """Log every event-loop stall of STALL_LOG_MS or more: while the loop runs nothing, no
        heartbeat is read or answered, which is what gets live brokers fenced."""
        if stalled_ms >= STALL_LOG_MS:
            self.longest_stall_ms = max(self.longest_stall_ms, round(stalled_ms))
            logger.warning("Controller %d was stalled for %d ms (the longest so far: %d ms)",
                           self._settings.node_id, stalled_ms, self.longest_stall_ms)

    # -- bounded partition moves ------------------------------------------------------------------

    def _leave_later(self, broker_id: int, after: PartitionKey | None, leaders_only: bool = False) -> None:
        """Queue the next batch of `broker_id`'s partition moves, starting after `after`."""
        self._leaving[broker_id] = (after, leaders_only)
        self._start_leaver()

    def _start_leaver(self) -> None:
        if (self._leaving or self._electing) and (self._leaver is None or self._leaver.done()):
            self._leaver = asyncio.create_task(self._leave_partitions())

    def _compute_ahead(self, image: MetadataImage, records: Sequence[Record], follow_up: LeaveFollowUp) -> _NextBatch:
        """Start computing the batch after this one on a worker thread while this one commits
        (Kafka's controller computes its next event from in-memory state without waiting for the
        commit). The rules are pure and the images immutable, so the thread shares nothing that
        changes; the event loop keeps serving heartbeats, and the Raft tick thread replicating
        this batch, while it runs (between them, under the GIL). A controlled shutdown of 33,000
        leaderships waited for 7 such computations in turn, 0.15-0.6 s each."""
        self._drop_ahead()
        task = asyncio.ensure_future(asyncio.to_thread(_encoded_ahead, image, tuple(records), follow_up))
        self._next_batch = _NextBatch(follow_up.broker_id, follow_up.after, follow_up.leaders_only,
                                      image.offset + 1, image.offset + len(records), task)
        return self._next_batch

    def _drop_ahead(self) -> None:
        if self._next_batch is not None:
            self._next_batch.result.cancel()  # (the thread finishes its computation; nobody reads it)
            self._next_batch = None

    async def _take_ahead(self, broker_id: int, after: PartitionKey | None,
                          leaders_only: bool) -> tuple[int, ControllerResult[int]] | None:
        """The batch computed ahead for this step, with the offset the committed image must be at
        for it to hold; None when there is none (or it failed: the step computes it again)."""
        ahead, self._next_batch = self._next_batch, None
        if ahead is None or (ahead.broker_id, ahead.after, ahead.leaders_only) != (broker_id, after, leaders_only):
            if ahead is not None:
                ahead.result.cancel()
            return None
        try:
            return ahead.offset, await ahead.result
        except Exception:  # a bug in the rule: the decision runs it again, and raises there
            logger.exception("Computing the next batch of broker %d's moves ahead failed", broker_id)
            return None

    def _committed_batch(self, broker_id: int, outcome: AppendOutcome) -> None:
        """A batch of a controlled shutdown that moved leaderships committed: the broker may shut
        down only once every active broker replayed it, so that they serve as the new leaders
        (splittable batches carry no transaction markers: the first batch's own offset is exact).
        The batches after its last leadership move only its ISR seats
        (`broker_control.continue_leaving`): it need not wait for those, as Kafka's broker waits
        only for the offset of its shutdown's first event."""
        registration = self._log.image().broker(broker_id)
        if outcome.last_offset is not None and registration is not None \
                and registration.in_controlled_shutdown and not registration.fenced:
            self.sessions().raise_controlled_shutdown_offset(broker_id, outcome.last_offset)

    async def _leave_partitions(self) -> None:
        """Work through the follow-ups, one batch per decision: the moves away first, brokers in
        turn, then the elections (`_elect_next`); ends when none is left or this controller is no
        longer active (the next active one finds what is left: `_find_left_behind`). Bounded:
        each batch moves its walk forward past its partitions."""
        while self._leaving or self._electing:
            if not self._controller.is_active:
                logger.info("Stopped moving partitions away from broker(s) %s and electing for broker(s) %s: no "
                            "longer the active controller", sorted(self._leaving), sorted(self._electing))
                self._leaving.clear()
                self._electing.clear()
                return
            if not self._leaving:
                await self._elect_next()
                continue
            broker_id, (after, leaders_only) = next(iter(self._leaving.items()))
            del self._leaving[broker_id]  # decide() puts it back at the end while more is left
            ahead = await self._take_ahead(broker_id, after, leaders_only)

            def batch(image: MetadataImage) -> ControllerResult[int]:
                if ahead is not None and image.offset == ahead[0]:
                    logger.debug("The batch of broker %d's moves after %s was computed ahead, at offset %d",
                                 broker_id, after, image.offset)
                    return ahead[1]  # computed from this very image (see _NextBatch)
                return continue_leaving(image, broker_id, after=after, leaders_only=leaders_only)
            try:
                moved, _ = await self.decide(batch, moving=broker_id, moves_leaders=leaders_only)
            except Exception as exc:  # noqa: BLE001 - the same batch again, after a pause
                logger.warning("Moving partitions away from broker %d after %s failed: %s; retrying in %d ms",
                               broker_id, after, exc, LEAVE_RETRY_MS)
                self._leaving.setdefault(broker_id, (after, leaders_only))
                await asyncio.sleep(LEAVE_RETRY_MS / 1000)
                continue
            if broker_id not in self._leaving:
                self.sessions().end_leaving(broker_id)
                logger.info("Broker %d leads no partition and is in no ISR it may leave (last batch: "
                            "%d partition change(s))", broker_id, moved)

    async def _elect_next(self) -> None:
        """One batch of an unfence's elections (`broker_control.continue_electing`)."""
        broker_id, after = next(iter(self._electing.items()))
        del self._electing[broker_id]  # decide() puts it back at the end while more is left
        try:
            elected, _ = await self.decide(lambda image: continue_electing(image, broker_id, after=after))
        except Exception as exc:  # noqa: BLE001 - the same batch again, after a pause
            logger.warning("Electing leaders for broker %d after %s failed: %s; retrying in %d ms",
                           broker_id, after, exc, LEAVE_RETRY_MS)
            self._electing.setdefault(broker_id, after)
            await asyncio.sleep(LEAVE_RETRY_MS / 1000)
            return
        if broker_id not in self._electing:
            logger.info("Broker %d: no leaderless partition it replicates is left to elect (last batch: "
                        "%d partition change(s))", broker_id, elected)

    async def _resume_leaving(self, due_ms: int) -> int:
        """Start queued partition moves that no task runs (a new epoch's leftovers)."""
        if self._controller.is_active:
            self.sessions()  # a new active epoch looks for leftovers here, if no heartbeat did yet
            self._start_leaver()
        return self._clock() + self._fence_period_ms

    # -- the periodic tasks -----------------------------------------------------------------------

    async def _fence_expired(self, due_ms: int) -> int:
        """At most one expired broker per pass; the next pass at the earliest expiry or a period."""
        now = self._clock()
        if not self._controller.is_active:
            return now + self._fence_period_ms
        sessions = self.sessions()
        if now - due_ms > self._stall_ms:
            # This controller did not run and may be deposed without knowing it yet: the
            # brokers' silence was its own. Judge from now on.
            logger.warning("Controller %d ran its fence pass %d ms late (the stall probe says why); "
                           "broker sessions start again now", self._settings.node_id, now - due_ms)
            sessions.restart_sessions(self._log.image(), now)
            return now + self._fence_period_ms
        broker_id = sessions.next_expired(now, self._log.image())
        if broker_id is not None and not await self._fence(broker_id, sessions):
            return self._clock() + self._fence_period_ms  # not at once: a fast failure would spin
        expiry = sessions.next_expiry_ms(self._log.image())
        following = self._clock() + self._fence_period_ms
        return following if expiry is None else min(following, max(expiry, self._clock() + 1))

    async def _fence(self, broker_id: int, sessions: BrokerHeartbeatManager) -> bool:
        def fence(image: MetadataImage) -> ControllerResult[None]:
            return fence_if_expired(image, broker_id, heartbeats=sessions, now_ms=self._clock())
        try:
            await self.decide(fence, api.FENCE_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - the next pass tries again
            logger.warning("Could not fence broker %d: %s", broker_id, exc)
            return False
        return True

    async def _watch_listeners(self, due_ms: int) -> int:
        assert self._watch is not None, "scheduled only with a watch"
        self._watch.sync(self._log.image() if self._controller.is_active else None)
        return self._clock() + self._fence_period_ms

    async def _process_gone(self, broker_id: int, broker_epoch: int, evidence: str) -> bool:
        """Fence the incarnation whose process the listener watch found gone (see its safety
        argument); a broker that re-registered or was fenced meanwhile is left alone. False when
        the decision failed, so that the watch asks again."""
        def fence(image: MetadataImage) -> ControllerResult[None]:
            registration = image.broker(broker_id)
            if registration is None or registration.fenced or registration.broker_epoch != broker_epoch:
                return ControllerResult((), None)
            return fence_broker(image, broker_id, reason=evidence)
        if not self._controller.is_active:
            return True  # not ours to fence any more: the next sync stops this watch
        try:
            await self.decide(fence, api.FENCE_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - the watch asks again; its session expires as usual
            logger.warning("Could not fence broker %d (broker epoch %d) whose process is gone: %s",
                           broker_id, broker_epoch, exc)
            return False
        return True

    async def _complete_reassignments(self, due_ms: int) -> int:
        """Complete reassignments the ISR already allows: AlterPartition completes them as it
        grows the ISR, but a controller that becomes active mid-way (or whose predecessor lost
        the completing record) must not leave one hanging until the next ISR change."""
        following = self._clock() + REASSIGNMENT_CHECK_MS
        image = self._log.image()
        if not self._controller.is_active or not image.topics.reassigning:  # kept by replay: no scan
            return following
        try:
            completed, _ = await self.decide(complete_reassignments)
        except Exception as exc:  # noqa: BLE001 - the next pass tries again
            logger.warning("Completing reassignments failed: %s", exc)
            return following
        if completed:
            logger.info("Completed %d partition reassignment(s) whose ISR already held every adding replica",
                        completed)
        return following

    def _rebalance_period_ms(self) -> int:
        return round(self._settings.leader_imbalance_check_interval_s * 1000)

    async def _balance_leaders(self, due_ms: int) -> int:
        """Preferred leader elections for partitions whose preferred replica is back in the ISR and
        active (Kafka's auto.leader.rebalance.enable; KRaft ignores the imbalance percentage too)."""
        following = self._clock() + self._rebalance_period_ms()
        if not self._controller.is_active:
            return following
        try:
            results, _ = await self.decide(lambda image: elect_leaders(
                image, election=Election.PREFERRED, partitions=None, max_elections=MAX_PARTITIONS_PER_DECISION))
        except Exception as exc:  # noqa: BLE001 - the next pass tries again
            logger.warning("Preferred leader election failed: %s", exc)
            return following
        moved = sorted(f"{t}-{p}" for (t, p), code in results.items() if code is ErrorCode.NONE)
        more = more_elections_left(results, MAX_PARTITIONS_PER_DECISION)
        if moved:
            logger.info("Moved leadership back to the preferred replica of %d partition(s): %s%s",
                        len(moved), ", ".join(moved[:20]) + (" ..." if len(moved) > 20 else ""),
                        "; more in the next decision" if more else "")
        # Bounded as Kafka's (MAX_ELECTIONS_PER_IMBALANCE, then "reschedule immediately"): a
        # restarted broker preferred for 33,000 partitions took them back in one decision that
        # every broker then applied at once; now in decisions of MAX_PARTITIONS_PER_DECISION,
        # the queue serving heartbeats between them.
        return self._clock() if more else following
