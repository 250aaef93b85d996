"""Transactions in the log cleaner: which batches belong to aborted transactions, and when a
commit or abort marker may go (Kafka's `CleanedTransactionMetadata` and the transactional
half of `Cleaner.cleanInto`). No I/O: the shell feeds batches in offset order.

Kafka's rules kept here:

- the cleaner learns the aborted transactions of the range it cleans ahead of reading their
  data: from the segments' `.txnindex` entries, as Kafka's `collectAbortedTransactions`
  (`aborted_in` is its range query), or, where an index is being rebuilt after recovery,
  from the log's markers replayed by the index's own rebuild (`aborted_from_markers`);
- a transactional data batch of a producer with an aborted transaction open at that offset
  is discarded whole (its records never enter the offset map, so they can shadow nothing);
- an ABORT marker stays while a batch of its transaction was read before it in this
  cleaning (that batch is then kept as an empty header: the producer's last batch), and the
  aborted transaction then stays in the cleaned segment's `.txnindex`; a COMMIT marker stays
  while a batch of its transaction remains before it; a marker of another type stays; an
  emptied control batch may always go;
- a marker that may go is first stamped with a delete horizon (KIP-534: `now +
  delete.retention.ms` in its base timestamp), and only a cleaning past that horizon removes
  it, so a consumer that read the transaction's data within `delete.retention.ms` still
  finds its end;
- the last batch of a producer stays (as an empty header if need be): its last data batch,
  or, when none of its data is left, its control batches of its latest epoch (fencing).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from broker.log.compaction import DELETE, KEEP, RETAIN_EMPTY, REWRITE
from broker.log.record_columns import BOOL
from broker.log.txn_index import AbortedTxn, marker_type, scan_transactions
from common.control_records import ControlType
from common.record_batch import NO_PRODUCER_ID, TRANSACTIONAL_MASK, RecordBatchHeader

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)


@dataclass(frozen=True, slots=True)
class LastRecord:
    """What the producer state keeps of a producer for the cleaner (Kafka's LastRecord):
    the last offset of its last data batch (None: no data batch left) and its epoch."""

    last_data_offset: int | None
    producer_epoch: int


def in_first_offset_order(aborted: Iterable[AbortedTxn]) -> list[AbortedTxn]:
    return sorted(aborted, key=lambda t: (t.first_offset, t.last_offset))


def aborted_from_markers(batches: Iterable[tuple[RecordBatchHeader, ControlType | None]]
                         ) -> list[AbortedTxn]:
    """The aborted transactions of a whole log as its `.txnindex` files hold them, from its
    batches (each header with, for a control batch, the marker it holds) replayed by the
    index's own rebuild (`txn_index.scan_transactions`, from the log start with no
    transaction open); in first-offset order."""
    return in_first_offset_order(scan_transactions(batches, {}).aborted)


def last_records_of(headers: Iterable[RecordBatchHeader]) -> dict[int, LastRecord]:
    """The producers' last records as the producer state keeps them, from the log's batch
    headers in offset order: a data batch sets its producer's last data offset and epoch, a
    marker only its epoch."""
    last: dict[int, LastRecord] = {}
    for header in headers:
        pid = header.producer_id
        if pid == NO_PRODUCER_ID:
            continue
        if header.is_control:
            previous = last.get(pid)
            last[pid] = LastRecord(previous.last_data_offset if previous is not None else None,
                                   header.producer_epoch)
        else:
            last[pid] = LastRecord(header.last_offset, header.producer_epoch)
    return last


def aborted_in(aborted: Iterable[AbortedTxn], start: int, end: int) -> list[AbortedTxn]:
    """The aborted transactions touching [start, end): Kafka's
    `collectAbortedTransactions(start, end)` (`lastOffset >= start && firstOffset < end`)."""
    return [t for t in aborted if t.last_offset >= start and t.first_offset < end]


def is_last_control_of_producer(header: RecordBatchHeader,
                                last_records: Mapping[int, LastRecord]) -> bool:
    """Kafka's third case of a producer's last batch: none of its data is left, and this
    control batch carries its latest epoch (needed to fence an older producer)."""
    last = last_records.get(header.producer_id)
    return (header.producer_id != NO_PRODUCER_ID and last is not None
            and last.last_data_offset is None and header.producer_epoch == last.producer_epoch)


@dataclass(slots=True)
class _OngoingAborted:
    txn: AbortedTxn
    last_observed_batch_offset: int | None = None


class CleanedTransactions:
    """Kafka's CleanedTransactionMetadata: the transactions open while the cleaner walks the
    log, fed every transactional batch in offset order (non-transactional batches change
    nothing). `retained` collects the aborted transactions whose ABORT marker stays, in
    marker order: the cleaned segment's `.txnindex` entries (`take_retained` per segment)."""

    def __init__(self) -> None:
        self._aborted: list[tuple[int, int, AbortedTxn]] = []  # a min-heap by first offset
        self._pushed = itertools.count()  # ties broken by arrival
        self._ongoing_committed: set[int] = set()
        self._ongoing_aborted: dict[int, _OngoingAborted] = {}
        self.retained: list[AbortedTxn] = []

    def add_aborted(self, aborted: Iterable[AbortedTxn]) -> None:
        for txn in aborted:
            heapq.heappush(self._aborted, (txn.first_offset, next(self._pushed), txn))

    def take_retained(self) -> list[AbortedTxn]:
        taken, self.retained = self.retained, []
        return taken

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:  # bounded: pops
            _, _, txn = heapq.heappop(self._aborted)
            self._ongoing_aborted.setdefault(txn.producer_id, _OngoingAborted(txn))

    def on_batch_read(self, header: RecordBatchHeader) -> bool:
        """A data batch read: True when it belongs to an aborted transaction (discard it)."""
        self._consume_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(header.producer_id)
        if ongoing is not None:
            ongoing.last_observed_batch_offset = header.last_offset
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_control_batch_read(self, header: RecordBatchHeader, kind: ControlType | None) -> bool:
        """A control batch read (`kind`: the marker it holds, None for another control type
        or an emptied batch): True when the marker may go (after its delete horizon)."""
        self._consume_aborted_up_to(header.last_offset)
        if header.record_count == 0:
            return True  # emptied by an earlier cleaning
        pid = header.producer_id
        if kind is ControlType.ABORT:
            ongoing = self._ongoing_aborted.pop(pid, None)
            if ongoing is not None and ongoing.last_observed_batch_offset is not None:
                self.retained.append(ongoing.txn)  # data of it remains: marker and entry stay
                return False
            return True
        if kind is ControlType.COMMIT:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False


