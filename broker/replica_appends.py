"""Writes to a hosted partition's log: a leader's produce appends, a follower's appends and
truncations, and the acks=all wait (Kafka's DelayedProduce).

    info = append_as_leader(partition, records, acks=-1, now_ms=now)   # raises a KafkaError
    append_as_follower(partition, records, leader_high_watermark, now_ms=now)
    codes = await purgatory.wait(DelayedProduce(required, outcome), required, timeout_s)

The caller (ReplicaManager) finds the partition, moves the high watermark afterwards and
wakes the requests waiting on it. Idempotent producers are checked here with
`broker.producer_state`; leaders and followers both keep that state, and with it the
partition's transactions: a control batch's COMMIT/ABORT marker ends one, and an ABORT is
indexed in the segment's `.txnindex` (Kafka's UnifiedLog.append updates both the same way for
every origin). Transaction markers come from the coordinator through `append_markers_as_leader`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Final

from broker.log.partition_log import LogAppendInfo
from broker.log.producer_snapshot import encode_snapshot, latest_snapshot, write_snapshot
from broker.log.segment import LogSegment
from broker.log.txn_index import AbortedTxn, last_stable_offset_after, marker_of
from broker.producer_state import AppendOutcome, ProducerStateEntry, ProducerStateManager
from broker.replica_reads import ReplicaError
from broker.replication.high_watermark import follower_high_watermark, follower_log_start_offset
from broker.replication.leader_rules import acks_all_refused
from broker.replication.partition import Partition
from common.topic_partition import TopicPartition
from common.errors import ErrorCode, KafkaStorageError
from common.control_records import ControlType, marker_batch
from common.record_batch import LOG_OVERHEAD, RecordBatchHeader, read_batches

log = logging.getLogger(__name__)

VALID_ACKS: Final = frozenset((-1, 0, 1))


def check_required_acks(acks: int) -> None:
    if acks not in VALID_ACKS:
        raise invalid_required_acks(acks)


def invalid_required_acks(acks: int) -> ReplicaError:
    """The refusal of a request whose acks are not in VALID_ACKS."""
    return ReplicaError(ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be -1 (all), 0 or 1, got {acks}")


def append_as_leader(partition: Partition, records: bytes | memoryview, *, acks: int,
                     now_ms: int) -> LogAppendInfo:
    """Append a producer's batches, stamped with the current leader epoch.

    Raises KafkaError: NOT_ENOUGH_REPLICAS (acks=-1 below min.insync.replicas),
    CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, KAFKA_STORAGE_ERROR, a
    producer-state refusal, ... Nothing is appended when it raises.
    """
    if acks == -1 and acks_all_refused(partition.isr, partition.min_insync_replicas):
        raise ReplicaError(ErrorCode.NOT_ENOUGH_REPLICAS,
                           f"ISR {list(partition.isr)} of {partition.tp} is smaller than "
                           f"min.insync.replicas {partition.min_insync_replicas}")
    view = memoryview(records)
    batches = read_batches(view)  # once: the log appends these without reading them again
    idempotent = False
    for _, header in batches:  # a loop, not any(<generator>): one batch per partition, per request
        if header.producer_id >= 0:
            idempotent = True
            break
    if idempotent:
        duplicate = _check_producer_state(partition, batches)
        if duplicate is not None:
            return duplicate
    partition_log = partition.log
    rolls = partition_log.rolls
    try:
        info = partition_log.append(view, now_ms=now_ms, leader_epoch=partition.leader_epoch,
                                    batches=batches)
    except OSError as e:
        raise KafkaStorageError(f"append to {partition.tp} failed: {e}") from e
    if partition_log.rolls != rolls:  # asked here: most appends roll nothing
        _snapshot_at_roll(partition)
    if idempotent:
        _update_producer_state(partition, batches, info.first_offset)
    return info


def _check_producer_state(partition: Partition, headers: list[tuple[int, RecordBatchHeader]]
                          ) -> LogAppendInfo | None:
    """Kafka's analyzeAndValidateProducerState: a rejected batch fails the append; a
    duplicate is acknowledged with its original offsets and nothing is appended."""
    for _, header in headers:
        verdict = partition.producer_state.check(header)
        if verdict.outcome is AppendOutcome.REJECT:
            raise ReplicaError(ErrorCode(verdict.error_code), verdict.message or
                               f"producer {header.producer_id} batch refused on {partition.tp}")
        if verdict.outcome is AppendOutcome.DUPLICATE and verdict.duplicate is not None:
            d = verdict.duplicate
            log.debug("Duplicate batch of producer %d on %s at offsets %d..%d",
                      header.producer_id, partition.tp, d.first_offset, d.last_offset)
            return LogAppendInfo(d.first_offset, d.last_offset, -1, d.timestamp, d.last_offset,
                                 partition.log.log_start_offset, 0, 0)
    return None


def append_marker_as_leader(partition: Partition, *, producer_id: int, producer_epoch: int,
                            coordinator_epoch: int, committed: bool, now_ms: int) -> LogAppendInfo:
    """Write one COMMIT or ABORT marker ending `producer_id`'s transaction, as the coordinator's
    WriteTxnMarkers asks (Kafka's appendRecords with origin COORDINATOR and acks=-1): no sequence
    check; the producer state ends the transaction, an ABORT is indexed in the `.txnindex`.

    Raises ReplicaError: NOT_ENOUGH_REPLICAS (ISR below min.insync.replicas),
    INVALID_PRODUCER_EPOCH (a marker for an older producer epoch), TRANSACTION_COORDINATOR_FENCED
    (from an older coordinator epoch than the last marker seen); KafkaStorageError.
    """
    if acks_all_refused(partition.isr, partition.min_insync_replicas):
        raise ReplicaError(ErrorCode.NOT_ENOUGH_REPLICAS,
                           f"ISR {list(partition.isr)} of {partition.tp} is smaller than "
                           f"min.insync.replicas {partition.min_insync_replicas}")
    batch = marker_batch(commit=committed, producer_id=producer_id, producer_epoch=producer_epoch,
                         coordinator_epoch=coordinator_epoch, timestamp_ms=now_ms)
    batches = read_batches(batch)
    header = batches[0][1]
    verdict = partition.producer_state.check_marker(header, coordinator_epoch)
    if verdict.outcome is AppendOutcome.REJECT:
        log.warning("Refused the %s marker of producer %d (epoch %d, coordinator epoch %d) on %s: %s",
                    "COMMIT" if committed else "ABORT", producer_id, producer_epoch, coordinator_epoch,
                    partition.tp, verdict.message)
        raise ReplicaError(ErrorCode(verdict.error_code), verdict.message)
    rolls = partition.log.rolls
    try:
        info = partition.log.append(batch, now_ms=now_ms, leader_epoch=partition.leader_epoch,
                                    batches=batches, validate=False)
    except OSError as e:
        raise KafkaStorageError(f"append of a transaction marker to {partition.tp} failed: {e}") from e
    if partition.log.rolls != rolls:
        _snapshot_at_roll(partition)
    kind = ControlType.COMMIT if committed else ControlType.ABORT
    aborted = _replay(partition, header, info.first_offset, info.last_offset, (kind, coordinator_epoch))
    if aborted is not None:
        partition.log.append_aborted_txn(aborted)
    return info


# ---- the follower side (the replica fetchers call these through the ReplicaManager) ---------


def append_as_follower(partition: Partition, records: memoryview, leader_high_watermark: int, *,
                       now_ms: int, leader_log_start_offset: int = -1) -> LogAppendInfo | None:
    """Append the leader's batches as they are (same offsets, same bytes); then the HW and
    the log start offset, which follows the leader's up to this replica's HW (Kafka's
    follower never moves its start past its HW)."""
    info = None
    partition_log = partition.log
    # One pass, each batch framed and CRC-checked once; a fetch may end in a partial batch,
    # which stays for the next fetch.
    batches = read_batches(records, allow_partial_tail=True)
    if batches:
        pos, header = batches[-1]
        whole = records[:pos + header.batch_length + LOG_OVERHEAD]
        rolls = partition_log.rolls
        try:
            info = partition_log.append(whole, now_ms=now_ms, assign_offsets=False, batches=batches)
        except OSError as e:
            raise KafkaStorageError(f"follower append to {partition.tp} failed: {e}") from e
        if partition_log.rolls != rolls:  # asked here: most appends roll nothing
            _snapshot_at_roll(partition)
        for pos, header in batches:  # the leader's offsets: a compacted leader's log has gaps
            if header.producer_id >= 0:
                marker = marker_of(whole[pos : pos + header.size], header) if header.is_control else None
                aborted = _replay(partition, header, header.base_offset, header.last_offset, marker)
                if aborted is not None:
                    partition_log.append_aborted_txn(aborted)
    high_watermark = partition_log.update_high_watermark(follower_high_watermark(
        leader_high_watermark=leader_high_watermark, log_end_offset=partition_log.log_end_offset))
    partition.producer_state.on_high_watermark(high_watermark)
    if leader_log_start_offset > partition_log.log_start_offset:  # most answers move nothing
        new_start = follower_log_start_offset(leader_log_start_offset=leader_log_start_offset,
                                              high_watermark=high_watermark)
        before = partition_log.log_start_offset
        if partition_log.maybe_increment_log_start_offset(new_start):
            log.info("Follower %s moved its log start offset %d -> %d after the leader's",
                     partition.tp, before, new_start)
    return info


def truncate_follower(partition: Partition, offset: int, why: str, *, now_ms: int) -> None:
    """Truncate a follower's log to `offset` (and its producer state with it)."""
    partition_log = partition.log
    leo = partition_log.log_end_offset
    if partition_log.truncate_to(offset, now_ms=now_ms):
        log.warning("Truncated follower %s to offset %d (log end offset was %d: offsets "
                    "%d..%d dropped) %s", partition.tp, offset, leo, offset, leo - 1, why)
        rebuild_producer_state(partition)


def truncate_follower_fully(partition: Partition, start_offset: int, why: str, *,
                            now_ms: int) -> None:
    """Drop a follower's whole log; it restarts empty at the leader's `start_offset`."""
    leo = partition.log.log_end_offset
    partition.log.truncate_fully_and_start_at(start_offset, now_ms=now_ms)
    log.warning("Truncated follower %s fully to start at offset %d (log end offset was %d) %s",
                partition.tp, start_offset, leo, why)
    use_producer_state(partition, ProducerStateManager())


def use_producer_state(partition: Partition, state: ProducerStateManager) -> None:
    """`state` becomes the partition's producer state, and what its log's producer snapshots
    are written from. The snapshot source holds the state, not the partition: a closure over the
    partition made every partition a reference cycle (partition -> log -> closure -> partition),
    garbage that only a full collection frees, and none once the heap keeper froze it."""
    partition.producer_state = state
    partition.log.snapshot_source = lambda: encode_snapshot(state.entries.values())


def _update_producer_state(partition: Partition, batches: list[tuple[int, RecordBatchHeader]],
                           first_offset: int) -> None:
    base = first_offset
    for _, header in batches:
        if header.producer_id >= 0:  # clients' batches: never a control batch (check_batch)
            partition.producer_state.update(header, base, base + header.last_offset_delta)
        base += header.last_offset_delta + 1


def _replay(partition: Partition, header: RecordBatchHeader, first_offset: int, last_offset: int,
            marker: tuple[ControlType, int] | None) -> AbortedTxn | None:
    """Update the producer state with one appended batch; the index entry of an aborted
    transaction it ends, with the LSO once its marker is in (Kafka's
    producerStateManager.lastStableOffset(completedTxn)), for the segment holding the marker."""
    state = partition.producer_state
    completed = state.update(header, first_offset, last_offset, marker)
    if marker is not None:  # the transaction ended: its verification is spent (KIP-890)
        partition.verified_txns.pop(header.producer_id, None)
    if completed is None:
        return None
    log.debug("%s transaction of producer %d on %s at offsets %d..%d",
              "Aborted" if completed.is_aborted else "Committed", completed.producer_id,
              partition.tp, completed.first_offset, completed.last_offset)
    if not completed.is_aborted:
        return None
    return AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset,
                      last_stable_offset_after(state.ongoing, completed))


