"""Producer state snapshots: `%020d.snapshot` files in Kafka's format (ProducerStateManager's
version 1), so a partition opening after a restart replays the batch headers from its latest
snapshot instead of from the log start.

    data = encode_snapshot(manager.entries.values())
    entries = decode_snapshot(data)          # ProducerStateEntry per producer
    write_snapshot(directory, offset, data); latest_snapshot(directory, at_most=leo)

The file: `version int16 (1), crc uint32, entries: int32 count, then per producer
producerId int64, epoch int16, lastSequence int32, lastOffset int64, offsetDelta int32,
timestamp int64, coordinatorEpoch int32, currentTxnFirstOffset int64` (46 bytes), big-endian;
the CRC-32C covers everything after it. As Kafka's, a snapshot keeps one batch per producer (its
last): duplicates of older batches are not detected after a restart from it. The snapshot at
offset N is the state of the producers after every batch below N. Written on segment roll (at
the new segment's base offset) and at a clean close (at the log end), through a temporary file,
fsynced and renamed; a snapshot past the log end (the log was truncated or recovery cut it) is
never used and is deleted, and only the latest MAX_SNAPSHOTS are kept: `prune_snapshots`, which a
roll runs on the flusher's removal thread (`PartitionLog.roll`), not on the event loop. These
files are small, but an unlink on a `discard` mount waits for the disk: 303 of them in 20 s on
one broker's loop took up to 18 ms each.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from broker.log.checkpoint_file import fsync_directory
from broker.producer_state import NO_TXN, BatchMetadata, ProducerStateEntry
from common.errors import KafkaStorageError
from common.record_batch import NO_SEQUENCE
from crc32c import crc32c

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX: Final = ".snapshot"
SNAPSHOT_VERSION: Final = 1
MAX_SNAPSHOTS: Final = 2  # the latest two: a crash in the active segment replays from the last roll
_HEAD = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")  # 46 bytes


class CorruptSnapshotError(KafkaStorageError):
    """A snapshot that does not decode: the partition replays from the log start instead."""


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    body = bytearray()
    rows = sorted(entries, key=lambda e: e.producer_id)
    body += _COUNT.pack(len(rows))
    for e in rows:
        last = e.batches[-1] if e.batches else None
        body += _ENTRY.pack(
            e.producer_id, e.producer_epoch, NO_SEQUENCE if last is None else last.last_seq,
            e.last_offset if last is None else last.last_offset,
            0 if last is None else last.last_offset - last.first_offset,
            e.last_timestamp, e.coordinator_epoch, e.current_txn_first_offset)
    return _HEAD.pack(SNAPSHOT_VERSION, crc32c(bytes(body))) + bytes(body)


def decode_snapshot(data: bytes, *, source: str = "producer snapshot") -> list[ProducerStateEntry]:
    """The producers a snapshot holds; CorruptSnapshotError for a torn or foreign file."""
    if len(data) < _HEAD.size + _COUNT.size:
        raise CorruptSnapshotError(f"{source} has {len(data)} bytes, too few for its header")
    version, crc = _HEAD.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"{source} has version {version}; only {SNAPSHOT_VERSION} is known")
    body = data[_HEAD.size:]
    if crc32c(body) != crc:
        raise CorruptSnapshotError(f"{source} fails its CRC")
    (count,) = _COUNT.unpack_from(body)
    if count < 0 or len(body) != _COUNT.size + count * _ENTRY.size:
        raise CorruptSnapshotError(f"{source} claims {count} producers in {len(body)} bytes")
    entries = []
    for pid, epoch, last_seq, last_offset, delta, timestamp, coordinator_epoch, txn_first in \
            _ENTRY.iter_unpack(body[_COUNT.size:]):
        batches: tuple[BatchMetadata, ...] = ()
        if last_seq != NO_SEQUENCE and delta >= 0:
            batches = (BatchMetadata(first_seq=(last_seq - delta) % (1 << 31), last_seq=last_seq,
                                     first_offset=last_offset - delta, last_offset=last_offset,
                                     timestamp=timestamp),)
        entries.append(ProducerStateEntry(pid, epoch, batches, last_timestamp=timestamp, last_offset=last_offset,
                                          current_txn_first_offset=txn_first if txn_first >= 0 else NO_TXN,
                                          coordinator_epoch=coordinator_epoch))
    return entries


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offsets(directory: Path) -> list[int]:
    """The offsets of the snapshots in `directory`, ascending."""
    offsets = []
    # os.listdir, not Path.glob: a broker opening a partition lists its directory here, and
    # glob's per-entry Path objects and pattern match were a tenth of creating 10,000 logs.
    try:
        names = os.listdir(directory)
    except FileNotFoundError:  # as glob: no directory, no snapshots
        return []
    for name in names:
        stem = name[: -len(SNAPSHOT_SUFFIX)]
        if name.endswith(SNAPSHOT_SUFFIX) and len(stem) == 20 and stem.isdigit():
            offsets.append(int(stem))
    return sorted(offsets)


def write_snapshot(directory: Path, offset: int, data: bytes, *, durable: bool = True) -> None:
    """Write the snapshot at `offset` (fsynced unless not `durable`: a clean stop closing 10,000
    logs skips it; a torn file fails its CRC and the log start is replayed instead). The older
    ones are the caller's to prune (`prune_snapshots`)."""
    path = snapshot_path(directory, offset)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if durable:
            fsync_directory(directory)
    except OSError as e:
        raise KafkaStorageError(f"cannot write producer snapshot {path}: {e}") from e


def prune_snapshots(directory: Path, offset: int, name: str = "") -> None:
    """Remove the snapshots below `offset` but the latest MAX_SNAPSHOTS - 1: with the one at
    `offset` (written, or about to be), the latest MAX_SNAPSHOTS are kept. Those at `offset` or
    above are never touched, so this may run on another thread while the loop writes there. A
    file that cannot be removed is one warning line; the next prune tries again."""
    older = [found for found in snapshot_offsets(directory) if found < offset]
    for old in older[:-(MAX_SNAPSHOTS - 1)]:
        path = snapshot_path(directory, old)
        try:
            path.unlink(missing_ok=True)
        except OSError as e:
            log.warning("%sCannot remove old producer snapshot %s: %s", name, path, e)


def delete_snapshots_from(directory: Path, offset: int) -> list[int]:
    """Remove the snapshots at `offset` or later (the log is cut there: they describe lost data);
    the offsets of those left, ascending (one listing of the directory serves both)."""
    kept = []
    for found in snapshot_offsets(directory):
        if found >= offset:
            snapshot_path(directory, found).unlink(missing_ok=True)
        else:
            kept.append(found)
    return kept


def latest_snapshot(directory: Path, *, at_most: int, name: str = "") -> tuple[int, list[ProducerStateEntry]] | None:
    """The latest readable snapshot at or below `at_most` (the log end; later ones are deleted):
    (offset, entries), or None to replay from the log start."""
    for offset in reversed(delete_snapshots_from(directory, at_most + 1)):
        path = snapshot_path(directory, offset)
        try:
            return offset, decode_snapshot(path.read_bytes(), source=f"producer snapshot {path}")
        except (OSError, KafkaStorageError) as e:
            log.warning("%sIgnoring producer snapshot %s: %s", name, path.name, e)
            path.unlink(missing_ok=True)
    return None
