"""Idempotent-producer state of one partition: Kafka's ProducerStateManager, pure.

For every producer id the partition keeps its epoch and the metadata of its last
NUM_BATCHES_TO_RETAIN appended batches (Kafka's ProducerStateEntry). A leader asks
`check(header)` before appending a client's batch and calls `update(...)` after the log
assigned its offsets; a follower or log recovery only replays (`update` / `rebuild`),
never checks, as Kafka's REPLICATION origin trusts what the leader already validated.

Everything works on the 61-byte batch header alone, never on records. No I/O, no clock
(`expire` takes `now_ms`).

The rules, in the order Kafka applies them to a client's batch (UnifiedLog
.analyzeAndValidateProducerState, then ProducerAppendInfo.checkProducerEpoch and
.checkSequence; Kafka 3.x broker, no transactions-v2 verification state):

1. producer_id == -1: not idempotent, nothing to check.
2. Same epoch and the sequence range equals one of the retained batches: DUPLICATE.
   The caller does not append; it acknowledges with the original offsets (and the
   original timestamp as logAppendTime), as Kafka's ProducerStateEntry.findDuplicateBatch.
3. Epoch below the current one: INVALID_PRODUCER_EPOCH (47); Kafka >= 2.7 answers this,
   not PRODUCER_FENCED, to a client.
4. Epoch different from the current one (a bump): the first sequence must be 0, else
   OUT_OF_ORDER_SEQUENCE_NUMBER (45) -- unless the partition knows no epoch for this
   producer (unknown producer id), when any sequence is accepted.
5. Same epoch: the first sequence must follow the last one (last + 1, or 0 after
   Int.MAX), else OUT_OF_ORDER_SEQUENCE_NUMBER. A duplicate of a batch older than the
   retained five lands here too.

Transactions (ProducerAppendInfo.appendDataBatch / appendEndTxnMarker): a transactional data
batch of a producer with no open transaction opens one at its first offset; while one is
open a non-transactional batch of that producer is refused (INVALID_TXN_STATE). A control
batch (a COMMIT or ABORT marker, written only by a leader on the coordinator's WriteTxnMarkers)
ends it: a marker epoch below the producer's is refused (INVALID_PRODUCER_EPOCH), a coordinator
epoch below the last seen for the producer is refused (TRANSACTION_COORDINATOR_FENCED); the
marker returns the `CompletedTxn`, or None for a transaction with no data here. The partition's
first unstable offset is the first offset of the oldest transaction still open or ended by a
marker not yet below the high watermark (Kafka's ongoingTxns and unreplicatedTxns); the last
stable offset (LSO) is min(that, high watermark).

Unknown producer id: since KIP-360 (Kafka 2.5) a broker with no state for a producer
(expired, deleted by retention or DeleteRecords, or never seen) accepts any first
sequence; brokers before 2.5 answered UNKNOWN_PRODUCER_ID (59). Kafka 4.x rejects a
non-zero sequence with OUT_OF_ORDER_SEQUENCE_NUMBER only for transactions-v2 producers
whose partition was verified (KIP-890), which tidelog does not implement. We follow 3.x.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Final, NamedTuple

from common.control_records import ControlType
from common.errors import ErrorCode
from common.record_batch import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    RecordBatchHeader,
)
from common.units import INT_MAX, MS

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

NUM_BATCHES_TO_RETAIN = 5  # ProducerStateEntry.NUM_BATCHES_TO_RETAIN
INT32_MAX = INT_MAX  # sequences wrap from here to 0
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000 * MS  # producer.id.expiration.ms (KIP-854)

# Kafka error codes this module answers with (names kept for its callers and tests)
OUT_OF_ORDER_SEQUENCE_NUMBER: Final = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
INVALID_PRODUCER_EPOCH: Final = ErrorCode.INVALID_PRODUCER_EPOCH
UNKNOWN_PRODUCER_ID: Final = ErrorCode.UNKNOWN_PRODUCER_ID
INVALID_RECORD: Final = ErrorCode.INVALID_RECORD
INVALID_TXN_STATE: Final = ErrorCode.INVALID_TXN_STATE
TRANSACTION_COORDINATOR_FENCED: Final = ErrorCode.TRANSACTION_COORDINATOR_FENCED
NO_TXN: Final = -1  # current_txn_first_offset of a producer with no open transaction
NO_COORDINATOR_EPOCH: Final = -1


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker ended in one partition (Kafka's CompletedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


class BatchMetadata(NamedTuple):
    """One retained batch: Kafka's BatchMetadata (first/last sequence and offset, timestamp).

    A NamedTuple, not a frozen dataclass (as high_watermark.FollowerState): as immutable and
    behaviour-free, but one is made for every idempotent batch a leader appends, and with the
    entry below they were two frozen dataclasses per batch (~110 opcodes of generated __init__
    and __post_init__, 5 % of a leader's samples at librdkafka's bulk acks=all). Its offsets
    come in at one place, `next_entry`, which checks them (a snapshot's are built valid)."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int  # the batch's maxTimestamp (the log-append time for LogAppendTime)


class ProducerStateEntry(NamedTuple):
    """What the partition knows about one producer id (a NamedTuple, as BatchMetadata: one per
    idempotent batch appended). At most NUM_BATCHES_TO_RETAIN batches, which `next_entry`
    keeps, the only place batches are added (a snapshot holds one)."""

    producer_id: int
    producer_epoch: int
    batches: tuple[BatchMetadata, ...] = ()  # oldest first, at most NUM_BATCHES_TO_RETAIN
    last_timestamp: int = -1
    last_offset: int = -1  # offset of the last batch (data or control) that changed this
    current_txn_first_offset: int = NO_TXN  # first offset of the open transaction, if any
    coordinator_epoch: int = NO_COORDINATOR_EPOCH  # of the last marker seen for this producer

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, header: RecordBatchHeader) -> BatchMetadata | None:
        """The retained batch `header` repeats: same epoch and same sequence range."""
        if header.producer_epoch != self.producer_epoch:
            return None
        first, last = header.base_sequence, header.last_sequence
        for batch in self.batches:
            if batch.first_seq == first and batch.last_seq == last:
                return batch
        return None


