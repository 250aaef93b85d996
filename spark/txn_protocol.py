"""The exactly-once sink's rules, pure: transactional ids, commit-log records and their reading,
the producer id a task hands the driver, and what an EndTxn answer means.

The protocol itself (who prepares, who commits, what a crash leaves) is told in
`spark/txn_sink.py`; this module holds the decisions it takes, so they are tested without
a cluster.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from common.control_records import ControlType, control_type
from common.errors import ErrorCode
from common.record_batch import RecordBatchHeader, complete_prefix, read_batches
from common.records import decode_records

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

# Kafka caps a transactional.id at a string's 32,767 bytes; ours stay short and printable.
MAX_TRANSACTIONAL_ID_CHARS: Final = 249
COMMIT_VALUE_VERSION: Final = 1


class CommitLogError(ValueError):
    """A commit-log record that is not one of ours: its key or value is malformed."""


def transactional_id(prefix: str, scope: str, partition: int) -> str:
    """The transactional.id of one Spark partition's writes: the same for every attempt of
    the task and every replay of the batch (so the newest fences the others), distinct per
    query (`scope`: the query id, kept in the checkpoint; a batch write's own id)."""
    if partition < 0:
        raise ValueError(f"a Spark partition id is never negative, got {partition}")
    tid = f"{prefix}-{scope}-{partition}"
    if len(tid) > MAX_TRANSACTIONAL_ID_CHARS:
        raise ValueError(f"transactional id {tid[:60]}... is longer than {MAX_TRANSACTIONAL_ID_CHARS} "
                         "characters: shorten option 'kafka.transactional.id'")
    return tid


def commit_log_partition(tid: str, partitions: int) -> int:
    """Which partition of the commit log holds `tid`'s records (a stable hash, not Python's
    per-process one)."""
    if partitions < 1:
        raise ValueError(f"the commit log needs a partition, it has {partitions}")
    return zlib.crc32(tid.encode()) % partitions


def commit_record(tid: str, batch_id: int, records: int) -> tuple[bytes, bytes]:
    """The (key, value) a task writes to the commit log inside its data transaction: it is
    visible exactly when the batch's rows are."""
    value = {"version": COMMIT_VALUE_VERSION, "batchId": batch_id, "records": records}
    return tid.encode(), json.dumps(value, separators=(",", ":")).encode()


def commit_batch_id(value: bytes | None) -> int:
    """The batch id a commit-log value names; CommitLogError when it names none."""
    try:
        document = json.loads(value or b"")
        batch_id = document["batchId"]
    except (ValueError, TypeError, KeyError):
        raise CommitLogError(f"a commit-log value that is not the sink's: {value!r:.80}") from None
    if not isinstance(batch_id, int) or isinstance(batch_id, bool) or batch_id < 0:
        raise CommitLogError(f"a commit-log value with a bad batchId: {value!r:.80}")
    return batch_id


class CommitLogScan:
    """What the commit log says about one transactional id, fed its partition's raw Fetch
    answers in offset order: the batch id its latest committed transaction wrote
    (`last_committed`, None: none yet), and the offset after the last batch fed.

    Fed uncommitted records on purpose: a read_committed read stops at the partition's LSO,
    which another query's (or another task's) open transaction can hold below our own
    committed record, and a sink that missed its record would write the batch twice. So the
    records keyed with the id are pending in their producer's transaction until its marker:
    COMMIT makes the pending batch id the committed one, ABORT drops it.
    """

    def __init__(self, tid: str, start: int) -> None:
        self._key = tid.encode()
        self._pending: dict[int, int] = {}  # producer id -> batch id written, awaiting its marker
        self.last_committed: int | None = None
        self.next_offset = start

    def feed(self, records: bytes | memoryview) -> int:
        """Take the whole batches of a Fetch answer (a cut last one is left for the next
        fetch, as Kafka's consumer does) from `next_offset` on; returns the new `next_offset`."""
        start = self.next_offset
        records = memoryview(records)[:complete_prefix(records)]
        for pos, header in read_batches(records):  # per batch: the commit log holds one record per task and batch
            if header.next_offset <= start:
                continue
            self.next_offset = header.next_offset
            if header.producer_id < 0:
                continue
            if header.is_control:
                kind = _marker_type(records, pos, header)
                written = self._pending.pop(header.producer_id, None)
                if kind is ControlType.COMMIT and written is not None:
                    self.last_committed = written
                continue
            for record in decode_records(records, pos, header):
                if record.offset >= start and record.key == self._key:
                    self._pending[header.producer_id] = commit_batch_id(record.value)
        return self.next_offset




def _marker_type(records: bytes | memoryview, pos: int, header: RecordBatchHeader) -> ControlType | None:
    control = decode_records(records, pos, header)
    return control_type(control[0].key) if control else None


def should_skip(last_committed: int | None, batch_id: int) -> bool:
    """A batch id at or below the last one this transactional id committed is a replay (the
    driver died after committing it, before Spark's commit log said so): write nothing."""
    return last_committed is not None and batch_id <= last_committed


# --- the producer ---------------------------------------------------------------------------


def producer_identity(stats: str) -> tuple[int, int] | None:
    """(producer id, epoch) from librdkafka's statistics JSON ("eos" object), once a producer
    id is assigned; None before. confluent-kafka exposes them nowhere else."""
    try:
        eos: Any = json.loads(stats).get("eos") or {}
        pid, epoch = int(eos.get("producer_id", -1)), int(eos.get("producer_epoch", -1))
    except (ValueError, TypeError, AttributeError):
        return None
    return (pid, epoch) if pid >= 0 and epoch >= 0 else None


# --- EndTxn answers -----------------------------------------------------------------------


class EndTxnOutcome(Enum):
    DONE = "done"  # the transaction ended as asked
    RETRY = "retry"  # ask the same coordinator again after a backoff
    FIND_COORDINATOR = "find"  # the coordinator moved: look it up, then ask again
    LOST = "lost"  # the transaction is no longer ours to end (fenced, timed out, aborted)


_RETRY: Final = frozenset({ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                           ErrorCode.REQUEST_TIMED_OUT})
_FIND: Final = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})
_LOST: Final = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED,
                          ErrorCode.INVALID_TXN_STATE, ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                          ErrorCode.TRANSACTIONAL_ID_NOT_FOUND})


def end_txn_outcome(error_code: int) -> EndTxnOutcome:
    """What an EndTxn error code means for the driver (Kafka's TransactionManager rules);
    ValueError for a code that is none of these (authorization, a bad request)."""
    try:
        code = ErrorCode(error_code)
    except ValueError:
        raise ValueError(f"EndTxn answered unknown error code {error_code}") from None
    if code is ErrorCode.NONE:
        return EndTxnOutcome.DONE
    if code in _RETRY:
        return EndTxnOutcome.RETRY
    if code in _FIND:
        return EndTxnOutcome.FIND_COORDINATOR
    if code in _LOST:
        return EndTxnOutcome.LOST
    raise ValueError(f"EndTxn answered {code.name}")
