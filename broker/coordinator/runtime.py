"""The coordinator runtime: one state machine per internal-topic partition led here.

    runtime = CoordinatorRuntime("group", shard_type, writer, timers, commit_timeout_ms=5_000)
    runtime.on_partition_change(3)          # leads it now: replay it (LOADING, then ACTIVE); or unload
    answer = await runtime.write(3, lambda state: CoordinatorResult(records=records, answer=answer))
    state = runtime.current(3)              # with the uncommitted writes; runtime.committed(3) without
    runtime.schedule_timer(3, ("session", "g1"), delay_ms, lambda state, now_ms: result)
    await runtime.idle()                    # tests: every load and write settled, no sleeps

Kafka 4's `CoordinatorRuntime` (coordinator-common), in one event loop instead of a thread
pool: a coordinator (`CoordinatorShard`) per partition of its internal topic, loaded by
replaying the partition when this broker becomes its leader and unloaded at once when it
stops leading it. An operation is a pure rule: the shard's state in, a `CoordinatorResult`
out (the records that make it durable and the answer); the state after it is the shard's
`replay` of those records, the very path loading takes, so what a coordinator holds is what
it would rebuild from its partition. The runtime appends the records with acks=all and
releases the answer only once the high watermark passes them. What Kafka keeps in memory
only (a classic group's members between two generations, their heartbeat deadlines: Kafka's
`CoordinatorResult.replayRecords` false for classic groups) a result adds with `memory`, a
function applied after the replay; nothing else changes a shard's state.

Transactions (Kafka's `scheduleTransactionalWriteOperation` and
`scheduleTransactionCompletion`): a result naming a producer id and epoch is appended as a
transactional batch of that producer, in a batch of its own, and replayed by the shard as
pending (`TransactionalShardType.replay_transactional`); `complete_transaction` appends the
producer's commit or abort marker (a control batch) and replays it
(`replay_end_transaction`). Loading feeds both, so a reloaded shard has the same pending and
committed state.

Pending and committed state (Kafka's `SnapshottableCoordinator` and its timeline snapshots
per written offset): the runtime keeps the committed state and a chain of pending batches,
each with the state after it. A commit moves the committed state forward; a write that fails
(the local append refused, the log truncated under it) drops its batch and every later one,
so the state returns to its last committed value and their answers fail. A write not
committed within the commit timeout fails its answers only: its records are in the log and
may yet commit, so its state stays pending (Kafka's OperationTimeout). An operation without records still changes state (a heartbeat): it joins the last
pending batch and answers when that commits (read-your-writes, as Kafka's deferred events).

Batching (Kafka's `CoordinatorRuntime` accumulates records per partition into one batch and,
with its adaptive linger, appends it when its event queue is empty): the first write of a
turn of the event loop is appended at once; the writes that follow it in the same turn go
into the partition's open batch, appended once at the end of the turn (`call_soon`) or as
soon as it reaches MAX_BATCH_BYTES. N concurrent offset commits cost two appends, not N.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Protocol, TypeVar, runtime_checkable

from broker.coordinator.errors import CoordinatorError
from broker.timers import TimerService
from common.errors import ErrorCode, KafkaError
from common.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from common.units import MIB

log = logging.getLogger(__name__)

S = TypeVar("S")
A = TypeVar("A")
Encoded = tuple[bytes | None, bytes | None]  # one record as (key, value) bytes
Settle = Callable[[Any, "CoordinatorError | None"], None]  # (answer, None) once committed, or (None, error)
MAX_BATCH_BYTES: Final = 1 * MIB  # an open batch is appended once it holds this many record bytes
MAX_IDLE_PASSES: Final = 1_000  # idle() waits out at most this many generations of new work
E = ErrorCode


@dataclass(frozen=True, slots=True)
class CoordinatorResult(Generic[S, A]):
    """What an operation decides: the records that make it durable (encoded by the coordinator)
    and the answer released once they commit. The state after it is the shard's replay of
    `records`, then `memory` applied to it: the only way to change what Kafka keeps in memory
    only, and never stored. `producer_id` >= 0: the records belong to that producer's
    transaction (a transactional batch, replayed as pending until its marker)."""

    records: tuple[Encoded, ...] = ()
    answer: A | None = None
    memory: Callable[[S], S] | None = None
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


class CoordinatorShardType(Protocol[S]):
    """What a coordinator supplies: its empty state and how a stored record changes it."""

    def empty(self) -> S: ...

    def replay(self, state: S, key: bytes, value: bytes | None) -> S:
        """`state` after one record of a non-transactional batch (a write, or loading)."""


@runtime_checkable
class TransactionalShardType(CoordinatorShardType[S], Protocol[S]):
    """A coordinator that takes part in transactions (Kafka's CoordinatorShard.replay with a
    producer id, and replayEndTransactionMarker)."""

    def replay_transactional(self, state: S, producer_id: int, producer_epoch: int,
                             key: bytes, value: bytes | None) -> S:
        """`state` after one record of `producer_id`'s transactional batch: pending."""

    def replay_end_transaction(self, state: S, producer_id: int, producer_epoch: int, committed: bool) -> S:
        """`state` after `producer_id`'s commit or abort marker."""


