"""The committed metadata log as pure state: a base snapshot, the chunks after it, the image.

`MetadataLogState` is what the Raft state machine (`quorum.metadata_log`) holds and
dumps; it has no I/O, threads or clocks, so chunking, epoch fencing and the dump round
trip are tested here directly. Records get dense offsets: a committed chunk's records take
the offsets right after the image's. Replay goes through `metadata.delta.apply`, the one
replay path.

Atomicity rule: one chunk is one Raft entry and applies whole or not at all. A decision
larger than one chunk (`MAX_CHUNK_BYTES`) is cut by `transaction_chunks` into chunks framed by
BeginTransaction ... EndTransaction (KIP-868): they commit one by one and may be interrupted
between chunks, but replay (`metadata.transactions`) publishes nothing of a transaction before
its End, so the image (and every snapshot folded from it) never holds half a decision. A
transaction left open by a failover is aborted by the next active controller (below).

Epoch fencing rule (`check_epoch`), decided on apply, identically on every voter:
- a chunk starting with BeginEpoch(e) must carry epoch e, and e must be at least the
  committed controller epoch (equal: the same controller retrying its BeginEpoch);
- any other chunk must carry exactly the committed controller epoch. Older is FENCED:
  a deposed active controller's late append. Newer, or none begun yet, is REJECTED: its
  BeginEpoch never committed, which only a bug does;
- a BeginEpoch chunk must start with AbortTransaction exactly when the log ends inside an open
  transaction (Kafka's activation records abort it the same way). The new controller reads
  that from its applied state; if entries still being applied change the answer its chunk is
  REJECTED and it retries with the state then applied.

Folding rule: the oldest chunks are folded into the base snapshot at a dump, never half a
transaction (KIP-868). Replaying them again to get the image to fold to held every
controller's Raft tick thread and event loop for 37 s at 100,000 partitions (issue 35), so
`apply_chunk` keeps the published image at a clean chunk boundary every `fold_spacing` records
(`FoldPoint`; images are immutable and share what did not change, so a point costs only what
changed after it). A fold picks the newest point at least `keep_records` behind the head:
`begin_fold` names it, the shell encodes its snapshot off the lock (`quorum.fold_encoder`),
`finish_fold` installs it — no replay at all. At most MAX_FOLD_POINTS are kept, and a fold
drops every point it covers, so a kept image never outlives its chunks.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgpack

from common.metadata_version import LEGACY_LEVEL
from common.units import KIB
from metadata.codec import MetadataRecordError
from metadata.image import EMPTY_IMAGE, MetadataImage
from metadata.records import (
    AbortTransaction,
    BeginEpoch,
    BeginTransaction,
    EndTransaction,
    Record,
    decode_record_maps,
    decode_records,
    encode_record,
)
from metadata.snapshot import decode_snapshot, encode_snapshot
from metadata.transactions import ReplayState, replay

PURE = True  # a pure core: no sockets, threads, clocks or files (tests/unit/test_purity.py)

# design.md (measured): keep one replicated call under ~30 KB. pysyncobj sends an entry of
# 64 KiB or more as a multi-message "transmission" whose last-part test compares against
# the wrong length (read in its source); 28 KiB stays under both. Each entry is a commit round
# of the pipeline (quorum.metadata_log.PIPELINE_WINDOW in flight): a controlled shutdown's
# 5,000-leadership batch takes 36 entries at 16 KiB, 21 at 28 KiB (14 once PartitionChange's
# unchanged fields are left off the wire, at metadata.version 2: metadata.records). bench/shutdown_controller_side.py,
# both changes together: the active controller's CPU over it 1.47-1.72 s at 16 KiB, 1.14-1.28 s
# at 28 KiB (load 8-15).
MAX_CHUNK_BYTES: Final = 28 * KIB
_ARRAY_HEADER_MAX: Final = 5  # msgpack array32 header: the most an array adds to its items
_ARRAY: Final = msgpack.Packer(use_bin_type=True)  # only its pack_array_header: no state kept between calls
# Images kept at chunk boundaries for the next fold. Each holds its own copy of every topic
# changed after it (four held ~7 MiB beyond the current image at 100,000 partitions after
# 250,000 ISR changes: bench/metadata_dump.py), and with the shell's spacing (half the records a
# fold keeps) four always leave one far enough behind the head.
MAX_FOLD_POINTS: Final = 4
FOLD_SPACING_RECORDS: Final = 10_000  # the default records between two fold points
DUMP_FORMAT: Final = "tidelog-metadata-log"
DUMP_VERSION: Final = 0
_DUMP_KEYS: Final = frozenset({"format", "version", "snapshot", "chunks"})


class OutcomeKind(enum.Enum):
    """How an append ended. Only UNKNOWN leaves the caller guessing: re-read the log."""

    COMMITTED = "COMMITTED"  # applied at first_offset..last_offset
    FENCED = "FENCED"  # committed to Raft but not applied: its epoch is stale
    REJECTED = "REJECTED"  # committed to Raft but not applied: malformed, or contradicts the image
    UNKNOWN = "UNKNOWN"  # timeout or leadership lost: it may still commit (or never)


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    """The result of one append; offsets name what committed (for a split append, the prefix)."""

    kind: OutcomeKind
    epoch: int
    first_offset: int | None = None
    last_offset: int | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        if (self.first_offset is None) != (self.last_offset is None):
            raise ValueError("first_offset and last_offset are both set or both None")
        if self.kind is OutcomeKind.COMMITTED and self.first_offset is None:
            raise ValueError("a COMMITTED outcome names its offsets")
        if self.first_offset is not None and self.last_offset is not None \
                and not 0 <= self.first_offset <= self.last_offset:
            raise ValueError(f"bad offsets {self.first_offset}..{self.last_offset}")

    @property
    def committed(self) -> bool:
        return self.kind is OutcomeKind.COMMITTED

    @property
    def offsets(self) -> range:
        """The committed offsets (empty when nothing committed)."""
        if self.first_offset is None or self.last_offset is None:
            return range(0)
        return range(self.first_offset, self.last_offset + 1)


class RecordTooLargeError(ValueError):
    """A record (or an atomic decision) does not fit in one chunk."""


@dataclass(frozen=True, slots=True)
class CommittedChunk:
    """One applied chunk: its encoded records hold offsets base_offset..base_offset+count-1."""

    base_offset: int
    epoch: int
    data: bytes
    count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.count - 1


def _encoded(record: Record, max_bytes: int, metadata_version: int) -> bytes:
    """One record's msgpack bytes, refused when it cannot fit any chunk."""
    data = encode_record(record, metadata_version)
    if len(data) + _ARRAY_HEADER_MAX > max_bytes:
        raise RecordTooLargeError(f"{type(record).__name__} record of {len(data)} bytes does not fit in a "
                                  f"{max_bytes}-byte chunk")
    return data


