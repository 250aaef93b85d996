"""broker/log/segment_files.py: the broker's bounded cache of open segment files, alone and
under real logs (eviction order, the bound, reopen keeping the data, a slice outliving its
segment's eviction or deletion, entries dropped on delete and rename)."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.log.log_manager import LogManager
from broker.log.partition_log import PartitionLog
from broker.log.segment import LogSegment
from broker.log.segment_files import SegmentFileCache, SegmentHandle, new_key
from common.topic_partition import TopicPartition
from common.errors import KafkaStorageError
from common.log_config import LogConfig
from tests.log_helpers import NOW, batch, open_log, values


def is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError as e:
        assert e.errno == errno.EBADF
        return False
    return True


def open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def files(tmp_path: Path) -> list[Path]:
    paths = [tmp_path / f"f{i}" for i in range(4)]
    for i, path in enumerate(paths):
        path.write_bytes(f"file {i}".encode())
    return paths


def opened(path: Path) -> SegmentHandle:
    return SegmentHandle(os.open(path, os.O_RDWR | os.O_APPEND))


def test_least_recently_used_is_evicted_and_closed(files: list[Path]) -> None:
    cache = SegmentFileCache(2)
    keys = [new_key() for _ in files]
    fds = []
    for key, path in zip(keys[:2], files):
        handle = opened(path)
        fds.append(handle.fd)
        cache.add(key, handle)
    del handle
    cache.get(keys[0], files[0])  # key 0 is now the most recent: key 1 goes first
    cache.add(keys[2], opened(files[2]))
    assert keys[1] not in cache and keys[0] in cache and keys[2] in cache
    assert not is_open(fds[1]) and is_open(fds[0])
    assert cache.stats.evictions == 1 and cache.stats.opens == 3 and cache.stats.reopens == 0


def test_get_reopens_an_evicted_file_by_its_path(files: list[Path]) -> None:
    cache = SegmentFileCache(1)
    first, second = new_key(), new_key()
    cache.add(first, opened(files[0]))
    cache.add(second, opened(files[1]))
    handle = cache.get(first, files[0])
    assert os.pread(handle.fd, 100, 0) == b"file 0"
    assert len(cache) == 1 and cache.stats.reopens == 1 and cache.stats.evictions == 2


def test_a_handle_outlives_its_eviction(files: list[Path]) -> None:
    """The descriptor of an evicted handle stays open while referenced, closes after."""
    cache = SegmentFileCache(1)
    key = new_key()
    cache.add(key, opened(files[0]))
    held = cache.get(key, files[0])
    cache.add(new_key(), opened(files[1]))  # evicts `key`
    assert key not in cache and is_open(held.fd)
    assert os.pread(held.fd, 100, 0) == b"file 0"
    fd = held.fd
    del held
    assert not is_open(fd)


def test_drop_and_missing_file(files: list[Path], tmp_path: Path) -> None:
    cache = SegmentFileCache(4)
    key = new_key()
    cache.add(key, opened(files[0]))
    cache.drop(key)
    cache.drop(key)  # twice is harmless (close, then delete)
    assert len(cache) == 0
    with pytest.raises(KafkaStorageError, match="cannot reopen segment"):
        cache.get(key, tmp_path / "gone")


@pytest.mark.parametrize("bound", [0, -1])
def test_a_cache_holds_at_least_one_file(bound: int) -> None:
    with pytest.raises(ValueError, match="at least one file"):
        SegmentFileCache(bound)


def test_resize_evicts_at_once(files: list[Path]) -> None:
    cache = SegmentFileCache(4)
    for path in files:
        cache.add(new_key(), opened(path))
    cache.resize(1)
    assert len(cache) == 1 and cache.stats.evictions == 3


# ---- under real logs ----------------------------------------------------------------------


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[list[PartitionLog]]:
    """Three logs sharing a cache of one file."""
    cache = SegmentFileCache(1)
    made = [PartitionLog(tmp_path / f"t-{i}", LogConfig(), now_ms=NOW, files=cache) for i in range(3)]
    yield made
    for log in made:
        log.close()


def test_logs_sharing_one_file_keep_every_record(logs: list[PartitionLog],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    def no_recovery(*_: object, **__: object) -> None:
        raise AssertionError("a reopen must not recover the segment")

    monkeypatch.setattr(LogSegment, "recover", no_recovery)
    for round_ in range(3):
        for i, log in enumerate(logs):
            log.append(batch(2, tag=f"p{i}r{round_}"), now_ms=NOW)
    cache = logs[0].files
    assert len(cache) == 1 and cache.stats.reopens >= 6
    for i, log in enumerate(logs):
        assert log.log_end_offset == 6
        assert [v for _, v in values(log)] == [f"p{i}r{r}-{j}".encode() for r in range(3) for j in range(2)]


def test_appends_to_one_log_do_not_reopen(tmp_path: Path) -> None:
    log = open_log(tmp_path, files=SegmentFileCache(1))
    try:
        for i in range(50):
            log.append(batch(1, tag=f"v{i}"), now_ms=NOW)
        assert log.files.stats.reopens == 0
    finally:
        log.close()


def test_a_slice_outliving_eviction_reads_its_own_bytes(logs: list[PartitionLog], tmp_path: Path) -> None:
    a, b, _ = logs
    a.append(batch(3, tag="a"), now_ms=NOW)
    data = a.read(0, 1 << 20)
    expected = data.read_bytes()
    b.append(batch(3, tag="b"), now_ms=NOW)  # evicts a's segment
    assert not a.active_segment.is_cached
    assert data.read_bytes() == expected  # its segment's file, reopened
    assert b.read(0, 1 << 20).read_bytes() != expected


class EvictedAtOnce(SegmentFileCache):
    """A cache whose every handle is evicted the moment it is handed out: what another thread's
    insert (the I/O pool loading logs, the flusher) can do between `get` and the system call."""

    def get(self, key: int, path: Path) -> SegmentHandle:
        handle = super().get(key, path)
        self.drop(key)
        return handle


def test_a_segment_holds_its_handle_across_each_system_call(tmp_path: Path) -> None:
    """fsync, pread, the recovery scan and ftruncate each keep the handle they use: taking
    `.fd` from a handle nobody holds closes the descriptor before the call (EBADF at best,
    another file's bytes once the number is reused). Failed ~1 in 20 runs of
    test_the_bound_holds_over_many_logs as an EBADF fsync on the flusher thread."""
    log = open_log(tmp_path, files=EvictedAtOnce(10))
    try:
        log.append(batch(3, tag="a"), now_ms=NOW)
        log.append(batch(2, tag="b"), now_ms=NOW)
        segment = log.active_segment
        segment.flush()
        on_disk = segment.log_path.read_bytes()
        assert segment.pread(0, 64) == on_disk[:64]
        assert segment.recover().truncated_bytes == 0
        assert segment.truncate_to(3) > 0
        assert segment.size < len(on_disk) and segment.pread(0, segment.size) == on_disk[:segment.size]
    finally:
        log.close()


def test_a_send_holds_its_descriptor_through_eviction_and_deletion(tmp_path: Path) -> None:
    """What slice_sender does: take the slice's file, then send across awaits. Meanwhile the
    cache evicts the segment and retention deletes it; descriptors opened meanwhile must not
    reuse its number, and the send still reads the slice's own bytes."""
    cache = SegmentFileCache(1)
    log = open_log(tmp_path, LogConfig(file_delete_delay_ms=0), files=cache)
    other = PartitionLog(tmp_path / "other-0", LogConfig(), now_ms=NOW, files=cache)
    try:
        log.append(batch(3, tag="old"), now_ms=NOW)
        data = log.read(0, 1 << 20)
        expected = data.read_bytes()
        sending = data.file()  # held by the send
        segment = log.active_segment
        log.truncate_fully_and_start_at(100, now_ms=NOW)  # renamed, then deleted at once
        log.reap_deleted_segments(NOW)
        other.append(batch(3, tag="other"), now_ms=NOW)  # the cache now holds another file
        assert not segment.is_cached and not segment.log_path.exists()
        fresh = [os.open(tmp_path / "other-0", os.O_RDONLY) for _ in range(8)]
        try:
            assert sending.fd not in fresh
            assert os.pread(sending.fd, data.length, data.position) == expected
        finally:
            for fd in fresh:
                os.close(fd)
        fd = sending.fd
        del sending
        assert not is_open(fd)
        with pytest.raises(KafkaStorageError, match="cannot reopen segment"):
            data.read_bytes()  # after the delete: an error, never another file's bytes
    finally:
        other.close()
        log.close()


def test_slices_waiting_to_be_sent_hold_no_descriptor(tmp_path: Path) -> None:
    """A fetch response of 40 partitions with data, the cache holding 5 files: the slices
    take their files when sent, one at a time, not when read."""
    before = open_files()
    cache = SegmentFileCache(5)
    logs = [PartitionLog(tmp_path / f"t-{i}", LogConfig(), now_ms=NOW, files=cache) for i in range(40)]
    try:
        for i, log in enumerate(logs):
            log.append(batch(1, tag=f"v{i}"), now_ms=NOW)
        response = [log.read(0, 1 << 20) for log in logs]
        assert open_files() - before <= 5
        assert [r.read_bytes() for r in response] == [log.read(0, 1 << 20).read_bytes() for log in logs]
    finally:
        for log in logs:
            log.close()


def test_rename_and_delete_drop_the_entry(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogConfig(file_delete_delay_ms=60_000), files=SegmentFileCache(8))
    try:
        log.append(batch(2), now_ms=NOW)
        log.roll(NOW)
        log.append(batch(2), now_ms=NOW)
        old = log.segments[0]
        assert old.is_cached
        log.truncate_to(1)  # the second segment goes (and the first one's batch)
        gone = [s for _, s in log._pending_deletes]
        assert gone and not any(s.is_cached for s in gone)
        assert all(s.log_path.name.endswith(".deleted") for s in gone)
        assert gone[0].pread(0, 1)  # a late read reopens the renamed file
        gone[0].delete()
        assert not gone[0].is_cached
        log.close()
        assert not old.is_cached and len(log.files) == 0
    finally:
        log.close()


def test_the_bound_holds_over_many_logs(tmp_path: Path) -> None:
    before = open_files()
    manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW, open_files_max=5)
    try:
        tps = [TopicPartition("t", i) for i in range(40)]
        assert manager.create_logs(tps, now_ms=NOW) == {}
        for i, tp in enumerate(tps):
            manager.logs[tp].append(batch(1, tag=f"v{i}"), now_ms=NOW)
            assert len(manager.files) <= 5
        # the lock file, the I/O pool's and this test's are few; 40 segments would be 40
        assert open_files() - before <= 5 + 3
        assert [v for _, v in values(manager.logs[tps[0]])] == [b"v0-0"]
    finally:
        manager.shutdown()


def test_the_open_file_limit_caps_the_setting(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    manager = LogManager([tmp_path / "logs"], LogConfig(), now_ms=NOW, open_files_max=10_000,
                         open_file_limit=8)
    try:
        assert manager.files.max_open == 4
        manager.create_logs([TopicPartition("t", i) for i in range(6)], now_ms=NOW)
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert warnings == ["This broker hosts 5 partitions but keeps at most 4 segment files open "
                            "(log.open.files.max 10000, open-file limit 8): the least recently used "
                            "are closed and reopened on use; raise the hard open-file limit "
                            "(ulimit -Hn, LimitNOFILE) to at least 10"]
    finally:
        manager.shutdown()