class LoadSink(Protocol):
    """What loading feeds: every record with its batch's producer (NO_PRODUCER_ID unless the
    batch is transactional) and every end-transaction marker."""

    def record(self, key: bytes, value: bytes | None, producer_id: int, producer_epoch: int) -> None: ...

    def end_transaction(self, producer_id: int, producer_epoch: int, committed: bool) -> None: ...


class PartitionWriter(Protocol):
    """The runtime's view of the internal topic's partitions (the replica manager here)."""

    def leader_epoch(self, partition: int) -> int | None:
        """This broker's leader epoch of `partition`; None when it does not lead it."""

    def append(self, partition: int, leader_epoch: int, records: list[Encoded], *,
               producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH) -> int:
        """Append one batch (acks=all), transactional when `producer_id` >= 0; the offset
        after it. KafkaError when refused."""

    def append_marker(self, partition: int, leader_epoch: int, *, producer_id: int, producer_epoch: int,
                      coordinator_epoch: int, committed: bool) -> int:
        """Append `producer_id`'s commit or abort marker (a control batch); the offset after it."""

    def high_watermark(self, partition: int) -> int: ...

    async def load(self, partition: int, leader_epoch: int, sink: LoadSink) -> int:
        """Feed every record and marker of `partition` to `sink`; the offset after the last one."""