def _snapshot_at_roll(partition: Partition) -> None:
    """The append rolled a segment (at the log end, before its batches): snapshot the producer
    state there, before the batches update it (Kafka's roll takes the snapshot). A failure only
    costs the next open a longer replay.

    Written without fsync, as Kafka's roll does (`takeSnapshot(false)`: its two fsyncs, file and
    directory, were the last a roll made on the event loop, issue 35). The kernel writes it back
    within seconds; one lost or torn by a power cut fails its CRC and the next open replays from
    an earlier snapshot or the log start, which gives the same producer state."""
    active = partition.log.active_segment
    try:
        write_snapshot(partition.log.directory, active.base_offset,
                       encode_snapshot(partition.producer_state.entries.values()), durable=False)
    except KafkaStorageError as e:
        log.warning("No producer snapshot of %s at offset %d: %s", partition.tp, active.base_offset, e)


def _usable_snapshot(partition: Partition) -> tuple[int, list[ProducerStateEntry]] | None:
    """The latest snapshot at or below the log end that the replay may start from: not past the
    start of a segment whose `.txnindex` recovery left to rebuild (the replay rebuilds it)."""
    partition_log = partition.log
    try:
        found = latest_snapshot(partition_log.directory, at_most=partition_log.log_end_offset,
                                name=f"{partition.tp}: ")
    except OSError as e:
        log.warning("Cannot read the producer snapshots of %s, replaying its log: %s", partition.tp, e)
        return None
    stale = [s.base_offset for s in partition_log.segments if s.txn_index_stale]
    if found is None or (stale and found[0] > min(stale)):
        return None
    return found