def _chunks(encoded: Sequence[bytes], max_bytes: int) -> list[bytes]:
    """Already encoded records as few chunks of at most `max_bytes`, in order. A chunk is the
    msgpack array of its records: the array header, then each record's own bytes (msgpack is
    concatenative), exactly what `encode_records` writes, without encoding a record twice."""
    chunks: list[bytes] = []
    start, size = 0, _ARRAY_HEADER_MAX
    for i, data in enumerate(encoded):  # bounded by the input
        if size + len(data) > max_bytes:
            chunks.append(_ARRAY.pack_array_header(i - start) + b"".join(encoded[start:i]))
            start, size = i, _ARRAY_HEADER_MAX
        size += len(data)
    if start < len(encoded):
        chunks.append(_ARRAY.pack_array_header(len(encoded) - start) + b"".join(encoded[start:]))
    return chunks


def split_records(records: Sequence[Record], max_bytes: int = MAX_CHUNK_BYTES, *,
                  metadata_version: int = LEGACY_LEVEL) -> list[bytes]:
    """Encode `records` as few chunks of at most `max_bytes`, keeping their order, in the form of
    the finalized `metadata_version` (`metadata.records.record_to_map`)."""
    return _chunks([_encoded(record, max_bytes, metadata_version) for record in records], max_bytes)


def transaction_chunks(records: Sequence[Record], name: str | None = None,
                       max_bytes: int = MAX_CHUNK_BYTES, *, metadata_version: int = LEGACY_LEVEL) -> list[bytes]:
    """`records` as chunks that apply together: one chunk, or a BeginTransaction ... EndTransaction
    frame over several (KIP-868), in the form of the finalized `metadata_version`. Each record is
    encoded once (a 10,000-partition creation encoded every record four times: 0.16 s of the
    active controller's loop, unloaded)."""
    encoded = [_encoded(record, max_bytes, metadata_version) for record in records]
    chunks = _chunks(encoded, max_bytes)
    if len(chunks) <= 1:
        return chunks
    return _chunks([_encoded(BeginTransaction(name), max_bytes, metadata_version), *encoded,
                    _encoded(EndTransaction(), max_bytes, metadata_version)], max_bytes)