class ShardStatus(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"


@dataclass(frozen=True, slots=True)
class _Marker:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    committed: bool


@dataclass(slots=True)
class _Batch(Generic[S]):
    state: S  # the shard's state once this batch (and every one before it) commits
    producer_id: int = NO_PRODUCER_ID  # >= 0: a transactional batch of this producer
    producer_epoch: int = NO_PRODUCER_EPOCH
    marker: _Marker | None = None  # a control batch: this marker, and no records
    records: list[Encoded] = field(default_factory=list)
    size: int = 0
    end_offset: int | None = None  # set once appended; None while open
    waiters: list[tuple[Settle, Any]] = field(default_factory=list)  # with the answer each gets


@dataclass(slots=True)
class _Shard(Generic[S]):
    partition: int
    leader_epoch: int
    committed: S
    status: ShardStatus = ShardStatus.LOADING
    committed_offset: int = 0
    batches: deque[_Batch[S]] = field(default_factory=deque)
    flush_scheduled: bool = False
    timer_keys: set[Hashable] = field(default_factory=set)
    load_task: asyncio.Task[None] | None = None

    @property
    def current(self) -> S:
        return self.batches[-1].state if self.batches else self.committed


TimerOperation = Callable[[S, int], CoordinatorResult[S, Any]]  # (state, now_ms) -> result


class CoordinatorRuntime(Generic[S]):
    def __init__(self, name: str, shard_type: CoordinatorShardType[S], writer: PartitionWriter,
                 timers: TimerService, *, commit_timeout_ms: int,
                 on_loaded: Callable[[int, S], None] | None = None,
                 on_unloaded: Callable[[int], None] | None = None,
                 max_batch_bytes: int = MAX_BATCH_BYTES) -> None:
        self.name = name
        self.shard_type = shard_type
        self.writer = writer
        self.timers = timers
        self.commit_timeout_ms = commit_timeout_ms
        self.max_batch_bytes = max_batch_bytes
        self._on_loaded = on_loaded
        self._on_unloaded = on_unloaded
        self.shards: dict[int, _Shard[S]] = {}
        self.appends_total = 0  # batches appended (fewer than writes: concurrent writes share one)

    # ---- leadership ----------------------------------------------------------------------

    def on_partition_change(self, partition: int) -> None:
        """Something happened to `partition` (a role change, an append, a HW move): load it if
        this broker now leads it in a new epoch, unload it if not any more, else commit what
        the high watermark passed."""
        epoch = self.writer.leader_epoch(partition)
        shard = self.shards.get(partition)
        if epoch is None:
            if shard is not None:
                self.unload(partition)
        elif shard is None or shard.leader_epoch != epoch:
            self.load(partition, epoch)
        elif shard.status is ShardStatus.ACTIVE:
            self.on_high_watermark(partition, self.writer.high_watermark(partition))

    def load(self, partition: int, leader_epoch: int) -> None:
        if partition in self.shards:
            self.unload(partition)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a role change applied before the loop runs: loaded on first use
            return
        shard: _Shard[S] = _Shard(partition, leader_epoch, self.shard_type.empty())
        self.shards[partition] = shard
        shard.load_task = loop.create_task(self._load(shard), name=f"load-{self.name}-{partition}")
        log.info("Loading the %s coordinator of partition %d (leader epoch %d)", self.name, partition, leader_epoch)

    async def _load(self, shard: _Shard[S]) -> None:
        started = self.timers.now_ms()
        sink = _Replayer(self, shard.committed)
        try:
            end = await self.writer.load(shard.partition, shard.leader_epoch, sink)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a bad partition must not stop the broker
            log.exception("Loading the %s coordinator of partition %d failed; it stays unavailable here "
                          "until its leadership changes", self.name, shard.partition)
            return
        if self.shards.get(shard.partition) is not shard:
            return
        shard.committed, shard.committed_offset, shard.status = sink.state, end, ShardStatus.ACTIVE
        shard.load_task = None
        log.info("Loaded the %s coordinator of partition %d (leader epoch %d): %d records and %d transaction "
                 "markers to offset %d in %d ms", self.name, shard.partition, shard.leader_epoch, sink.records,
                 sink.markers, end, self.timers.now_ms() - started)
        if self._on_loaded is not None:
            self._on_loaded(shard.partition, sink.state)

    def unload(self, partition: int) -> None:
        """Stop coordinating `partition` at once: pending answers fail with NOT_COORDINATOR,
        its timers are cancelled."""
        shard = self.shards.pop(partition, None)
        if shard is None:
            return
        if shard.load_task is not None:
            shard.load_task.cancel()
        for key in shard.timer_keys:
            self.timers.cancel(key)
        failed = self._drop_batches(shard, 0, E.NOT_COORDINATOR, f"partition {partition} unloaded")
        log.info("Unloaded the %s coordinator of partition %d (leader epoch %d)%s", self.name, partition,
                 shard.leader_epoch, f": {failed} pending write(s) answered NOT_COORDINATOR" if failed else "")
        if self._on_unloaded is not None:
            self._on_unloaded(partition)

    # ---- reads ---------------------------------------------------------------------------

    def status(self, partition: int) -> ShardStatus | None:
        shard = self.shards.get(partition)
        return None if shard is None else shard.status

    def active(self) -> list[int]:
        return [p for p, s in self.shards.items() if s.status is ShardStatus.ACTIVE]

    def current(self, partition: int) -> S:
        """The state with every write made so far, committed or not (what the next rule sees)."""
        return self._active(partition).current

    def committed(self, partition: int) -> S:
        """The state of the committed writes only (what a read answers: Kafka's read operations
        run at the last committed offset)."""
        return self._active(partition).committed

    def require_active(self, partition: int, topic: str) -> None:
        """Nothing when this broker leads `partition` of `topic` and its state is loaded;
        CoordinatorError otherwise (NOT_COORDINATOR, or COORDINATOR_LOAD_IN_PROGRESS with the
        load started for a new leader epoch), as Kafka's coordinators answer a request."""
        epoch = self.writer.leader_epoch(partition)
        if epoch is None:
            raise CoordinatorError(E.NOT_COORDINATOR, f"this broker does not lead {topic}-{partition}")
        shard = self.shards.get(partition)
        if shard is None or shard.leader_epoch != epoch:
            self.load(partition, epoch)
            raise CoordinatorError(E.COORDINATOR_LOAD_IN_PROGRESS, f"loading {topic}-{partition}")
        if shard.status is ShardStatus.LOADING:
            raise CoordinatorError(E.COORDINATOR_LOAD_IN_PROGRESS, f"loading {topic}-{partition}")

    def _active(self, partition: int) -> _Shard[S]:
        shard = self.shards.get(partition)
        if shard is None:
            raise CoordinatorError(E.NOT_COORDINATOR, f"the {self.name} coordinator of partition {partition} is not here")
        if shard.status is ShardStatus.LOADING:
            raise CoordinatorError(E.COORDINATOR_LOAD_IN_PROGRESS,
                                   f"the {self.name} coordinator of partition {partition} is loading")
        return shard

    # ---- writes --------------------------------------------------------------------------

    async def write(self, partition: int, operation: Callable[[S], CoordinatorResult[S, A]]) -> A | None:
        """Run `operation` on the current state now; its answer once its records commit.
        CoordinatorError when the shard is not here or the write fails (its state reverted)."""
        return await self.submit(partition, operation)

    def submit(self, partition: int, operation: Callable[[S], CoordinatorResult[S, A]]) -> asyncio.Future[A | None]:
        """`write` without awaiting: the operation runs now, the future holds its answer."""
        future: asyncio.Future[A | None] = asyncio.get_running_loop().create_future()
        self.submit_settled(partition, operation, _settle_future(future))
        return future

    def submit_settled(self, partition: int, operation: Callable[[S], CoordinatorResult[S, A]],
                       settle: Settle) -> None:
        """The operation runs now; `settle` is called at once when the write commits or fails
        (already during this call when nothing was pending), without a turn of the event loop."""
        shard = self._active(partition)
        result = operation(shard.current)
        state = self._state_after(shard.current, result)
        if not result.records:
            if shard.batches:  # answered once what it read commits (read-your-writes)
                last = shard.batches[-1]
                last.state = state
                last.waiters.append((settle, result.answer))
            else:
                shard.committed = state
                settle(result.answer, None)
            return
        size = sum(len(k or b"") + len(v or b"") for k, v in result.records)
        batch = shard.batches[-1] if shard.batches and shard.batches[-1].end_offset is None else None
        if batch is not None and (batch.marker is not None or batch.producer_id != result.producer_id
                                  or batch.producer_epoch != result.producer_epoch):
            self._flush(shard)  # a transaction's records never share a batch with others'
            batch = None
        if batch is not None and batch.records and batch.size + size > self.max_batch_bytes:
            self._flush(shard)
            batch = None
        first = batch is None and not shard.flush_scheduled
        if batch is None:
            batch = _Batch(state, result.producer_id, result.producer_epoch)
            shard.batches.append(batch)
        batch.state = state
        batch.records.extend(result.records)
        batch.size += size
        batch.waiters.append((settle, result.answer))
        self._schedule_flush(shard, first)

    def complete_transaction(self, partition: int, producer_id: int, producer_epoch: int,
                             coordinator_epoch: int, committed: bool) -> asyncio.Future[None]:
        """Append `producer_id`'s commit or abort marker and replay it (its pending records
        become committed state, or go); the future settles when the marker commits (Kafka's
        scheduleTransactionCompletion)."""
        shard = self._active(partition)
        if not isinstance(self.shard_type, TransactionalShardType):
            raise TypeError(f"the {self.name} coordinator does not take part in transactions")
        state = self.shard_type.replay_end_transaction(shard.current, producer_id, producer_epoch, committed)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if shard.batches and shard.batches[-1].end_offset is None:
            self._flush(shard)
        first = not shard.flush_scheduled
        batch: _Batch[S] = _Batch(state, producer_id, producer_epoch,
                                  _Marker(producer_id, producer_epoch, coordinator_epoch, committed))
        batch.waiters.append((_settle_future(future), None))
        shard.batches.append(batch)
        self._schedule_flush(shard, first)
        return future

    def _schedule_flush(self, shard: _Shard[S], first: bool) -> None:
        if not shard.flush_scheduled:
            # The first write of a turn of the event loop is appended at once (a lone
            # synchronous committer waits for nothing); the writes that follow it in the same
            # turn share one append at the end of the turn.
            shard.flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_if_current, shard)
            if first:
                self._flush(shard)

    def _state_after(self, state: S, result: CoordinatorResult[S, Any]) -> S:
        transactional = result.producer_id != NO_PRODUCER_ID
        if transactional and not isinstance(self.shard_type, TransactionalShardType):
            raise TypeError(f"the {self.name} coordinator does not take part in transactions")
        for key, value in result.records:
            if key is None:
                raise ValueError(f"a record of the {self.name} coordinator has no key")
            if transactional:
                assert isinstance(self.shard_type, TransactionalShardType)
                state = self.shard_type.replay_transactional(state, result.producer_id, result.producer_epoch,
                                                             key, value)
            else:
                state = self.shard_type.replay(state, key, value)
        return state if result.memory is None else result.memory(state)

    def _flush_if_current(self, shard: _Shard[S]) -> None:
        shard.flush_scheduled = False
        if self.shards.get(shard.partition) is shard:
            self._flush(shard)

    def _flush(self, shard: _Shard[S]) -> None:
        """Append the open batch: one append for every write made since the last flush."""
        if not shard.batches or shard.batches[-1].end_offset is not None:
            return
        batch = shard.batches[-1]
        try:
            if batch.marker is not None:
                m = batch.marker
                end = self.writer.append_marker(shard.partition, shard.leader_epoch, producer_id=m.producer_id,
                                                producer_epoch=m.producer_epoch,
                                                coordinator_epoch=m.coordinator_epoch, committed=m.committed)
            elif batch.producer_id != NO_PRODUCER_ID:
                end = self.writer.append(shard.partition, shard.leader_epoch, batch.records,
                                         producer_id=batch.producer_id, producer_epoch=batch.producer_epoch)
            else:
                end = self.writer.append(shard.partition, shard.leader_epoch, batch.records)
        except KafkaError as e:
            self._fail(shard, len(shard.batches) - 1, ErrorCode(int(e.code)), f"append refused: {e}")
            return
        except Exception as e:  # noqa: BLE001 - a bug below must fail these writes, not wedge the partition
            log.exception("Appending to partition %d of the %s coordinator failed", shard.partition, self.name)
            self._fail(shard, len(shard.batches) - 1, E.UNKNOWN_SERVER_ERROR, f"append failed: {e!r}")
            return
        batch.end_offset = end
        self.appends_total += 1
        self.timers.schedule(self._commit_timer(shard, end), self.timers.now_ms() + self.commit_timeout_ms,
                             lambda now: self._commit_timed_out(shard, end))
        self.on_high_watermark(shard.partition, self.writer.high_watermark(shard.partition))

    def _commit_timer(self, shard: _Shard[S], end: int) -> Hashable:
        key = (self.name, shard.partition, shard.leader_epoch, "commit", end)
        shard.timer_keys.add(key)
        return key

    def on_high_watermark(self, partition: int, high_watermark: int) -> None:
        """Commit every batch the high watermark passed: its state becomes the committed one
        and its answers are released, in append order."""
        shard = self.shards.get(partition)
        if shard is None:
            return
        while shard.batches:  # each pass commits one batch
            batch = shard.batches[0]
            if batch.end_offset is None or batch.end_offset > high_watermark:
                break
            shard.batches.popleft()
            shard.committed, shard.committed_offset = batch.state, batch.end_offset
            key = (self.name, partition, shard.leader_epoch, "commit", batch.end_offset)
            self.timers.cancel(key)
            shard.timer_keys.discard(key)
            for settle, answer in batch.waiters:
                settle(answer, None)

    def on_truncated(self, partition: int, log_end_offset: int) -> None:
        """The partition's log was truncated to `log_end_offset`: the writes past it are lost."""
        shard = self.shards.get(partition)
        if shard is None:
            return
        for index, batch in enumerate(shard.batches):
            if batch.end_offset is None or batch.end_offset > log_end_offset:
                self._fail(shard, index, E.NOT_COORDINATOR, f"log truncated to offset {log_end_offset}")
                return

    def _commit_timed_out(self, shard: _Shard[S], end: int) -> None:
        """A batch not committed in time: its answers fail, but the batch stays pending with its
        state, as Kafka's OperationTimeout only completes the write's future. Its records are in
        the log and may still commit (the state then moves on to include them, as a reload would
        find them) or be truncated (then `on_truncated` reverts it); reverting now would leave
        the state without records the partition later holds."""
        shard.timer_keys.discard((self.name, shard.partition, shard.leader_epoch, "commit", end))
        for batch in shard.batches:
            if batch.end_offset == end:
                waiters, batch.waiters = batch.waiters, []
                why = f"not committed within {self.commit_timeout_ms} ms"
                for settle, _ in waiters:
                    settle(None, CoordinatorError(E.REQUEST_TIMED_OUT, why))
                log.warning("The %s coordinator of partition %d (leader epoch %d): the write ending at offset %d "
                            "was %s; %d answer(s) failed with REQUEST_TIMED_OUT, the write stays pending until "
                            "the log commits or truncates it", self.name, shard.partition, shard.leader_epoch,
                            end, why, len(waiters))
                return

    def _fail(self, shard: _Shard[S], index: int, error: ErrorCode, why: str) -> None:
        """The batch at `index` failed: it and every later one (computed on top of it) go, and
        the state returns to the last one still standing, or the committed state."""
        failed = self._drop_batches(shard, index, error, why)
        log.warning("The %s coordinator of partition %d (leader epoch %d) reverted %d write(s) to its state "
                    "at offset %d: %s (%s)", self.name, shard.partition, shard.leader_epoch, failed,
                    shard.committed_offset, why, error.name)

    def _drop_batches(self, shard: _Shard[S], index: int, error: ErrorCode, why: str) -> int:
        failed = 0
        while len(shard.batches) > index:  # each pass drops one batch
            batch = shard.batches.pop()
            if batch.end_offset is not None:
                key = (self.name, shard.partition, shard.leader_epoch, "commit", batch.end_offset)
                self.timers.cancel(key)
                shard.timer_keys.discard(key)
            for settle, _ in batch.waiters:
                failed += 1
                settle(None, CoordinatorError(error, why))
        return failed

    # ---- timers --------------------------------------------------------------------------

    def schedule_timer(self, partition: int, key: Hashable, delay_ms: int, operation: TimerOperation[S],
                       on_done: Callable[[asyncio.Future[Any]], None] | None = None) -> None:
        """Run `operation` as a write `delay_ms` from now (Kafka's CoordinatorTimer.schedule,
        by delay: the timer service's clock is the broker's, not the shard's), while this
        broker still coordinates `partition` in this epoch; replaces `key`'s timer. The
        operation gets the timer service's time. `on_done` gets the write's future (default:
        failures are logged)."""
        shard = self.shards.get(partition)
        if shard is None:
            return
        full_key = (self.name, partition, shard.leader_epoch, key)
        shard.timer_keys.add(full_key)

        def run(now_ms: int) -> None:
            shard.timer_keys.discard(full_key)
            if self.shards.get(partition) is not shard or shard.status is not ShardStatus.ACTIVE:
                return
            future = self.submit(partition, lambda state: operation(state, now_ms))
            future.add_done_callback(on_done or _log_timer_failure(self.name, partition, key))

        self.timers.schedule_in(full_key, delay_ms, run)

    def cancel_timer(self, partition: int, key: Hashable) -> None:
        shard = self.shards.get(partition)
        if shard is not None:
            full_key = (self.name, partition, shard.leader_epoch, key)
            shard.timer_keys.discard(full_key)
            self.timers.cancel(full_key)

    def timer_deadline(self, partition: int, key: Hashable) -> int | None:
        """When `key`'s timer is due, on the timer service's clock; None without one."""
        shard = self.shards.get(partition)
        return None if shard is None else self.timers.deadline((self.name, partition, shard.leader_epoch, key))

    # ---- tests and shutdown --------------------------------------------------------------

    async def idle(self) -> None:
        """Until every load and every write so far has settled (tests await this instead of
        sleeping). Work started meanwhile is awaited too, up to MAX_IDLE_PASSES generations."""
        for _ in range(MAX_IDLE_PASSES):
            await asyncio.sleep(0)  # let scheduled flushes run
            waiting: list[asyncio.Future[Any]] = []
            for shard in self.shards.values():
                if shard.load_task is not None:
                    waiting.append(shard.load_task)
                if shard.batches:  # settled once every batch before it settled, or dropped with them
                    last: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                    shard.batches[-1].waiters.append((_settle_future(last), None))
                    waiting.append(last)
            if not waiting:
                return
            await asyncio.gather(*waiting, return_exceptions=True)
        raise RuntimeError(f"the {self.name} coordinator runtime kept getting new work")

    async def close(self) -> None:
        tasks = [s.load_task for s in self.shards.values() if s.load_task is not None]
        for partition in list(self.shards):
            self.unload(partition)
        await asyncio.gather(*tasks, return_exceptions=True)