class AppendOutcome(Enum):
    APPEND = "append"  # append the batch, then call update() with its offsets
    DUPLICATE = "duplicate"  # already in the log: acknowledge with `duplicate`, append nothing
    REJECT = "reject"  # answer the client with `error_code`


@dataclass(frozen=True, slots=True)
class AppendCheck:
    """The verdict on one client batch."""

    outcome: AppendOutcome
    error_code: int = 0
    duplicate: BatchMetadata | None = None
    message: str = ""

    def __post_init__(self) -> None:
        if (self.outcome is AppendOutcome.REJECT) != (self.error_code != 0):
            raise ValueError(f"{self.outcome.name} with error code {self.error_code}")
        if (self.outcome is AppendOutcome.DUPLICATE) != (self.duplicate is not None):
            raise ValueError(f"{self.outcome.name} with duplicate {self.duplicate}")


ACCEPT = AppendCheck(AppendOutcome.APPEND)


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """Whether `next_seq` directly follows `last_seq` (ProducerAppendInfo.inSequence)."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def _reject(code: int, message: str) -> AppendCheck:
    return AppendCheck(AppendOutcome.REJECT, error_code=code, message=message)


def check_batch(entry: ProducerStateEntry | None, header: RecordBatchHeader) -> AppendCheck:
    """Kafka's checks of one client batch against the producer's entry (None: unknown)."""
    pid, epoch, first_seq = header.producer_id, header.producer_epoch, header.base_sequence
    if pid == NO_PRODUCER_ID:
        return ACCEPT
    if header.is_control:
        # LogValidator: clients may not write control batches (transaction markers).
        return _reject(INVALID_RECORD, "clients are not allowed to write control records")
    if first_seq < 0:
        # LogValidator.validateBatch: an idempotent batch must carry a sequence.
        return _reject(
            INVALID_RECORD,
            f"invalid sequence number {first_seq} in record batch with producerId {pid}",
        )
    if entry is None:
        return ACCEPT  # KIP-360: no state for this producer, any sequence starts it
    duplicate = entry.find_duplicate(header)
    if duplicate is not None:
        return AppendCheck(AppendOutcome.DUPLICATE, duplicate=duplicate)
    if epoch < entry.producer_epoch:
        return _reject(
            INVALID_PRODUCER_EPOCH,
            f"epoch of producer {pid} is {epoch}, which is < the last seen epoch "
            f"{entry.producer_epoch}",
        )
    if entry.current_txn_first_offset != NO_TXN and not header.is_transactional:
        return _reject(
            INVALID_TXN_STATE,
            f"expected a transactional write from producer {pid}: its transaction open since "
            f"offset {entry.current_txn_first_offset} has not ended",
        )
    if entry.producer_epoch == NO_PRODUCER_EPOCH:
        return ACCEPT  # as for an unknown producer: no epoch known, any sequence
    if epoch != entry.producer_epoch:
        if first_seq != 0:
            return _reject(
                OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"invalid sequence number for new epoch of producer {pid}: {epoch} "
                f"(request epoch), {first_seq} (seq. number), {entry.producer_epoch} "
                "(current producer epoch)",
            )
        return ACCEPT
    if not in_sequence(entry.last_seq, first_seq):
        return _reject(
            OUT_OF_ORDER_SEQUENCE_NUMBER,
            f"out of order sequence number for producer {pid}: {first_seq} "
            f"(incoming seq. number), {entry.last_seq} (current end sequence number)",
        )
    return ACCEPT


def check_marker(entry: ProducerStateEntry | None, header: RecordBatchHeader,
                 coordinator_epoch: int) -> AppendCheck:
    """Kafka's checks of a transaction marker the coordinator asks a leader to write
    (ProducerAppendInfo.appendEndTxnMarker, origin COORDINATOR): no sequence check."""
    if entry is None:
        return ACCEPT
    pid, epoch = header.producer_id, header.producer_epoch
    if epoch < entry.producer_epoch:
        return _reject(
            INVALID_PRODUCER_EPOCH,
            f"epoch of producer {pid} in the transaction marker is {epoch}, which is < the "
            f"last seen epoch {entry.producer_epoch}",
        )
    if coordinator_epoch < entry.coordinator_epoch:
        return _reject(
            TRANSACTION_COORDINATOR_FENCED,
            f"transaction marker for producer {pid} from coordinator epoch {coordinator_epoch}, "
            f"which is < the last seen coordinator epoch {entry.coordinator_epoch}",
        )
    return ACCEPT


def next_entry(
    entry: ProducerStateEntry | None,
    header: RecordBatchHeader,
    first_offset: int,
    last_offset: int,
    coordinator_epoch: int | None = None,
) -> ProducerStateEntry:
    """The entry after `header` was appended at first_offset..last_offset; no checks.

    A new epoch forgets the retained batches (ProducerStateEntry.maybeUpdateProducerEpoch);
    a transactional data batch opens a transaction if none is open; a control batch moves
    the epoch and the timestamp and, when it is a marker (`coordinator_epoch` given), ends
    the open transaction and records the coordinator epoch.
    """
    if last_offset < first_offset:
        raise ValueError(f"batch offsets {first_offset}..{last_offset} run backwards")
    producer_epoch = header.producer_epoch
    if entry is None:
        batches: tuple[BatchMetadata, ...] = ()
        txn_first, coord_epoch = NO_TXN, NO_COORDINATOR_EPOCH
    else:
        batches = entry.batches if producer_epoch == entry.producer_epoch else ()
        txn_first, coord_epoch = entry.current_txn_first_offset, entry.coordinator_epoch
    max_timestamp = header.max_timestamp
    if header.is_control:
        if coordinator_epoch is not None:
            txn_first, coord_epoch = NO_TXN, coordinator_epoch
    else:
        if header.is_transactional and txn_first == NO_TXN:
            txn_first = first_offset
        # positional: a NamedTuple's keyword call costs more (one built per idempotent batch)
        batch = BatchMetadata(header.base_sequence, header.last_sequence, first_offset, last_offset, max_timestamp)
        batches = (*batches[1 - NUM_BATCHES_TO_RETAIN:], batch) if batches else (batch,)
    return ProducerStateEntry(header.producer_id, producer_epoch, batches, max_timestamp, last_offset,
                              txn_first, coord_epoch)


def _truncated_entry(entry: ProducerStateEntry, offset: int) -> ProducerStateEntry | None:
    """`entry` without what lies at or above `offset`; None when that cannot be known."""
    if entry.last_offset < offset:
        return entry
    if entry.coordinator_epoch != NO_COORDINATOR_EPOCH:
        # A transactional producer: a marker may have been cut, which reopens a transaction
        # whose start is not in memory. Forget it; rebuild() from the log for the exact state.
        return None
    kept = tuple(b for b in entry.batches if b.last_offset < offset)
    if not kept:
        # Everything we retained is gone; what came before is not in memory. Forget the
        # producer (it may restart at any sequence, KIP-360) or rebuild() from the log.
        return None
    # Batches are retained only within one epoch, and a marker that bumped the epoch
    # would have dropped them, so what remains is the same epoch.
    txn_first = entry.current_txn_first_offset
    return entry._replace(
        batches=kept, last_timestamp=kept[-1].timestamp, last_offset=kept[-1].last_offset,
        current_txn_first_offset=txn_first if txn_first < offset else NO_TXN,
    )


class ProducerStateManager:
    """The producer entries of one partition. `check` reads; only `update` and the
    recovery/truncation methods change state, and only by replacing frozen entries.

    Beside the entries it keeps the partition's unstable transactions: those open (pid ->
    first offset, Kafka's ongoingTxns) and those ended by a marker the high watermark has not
    passed yet (Kafka's unreplicatedTxns), which hold the last stable offset back."""

    __slots__ = ("_entries", "_ongoing", "_unreplicated")

    def __init__(self, entries: Iterable[ProducerStateEntry] = ()) -> None:
        self._entries: dict[int, ProducerStateEntry] = {e.producer_id: e for e in entries}
        self._ongoing: dict[int, int] = {e.producer_id: e.current_txn_first_offset
                                         for e in self._entries.values()
                                         if e.current_txn_first_offset != NO_TXN}
        self._unreplicated: list[CompletedTxn] = []  # in marker order

    @property
    def entries(self) -> Mapping[int, ProducerStateEntry]:
        """Read-only view, producer id -> entry (Kafka's activeProducers)."""
        return MappingProxyType(self._entries)

    @property
    def ongoing(self) -> Mapping[int, int]:
        """The open transactions, producer id -> first offset."""
        return MappingProxyType(self._ongoing)

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._entries.get(producer_id)

    def check(self, header: RecordBatchHeader) -> AppendCheck:
        """Verdict on a client's batch; never raises for a bad batch, never changes state."""
        return check_batch(self._entries.get(header.producer_id), header)

    def check_marker(self, header: RecordBatchHeader, coordinator_epoch: int) -> AppendCheck:
        """Verdict on a transaction marker the coordinator asks this leader to write."""
        return check_marker(self._entries.get(header.producer_id), header, coordinator_epoch)

    def update(self, header: RecordBatchHeader, first_offset: int, last_offset: int,
               marker: tuple[ControlType, int] | None = None) -> CompletedTxn | None:
        """Record that `header`'s batch now sits at first_offset..last_offset in the log.

        `marker`: (type, coordinator epoch) of a control batch's COMMIT or ABORT record.
        Returns the transaction the marker ended, None for any other batch or a marker
        ending a transaction with no data in this partition (Kafka emits no CompletedTxn then).
        Also the replay path of followers and recovery: the batch is trusted, as Kafka
        trusts replicated batches (an older epoch is taken as it comes).
        """
        pid = header.producer_id
        if pid == NO_PRODUCER_ID:
            return None
        entry = self._entries.get(pid)
        coordinator_epoch = marker[1] if marker is not None else None
        updated = next_entry(entry, header, first_offset, last_offset, coordinator_epoch)
        self._entries[pid] = updated
        if updated.current_txn_first_offset != NO_TXN:
            self._ongoing[pid] = updated.current_txn_first_offset
            return None
        first = self._ongoing.pop(pid, NO_TXN)
        if marker is None or first == NO_TXN:
            return None
        completed = CompletedTxn(pid, first, first_offset, marker[0] is ControlType.ABORT)
        self._unreplicated.append(completed)
        return completed

    def on_high_watermark(self, high_watermark: int) -> None:
        """Forget the ended transactions whose marker is below `high_watermark` (Kafka's
        removeUnreplicatedTransactions): a follower calls it as its HW moves, a leader's reads
        through `first_unstable_offset`, so the list stays as short as the markers in flight."""
        if self._unreplicated and self._unreplicated[0].last_offset < high_watermark:
            self._unreplicated = [t for t in self._unreplicated if t.last_offset >= high_watermark]

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the oldest transaction open, or ended by a marker at or above
        `high_watermark`; None when there is none. Forgets ended transactions below it."""
        self.on_high_watermark(high_watermark)
        firsts = [t.first_offset for t in self._unreplicated]
        if self._ongoing:
            firsts.append(min(self._ongoing.values()))
        return min(firsts) if firsts else None

    def last_stable_offset(self, high_watermark: int) -> int:
        """Kafka's LSO: min(first unstable offset, high watermark)."""
        if not self._ongoing and not self._unreplicated:
            return high_watermark  # every fetch asks: no transaction here costs one test
        first = self.first_unstable_offset(high_watermark)
        return high_watermark if first is None else min(first, high_watermark)

    def rebuild(self, headers: Iterable[RecordBatchHeader],
                markers: Mapping[int, tuple[ControlType, int]] | None = None) -> None:
        """Forget everything and replay the batch headers of the log, in offset order.

        Each header's own base/last offset is where the log holds it (Kafka's
        loadProducersFromRecords; we have no snapshots, so the scan starts at the log
        start or wherever the caller's recovery starts). `markers`: the (type, coordinator
        epoch) of each control batch by its offset. Cost: one step per batch.
        """
        self._entries, self._ongoing, self._unreplicated = {}, {}, []
        found = markers or {}
        for header in headers:
            self.update(header, header.base_offset, header.last_offset,
                        found.get(header.base_offset) if header.is_control else None)

    def truncate_to(self, offset: int) -> None:
        """Drop what the log lost when truncated to end before `offset`.

        Exact for idempotent producers with a retained batch below `offset`; a producer all of
        whose retained batches are gone, or a transactional one past `offset`, is forgotten
        (call `rebuild` for the exact state).
        """
        entries = {}
        for pid, entry in self._entries.items():
            kept = _truncated_entry(entry, offset)
            if kept is not None:
                entries[pid] = kept
        self._entries = entries
        self._ongoing = {pid: e.current_txn_first_offset for pid, e in entries.items()
                         if e.current_txn_first_offset != NO_TXN}
        self._unreplicated = [t for t in self._unreplicated if t.last_offset < offset]

    def expire(
        self, now_ms: int, producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
    ) -> list[int]:
        """Forget producers idle for producer.id.expiration.ms; returns their ids, sorted.

        A producer with an open transaction is kept, as Kafka's isProducerExpired does:
        its transaction still holds the LSO and must end with a marker.
        """
        expired = sorted(
            pid
            for pid, entry in self._entries.items()
            if entry.current_txn_first_offset == NO_TXN
            and now_ms - entry.last_timestamp >= producer_id_expiration_ms
        )
        for pid in expired:
            del self._entries[pid]
        return expired