def check_epoch(controller_epoch: int, epoch: int, records: Sequence[Record],
                in_transaction: bool = False) -> AppendOutcome | None:
    """Why a chunk carrying `epoch` may not apply on top of `controller_epoch` (and the open
    transaction, if any); None if it may."""
    begins = [i for i, r in enumerate(records) if isinstance(r, BeginEpoch)]
    aborts_first = bool(records) and isinstance(records[0], AbortTransaction)
    if begins and begins != [1 if aborts_first else 0]:
        return AppendOutcome(OutcomeKind.REJECTED, epoch,
                             reason="BeginEpoch must be the only BeginEpoch and first in its chunk "
                                    "(after an AbortTransaction only)")
    if begins and aborts_first != in_transaction:
        return AppendOutcome(OutcomeKind.REJECTED, epoch, reason=(
            "the log ends inside an open transaction: BeginEpoch must follow an AbortTransaction"
            if in_transaction else "no transaction is open: BeginEpoch must not follow an AbortTransaction"))
    if begins:
        begin = records[begins[0]]
        assert isinstance(begin, BeginEpoch)
        if begin.epoch != epoch:
            return AppendOutcome(OutcomeKind.REJECTED, epoch,
                                 reason=f"BeginEpoch({begin.epoch}) appended under epoch {epoch}")
        if epoch < controller_epoch:
            return AppendOutcome(OutcomeKind.FENCED, epoch,
                                 reason=f"epoch {epoch} is older than controller epoch {controller_epoch}")
        return None
    if epoch < controller_epoch:
        return AppendOutcome(OutcomeKind.FENCED, epoch,
                             reason=f"epoch {epoch} is older than controller epoch {controller_epoch}")
    if epoch > controller_epoch or controller_epoch < 0:
        return AppendOutcome(OutcomeKind.REJECTED, epoch,
                             reason=f"epoch {epoch} has not begun (controller epoch is {controller_epoch})")
    return None


@dataclass(frozen=True, slots=True)
class DumpParts:
    """A state's base snapshot and chunks at one moment; `encode` is `MetadataLogState.encode_dump`."""

    snapshot: bytes
    chunks: tuple[CommittedChunk, ...]

    def encode(self) -> bytes:
        packed: bytes = msgpack.packb({
            "format": DUMP_FORMAT, "version": DUMP_VERSION, "snapshot": self.snapshot,
            "chunks": [[c.base_offset, c.epoch, c.data] for c in self.chunks],
        }, use_bin_type=True)
        return packed


@dataclass(frozen=True, slots=True, eq=False)
class FoldPoint:
    """The published image right after a chunk that left no transaction open: the log can be
    folded here as it is. Compared by identity: a point belongs to the state that made it."""

    image: MetadataImage

    @property
    def offset(self) -> int:
        return self.image.offset


