"""Reads from a hosted partition: which partition may answer, what a fetch may see, and the
wait of a fetch that found too little (Kafka's DelayedFetch).

    partition = leader_partition(partitions, broker_id, tp, current_leader_epoch)
    read = read_log(partition, offset, max_bytes, up_to=partition.log.high_watermark)
    woken = await purgatory.wait(DelayedFetch(tps, fetch_state), tps, timeout_s)

Consumers never read past the high watermark; a follower reads up to the log end offset.
The follower's bookkeeping that a read causes (its LEO, the HW, the ISR) is the
ReplicaManager's.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Final, NamedTuple

from broker.log.log_read import whole_batches
from broker.log.segment import NO_FD, FileSlice
from broker.log.txn_index import AbortedTxn
from broker.replication.high_watermark import on_follower_fetch
from broker.replication.leader_rules import current_leader_epoch_error
from broker.replication.partition import Partition
from common.topic_partition import TopicPartition
from common.errors import (
    ErrorCode,
    KafkaError,
    KafkaStorageError,
    OffsetOutOfRangeError,
)

NOT_LEADER_OR_FOLLOWER: Final = ErrorCode.NOT_LEADER_OR_FOLLOWER


class ReplicaError(KafkaError):
    """A partition-level refusal carrying any Kafka error code."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def not_leader(tp: TopicPartition, why: str) -> ReplicaError:
    return ReplicaError(NOT_LEADER_OR_FOLLOWER, f"this broker is not the leader of {tp}: {why}")


READ_UNCOMMITTED: Final = 0  # Fetch/ListOffsets isolation_level
READ_COMMITTED: Final = 1


class ReadResult(NamedTuple):
    records: FileSlice
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int = -1
    aborted_transactions: tuple[AbortedTxn, ...] | None = None  # read_committed only


def leader_partition(partitions: Mapping[TopicPartition, Partition], broker_id: int,
                     tp: TopicPartition, current_leader_epoch: int = -1) -> Partition:
    """The partition if `broker_id` leads it; KafkaError otherwise (Kafka's
    getPartitionOrException plus the current-leader-epoch check of KIP-320)."""
    partition = partitions.get(tp)
    if partition is None:
        # Kafka: a partition this broker does not host at all is unknown here; the
        # handler answers NOT_LEADER_OR_FOLLOWER when the topic exists in the image.
        raise ReplicaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"this broker does not host {tp}")
    epoch_error = current_leader_epoch_error(current_leader_epoch, partition.leader_epoch)
    if epoch_error is not None:
        relation = "older than the current" if epoch_error is ErrorCode.FENCED_LEADER_EPOCH \
            else "newer than this broker's"
        raise ReplicaError(epoch_error, f"leader epoch {current_leader_epoch} of {tp} is {relation} "
                                        f"{partition.leader_epoch}")
    if not partition.is_leader(broker_id):
        raise not_leader(tp, f"the leader is broker {partition.leader_id}")
    return partition


def serving_partition(partitions: Mapping[TopicPartition, Partition], broker_id: int,
                      tp: TopicPartition, current_leader_epoch: int = -1) -> Partition:
    """The partition if `broker_id` leads it and may serve clients (not RECOVERING)."""
    partition = leader_partition(partitions, broker_id, tp, current_leader_epoch)
    if partition.is_recovering:
        raise not_leader(tp, "elected uncleanly and not yet recovered")
    return partition


def check_follower_fetch(partition: Partition, replica_id: int, offset: int) -> None:
    """A follower may fetch a partition it replicates, within [log start, log end]."""
    tp, partition_log = partition.tp, partition.log
    if replica_id not in partition.replicas:
        raise ReplicaError(NOT_LEADER_OR_FOLLOWER, f"broker {replica_id} is not a replica of {tp}")
    if not partition_log.log_start_offset <= offset <= partition_log.log_end_offset:
        raise OffsetOutOfRangeError(
            f"follower {replica_id} fetched {tp} at offset {offset}, outside "
            f"[{partition_log.log_start_offset}, {partition_log.log_end_offset}]")


def read_as_follower(partitions: Mapping[TopicPartition, Partition], broker_id: int, tp: TopicPartition,
                     offset: int, max_bytes: int, *, current_leader_epoch: int, isolation_level: int,
                     min_one_batch: bool) -> ReadResult:
    """KIP-392: a consumer's read from a follower (Fetch v11+), up to this follower's high
    watermark (its last stable offset for read_committed), with the aborted transactions.

    The leader epoch is checked as on the leader (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH);
    an offset past this log's end is OFFSET_OUT_OF_RANGE, which sends a KIP-392 client back to
    the leader, except for a client that sent no leader epoch: it may be here by stale
    metadata rather than by the leader's choice, so it gets an empty answer and retries
    (Kafka's ReplicaManager since KAFKA-14301)."""
    partition = partitions.get(tp)
    if partition is None:
        raise ReplicaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"this broker does not host {tp}")
    epoch_error = current_leader_epoch_error(current_leader_epoch, partition.leader_epoch)
    if epoch_error is not None:
        raise ReplicaError(epoch_error, f"leader epoch {current_leader_epoch} of {tp} does not match this "
                                        f"follower's {partition.leader_epoch}")
    if partition.is_leader(broker_id):  # a leader refused this read for a reason of its own
        raise not_leader(tp, "elected uncleanly and not yet recovered")
    if broker_id not in partition.replicas:
        raise not_leader(tp, f"broker {broker_id} is no longer a replica of it")
    partition_log = partition.log
    if offset > partition_log.log_end_offset and current_leader_epoch < 0:
        return ReadResult(FileSlice(NO_FD, 0, 0), partition_log.high_watermark, partition_log.log_start_offset,
                          partition_log.log_end_offset, partition.last_stable_offset)
    if isolation_level == READ_COMMITTED:
        return read_committed(partition, offset, max_bytes, min_one_batch=min_one_batch)
    return read_log(partition, offset, max_bytes, up_to=partition_log.high_watermark, min_one_batch=min_one_batch)


