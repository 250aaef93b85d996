"""A follower's fetcher: one task and one connection to one leader broker, many partitions.

Kafka's ReplicaFetcherThread; `fetcher_manager.ReplicaFetcherManager` starts one per leader
and moves partitions between them. A partition joins its leader's
fetcher in the "truncating" state: OffsetForLeaderEpoch for its latest epoch, repeated
with older epochs until the two logs agree (KIP-101/279: `truncation_rounds`, the task's
requests, on `truncation`'s rules), never the high watermark. Then it fetches from its log end offset with the Fetch API (replica id
set, the leader epoch it knows), appends the leader's batches unchanged, and takes
min(leader HW, own LEO) as its HW. Errors of one partition back it off alone; a lost
connection backs off the whole fetcher. Every wait is bounded.

A round's Python work is what changed (`fetch_rounds.FetchRounds`): the partitions added,
touched or due after a back-off, and those outside the ISR; the Fetch names only what its
fetch session (KIP-227) does not hold yet. Nothing outside the fetcher moves a follower's
log end offset; its log start offset moves with retention too, which `LOG_START_CHECK_S`
bounds (the leader reads it for DeleteRecords' low watermark only).

A fetch answer is handled, and the next Fetch written, in the connection's read callback
(`KafkaConnection.requests`, `_on_answer`): the task is not woken per round (a future set, a
task step and a loop pass: ~300 of a round's ~3,700 opcodes, issue 35). It sleeps until a
round needs it: truncation, an out-of-range reset, a log start to write, an error answer,
nothing to fetch, a lost connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

from broker.log.log_manager import CHECKPOINT_WAIT_S, LOG_START_OFFSET_CHECKPOINT
from broker.replication.fetch_rounds import FetchRounds
from broker.replication.fetcher_state import (
    FetcherOwner,
    FetcherSettings,
    PartitionFetchState,
)
from broker.replication.high_watermark import follower_answer_changes_nothing
from broker.replication.kafka_connection import BrokerConnectionError, KafkaConnection
from broker.replication.partition import Partition
from broker.replication.truncation import AskLeader, TruncateFully, start_truncation
from broker.replication.truncation_rounds import TruncationRounds
from common.topic_partition import TopicPartition
from common.errors import ErrorCode, KafkaError
from common.protocol import fetch
from common.protocol.api_keys import ApiKey
from common.protocol.fetch_requests import FetchRequests
from common.protocol.primitives import Chunk
from common.request_versions import FETCH_VERSION

if TYPE_CHECKING:  # the replica manager (above this package) is its owner's: annotation only
    from broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

# Errors that mean "the leader and we disagree about who leads in which epoch": wait for
# the metadata to move on (it will), then carry on.
_WAIT_FOR_METADATA: Final = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.REPLICA_NOT_AVAILABLE})


_LEADER_BEHIND: Final = frozenset({ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER})
LEADER_BEHIND_FIRST_RETRY_S: Final = 0.02
# How stale the log start offset a follower reports may get when retention moves it (one pass
# over the fetcher's partitions per period; the fetcher moves every other offset itself).
LOG_START_CHECK_S: Final = 5.0
_FETCH: Final = ApiKey.FETCH  # bound once: the enum class's attribute lookup is slow, and this is per round
_RECORD_BYTES: Final = (bytes, memoryview)  # an answer's records as bytes (not a placeholder, not None)
_NO_RECORDS: Final = memoryview(b"")
_new_entry: Final = fetch.new_fetch_partition


class ReplicaFetcher:
    """Fetches every partition this broker follows from one leader, over one connection."""

    def __init__(self, manager: FetcherOwner, leader_id: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        # The manager's, fixed for its life: read once, not through it on every round.
        settings = self._settings = manager.settings
        self._replicas: ReplicaManager = manager.replicas
        # Read per partition refreshed or answered (the quotas' object is the replica manager's
        # for its life; its quotas are read through it on each call).
        throttles = self._replicas.throttles
        self._follower_throttled, self._record_follower = throttles.follower_throttled, throttles.record_follower
        # Every Fetch of this fetcher carries the same head; only the session and partitions vary.
        self._requests = FetchRequests(FETCH_VERSION, replica_id=settings.broker_id,
                                       max_wait_ms=settings.max_wait_ms, min_bytes=settings.min_bytes,
                                       max_bytes=settings.response_max_bytes, isolation_level=fetch.READ_UNCOMMITTED)
        self._max_wait_s = settings.max_wait_ms / 1000  # the long poll's extra time for an answer
        self._rounds = FetchRounds()
        self.partitions = self._rounds.partitions  # read by the manager and tests
        self._truncation = TruncationRounds(self, self._replicas, self._rounds, settings.broker_id)
        self._changed = asyncio.Event()
        self._conn: KafkaConnection | None = None
        self._failing = False
        self._out_of_range: list[TopicPartition] = []
        # Partitions whose log start an answer moved (the leader's DeleteRecords): on disk
        # before the next fetch reports them (a dict as an ordered set).
        self._log_starts_moved: dict[TopicPartition, None] = {}
        self._loop = asyncio.get_running_loop()
        self._log_starts_checked = self._loop.time()
        self._log_start_moves_seen = -1  # the log manager's count of log start moves at that check
        self.task: asyncio.Task[None] | None = self._loop.create_task(
            self._run(), name=f"replica-fetcher-{leader_id}")

    def add(self, tp: TopicPartition, leader_epoch: int) -> None:
        partition = self._replicas.follower_partition(tp, leader_epoch)
        if partition is None:
            return
        step = start_truncation(partition.log.leader_epoch_cache.entries, partition.log.log_end_offset)
        state = PartitionFetchState(leader_epoch, step if isinstance(step, AskLeader) else None)
        self._rounds.add(tp, state)
        if isinstance(step, TruncateFully):  # a log with data but no epochs: start over
            self._replicas.truncate_follower_fully(partition, 0, "(log without leader epochs)")
        self._changed.set()

    def remove(self, tp: TopicPartition) -> None:
        """Stop fetching `tp` (the next fetch forgets it)."""
        self._rounds.remove(tp)

    def registrations_changed(self, tps: Iterable[TopicPartition]) -> None:
        """This broker joined or left these partitions' ISR without their leader or leader epoch
        moving: build their entries again (those not fetched here are ignored)."""
        rounds = self._rounds
        for tp in tps:
            rounds.touch(tp)
        self._changed.set()

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
        if self._conn is not None:
            self._conn.abort()

    def back_off(self, tp: TopicPartition, state: PartitionFetchState, *, leader_behind: bool = False) -> None:
        delay = self._settings.backoff_ms / 1000
        if leader_behind:
            # counted only while the doubling is below the backoff: a leader behind for ~1,000
            # answers in a row made 0.02 * 2 ** n too large for a float (the fetcher failed)
            behind_delay = LEADER_BEHIND_FIRST_RETRY_S * 2 ** state.leader_behind
            if behind_delay < delay:
                delay = behind_delay
                state.leader_behind += 1
        self._rounds.back_off(tp, state, asyncio.get_running_loop().time() + delay)

    # ---- the loop ----------------------------------------------------------------------

    def _start_round(self, now: float) -> None:
        """The start of every round: back-offs that ended, log starts checked when due."""
        self._rounds.due(now)
        if now - self._log_starts_checked >= LOG_START_CHECK_S:
            self._check_log_starts(now)

    async def _run(self) -> None:
        loop = self._loop
        backoff = self._settings.backoff_ms / 1000
        rounds = self._rounds
        try:
            while True:  # until cancelled; every pass does bounded requests or one bounded wait
                now = loop.time()
                self._start_round(now)
                if not rounds.is_truncating() and not rounds.has_fetch_work():
                    self._changed.clear()
                    retry_at = rounds.next_retry()
                    try:
                        async with asyncio.timeout(backoff if retry_at is None else min(backoff, retry_at - now)):
                            await self._changed.wait()
                    except TimeoutError:
                        pass
                    continue
                try:
                    conn = self._conn
                    if conn is None or conn.closed:  # (no coroutine per round while connected)
                        conn = await self._connection()
                    if rounds.is_truncating():
                        await self._truncation.run(conn)
                        self._answered(conn)
                    else:
                        await self._fetch(conn, now)
                except BrokerConnectionError as e:
                    if not self._failing:
                        log.warning("Fetcher of leader %d: %s; retrying every %.1f s", self.leader_id, e, backoff)
                    self._failing = True
                    await asyncio.sleep(backoff)
                except Exception:  # a storage error, a leader answer we cannot use: keep the fetcher alive
                    log.exception("Fetcher of leader %d failed; retrying in %.1f s", self.leader_id, backoff)
                    if self._conn is not None:
                        self._conn.abort()
                    await asyncio.sleep(backoff)
        finally:
            if self._conn is not None:
                self._conn.abort()

    def _answered(self, conn: KafkaConnection) -> None:
        """A request on `conn` was answered: the leader is reachable (again)."""
        if self._failing:
            self._failing = False
            log.info("Fetcher of leader %d: connected to %s again", self.leader_id, conn.address)

    def _check_log_starts(self, now: float) -> None:
        """Touch the partitions whose log start offset moved under the fetcher (retention):
        one light pass over the fetched partitions per LOG_START_CHECK_S, and none while no log
        start of this broker moved since the last (an idle broker walked them all for nothing)."""
        self._log_starts_checked = now
        moves = self._replicas.log_manager.changes.log_start_moves
        if moves == self._log_start_moves_seen:
            return
        self._log_start_moves_seen = moves
        hosted = self._replicas.partitions
        for tp, entry in self._rounds.session.wanted.items():
            partition = hosted.get(tp)
            if partition is not None and partition.log.log_start_offset != entry.log_start_offset:
                self._rounds.touch(tp)

    async def _connection(self) -> KafkaConnection:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        address = self.manager.leader_address(self.leader_id)
        if address is None:
            raise BrokerConnectionError(f"leader {self.leader_id} has no {self._settings.listener_name} "
                                        "listener in the metadata")
        self._conn = await KafkaConnection.open(
            *address, client_id=f"broker-{self._settings.broker_id}-fetcher-{self.leader_id}",
            timeout_s=self._settings.socket_timeout_ms / 1000, local_host=self._settings.local_host)
        return self._conn

    # ---- fetching ------------------------------------------------------------------------

    async def _write_moved_log_starts(self) -> None:
        """Put the log starts the last answers moved on disk before a fetch
        reports them: the leader counts on a replica's reported start for DeleteRecords' low
        watermark. One write per log dir for them all, awaited off the loop (bounded); the
        ReplicaManager wrote each partition's alone, the loop waiting for it (tens of ms at
        100,000 logs). Its own partitions by name: a write another fetcher started with them counts."""
        moved, self._log_starts_moved = self._log_starts_moved, {}
        written = self._replicas.log_manager.checkpoint_log_start_offsets(*moved, wait=False)
        if written.done():
            return
        try:
            async with asyncio.timeout(CHECKPOINT_WAIT_S):
                # shielded: a timeout or the fetcher's stop must not cancel the writer's future
                await asyncio.shield(asyncio.wrap_future(written))
        except TimeoutError:
            log.error("Fetcher of leader %d: the %s is not written after %d s; the leader may learn "
                      "of a log start a crash would take back", self.leader_id, LOG_START_OFFSET_CHECKPOINT,
                      CHECKPOINT_WAIT_S)
        except Exception:  # noqa: BLE001 - a failed write is logged by the checkpoint writer; the file stays owed
            pass

    async def _fetch(self, conn: KafkaConnection, now: float) -> None:
        """Fetch rounds, one after another while each answer leaves nothing for this task: the
        answers are handled and the next Fetch written in the connection's read callback
        (`_on_answer`). Returns when a round needs the task, after an out-of-range reset."""
        if self._log_starts_moved:  # (not in the usual round)
            await self._write_moved_log_starts()
        body = self._next_fetch(now)
        if body is None:
            return
        session = self._rounds.session
        try:
            await conn.requests(_FETCH, FETCH_VERSION, body, fetch.decode_fetch_response, self._on_answer,
                                extra_timeout_s=self._max_wait_s)
        except BaseException:
            session.handle_error()  # (the last Fetch built may be unanswered, or unsent)
            raise
        if self._out_of_range:
            out_of_range, self._out_of_range = self._out_of_range, []
            await self._truncation.reset_to_leader(conn, out_of_range)

    def _next_fetch(self, now: float) -> list[Chunk] | None:
        """The next Fetch's body: the entries of what changed built again; None when nothing is
        fetched."""
        rounds, follower_partition, refresh = self._rounds, self._replicas.follower_partition, self._refresh
        for tp, state in rounds.to_refresh(now):  # what changed, and those outside the ISR
            # `state` is the fetcher's own (to_refresh just read it, nothing awaited since).
            partition = follower_partition(tp, state.leader_epoch)
            if partition is None:
                self.back_off(tp, state)
            else:
                refresh(tp, state, partition)
        if not rounds.session.wanted:
            return None
        plan = rounds.build()
        return [self._requests.encode(plan.session_id, plan.epoch, plan.to_send.items(), plan.to_forget)]

    def _refresh(self, tp: TopicPartition, state: PartitionFetchState, partition: Partition) -> None:
        """Build `tp`'s entry from its log now (kept while its offsets and epoch are), or back
        it off while the reassignment throttle holds it."""
        if self._follower_throttled(partition):
            self.back_off(tp, state)
            return
        partition_log = partition.log
        offset, log_start = partition_log.log_end_offset, partition_log.log_start_offset
        entry = state.request
        if entry is None or entry.fetch_offset != offset or entry.log_start_offset != log_start \
                or entry.current_leader_epoch != state.leader_epoch:
            entry = state.request = _new_entry((tp.partition, offset, self._settings.partition_max_bytes, log_start,
                                                state.leader_epoch, -1, fetch.ZERO_UUID))
        self._rounds.fetching(tp, entry, in_isr=self._settings.broker_id in partition.isr)

    def _on_answer(self, response: fetch.FetchResponse) -> list[Chunk] | None:
        """A Fetch answered, in the connection's read callback: handled, and the next round's
        Fetch when it needs nothing of the task (None hands the next round to it)."""
        session = self._rounds.session
        session_id = session.session_id
        if not session.handle_response(response.error_code, response.session_id):
            log.info("Fetcher of leader %d: fetch session %d answered %s; starting a new session",
                     self.leader_id, session_id, _name(response.error_code))
            return None
        if response.error_code:
            log.warning("Fetcher of leader %d: fetch failed: %s", self.leader_id, _name(response.error_code))
            for tp in list(session.wanted):  # bounded by the partitions fetched; a rare answer
                self.back_off(tp, self.partitions[tp])
            return None
        self._on_fetch_response(response)
        conn = self._conn
        if conn is None or conn.closed:  # (stopped meanwhile)
            return None
        self._answered(conn)
        if self._out_of_range or self._log_starts_moved:
            return None  # a reset or a write to await first
        now = self._loop.time()
        self._start_round(now)
        rounds = self._rounds
        if rounds.is_truncating() or not rounds.has_fetch_work():
            return None
        return self._next_fetch(now)

    def _on_fetch_response(self, response: fetch.FetchResponse) -> None:
        # One pass per answered partition, its checks inline: a follower of an acks=all canary
        # dispatches one answer per produce (issue 35).
        partitions, wanted = self.partitions, self._rounds.session.wanted
        replicas = self._replicas
        follower_partition, record_follower = replicas.follower_partition, self._record_follower
        for topic in response.responses:
            name = topic.topic
            for p in topic.partitions:
                tp = tuple.__new__(TopicPartition, (name, p.partition_index))  # (C: no __new__ frame)
                state = partitions.get(tp)
                if state is None or (entry := state.request) is None or wanted.get(tp) is not entry:
                    continue  # removed, added again or backed off during the request: not ours
                partition = follower_partition(tp, state.leader_epoch)
                if partition is None or partition.log.log_end_offset != entry.fetch_offset:
                    continue  # a new epoch, or truncated meanwhile
                if p.error_code:
                    self._rounds.touch(tp)  # its entry is built again (after its back-off, or reset)
                    if p.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                        self._out_of_range.append(tp)
                    else:
                        self.partition_error(tp, state, p.error_code, "Fetch")
                    continue
                state.leader_behind = 0
                records = p.records
                view = memoryview(records) if isinstance(records, _RECORD_BYTES) else _NO_RECORDS
                self._append(tp, state, partition, p, view)
                if view:
                    record_follower(partition, len(view))
                # Its offsets moved: its entry is built again. An answer that moved only the
                # high watermark leaves the entry as it was (a new leader answers each
                # partition a follower moves to it once, with no records: 16,500 per
                # surviving broker in a controlled shutdown at 100,000 partitions).
                partition_log = partition.log
                if partition_log.log_start_offset != entry.log_start_offset:
                    self._log_starts_moved[tp] = None  # on disk before the next fetch reports it
                    self._rounds.touch(tp)
                elif partition_log.log_end_offset != entry.fetch_offset and wanted.get(tp) is entry:
                    # now, the partition at hand (one its append backed off is built when due)
                    self._refresh(tp, state, partition)

    def _append(self, tp: TopicPartition, state: PartitionFetchState, partition: Partition,
                answer: fetch.FetchPartitionResponse, view: memoryview) -> None:
        partition_log = partition.log
        if not view and follower_answer_changes_nothing(
                leader_high_watermark=answer.high_watermark,
                leader_log_start_offset=answer.log_start_offset,
                log_end_offset=partition_log.log_end_offset, high_watermark=partition_log.high_watermark,
                log_start_offset=partition_log.log_start_offset):
            return
        try:
            self._replicas.append_as_follower(partition, view, answer.high_watermark, answer.log_start_offset)
        except KafkaError as e:
            # Kafka marks the partition failed; we back off and fetch it again (a corrupt
            # batch stays out of our log either way).
            log.error("Follower %s: cannot append what leader %d sent at offset %d: %s",
                      tp, self.leader_id, partition.log.log_end_offset, e)
            self.back_off(tp, state)

    def partition_error(self, tp: TopicPartition, state: PartitionFetchState, code: int, what: str) -> None:
        # UNKNOWN_LEADER_EPOCH / NOT_LEADER_OR_FOLLOWER: the new leader has not applied its own
        # election yet. Kafka waits replica.fetch.backoff.ms (1 s) here, which holds the HW of
        # every failed-over partition for that long; the leader is typically milliseconds away.
        self.back_off(tp, state, leader_behind=code in _LEADER_BEHIND)
        if code in _WAIT_FOR_METADATA:
            # thousands per controlled shutdown: the error's name only when the line is written
            if log.isEnabledFor(logging.DEBUG):
                log.debug("Follower %s: %s from leader %d answered %s; waiting for metadata",
                          tp, what, self.leader_id, _name(code))
        else:
            log.warning("Follower %s: %s from leader %d answered %s", tp, what, self.leader_id, _name(code))


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