# ---- a chunk of batches (cleaner_chunk's): the slower per-batch path, transactional batches only

Batches = Sequence[tuple[int, RecordBatchHeader]]


def read_transactions(txn: CleanedTransactions, data: bytes | memoryview, batches: Batches,
                      markers: dict[int, ControlType | None]) -> BOOL:
    """Feed `txn` the chunk's transactional batches in offset order (Kafka's
    shouldDiscardBatch): per chunk batch, whether it may be discarded (data of an aborted
    transaction; a marker free to go). Fills `markers` with each control batch's marker
    (None: emptied, or another control type)."""
    discard = np.zeros(len(batches), np.bool_)
    view = memoryview(data)
    for i, (pos, header) in enumerate(batches):  # bounded: the chunk's batches
        if not header.attributes & TRANSACTIONAL_MASK:
            continue
        if header.is_control:
            kind = marker_type(view[pos : pos + header.size], header)
            markers[i] = kind
            discard[i] = txn.on_control_batch_read(header, kind)
        else:
            discard[i] = txn.on_batch_read(header)
    return discard


def aborted_batches(txn: CleanedTransactions, data: bytes | memoryview, batches: Batches) -> BOOL:
    """The map pass's view of a chunk: per batch, whether it is data of an aborted
    transaction (its keys stay out of the map)."""
    markers: dict[int, ControlType | None] = {}
    discard = read_transactions(txn, data, batches, markers)
    discard[list(markers)] = False  # markers hold no key of the topic
    return discard


def control_fate(header: RecordBatchHeader, may_go: bool, *, now_ms: int,
                 delete_retention_ms: int,
                 last_records: Mapping[int, LastRecord]) -> tuple[int, int | None]:
    """A control batch's fate (`compaction`'s KEEP, REWRITE, RETAIN_EMPTY or DELETE: Kafka's
    checkBatchRetention for it) and the delete horizon it is stamped with (None: unchanged):
    a marker free to go is stamped on the first cleaning that finds it so, and goes at the
    first cleaning past that horizon; the last control batch of a producer with no data
    left stays as an empty header."""
    gone = may_go and header.has_delete_horizon and header.base_timestamp <= now_ms
    if header.record_count and not gone:
        if may_go and not header.has_delete_horizon:
            return REWRITE, now_ms + delete_retention_ms
        return KEEP, None
    if is_last_control_of_producer(header, last_records):
        return (RETAIN_EMPTY if header.record_count else KEEP), None
    return DELETE, None