def rebuild_producer_state(partition: Partition) -> None:
    """Replay the log's batches into a new producer state, from the latest usable snapshot
    (`broker.log.producer_snapshot`) or the log start: one pass over the headers, plus one small
    read per control batch for its marker. The `.txnindex` of every segment recovery rescanned is
    rebuilt on the way and written at once (recovery already moved the recovery point past it,
    so it would not be rebuilt again after another crash)."""
    partition_log = partition.log
    start, found = 0, _usable_snapshot(partition)
    if found is not None:
        start = found[0]
    use_producer_state(partition, ProducerStateManager(() if found is None else found[1]))
    rebuilt: list[LogSegment] = []
    for segment, position, header in partition_log.batches(start):
        if header.producer_id < 0:
            continue
        stale = segment.txn_index_stale
        if stale and (not rebuilt or rebuilt[-1] is not segment):
            rebuilt.append(segment)
        marker = marker_of(segment.pread(position, header.size), header) if header.is_control else None
        aborted = _replay(partition, header, header.base_offset, header.last_offset, marker)
        if aborted is not None and stale:
            segment.txn_index.append(aborted)
    for segment in partition.log.segments:
        if segment.txn_index_stale:
            segment.txn_index.flush()
            segment.txn_index_stale = False
            if len(segment.txn_index):
                log.info("Rebuilt the transaction index of segment %s of %s: %d aborted transactions",
                         segment.log_path.name, partition.tp, len(segment.txn_index))


