"""One log segment: a `%020d.log` file of record batches with its `.index` and `.timeindex`,
and the aborted transactions whose ABORT marker it holds (`.txnindex`, written only when it has
one).

Batches are stored exactly as received except for baseOffset and partitionLeaderEpoch,
which sit outside the CRC. One descriptor serves both appends (O_APPEND) and reads (pread);
it lives in the broker's bounded `SegmentFileCache` (`segment_files`), which may evict it
while the segment is idle: each use asks the cache for the segment's handle (a hit, or the
file opened again - the segment's size, offsets and indexes stay in memory, so a reopen
reads nothing). A `FileSlice` names its segment, not a descriptor: the network layer takes
the segment's handle when it sends the slice and holds it until the send ends, so a fetch
response of thousands of partitions holds no descriptor per partition while it waits.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from broker.log.append_rules import MAX_RELATIVE_OFFSET
from broker.log.checkpoint_file import fsync_directory
from broker.log.flusher import SegmentSync
from broker.log.offset_index import OffsetIndex
from broker.log.segment_files import (
    SEGMENT_OPEN_FLAGS,
    BorrowedFile,
    SegmentFileCache,
    SegmentHandle,
    new_key,
)
from broker.log.segment_removal import SegmentRemoval, remove_files
from broker.log.time_index import TimeIndex
from broker.log.txn_index import TXN_INDEX_SUFFIX
from broker.log.txn_index_file import TransactionIndex
from common.errors import KafkaError, KafkaStorageError
from common.record_batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    RecordBatchHeader,
    parse_header,
    verify_crc,
)

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
NO_TIMESTAMP = -1
NO_FD = -1  # the descriptor of an empty slice: nothing is read from it
_IOV_MAX = 1024  # Linux's limit of buffers in one writev
_PREFIX = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch
# A segment's index objects, made at their first use when the segment defers its file.
_INDEXES: Final = frozenset({"offset_index", "time_index", "txn_index"})


def segment_file_name(base_offset: int, suffix: str) -> str:
    """Kafka's file name: the base offset zero-padded to 20 digits."""
    return f"{base_offset:020d}{suffix}"


@dataclass(frozen=True, slots=True)
class FileSlice:
    """Bytes [position, position+length) of a segment file, ready for sendfile/pread.

    A slice of a segment (`segment` set, `fd` NO_FD) takes the segment's open file only when
    read or sent, through `file()`, whose handle keeps the descriptor open while held: a
    descriptor closed early would be reused by the kernel and read another file's bytes. A
    slice sent after its segment was deleted (past `file.delete.delay.ms`) fails (as a closed
    FileChannel does in Kafka), and one of a truncated file comes up short. Without `segment`,
    `fd` is the caller's descriptor (or NO_FD for an empty slice). `first_batch_size`: the size
    of the batch at `position` when the read that made the slice parsed its header (0: not
    known), so a Fetch's `log_read.whole_batches` does not read its length prefix again."""

    fd: int
    position: int
    length: int
    segment: LogSegment | None = None
    first_batch_size: int = 0

    def file(self) -> SegmentHandle | BorrowedFile:
        """The file to read the slice from: use its `fd` only while holding it. Raises
        KafkaStorageError when the segment's file is gone."""
        return BorrowedFile(self.fd) if self.segment is None else self.segment.file()

    def read_bytes(self) -> bytes:
        """The slice's bytes (tools, tests, the coordinators; the network layer sends it)."""
        if not self.length:
            return b""
        handle = self.file()
        return os.pread(handle.fd, self.length, self.position)


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    """What scanning a segment found: bytes kept, bytes cut off, and why."""

    valid_bytes: int
    truncated_bytes: int
    next_offset: int
    reason: str | None