def record_session_fetch(partition: Partition, replica_id: int, fetch_offset: int, at_ms: int) -> None:
    """A follower's fetch session held `partition` at `fetch_offset`, the leader's log end
    offset then, when its latest fetch arrived at `at_ms`: that fetch counts for its lag as
    Kafka's read of every session partition would (`broker.fetch_sessions`). Nothing when
    the follower's state has moved since (another offset, or a later fetch already seen)."""
    state = partition.follower_states.get(replica_id)
    if state is None or state.log_end_offset != fetch_offset or at_ms <= state.last_fetch_ms:
        return
    partition.follower_states[replica_id] = on_follower_fetch(
        state, fetch_offset=fetch_offset, leader_leo=fetch_offset, now_ms=at_ms,
        log_start_offset=state.log_start_offset)


def read_log(partition: Partition, offset: int, max_bytes: int, *, up_to: int | None,
             min_one_batch: bool) -> ReadResult:
    """Batches from `offset` as a file slice, none at or past `up_to` (None: the log end), and
    no partial batch after a whole one (`broker.log.log_read.whole_batches`)."""
    partition_log = partition.log
    high_watermark = partition_log.high_watermark
    try:
        data = whole_batches(partition_log.read(offset, max_bytes, max_offset=up_to, min_one_batch=min_one_batch))
    except OSError as e:
        raise KafkaStorageError(f"read of {partition.tp} at offset {offset} failed: {e}") from e
    return ReadResult(data, high_watermark, partition_log.log_start_offset,
                      partition_log.log_end_offset, partition.last_stable_offset)


def read_committed(partition: Partition, offset: int, max_bytes: int, *,
                   min_one_batch: bool) -> ReadResult:
    """A read_committed consumer's read (Kafka's FetchIsolation.TXN_COMMITTED): batches below
    the last stable offset only, with the aborted transactions overlapping what it returns,
    which the client uses to drop aborted records (UnifiedLog.read's collectAbortedTxns)."""
    last_stable = partition.last_stable_offset
    records, high_watermark, log_start, log_end, lso, _ = read_log(
        partition, offset, max_bytes, up_to=last_stable, min_one_batch=min_one_batch)
    aborted: tuple[AbortedTxn, ...] = ()
    if records.length:
        try:
            aborted = tuple(partition.log.collect_aborted_transactions(offset, last_stable))
        except OSError as e:
            raise KafkaStorageError(f"read of {partition.tp}'s aborted transactions failed: {e}") from e
    # built whole, not by NamedTuple._replace (~2 us): librdkafka reads read_committed by default
    return ReadResult(records, high_watermark, log_start, log_end, lso, aborted)


def fetch_state(partition: Partition | None) -> Hashable:
    """What a waiting fetch compares: any append, HW move or role change alters it."""
    if partition is None:
        return None
    partition_log = partition.log
    return (partition.leader_id, partition.leader_epoch, partition_log.log_end_offset,
            partition_log.high_watermark, partition_log.log_start_offset)


def follower_fetch_state(partition: Partition | None) -> Hashable:
    """`fetch_state` without the HW: a follower reads to the log end, so a HW move gives it
    no bytes (Kafka's DelayedFetch at FetchLogEnd; it learns the HW on its next answer)."""
    if partition is None:
        return None
    partition_log = partition.log
    return (partition.leader_id, partition.leader_epoch, partition_log.log_end_offset,
            partition_log.log_start_offset)


def consumer_fetch_state(partition: Partition | None) -> Hashable:
    """`fetch_state` without the log end: a consumer reads to the HW (read_committed: the
    LSO, which moves only when the HW does), so an append the HW has not passed gives it no
    bytes (Kafka's DelayedFetch at FetchHighWatermark / FetchTxnCommitted). With acks=all,
    each append would otherwise wake it once for nothing before the HW move wakes it."""
    if partition is None:
        return None
    partition_log = partition.log
    return (partition.leader_id, partition.leader_epoch, partition_log.high_watermark,
            partition_log.log_start_offset)


def delayed_fetch(partitions: Mapping[TopicPartition, Partition], tps: Iterable[TopicPartition],
                  replica_id: int | None) -> DelayedFetch:
    """A waiting fetch over `tps` in Kafka's DelayedFetch terms: woken by any change (None: a
    share fetch's "any change"), a follower's (>= 0) not by a HW move, a consumer's (< 0) not
    by an append below the HW."""
    state = fetch_state if replica_id is None else follower_fetch_state if replica_id >= 0 \
        else consumer_fetch_state
    return DelayedFetch(tps, lambda tp: state(partitions.get(tp)))


class DelayedFetch:
    """A fetch that found fewer than min_bytes, waiting for its partitions to change.

    Completes (True) the first time one of them differs from when the fetch read it — an
    append, a HW move, a role change, a deletion — and the handler reads again and decides;
    expires (False) at the fetch's deadline. Comparing state rather than counting wake-ups
    keeps an event on another partition of a shared key from waking it for nothing.
    """

    __slots__ = ("_seen", "_state")

    def __init__(self, tps: Iterable[TopicPartition], state: Callable[[TopicPartition], Hashable]) -> None:
        self._state = state
        self._seen = {tp: state(tp) for tp in tps}

    def try_complete(self) -> bool | None:
        for tp, seen in self._seen.items():
            if self._state(tp) != seen:
                return True
        return None

    def on_expiration(self) -> bool:
        return False