class _Replayer(Generic[S]):
    """The LoadSink of one load: the shard's state after each record and marker read back."""

    def __init__(self, runtime: CoordinatorRuntime[S], state: S) -> None:
        self.shard_type = runtime.shard_type
        self.name = runtime.name
        self.state = state
        self.records = 0
        self.markers = 0

    def record(self, key: bytes, value: bytes | None, producer_id: int, producer_epoch: int) -> None:
        self.records += 1
        if producer_id == NO_PRODUCER_ID:
            self.state = self.shard_type.replay(self.state, key, value)
        elif isinstance(self.shard_type, TransactionalShardType):
            self.state = self.shard_type.replay_transactional(self.state, producer_id, producer_epoch, key, value)
        else:
            raise ValueError(f"the {self.name} coordinator's partition holds a transactional batch "
                             f"of producer {producer_id}")

    def end_transaction(self, producer_id: int, producer_epoch: int, committed: bool) -> None:
        self.markers += 1
        if isinstance(self.shard_type, TransactionalShardType):
            self.state = self.shard_type.replay_end_transaction(self.state, producer_id, producer_epoch, committed)


def _log_timer_failure(name: str, partition: int, key: Hashable) -> Callable[[asyncio.Future[Any]], None]:
    def done(future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if isinstance(error, CoordinatorError):
            log.info("The %s coordinator's timer %r of partition %d did not commit: %s",
                     name, key, partition, error)
        elif error is not None:
            log.error("The %s coordinator's timer %r of partition %d failed", name, key, partition,
                      exc_info=error)
    return done


def _settle_future(future: asyncio.Future[Any]) -> Settle:
    def settle(answer: Any, error: CoordinatorError | None) -> None:
        if not future.done():
            future.set_result(answer) if error is None else future.set_exception(error)
    return settle
