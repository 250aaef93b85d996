"""The active controller: while this voter is the Raft leader, it alone turns decisions into records.

Leadership: pysyncobj 0.3.17 has `SyncObjConf.onStateChanged(old, new)`, called on its tick
thread; we use it only to wake up early. The truth is polled every `LEADERSHIP_POLL`:
`MetadataLog.leadership()` (`_isLeader()` and `raftCurrentTerm`, read so they agree),
because the callback can fire while two nodes both still believe they lead.

On becoming leader of term T the controller first commits `BeginEpoch(T)`; only once that
is applied (so every earlier entry is applied too) is it active with epoch T, and every
later append carries T. Voters fence an append whose epoch is older than the latest
committed BeginEpoch, so a deposed controller's late appends never apply. An append with
an UNKNOWN or FENCED outcome makes it renounce: if it is still the leader it begins the
epoch again, and that committed BeginEpoch settles whether the unknown append landed.

Decisions are serialized through one bounded asyncio queue consumed by one task: the
admin API that will feed it is aiohttp (asyncio), and keeping every decision and the
controller's soft state (heartbeats, later) on the event loop needs no locks. A decision
reads the committed image, so the next one starts only after the previous one committed.

How a decision's records go to the log: one chunk, or a KIP-868 transaction (BeginTransaction
... EndTransaction) when they need more, unless the rule's result is `splittable` (Kafka's
non-atomic ControllerResult.of, which QuorumController splits into as many Raft batches as it
takes): then they go as plain chunks, PIPELINE_WINDOW in flight (`MetadataLog.append_chunks`),
each applied and published on its own as it commits. That spares the transaction's two serial
commit rounds (its Begin chunk alone, its End chunk after every body chunk committed) and lets
brokers replay a 5,000-leadership batch chunk by chunk instead of all at once at its End.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Protocol

from common.metadata_version import metadata_version
from common.units import SECONDS
from metadata.image import MetadataImage
from metadata.records import AbortTransaction, BeginEpoch, Record
from quorum.controller_result import ControllerResult
from quorum.log_state import AppendOutcome, OutcomeKind, split_records
from quorum.metadata_log import CHUNK_COMMIT_BUDGET
from quorum.replication_control import unclean_elections

logger = logging.getLogger(__name__)

LEADERSHIP_POLL: Final = 0.05 * SECONDS  # the tick period of pysyncobj: no point polling faster
BEGIN_EPOCH_TIMEOUT: Final = 2 * SECONDS
DECISION_QUEUE_MAX: Final = 256
# Kafka's controller.performance.always.log.threshold.ms: a decision that holds the queue this
# long (rule, append, commit) is logged, since every decision behind it waits as long.
SLOW_DECISION_LOG: Final = 2 * SECONDS

# A decision returns its records, or a rule's ControllerResult (whose `atomic` then decides).
Decision = Callable[[MetadataImage], "Sequence[Record] | ControllerResult[Any]"]


class QuorumLog(Protocol):
    """What the controller needs of `quorum.metadata_log.MetadataLog`."""

    def leadership(self) -> tuple[bool, int]: ...
    def leader_address(self) -> str | None: ...
    def fatal_error(self) -> str | None: ...
    def image(self) -> MetadataImage: ...
    def in_transaction(self) -> bool: ...
    async def append(self, records: Sequence[Record], epoch: int, timeout_s: float, *,
                     atomic: bool = True) -> AppendOutcome: ...
    async def append_chunks(self, chunks: Sequence[bytes], epoch: int, timeout_s: float) -> list[AppendOutcome]: ...
    def add_state_listener(self, listener: Callable[[], None]) -> None: ...
    def remove_state_listener(self, listener: Callable[[], None]) -> None: ...


class NotActiveControllerError(Exception):
    """This voter is not the active controller; nothing was appended. `leader` may say who is."""

    def __init__(self, message: str, leader: str | None = None) -> None:
        super().__init__(message)
        self.leader = leader


class ControllerBusyError(Exception):
    """The decision queue is full; nothing was appended."""


@dataclass(frozen=True, slots=True)
class _Pending:
    """One queued decision and the future its caller awaits."""

    decision: Decision
    deadline: float  # loop time
    atomic: bool
    future: asyncio.Future[AppendOutcome | None] = field(repr=False)
    on_committed: Callable[[AppendOutcome], None] | None = None


class ActiveController:
    """Tracks Raft leadership, begins epochs and runs decisions in order while active."""

    def __init__(self, log: QuorumLog, *, queue_max: int = DECISION_QUEUE_MAX) -> None:
        self._log = log
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue(queue_max)
        self._wake = asyncio.Event()
        self._epoch: int | None = None

    @property
    def is_active(self) -> bool:
        """Active, and still the Raft leader of its epoch: between two leadership polls (or while an
        append is stuck) a deposed leader must not go on naming itself active to brokers."""
        return self._epoch is not None and self._leads(self._epoch)

    def _leads(self, epoch: int) -> bool:
        leader, term = self._log.leadership()
        return leader and term == epoch and self._log.fatal_error() is None

    @property
    def epoch(self) -> int | None:
        """The epoch this controller appends under while active, else None."""
        return self._epoch

    async def append(self, records: Sequence[Record], timeout_s: float, *,
                     atomic: bool = True) -> AppendOutcome:
        """Append `records` under the current epoch (see `decide`)."""
        records = tuple(records)
        if not records:
            raise ValueError("nothing to append")
        outcome = await self.decide(lambda image: records, timeout_s, atomic=atomic)
        assert outcome is not None, "a decision with records always has an outcome"
        return outcome

    async def decide(self, decision: Decision, timeout_s: float, *, atomic: bool = True,
                     on_committed: Callable[[AppendOutcome], None] | None = None) -> AppendOutcome | None:
        """Queue `decision(image) -> records`; its records are appended once it is its turn.

        None when it returned no records. Raises NotActiveControllerError, ControllerBusyError
        or TimeoutError when nothing was appended, or what `decision` raised. `on_committed(outcome)`
        runs once its records committed and before the next decision starts (soft state that the
        next decision must see, such as a controlled-shutdown offset).
        """
        self._check_active()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[AppendOutcome | None] = loop.create_future()
        try:
            self._queue.put_nowait(_Pending(decision, loop.time() + timeout_s, atomic, future, on_committed))
        except asyncio.QueueFull:
            raise ControllerBusyError(f"{self._queue.maxsize} decisions are already queued") from None
        return await future

    def _check_active(self) -> None:
        if not self.is_active:
            raise NotActiveControllerError("this controller is not the active controller",
                                           self._log.leader_address())

    async def run(self) -> None:
        """The decision loop; runs until cancelled, then fails what is still queued."""
        loop = asyncio.get_running_loop()

        def wake() -> None:  # on pysyncobj's tick thread
            try:
                loop.call_soon_threadsafe(self._wake.set)
            except RuntimeError:  # the loop is closed
                pass

        self._log.add_state_listener(wake)
        try:
            while True:  # until cancelled: the node's lifetime
                await self._track_leadership()
                if self._epoch is None:
                    await self._sleep_until_woken(LEADERSHIP_POLL)
                    continue
                try:
                    async with asyncio.timeout(LEADERSHIP_POLL):
                        pending = await self._queue.get()
                except TimeoutError:
                    continue
                epoch = self._epoch
                try:
                    await self._execute(pending)
                finally:
                    if not pending.future.done():  # cancelled mid-append: it may still commit
                        pending.future.set_result(AppendOutcome(
                            OutcomeKind.UNKNOWN, -1 if epoch is None else epoch,
                            reason="the controller stopped while appending"))
        finally:
            self._log.remove_state_listener(wake)
            if self._epoch is not None:
                self._renounce("the controller is stopping")
            self._fail_queued("the controller is stopping")

    async def _sleep_until_woken(self, timeout_s: float) -> None:
        self._wake.clear()
        try:
            async with asyncio.timeout(timeout_s):
                await self._wake.wait()
        except TimeoutError:
            pass

    async def _track_leadership(self) -> None:
        leader, term = self._log.leadership()
        if self._log.fatal_error() is not None:
            leader = False  # a voter whose state is broken must not decide anything
        if self._epoch is not None and (not leader or term != self._epoch):
            self._renounce(f"raft term is now {term} and the leader is {self._log.leader_address()}")
        if leader and self._epoch is None:
            await self._begin_epoch(term)

    async def _begin_epoch(self, term: int) -> None:
        # KIP-868: a transaction the previous controller left open is aborted with our BeginEpoch.
        # Entries of the old term may still be applying: if they change the answer, the chunk is
        # REJECTED (quorum.log_state.check_epoch) and the retry reads the state then applied.
        abort = self._log.in_transaction()
        records: list[Record] = [AbortTransaction("controller failover"), BeginEpoch(term)] if abort \
            else [BeginEpoch(term)]
        outcome = await self._log.append(records, term, BEGIN_EPOCH_TIMEOUT)
        leader, now = self._log.leadership()
        if outcome.committed and leader and now == term:
            self._epoch = term
            logger.info("Became active controller with epoch %d (BeginEpoch committed at offset %s%s)",
                        term, outcome.last_offset,
                        f", aborting the open metadata transaction at offset {outcome.first_offset}"
                        if abort else "")
        elif leader and now == term:
            logger.warning("Could not begin epoch %d: %s %s; retrying while Raft leader",
                           term, outcome.kind.value, outcome.reason)
            await self._sleep_until_woken(LEADERSHIP_POLL)

    def _renounce(self, reason: str) -> None:
        logger.info("Renounced active controller role at epoch %s: %s", self._epoch, reason)
        self._epoch = None
        self._fail_queued(f"the controller renounced: {reason}")

    def _fail_queued(self, reason: str) -> None:
        leader = self._log.leader_address()
        while not self._queue.empty():  # bounded by the queue size
            pending = self._queue.get_nowait()
            if not pending.future.done():
                pending.future.set_exception(NotActiveControllerError(reason, leader))

    async def _execute(self, pending: _Pending) -> None:
        future, epoch = pending.future, self._epoch
        loop = asyncio.get_running_loop()
        if future.done():  # the caller was cancelled
            return
        if epoch is None:
            leader = self._log.leader_address()
            future.set_exception(NotActiveControllerError("the controller renounced", leader))
            return
        remaining = pending.deadline - loop.time()
        if remaining <= 0:
            future.set_exception(TimeoutError("the decision timed out in the queue; nothing was appended"))
            return
        started = loop.time()
        try:
            before = self._log.image()
            decided = pending.decision(before)
            records, atomic, splittable, chunks = (decided.records, decided.atomic, decided.splittable,
                                                   decided.chunks) \
                if isinstance(decided, ControllerResult) else (decided, pending.atomic, False, None)
            if splittable and records and chunks is None:  # RecordTooLargeError: nothing appended
                # in the form the decision's image's metadata.version lets every node read
                chunks = split_records(records, metadata_version=metadata_version(before.features.levels))
            computed = loop.time()
            outcome = None
            if records:
                outcome = await self._append_while_leader(records, epoch, remaining, atomic, splittable, chunks)
                if outcome.kind is OutcomeKind.COMMITTED:
                    if splittable and len(records) > 1 and chunks is not None:
                        logger.info("Committed %d record(s) at offsets %s..%s, epoch %d, without a transaction "
                                    "(each chunk stands alone; %d chunk(s), %d bytes): computed in %d ms, committed "
                                    "%d ms later", len(records), outcome.first_offset, outcome.last_offset, epoch,
                                    len(chunks), sum(len(c) for c in chunks), round((computed - started) * 1000),
                                    round((loop.time() - computed) * 1000))
                    for line in unclean_elections(before, records):
                        logger.warning("%s", line)
                    if pending.on_committed is not None:
                        try:
                            pending.on_committed(outcome)
                        except Exception:  # a bug in soft-state bookkeeping: the records did commit
                            logger.exception("A committed decision's follow-up bookkeeping failed")
            took = loop.time() - started
            if took >= SLOW_DECISION_LOG:
                logger.warning("Exceptionally slow controller decision: %d ms for %d record(s) (%s); %d "
                               "decision(s) waited behind it", round(took * 1000), len(records),
                               "nothing appended" if outcome is None else outcome.kind.value, self._queue.qsize())
        except Exception as exc:  # the decision's own error, or RecordTooLargeError: nothing appended
            if not future.done():
                future.set_exception(exc)
            return
        if outcome is not None and outcome.kind in (OutcomeKind.FENCED, OutcomeKind.UNKNOWN):
            self._renounce(f"an append at epoch {epoch} was {outcome.kind.value}: {outcome.reason}")
        if not future.done():
            future.set_result(outcome)

    async def _append_while_leader(self, records: Sequence[Record], epoch: int, timeout_s: float,
                                   atomic: bool, splittable: bool = False,
                                   chunks: Sequence[bytes] | None = None) -> AppendOutcome:
        """Append, but stop waiting as soon as Raft leadership of `epoch` is lost: a command a
        deposed leader sent may never call back, and waiting out the whole timeout kept this
        controller 'active' (answering heartbeats it could not commit) for seconds."""
        task = asyncio.create_task(self._append(records, epoch, timeout_s, atomic, splittable, chunks))
        try:
            while True:  # bounded by the append's own timeout
                done, _ = await asyncio.wait({task}, timeout=LEADERSHIP_POLL)
                if done:
                    return task.result()
                if not self._leads(epoch):
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                    term = self._log.leadership()[1]
                    return AppendOutcome(OutcomeKind.UNKNOWN, epoch, reason=f"lost Raft leadership mid-append "
                                         f"(raft term {term}, leader {self._log.leader_address()})")
        finally:
            if not task.done():  # this controller is stopping: cancelled while waiting
                task.cancel()

    async def _append(self, records: Sequence[Record], epoch: int, timeout_s: float, atomic: bool,
                      splittable: bool, encoded: Sequence[bytes] | None = None) -> AppendOutcome:
        """One chunk or a transaction (`QuorumLog.append`); a splittable list longer than a chunk
        as plain chunks, pipelined (see the module doc): `encoded`, cut by the caller."""
        if splittable and encoded is not None:
            chunks = list(encoded)
            if len(chunks) > 1:
                # sized like a transaction's deadline (MetadataLog.append): a heartbeat's timeout
                # would cut a long list short, and an UNKNOWN chunk makes the controller renounce
                timeout_s = max(timeout_s, len(chunks) * CHUNK_COMMIT_BUDGET)
                return joined_outcome(await self._log.append_chunks(chunks, epoch, timeout_s), epoch)
        return await self._log.append(records, epoch, timeout_s, atomic=atomic)


def joined_outcome(outcomes: Sequence[AppendOutcome], epoch: int) -> AppendOutcome:
    """One outcome for chunks appended in order: COMMITTED over all of them, else the first that
    did not commit, naming the offsets of the committed chunks before it (they stay applied: each
    chunk stands alone). Chunks after a failed one are not looked at: the log applies in order
    and fences a whole epoch at once, so they did not commit either, or their outcome is as
    unknown as the failed one's."""
    failed = next((i for i, outcome in enumerate(outcomes) if not outcome.committed), None)
    if failed is None:
        return AppendOutcome(OutcomeKind.COMMITTED, epoch, outcomes[0].first_offset, outcomes[-1].last_offset)
    if failed == 0:
        return outcomes[0]
    return replace(outcomes[failed], first_offset=outcomes[0].first_offset,
                   last_offset=outcomes[failed - 1].last_offset)
