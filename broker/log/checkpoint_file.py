"""Kafka's checkpoint file format, written atomically.

    0            <- format version
    2            <- number of entries
    entry line   <- space-separated fields, one entry per line
    entry line

Writes go to `<name>.tmp`, are fsynced, renamed over the old file, and the directory is
fsynced, so a crash leaves either the old or the new checkpoint, never a mix. A checkpoint made
with `in_place=True` (a partition's leader-epoch checkpoint) is created in place when it does not
exist yet and fits one page: there is no old content to keep, and one write() of at most a page
leaves the file empty or whole, which the reader then takes for no entries or the entries (Kafka's
CheckpointReadBuffer reads an empty file as no entries too). Every leader of a new topic writes
one: a rename more per file was a fifth of a broker's CPU creating 10,000 partitions.

`CheckpointWriter` writes whole files on a thread of its own, off the event loop: a broker's
offset checkpoints at 100,000 partitions are three files of 100,000 lines per log dir, and
writing them on the loop stalled it 0.3-1.1 s per pass (issue 35; Kafka writes them on its
scheduler thread).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import Final, Generic, TypeVar

from broker.log.io_worker import IoWorker
from common.errors import KafkaStorageError

log = logging.getLogger(__name__)

T = TypeVar("T")
VERSION = 0
IN_PLACE_MAX_BYTES: Final = 4096  # bytes (one page): a new file written in place is empty or whole


class CorruptCheckpointError(KafkaStorageError):
    """A checkpoint file that does not parse; the message names file and line."""


def write_atomically(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Replace `path` with `data` so that a crash leaves the old or the new content.
    `sync=False` (Kafka's `write(entries, sync)`): the same rename, no fsync; a process crash
    still leaves the new content (the page cache survives it), a power loss may leave the old
    one until `sync_file` runs."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if sync:
            fsync_directory(path.parent)
    except OSError as e:
        raise KafkaStorageError(f"cannot write checkpoint {path}: {e}") from e


def create_in_place(path: Path, data: bytes) -> bool:
    """Create `path` holding `data` (at most IN_PLACE_MAX_BYTES) without a temporary file and a
    rename, not fsynced; False when it exists already (then nothing was written)."""
    if len(data) > IN_PLACE_MAX_BYTES:
        return False
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    except OSError as e:
        raise KafkaStorageError(f"cannot write checkpoint {path}: {e}") from e
    try:
        written = os.write(fd, data)
        if written != len(data):
            raise OSError(f"short write: {written} of {len(data)} bytes")
    except OSError as e:
        path.unlink(missing_ok=True)  # no torn checkpoint: the next write starts over
        raise KafkaStorageError(f"cannot write checkpoint {path}: {e}") from e
    finally:
        os.close(fd)
    return True


def sync_file(path: Path) -> None:
    """Make a file written with `sync=False` durable: its content, then its directory entry."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_directory(path.parent)
    except OSError as e:
        raise KafkaStorageError(f"cannot sync checkpoint {path}: {e}") from e


def fsync_directory(directory: Path) -> None:
    """Make a rename or file creation in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def entry_line(fields: Sequence[object]) -> str:
    """One entry's line: its fields, space-separated."""
    return " ".join(str(f) for f in fields)


def checkpoint_data(lines: Sequence[str]) -> bytes:
    """A checkpoint file's content: the version, the entry count, the entries' lines."""
    return ("\n".join([str(VERSION), str(len(lines)), *lines]) + "\n").encode()