class MetadataLogState:
    """Base snapshot + committed chunks after it + the image they replay to. Not thread-safe."""

    def __init__(self, base_snapshot: bytes | None = None, chunks: Iterable[CommittedChunk] = (), *,
                 fold_spacing: int = FOLD_SPACING_RECORDS) -> None:
        if fold_spacing < 1:
            raise ValueError(f"fold_spacing must be at least 1 record, got {fold_spacing}")
        self._fold_spacing = fold_spacing
        self._points: list[FoldPoint] = []  # oldest first, each after the base and a chunk's last offset
        self._pending: FoldPoint | None = None  # begin_fold's choice, kept until finish_fold
        if base_snapshot is None:
            self._base_image, self._base_snapshot = EMPTY_IMAGE, encode_snapshot(EMPTY_IMAGE)
        else:
            self._base_image, self._base_snapshot = decode_snapshot(base_snapshot), bytes(base_snapshot)
        self._chunks: list[CommittedChunk] = []
        self._bases: list[int] = []  # base_offset of each chunk, for bisect
        self._state = ReplayState(self._base_image)  # the base never ends inside a transaction (fold)
        for chunk in chunks:
            self._replay(chunk)

    @property
    def image(self) -> MetadataImage:
        """The published image: an open transaction's records are not in it yet."""
        return self._state.image

    @property
    def in_transaction(self) -> bool:
        """Whether the log ends inside an open metadata transaction."""
        return self._state.in_transaction

    @property
    def log_start_offset(self) -> int:
        """The first offset still held as a record; older ones live only in the base snapshot."""
        return self._base_image.offset + 1

    @property
    def last_offset(self) -> int:
        """The offset of the last committed record (-1 when none), in a transaction or not."""
        return self._state.last_offset

    @property
    def base_snapshot(self) -> bytes:
        return self._base_snapshot

    @property
    def chunks(self) -> tuple[CommittedChunk, ...]:
        return tuple(self._chunks)

    @property
    def fold_points(self) -> tuple[FoldPoint, ...]:
        return tuple(self._points)

    def apply_chunk(self, data: bytes, epoch: int) -> AppendOutcome:
        """Apply one committed Raft entry; only COMMITTED changes the state."""
        if type(epoch) is not int:
            return AppendOutcome(OutcomeKind.REJECTED, -1,
                                 reason=f"epoch must be an integer, got {epoch!r:.40}")
        try:
            records = decode_records(data)
        except MetadataRecordError as exc:
            return AppendOutcome(OutcomeKind.REJECTED, epoch, reason=f"undecodable chunk: {exc}")
        if not records:
            return AppendOutcome(OutcomeKind.REJECTED, epoch, reason="empty chunk")
        verdict = check_epoch(self._state.image.controller_epoch, epoch, records, self._state.in_transaction)
        if verdict is not None:
            return verdict
        base = self._state.last_offset + 1
        try:
            state = replay(self._state, enumerate(records, start=base))
        except MetadataRecordError as exc:
            return AppendOutcome(OutcomeKind.REJECTED, epoch, reason=str(exc))
        self._state = state
        self._chunks.append(CommittedChunk(base, epoch, bytes(data), len(records)))
        self._bases.append(base)
        self._mark()
        return AppendOutcome(OutcomeKind.COMMITTED, epoch, base, state.last_offset)

    def _replay(self, chunk: CommittedChunk) -> None:
        """Re-apply a chunk from a dump: it was accepted once, so any problem means corruption."""
        if chunk.base_offset != self._state.last_offset + 1:
            raise MetadataRecordError(
                f"chunk at offset {chunk.base_offset} does not follow offset {self._state.last_offset}")
        records = decode_records(chunk.data)
        if len(records) != chunk.count or not records:
            raise MetadataRecordError(f"chunk at offset {chunk.base_offset} holds {len(records)} records")
        self._state = replay(self._state, enumerate(records, start=chunk.base_offset))
        self._chunks.append(chunk)
        self._bases.append(chunk.base_offset)
        self._mark()

    def _mark(self) -> None:
        """Keep the image as a fold point if no transaction is open and the last point (or the
        base) is `fold_spacing` records behind; beyond MAX_FOLD_POINTS the oldest goes (never
        the one a fold is encoding)."""
        if self._state.in_transaction:
            return
        last = self._points[-1].offset if self._points else self._base_image.offset
        if self._state.last_offset - last < self._fold_spacing:
            return
        # with no transaction open the published image holds every record (an Abort moves its offset)
        assert self._state.image.offset == self._state.last_offset
        self._points.append(FoldPoint(self._state.image))
        if len(self._points) > MAX_FOLD_POINTS:
            oldest = 0 if self._points[0] is not self._pending else 1
            del self._points[oldest]

    def records_from(self, offset: int, max_records: int) -> list[tuple[int, Record]]:
        """Up to `max_records` (offset, record) pairs from `offset`; IndexError if it was folded."""
        if offset < self.log_start_offset:
            raise IndexError(f"offset {offset} is before the log start offset {self.log_start_offset}")
        out: list[tuple[int, Record]] = []
        i = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        # Bounded by the chunk count; stops early once max_records are collected.
        for chunk in self._chunks[i:]:
            if len(out) >= max_records:
                break
            for at, record in enumerate(decode_records(chunk.data), start=chunk.base_offset):
                if at >= offset and len(out) < max_records:
                    out.append((at, record))
        return out

    def record_maps_from(self, offset: int, max_records: int) -> list[tuple[int, dict[str, Any]]]:
        """`records_from` as the records' msgpack maps, which is what a metadata fetch sends: the
        chunks were checked when applied, and building then re-encoding 10,000 records per
        broker fetch held the controller's event loop for a large topic."""
        if offset < self.log_start_offset:
            raise IndexError(f"offset {offset} is before the log start offset {self.log_start_offset}")
        out: list[tuple[int, dict[str, Any]]] = []
        i = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        for chunk in self._chunks[i:]:  # bounded by the chunk count; stops once max_records are collected
            if len(out) >= max_records:
                break
            maps = decode_record_maps(chunk.data)
            skip = max(offset - chunk.base_offset, 0)
            out.extend((chunk.base_offset + k, m) for k, m in
                       enumerate(maps[skip:skip + max_records - len(out)], start=skip))
        return out

    def fold(self, keep_records: int) -> None:
        """Fold the oldest chunks into the base snapshot now; at least the newest `keep_records`
        stay records. It folds at the last chunk after which no transaction is open (a snapshot
        never holds half a transaction, KIP-868), replaying only from the newest fold point before
        it, and encodes the snapshot here: for tests and tools. A controller folds with
        `begin_fold` and `finish_fold`, encoding off its lock."""
        limit = self._state.last_offset - keep_records
        start = self._newest_point(limit)
        base = self._base_image if start is None else start.image
        state, clean = ReplayState(base), base
        # Bounded by the chunk count: each chunk after the start point is replayed at most once.
        for chunk in self._chunks[bisect.bisect_right(self._bases, base.offset):]:
            if chunk.last_offset > limit:
                break
            state = replay(state, enumerate(decode_records(chunk.data), start=chunk.base_offset))
            if not state.in_transaction:
                clean = state.image
        if clean.offset > self._base_image.offset:
            self._fold_to(clean, encode_snapshot(clean))

    def begin_fold(self, keep_records: int) -> FoldPoint | None:
        """The newest fold point with at least `keep_records` records after it (None if there is
        none), kept until `finish_fold` installs its snapshot; a later call replaces the choice."""
        self._pending = self._newest_point(self._state.last_offset - keep_records)
        return self._pending

    def finish_fold(self, point: FoldPoint, snapshot: bytes) -> bool:
        """Fold into `point`, whose image `snapshot` encodes (`encode_snapshot`); False, changing
        nothing, if it is no longer this state's chosen point (a newer `begin_fold` or `fold`)."""
        if point is not self._pending or not any(p is point for p in self._points):
            return False
        self._fold_to(point.image, snapshot)
        return True

    def _newest_point(self, limit: int) -> FoldPoint | None:
        return next((p for p in reversed(self._points) if p.offset <= limit), None)

    def _fold_to(self, image: MetadataImage, snapshot: bytes) -> None:
        """Make `image`, the published image right after one of the chunks, the base."""
        folded = bisect.bisect_right(self._bases, image.offset)
        if folded == 0 or self._chunks[folded - 1].last_offset != image.offset:
            raise ValueError(f"offset {image.offset} is not the end of a chunk after the base")
        self._base_image, self._base_snapshot = image, snapshot
        del self._chunks[:folded], self._bases[:folded]
        self._points = [p for p in self._points if p.offset > image.offset]
        if self._pending is not None and self._pending.offset <= image.offset:
            self._pending = None

    def dump_parts(self) -> DumpParts:
        """What a dump holds, as references (immutable): take them under a lock, encode outside it."""
        return DumpParts(self._base_snapshot, tuple(self._chunks))

    def encode_dump(self) -> bytes:
        """The whole state as plain msgpack: snapshot bytes and [base_offset, epoch, data] chunks."""
        return self.dump_parts().encode()

    @classmethod
    def decode_dump(cls, data: bytes, *, fold_spacing: int = FOLD_SPACING_RECORDS) -> MetadataLogState:
        """The state `encode_dump` wrote; MetadataRecordError if it is malformed or does not replay."""
        try:
            m: Any = msgpack.unpackb(data, raw=False, strict_map_key=True)
        except (msgpack.UnpackException, ValueError, TypeError) as exc:
            raise MetadataRecordError(
                f"metadata log dump: not valid msgpack ({type(exc).__name__})") from None
        if not isinstance(m, dict) or set(m) != _DUMP_KEYS:
            raise MetadataRecordError(f"metadata log dump: expected a map with keys {sorted(_DUMP_KEYS)}")
        if m["format"] != DUMP_FORMAT or m["version"] != DUMP_VERSION:
            raise MetadataRecordError(
                f"metadata log dump: format {m['format']!r:.40} version {m['version']!r:.20} is not "
                f"{DUMP_FORMAT!r} version {DUMP_VERSION}")
        if not isinstance(m["snapshot"], bytes) or not isinstance(m["chunks"], list):
            raise MetadataRecordError("metadata log dump: snapshot must be bytes and chunks a list")
        chunks = []
        for i, item in enumerate(m["chunks"]):
            if (not isinstance(item, list) or len(item) != 3 or type(item[0]) is not int
                    or type(item[1]) is not int or not isinstance(item[2], bytes)):
                raise MetadataRecordError(f"metadata log dump: chunk {i} is not [base_offset, epoch, data]")
            chunks.append(CommittedChunk(item[0], item[1], item[2], len(decode_records(item[2]))))
        return cls(m["snapshot"], chunks, fold_spacing=fold_spacing)