# ---- acks=all ----------------------------------------------------------------------------


ProduceOutcome = Callable[[TopicPartition, int], "int | None"]


class DelayedProduce:
    """One acks=all request waiting for its partitions' high watermarks (Kafka's DelayedProduce).

    `required[tp]` is the offset tp's HW must reach; `outcome(tp, offset)` is that
    partition's error code once it is decided (0: replicated) or None while it must wait.
    A decided partition stays decided; the request completes when all are, or at its one
    deadline, where the undecided ones answer REQUEST_TIMED_OUT.
    """

    __slots__ = ("_codes", "_outcome", "required")

    def __init__(self, required: Mapping[TopicPartition, int], outcome: ProduceOutcome) -> None:
        self.required = dict(required)
        self._outcome = outcome
        self._codes: dict[TopicPartition, int] = {}

    def try_complete(self) -> dict[TopicPartition, int] | None:
        for tp, offset in self.required.items():
            if tp not in self._codes:
                code = self._outcome(tp, offset)
                if code is not None:
                    self._codes[tp] = code
        return dict(self._codes) if len(self._codes) == len(self.required) else None

    def on_expiration(self) -> dict[TopicPartition, int]:
        return {tp: self._codes.get(tp, int(ErrorCode.REQUEST_TIMED_OUT)) for tp in self.required}