class CheckpointFile(Generic[T]):
    """A checkpoint of entries of type T, converted by `to_fields` / `from_fields`."""

    def __init__(self, path: Path, to_fields: Callable[[T], Sequence[object]],
                 from_fields: Callable[[list[str]], T], *, in_place: bool = False) -> None:
        """`in_place`: a write that creates the file does so in place (the module's doc)."""
        self.path = path
        self._to_fields = to_fields
        self._from_fields = from_fields
        self._in_place = in_place

    def write(self, entries: Iterable[T], *, sync: bool = True) -> None:
        """Replace the file with `entries` (`sync=False`: see `write_atomically`)."""
        data = checkpoint_data([entry_line(self._to_fields(e)) for e in entries])
        if self._in_place and create_in_place(self.path, data):
            if sync:
                self.sync()
            return
        write_atomically(self.path, data, sync=sync)

    def sync(self) -> None:
        """Make the last `write(..., sync=False)` durable."""
        sync_file(self.path)

    def read(self) -> list[T]:
        """The entries, or [] when the file does not exist; CorruptCheckpointError otherwise."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError) as e:
            raise CorruptCheckpointError(f"cannot read checkpoint {self.path}: {e}") from e
        lines = text.splitlines()
        if not lines and self._in_place:
            return []  # created in place, and the process stopped before its one write
        if len(lines) < 2:
            raise CorruptCheckpointError(f"checkpoint {self.path} is truncated: no header")
        if lines[0].strip() != str(VERSION):
            raise CorruptCheckpointError(
                f"checkpoint {self.path} line 1: unknown version {lines[0]!r}")
        try:
            count = int(lines[1])
        except ValueError:
            raise CorruptCheckpointError(
                f"checkpoint {self.path} line 2: bad entry count {lines[1]!r}") from None
        if count != len(lines) - 2:
            raise CorruptCheckpointError(
                f"checkpoint {self.path} line 2: says {count} entries but holds "
                f"{len(lines) - 2}")
        entries = []
        for number, line in enumerate(lines[2:], start=3):
            try:
                entries.append(self._from_fields(line.split()))
            except (ValueError, IndexError) as e:
                raise CorruptCheckpointError(
                    f"checkpoint {self.path} line {number}: cannot parse {line!r} ({e})") from None
        return entries


class CheckpointWriter:
    """Writes checkpoint files on one thread of its own, in the order asked: at most one write
    of a file in flight (one thread: never two writers on one `.tmp`), and a write asked for
    while one of the same file is queued replaces it (the newest content wins, and never lands
    before an older one). Thread-safe `submit`; the queue holds at most one write per file.

    One thread, not the broker's I/O pool: the event loop waits for that pool's runs (log
    creation, new leaderships' epoch syncs, closing logs), and a 100,000-line file queued ahead
    of them would stall the loop as before; rendering the lines is Python under the GIL, so a
    thread per file would not write them sooner.
    """

    def __init__(self, write: Callable[[Path, bytes], None] = write_atomically) -> None:
        """`write`: how a file is written (tests stand in for the disk)."""
        self._write = write
        self._lock = threading.Lock()
        # per file, its next write (the content's renderer and its waiters' future), not started
        self._queued: dict[Path, tuple[Callable[[], bytes], Future[None]]] = {}
        self._worker = IoWorker("checkpoint-writer")  # its thread starts at the first write

    def submit(self, path: Path, render: Callable[[], bytes]) -> Future[None]:
        """Write `path` with `render()`'s bytes, after the writes asked for before. `render`
        runs on the writer's thread: it must read only what no one changes (a snapshot). The
        future ends once the file is written, or with the write's error (also logged here); a
        write of `path` still queued is replaced, and its future is this one's."""
        with self._lock:
            queued = self._queued.get(path)
            if queued is not None:
                self._queued[path] = (render, queued[1])
                return queued[1]
            future: Future[None] = Future()
            # running from the start: one waiter's cancel (asyncio.wrap_future's) must not take
            # the outcome from the others, nor the file its owed write
            future.set_running_or_notify_cancel()
            self._queued[path] = (render, future)
            # (the job reports its own failure to `future`'s waiters; `what` covers a bug in it)
            self._worker.submit(partial(self._write_next, path), what=f"writing checkpoint {path}")
        return future

    def _write_next(self, path: Path) -> None:
        with self._lock:  # from here on, a write asked for is queued anew
            render, future = self._queued.pop(path)
        try:
            self._write(path, render())
        except BaseException as e:  # noqa: BLE001 - every waiter hears it; the thread goes on
            if isinstance(e, (KafkaStorageError, OSError)):
                log.error("%s; it keeps its previous content until written again", e)
            else:
                log.exception("Writing checkpoint %s failed", path)
            future.set_exception(e)
        else:
            future.set_result(None)

    def close(self, *, wait: bool = True) -> None:
        """Stop the thread once the writes asked for have ended (at most io_worker.CLOSE_WAIT_S;
        `wait=False`: without waiting for them, when a bounded wait for them ran out)."""
        if wait:
            self._worker.close()
        else:
            self._worker.close(0)


def all_done(futures: Sequence[Future[None]]) -> Future[None]:
    """A future that ends when all of `futures` (`CheckpointWriter`'s: never cancelled) have,
    with the first failed one's error in the order of `futures`."""
    combined: Future[None] = Future()
    combined.set_running_or_notify_cancel()  # as the writer's: a waiter's cancel is its own
    if not futures:
        combined.set_result(None)
        return combined
    lock, left = threading.Lock(), [len(futures)]

    def one_done(_future: Future[None]) -> None:
        with lock:
            left[0] -= 1
            if left[0]:
                return
        for future in futures:  # bounded by `futures`
            error = future.exception()
            if error is not None:
                combined.set_exception(error)
                return
        combined.set_result(None)

    for future in futures:
        future.add_done_callback(one_done)
    return combined