class LogSegment:
    """A segment file plus its two sparse indexes. Not thread-safe: one owner serializes calls."""

    # Set in __init__, or, for a segment that defers its file, at their first use (__getattr__).
    offset_index: OffsetIndex
    time_index: TimeIndex
    txn_index: TransactionIndex

    def __init__(self, directory: Path, base_offset: int, *, index_interval_bytes: int,
                 max_index_bytes: int, created_ms: int, create: bool,
                 files: SegmentFileCache | None = None, defer_file: bool = False) -> None:
        """Open (`create`: create) the segment's file; `files` is the broker's cache of open
        segment files (None: one of its own, which keeps this segment's file open).

        `defer_file` (with `create`): the file is created by the segment's first use of it (its
        first append, roll flush or truncation), not here. A new log's one segment is empty and
        most of a 100,000-partition broker's stay so: creating its file was half of what a new
        log cost the kernel (an inode allocation per file, on this VM's journal-less ext4 a scan
        past every inode freed in the last minutes: 90-160 us of system CPU each). An empty
        segment without its file is what the loader makes of a directory without one anyway:
        one empty segment, so a crash before the first append loses nothing (Kafka's log has its
        file from the start; nothing in it until then)."""
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = created_ms
        self.log_path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        self._max_index_bytes = max_index_bytes
        if not defer_file:  # a deferred segment's indexes are made at their first use, as its file
            self._make_indexes()
        # Set by `recover`: the aborted transactions must be rebuilt from the batches, which needs
        # the transactions open when the segment starts (the producer-state replay does it).
        self.txn_index_stale = False
        self._files = SegmentFileCache(1) if files is None else files
        self._key = new_key()
        if defer_file and not create:
            raise ValueError("only a segment being created can defer its file")
        self._file_deferred = defer_file  # the file is not created yet: `file()` creates it
        if defer_file:
            self.size = 0
        else:
            flags = SEGMENT_OPEN_FLAGS | os.O_CREAT | (os.O_EXCL if create else 0)
            try:
                handle = SegmentHandle(os.open(self.log_path, flags, 0o644))
                self.size = os.fstat(handle.fd).st_size
            except OSError as e:
                raise KafkaStorageError(f"cannot open segment {self.log_path}: {e}") from e
            self._files.add(self._key, handle)
        # Bytes known to be on disk: a new file has none to sync; an existing one is unknown
        # (it may hold unsynced data from before a crash) until its first fsync here.
        self._synced_size = 0 if create else -1
        # Whether the directory entries of the files this segment created are durable: not for
        # a segment created here until its first flush fsyncs the directory (once), as Kafka's
        # LocalLog.flush does (flushDirIfExists). Without it a power loss after a flush on the
        # caller's thread could lose the new file whose bytes the recovery point then claims.
        self._directory_synced = not create
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.first_batch_timestamp: int | None = None  # drives time-based rolling
        self.next_offset = base_offset  # one past the last offset stored here
        self._bytes_since_index_entry = 0
        # The file's last batch (position, header as stored), when known: `translate_offset` of
        # an offset in it reads nothing. A follower's fetch (and a consumer's at the high
        # watermark) asks for the batch just appended; the scan from the last index entry read
        # every batch header after it, one pread each: ~28 per acks=all RF=3 produce on the
        # leader. Kafka's leader keeps the log end's position for the same reason.
        self._last_batch: tuple[int, RecordBatchHeader] | None = None
        # The batch after the last slice a Fetch sent from here (position, header as stored;
        # `note_next_batch`): a consumer reading a backlog asks for it next, and finds it with
        # no index lookup and none of the two header reads that lookup costs (the index is
        # keyed by each indexed batch's last offset, so it lands on the batch before).
        self._next_read: tuple[int, RecordBatchHeader] | None = None

    def _make_indexes(self) -> None:
        """The three index objects (their files are written only once they hold entries). Their
        paths and arrays were a third of a new log's CPU on the I/O pool (~75 us per log on
        tmpfs); most new logs never index anything."""
        directory, base = self.directory, self.base_offset
        self.offset_index = OffsetIndex(directory / segment_file_name(base, INDEX_SUFFIX), base,
                                        self._max_index_bytes)
        self.time_index = TimeIndex(directory / segment_file_name(base, TIME_INDEX_SUFFIX), base,
                                    self._max_index_bytes)
        self.txn_index = TransactionIndex(directory / segment_file_name(base, TXN_INDEX_SUFFIX))

    if not TYPE_CHECKING:  # hidden from mypy: the three annotations above stay the only names
        def __getattr__(self, name: str) -> object:
            """Only reached when an attribute is missing: a deferred segment's indexes, at
            their first use."""
            if name in _INDEXES and "directory" in self.__dict__:
                self._make_indexes()
                return self.__dict__[name]
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def _indexes_made(self) -> bool:
        """Whether the index objects exist (a deferred segment's wait for their first use, and
        until then hold no entry and no file)."""
        return "txn_index" in self.__dict__

    def file(self) -> SegmentHandle:
        """The segment's open file: use `.fd` only while holding the handle (the cache may
        evict it, and the last reference closes the descriptor). A deferred file is created
        here, at its first use."""
        if self._file_deferred:
            return self._create_file()
        return self._files.get(self._key, self.log_path)

    def _create_file(self) -> SegmentHandle:
        """Create the deferred file (O_EXCL: a file already there is not this empty segment's)."""
        flags = SEGMENT_OPEN_FLAGS | os.O_CREAT | os.O_EXCL
        try:
            handle = SegmentHandle(os.open(self.log_path, flags, 0o644))
        except OSError as e:
            raise KafkaStorageError(f"cannot create segment {self.log_path}: {e}") from e
        self._file_deferred = False
        self._files.add(self._key, handle)
        return handle

    @property
    def has_file(self) -> bool:
        """Whether the segment's file exists (false while it is deferred: `defer_file`)."""
        return not self._file_deferred

    # ---- appending -------------------------------------------------------------------

    def append(self, view: memoryview, batches: Sequence[tuple[int, RecordBatchHeader]],
               base_offsets: Sequence[int], leader_epoch: int | None, total: int) -> None:
        """Write `batches` (positions in `view`, `total` bytes in all): a leader's with new
        base offsets and its leader epoch; a replica's (`leader_epoch` None: `base_offsets`
        are then the batches' own, and `view` holds just them, contiguous) as they are.

        A leader's rewritten 16-byte prefix of each batch is spliced in front of the rest
        with writev, so batch bytes are never copied in Python. A failed write truncates
        the file back: the segment never keeps a partial batch that was not acknowledged.
        """
        iov: list[bytes | memoryview]
        if leader_epoch is None:  # a replica's batches keep their offsets: written as they are
            iov = [view]
        else:
            iov = []
            pack = _PREFIX.pack
            for (pos, header), base in zip(batches, base_offsets):
                length = header.batch_length
                iov += (pack(base, length, leader_epoch), view[pos + 16 : pos + length + LOG_OVERHEAD])
        self._write(iov, total)
        position, end = self.size, self.size
        for (_, header), base in zip(batches, base_offsets):
            position = end
            end += header.batch_length + LOG_OVERHEAD
            self._index_batch(position, base + header.last_offset_delta, header.max_timestamp,
                              end - position)
        # the last batch as stored: its header with the new base offset (and epoch), made by
        # tuple.__new__ (C), not two NamedTuple._replace calls (Python frames)
        self._last_batch = (position, header if leader_epoch is None else tuple.__new__(
            RecordBatchHeader, (base, header[1], leader_epoch, *header[3:])))
        self.size = end
        self.next_offset = base + header.last_offset_delta + 1

    def _write(self, iov: list[bytes | memoryview], total: int) -> None:
        # file() without its frame: every append of every partition comes here
        handle = self._create_file() if self._file_deferred else self._files.get(self._key, self.log_path)
        fd = handle.fd
        try:
            if len(iov) <= _IOV_MAX:
                written = os.writev(fd, iov)
            else:
                written = sum(os.writev(fd, iov[i : i + _IOV_MAX])
                              for i in range(0, len(iov), _IOV_MAX))
            if written != total:  # a short write: the disk filled up, finish or fail
                rest = b"".join(iov)[written:]
                while rest:
                    rest = rest[os.write(fd, rest):]
        except OSError as e:
            self._undo_partial_write(handle)
            raise KafkaStorageError(
                f"append of {total} bytes to {self.log_path} failed: {e}") from e

    def _undo_partial_write(self, handle: SegmentHandle) -> None:
        try:
            os.ftruncate(handle.fd, self.size)
        except OSError as e:
            log.error("Cannot truncate %s back to %d bytes after a failed append: %s",
                      self.log_path, self.size, e)

    def _index_batch(self, position: int, last_offset: int, max_timestamp: int,
                     size: int) -> None:
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = max_timestamp
        if self._bytes_since_index_entry > self.index_interval_bytes:
            # OffsetIndex.append's and TimeIndex.maybe_append's conversions without their frames:
            # a bulk produce indexes each batch
            self.offset_index.append_entry(last_offset - self.base_offset, position)
            self.time_index.append_entry(self.max_timestamp, self.offset_of_max_timestamp - self.base_offset,
                                         if_key_grows=True)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += size

    # ---- reading ---------------------------------------------------------------------

    def headers_from(self, position: int) -> Iterator[tuple[int, RecordBatchHeader]]:
        """(position, header) of each batch from `position` to the end of the file."""
        if position >= self.size:
            return
        handle = self.file()  # held while the generator lives
        while position < self.size:
            try:
                header = parse_header(os.pread(handle.fd, HEADER_SIZE, position),
                                      require_body=False)
            except (OSError, KafkaError) as e:
                raise KafkaStorageError(
                    f"segment {self.log_path} is unreadable at position {position}: {e}") from e
            if position + header.size > self.size:
                raise KafkaStorageError(
                    f"segment {self.log_path} ends inside the batch at position {position}")
            yield position, header
            position += header.size

    def translate_offset(self, offset: int) -> tuple[int, RecordBatchHeader] | None:
        """Position and header of the first batch whose last offset is >= `offset`."""
        last = self._last_batch
        if last is not None and last[1].base_offset <= offset:  # every earlier batch ends below it
            return last if offset <= last[1].base_offset + last[1].last_offset_delta else None
        noted = self._next_read
        if noted is not None and noted[1].base_offset <= offset <= noted[1].base_offset + noted[1].last_offset_delta:
            return noted  # batches are in offset order: the one before it ends below `offset`
        start = self.offset_index.lookup(offset).position
        for position, header in self.headers_from(start):
            if header.base_offset + header.last_offset_delta >= offset:
                return position, header
        return None

    def read(self, offset: int, max_bytes: int, *, max_position: int | None = None,
             min_one_batch: bool = True) -> FileSlice | None:
        """A slice from the batch holding `offset`, at most `max_bytes` (may end mid-batch).

        Like Kafka, the slice may end in a partial batch, which clients skip; with
        `min_one_batch` a first batch larger than `max_bytes` is returned whole so that a
        consumer always makes progress. None when `offset` is past this segment's data.
        """
        found = self.translate_offset(offset)
        if found is None:
            return None
        start, header = found
        limit = self.size if max_position is None else min(self.size, max_position)
        if start >= limit:
            return FileSlice(NO_FD, start, 0)
        wanted = max(max_bytes, header.size) if min_one_batch else max_bytes
        return FileSlice(NO_FD, start, min(limit - start, wanted), self, header.size)

    def note_next_batch(self, position: int, header: RecordBatchHeader) -> None:
        """The batch at `position` (its header as read from this file) is the one a Fetch that
        was just answered will ask for next (`log_read.whole_batches`)."""
        if position + header.size <= self.size:
            self._next_read = (position, header)

    def scan_tail(self) -> int:
        """Restore the in-memory tail state after loading; return the next offset."""
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry
        next_offset = self.base_offset
        last = self.offset_index.last_entry
        if len(self.offset_index):
            next_offset = last.offset + 1
        self._bytes_since_index_entry = 0
        self._last_batch = None
        self._next_read = None  # a truncation (which rescans the tail) may have cut or moved it
        for position, header in self.headers_from(last.position):
            self._last_batch = (position, header)
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
            self._bytes_since_index_entry += header.size
            next_offset = header.next_offset
        self.first_batch_timestamp = None
        for _, header in self.headers_from(0):
            self.first_batch_timestamp = header.max_timestamp
            break
        self.next_offset = next_offset
        return next_offset

    @property
    def largest_timestamp(self) -> int:
        """The largest batch timestamp, or the file's mtime when no batch carried one."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return self.modified_ms()

    def modified_ms(self) -> int:
        """The file's mtime in ms (by path: an idle segment's file need not be open); a deferred
        file's would be its creation time, the segment's."""
        if self._file_deferred:
            return self.created_ms
        try:
            return int(os.stat(self.log_path).st_mtime * 1000)
        except OSError as e:
            raise KafkaStorageError(f"cannot stat {self.log_path}: {e}") from e

    # ---- truncation and recovery -----------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Drop the batch holding `offset` and everything after it; return bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position, header = found
        return self._truncate_at(position, header.base_offset)

    def _truncate_at(self, position: int, first_removed_offset: int) -> int:
        removed = self.size - position
        self.offset_index.truncate_to(first_removed_offset)
        self.time_index.truncate_to(first_removed_offset)
        self.txn_index.truncate_to(first_removed_offset)
        try:
            handle = self.file()  # held across the call: the cache may evict it meanwhile
            os.ftruncate(handle.fd, position)
        except OSError as e:
            raise KafkaStorageError(f"cannot truncate {self.log_path}: {e}") from e
        self.size = position
        self._synced_size = -1  # appends may grow it back to the old size with other bytes
        self.scan_tail()
        return removed

    def recover(self, epoch_for: Callable[[int], int] | None = None, *,
                allow_gaps: bool = False) -> RecoveryResult:
        """Validate every batch, rebuild both indexes, and truncate at the first bad or
        partial batch.

        A batch is good when its framing and CRC hold, its offsets continue the previous
        batch's exactly - or, with `allow_gaps` (a compacted log, or data that was flushed),
        at least follow them: compaction leaves gaps - and - given the leader-epoch cache's
        `epoch_for` - its partitionLeaderEpoch is the one the cache says wrote that offset.
        The last two guard the fields the CRC does not cover.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.txn_index.replace(())
        self.txn_index_stale = True
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset
        self.first_batch_timestamp = None
        self._bytes_since_index_entry = 0
        self._last_batch = None
        self._next_read = None
        next_offset = self.base_offset
        valid_end, reason = 0, None
        for position, header in self._framed_batches():
            if isinstance(header, str):
                reason = header
                break
            if ((header.base_offset != next_offset
                 and not (allow_gaps and header.base_offset > next_offset))
                    or header.last_offset_delta < 0
                    or header.last_offset - self.base_offset > MAX_RELATIVE_OFFSET):
                reason = (f"batch offsets {header.base_offset}..{header.last_offset} at "
                          f"position {position} do not follow offset {next_offset - 1}")
                break
            epoch = header.partition_leader_epoch
            known = epoch_for(header.base_offset) if epoch_for is not None else -1
            if epoch < -1 or (known >= 0 and epoch != known):  # known -1: below the cache
                reason = (f"batch at offset {header.base_offset} (position {position}) has "
                          f"leader epoch {epoch}, but the leader-epoch cache says {known}")
                break
            self._index_batch(position, header.last_offset, header.max_timestamp, header.size)
            next_offset = header.next_offset
            valid_end = position + header.size
            self._last_batch = (position, header)
        truncated = self.size - valid_end
        if truncated:
            try:
                handle = self.file()
                os.ftruncate(handle.fd, valid_end)
            except OSError as e:
                raise KafkaStorageError(f"cannot truncate {self.log_path}: {e}") from e
            self.size = valid_end
            self._synced_size = -1
        self.next_offset = next_offset
        return RecoveryResult(valid_end, truncated, next_offset, reason)

    def _framed_batches(self) -> Iterator[tuple[int, RecordBatchHeader | str]]:
        """(position, header) per CRC-valid batch, then (position, reason) at the first that
        is not. The file is mapped, so positions in messages are file positions."""
        if self.size == 0:
            return
        try:
            # the map holds a descriptor of its own (CPython dups it) until closed below
            handle = self.file()
            mapped = mmap.mmap(handle.fd, self.size, access=mmap.ACCESS_READ)
        except OSError as e:
            raise KafkaStorageError(f"cannot map {self.log_path}: {e}") from e
        view = memoryview(mapped)
        try:
            position = 0
            while position < self.size:
                try:
                    header = parse_header(view, position)
                    verify_crc(view, position, header)
                except KafkaError as e:  # bad magic or CRC, or a batch cut short
                    yield position, str(e)
                    return
                yield position, header
                position += header.size
        finally:
            view.release()
            mapped.close()

    def pread(self, position: int, length: int) -> bytes:
        """`length` bytes (fewer at the end of the file) from `position`."""
        try:
            handle = self.file()  # held across the call: another thread's eviction would close it
            return os.pread(handle.fd, length, position)
        except OSError as e:
            raise KafkaStorageError(f"cannot read {self.log_path}: {e}") from e

    # ---- lifecycle -------------------------------------------------------------------

    def flush(self) -> None:
        """fsync the log file (unless nothing changed since the last fsync) and write both
        indexes; the first flush of a segment created here also fsyncs its directory."""
        size = self.size  # what this fsync covers
        if size != self._synced_size:
            try:
                handle = self.file()  # held across the fsync (an eviction on another thread closes it)
                os.fsync(handle.fd)  # syncs the file, whichever descriptor wrote it
            except OSError as e:
                raise KafkaStorageError(f"cannot fsync {self.log_path}: {e}") from e
            self._synced_size = size
        if self._has_index_files():  # a segment with data has them, made now if not yet
            self.offset_index.flush()
            self.time_index.flush()
        new_txn_file = False
        if self._indexes_made:
            self.txn_index.flush(directory=False)  # a new file's entry: the directory fsync below
            new_txn_file = self.txn_index.new_file
        # after the index files exist; again for a `.txnindex` made since (a first ABORT marker)
        if (new_txn_file or not self._directory_synced) and not self._file_deferred:
            try:
                fsync_directory(self.directory)
            except OSError as e:
                raise KafkaStorageError(f"cannot fsync directory {self.directory}: {e}") from e
            self._directory_synced = True
            if new_txn_file:
                self.txn_index.new_file = False

    def prepare_sync(self) -> SegmentSync:
        """The event loop's half of a background flush (`flusher`): write the indexes' new
        entries (to the page cache: no fsync) and pin the log file's descriptor, so the flusher's
        thread does only the fsyncs and never reads this segment's in-memory state."""
        if self._has_index_files():
            self.offset_index.flush(fsync=False)
            self.time_index.flush(fsync=False)
        self.txn_index.flush(fsync=False)
        return SegmentSync(self.file(), self.log_path, self.size,
                           (self.offset_index.path, self.time_index.path, self.txn_index.path),
                           directory_owed=not self._directory_synced or self.txn_index.new_file)

    def mark_synced(self, size: int, *, directory: bool = False) -> None:
        """A background fsync covered the first `size` bytes (unless the file changed since);
        `directory`: it fsynced the segment's directory after its files too (every file made
        before its `prepare_sync`; one made after is made by a flush that fsyncs it itself)."""
        if self.size == size:
            self._synced_size = size
        if directory:
            self._directory_synced = True
            if self._indexes_made:
                self.txn_index.new_file = False

    def _has_index_files(self) -> bool:
        """Whether flushing or closing writes the index files. An empty segment (every partition
        of a new topic) has nothing to index: its index files are not created, which spares a
        broker hosting 10,000 empty partitions 20,000 file creations and fsyncs per clean stop.
        The loader takes an empty segment's missing indexes as empty (`log_loader`)."""
        return self.size > 0 or (self._indexes_made and (len(self.offset_index) > 0
                                                         or len(self.time_index) > 0))

    def mark_durable(self) -> None:
        """The file as opened is known to be on disk (a clean stop or a flush below the recovery
        point synced it): closing it needs no fsync (10,000 of them, once per restart)."""
        self._synced_size = self.size

    @property
    def owes_nothing(self) -> bool:
        """Empty, synced as it is and without an index entry: closing it would write and sync
        nothing (the one segment of an empty log, most of a 100,000-partition broker's logs).
        A segment truncated to empty is not (its size is unknown to be synced)."""
        return (self.size == 0 and self._synced_size == 0
                and (not self._indexes_made or (len(self.offset_index) == 0 and len(self.time_index) == 0
                                                and len(self.txn_index) == 0)))

    def release(self) -> None:
        """Let go of the file without writing anything (a clean stop of a segment that
        `owes_nothing`); the descriptor closes when no slice in flight holds it."""
        self._files.drop(self._key)

    def on_become_inactive(self) -> None:
        """On roll: make the time index's last entry the segment's largest timestamp."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    def close(self) -> None:
        """Write indexes and release the file (no fsync; see `flush`). The descriptor closes
        when no slice in flight holds it any more."""
        if self._has_index_files():
            self.offset_index.flush(fsync=False)
            self.time_index.flush(fsync=False)
        if self._indexes_made:
            self.txn_index.flush(fsync=False)
        self._files.drop(self._key)

    @property
    def is_cached(self) -> bool:
        """Whether the file is open in the cache now (tests, metrics)."""
        return self._key in self._files

    def mark_deleted(self) -> None:
        """Rename every file with `.deleted`. Slices in flight keep their descriptors; the
        cache entry goes (a read before the delete delay ends reopens the renamed file). An
        empty segment's index files are not created only to be renamed (`_has_index_files`)."""
        if self._has_index_files():
            self.offset_index.flush(fsync=False)
            self.time_index.flush(fsync=False)
        self.txn_index.flush(fsync=False)
        for index in (self.offset_index, self.time_index, self.txn_index):
            index.rename(index.path.with_name(index.path.name + DELETED_SUFFIX))
        deleted = self.log_path.with_name(self.log_path.name + DELETED_SUFFIX)
        if not self._file_deferred:  # a deferred file was never created: nothing to rename
            os.replace(self.log_path, deleted)
        self.log_path = deleted
        self._files.drop(self._key)

    def delete(self) -> None:
        """Release the descriptor (slices in flight keep theirs) and remove the files, on the
        caller's thread (a load, a close on the I/O pool; the event loop uses `removal`)."""
        removal = self.removal()
        remove_files(removal.paths, "")
        del removal  # the descriptor closes now unless a slice in flight holds it

    def removal(self) -> SegmentRemoval:
        """Leave the segment's files to a `SegmentRemover`: the cache's handle (closed after
        the unlinks) and the paths of the files that exist, the log file first."""
        paths = [self.log_path]
        if self._indexes_made:  # indexes never made have no files
            paths += (self.offset_index.path, self.time_index.path, self.txn_index.path)
            self.txn_index.new_file = False  # no file, no entry owed (as its `delete` says)
        return SegmentRemoval(tuple(paths), self._files.take(self._key))

