"""The `.txnindex` file: the aborted transactions whose abort marker a segment holds.

    entries = decode_entries(path.read_bytes())          # [AbortedTxn, ...]
    scan = scan_transactions(markers_of(segment), ongoing={7: 120})
    found, complete = collect_aborted(entries, fetch_offset=100, upper_bound=180)

Kafka's TransactionIndex format: one 34-byte big-endian entry per aborted transaction,
`version int16 (0), producerId int64, firstOffset int64, lastOffset int64,
lastStableOffset int64`, appended in marker order when the leader (or a follower, or
recovery) appends an ABORT marker. `lastOffset` is the marker's offset; `lastStableOffset` is
the partition's LSO right after that marker (the first offset of the oldest transaction still
open, or the marker's offset + 1), which lets a read stop searching once an entry's LSO passes
the end of the fetched range (`collect_aborted`'s `complete`).

The pure half (format, the rebuild of a segment's entries from its batches, the search of a
read_committed fetch) is shared with the log cleaner, which rewrites a cleaned segment's index.
The file of one segment is `txn_index_file.TransactionIndex`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from broker.producer_state import CompletedTxn
from common.control_records import ControlType, decode_marker
from common.errors import KafkaError, KafkaStorageError
from common.record_batch import RecordBatchHeader
from common.records import decode_records

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

TXN_INDEX_SUFFIX: Final = ".txnindex"
TXN_INDEX_VERSION: Final = 0
ENTRY: Final = struct.Struct(">hqqqq")  # version, producerId, firstOffset, lastOffset, LSO
ENTRY_SIZE: Final = ENTRY.size  # 34 bytes


class CorruptTxnIndexError(KafkaStorageError):
    """A `.txnindex` file that does not decode: the segment's index must be rebuilt."""


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction: Kafka's AbortedTxn."""

    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset
    last_stable_offset: int  # the partition's LSO once the marker was appended

    def __post_init__(self) -> None:
        if self.last_offset < self.first_offset:
            raise ValueError(f"aborted transaction of producer {self.producer_id} runs "
                             f"backwards: {self.first_offset}..{self.last_offset}")


def encode_entry(txn: AbortedTxn) -> bytes:
    return ENTRY.pack(TXN_INDEX_VERSION, txn.producer_id, txn.first_offset, txn.last_offset,
                      txn.last_stable_offset)


def encode_entries(entries: Iterable[AbortedTxn]) -> bytes:
    return b"".join(encode_entry(txn) for txn in entries)


def decode_entries(data: bytes | memoryview, *, source: str = "transaction index") -> list[AbortedTxn]:
    """Every entry of a `.txnindex` file; CorruptTxnIndexError on a torn tail, an unknown version or
    an entry that runs backwards (the caller rebuilds the index from its segment)."""
    if len(data) % ENTRY_SIZE:
        raise CorruptTxnIndexError(f"{source} has size {len(data)}, not a multiple of the "
                                f"entry size {ENTRY_SIZE}")
    entries = []
    for version, pid, first, last, lso in ENTRY.iter_unpack(data):
        if version != TXN_INDEX_VERSION:
            raise CorruptTxnIndexError(f"{source} holds an entry of version {version}; only "
                                    f"{TXN_INDEX_VERSION} is known")
        if last < first:
            raise CorruptTxnIndexError(f"{source}: aborted transaction of producer {pid} runs "
                                    f"backwards ({first}..{last})")
        entries.append(AbortedTxn(pid, first, last, lso))
    return entries


# ---- the pure rebuild -------------------------------------------------------------------------


def marker_of(batch: bytes | memoryview, header: RecordBatchHeader) -> tuple[ControlType, int] | None:
    """(type, coordinator epoch) of the COMMIT or ABORT marker a control batch holds (`batch`: its
    whole bytes); None for another control type or an unreadable record, which readers skip as
    Kafka's ControlRecordType.UNKNOWN. Decodes the one record of a control batch, never a data
    batch's."""
    if not header.is_control:
        return None
    try:
        records = decode_records(batch, 0, header)
        marker = decode_marker(records[0].key, records[0].value) if records else None
    except (KafkaError, ValueError):  # corrupt, a codec we cannot read, a malformed value
        return None
    return None if marker is None else (marker.type, marker.coordinator_epoch)


def marker_type(batch: bytes | memoryview, header: RecordBatchHeader) -> ControlType | None:
    """The marker type a control batch holds (see `marker_of`)."""
    found = marker_of(batch, header)
    return None if found is None else found[0]


def last_stable_offset_after(ongoing: Mapping[int, int], completed: CompletedTxn) -> int:
    """The LSO once `completed`'s marker is in the log (ProducerStateManager.lastStableOffset):
    the first offset of the oldest other open transaction, else one past the marker."""
    others = [first for pid, first in ongoing.items() if pid != completed.producer_id]
    return min(others) if others else completed.last_offset + 1


@dataclass(frozen=True, slots=True)
class TxnScan:
    """What replaying a run of batches found: the transactions ended, the aborted ones as index
    entries (in marker order), and the transactions still open after it (pid -> first offset)."""

    completed: tuple[CompletedTxn, ...]
    aborted: tuple[AbortedTxn, ...]
    ongoing: Mapping[int, int]


def scan_transactions(batches: Iterable[tuple[RecordBatchHeader, ControlType | None]],
                      ongoing: Mapping[int, int]) -> TxnScan:
    """Replay batches in offset order: a transactional data batch opens its producer's
    transaction (if none is open), a COMMIT or ABORT control batch ends it. A marker with no
    open transaction completes nothing and indexes nothing (Kafka 3.x's
    ProducerAppendInfo.appendEndTxnMarker emits a CompletedTxn for non-empty transactions
    only), as the live append path does. `ongoing`: the open transactions before the first
    batch (pid -> first offset); the control type is None for a control batch that is no
    marker (skipped)."""
    open_txns = dict(ongoing)
    completed: list[CompletedTxn] = []
    aborted: list[AbortedTxn] = []
    for header, kind in batches:
        pid = header.producer_id
        if not header.is_transactional or pid < 0:
            continue
        if not header.is_control:
            open_txns.setdefault(pid, header.base_offset)
            continue
        if kind is None:
            continue
        first_offset = open_txns.get(pid)
        if first_offset is None:
            continue
        txn = CompletedTxn(pid, first_offset, header.base_offset, kind is ControlType.ABORT)
        if txn.is_aborted:
            aborted.append(AbortedTxn(pid, txn.first_offset, txn.last_offset,
                                      last_stable_offset_after(open_txns, txn)))
        open_txns.pop(pid, None)
        completed.append(txn)
    return TxnScan(tuple(completed), tuple(aborted), open_txns)


def collect_aborted(entries: Sequence[AbortedTxn], fetch_offset: int, upper_bound: int
                    ) -> tuple[list[AbortedTxn], bool]:
    """The entries overlapping [fetch_offset, upper_bound) (Kafka's collectAbortedTxns), and
    whether the search may stop here: an entry whose LSO reached `upper_bound` was written
    after everything the fetch returns, so later segments cannot hold one that overlaps."""
    found = [txn for txn in entries
             if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound]
    complete = any(txn.last_stable_offset >= upper_bound for txn in entries)
    return found, complete
