"""Crash recovery: torn writes, garbage and bit flips at random points, damaged indexes.

A crash is simulated by copying the partition directory while the log is open (the
page cache holds every appended byte, but the indexes, kept in memory until a flush, are
stale or missing, as after a real crash), then damaging the copy and reopening it
without the clean-shutdown marker.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.log.partition_log import PartitionLog
from broker.log.segment import LogSegment
from common.record_batch import CompressionType
from common.log_config import LogConfig
from tests.log_helpers import NOW, batch, open_log, read_all, values

SMALL = LogConfig(segment_bytes=1200, index_interval_bytes=150)


@dataclass(frozen=True)
class Acked:
    """One acknowledged batch and where it sits on disk."""

    first: int
    last: int
    segment: int  # base offset of its segment
    end_position: int  # position just past it in the segment file


def build(directory: Path, batches: int, seed: int) -> tuple[PartitionLog, list[Acked]]:
    log = open_log(directory, SMALL)
    acked = []
    for i in range(batches):
        codec = list(CompressionType)[(seed + i) % 5]
        info = log.append(batch(1 + (seed * 7 + i) % 4, tag=f"b{i}", compression=codec),
                          now_ms=NOW, leader_epoch=i // 6)
        segment = log.active_segment
        acked.append(Acked(info.first_offset, info.last_offset, segment.base_offset,
                           segment.size))
    return log, acked


def crash_copy(log: PartitionLog, target: Path) -> Path:
    """The partition directory as a crash would leave it (no marker, indexes unflushed)."""
    copy = target / log.directory.name
    shutil.copytree(log.directory, copy)
    return copy


def segment_file(directory: Path, base: int) -> Path:
    return directory / f"{base:020d}.log"


def survivors(acked: list[Acked], segment: int, position: int) -> list[Acked]:
    """Batches entirely before the damage at (segment, position)."""
    return [a for a in acked if a.segment < segment
            or (a.segment == segment and a.end_position <= position)]


FAULTS = ("torn", "garbage", "flip", "append")


@given(seed=st.integers(0, 10_000), fault=st.sampled_from(FAULTS), data=st.data())
def test_recovery_keeps_every_batch_before_the_fault_and_nothing_after(
        tmp_path_factory: pytest.TempPathFactory, seed: int, fault: str,
        data: st.DataObject) -> None:
    work = tmp_path_factory.mktemp("crash")
    log, acked = build(work / "live", 24, seed)
    crashed = crash_copy(log, work / "crashed")
    log.close()
    bases = sorted({a.segment for a in acked})
    segment = data.draw(st.sampled_from(bases), label="segment")
    path = segment_file(crashed, segment)
    size = path.stat().st_size
    raw = bytearray(path.read_bytes())
    if fault == "append":
        position = size
        raw += data.draw(st.binary(min_size=1, max_size=200), label="garbage")
    else:
        position = data.draw(st.integers(0, size - 1), label="position")
        if fault == "torn":
            del raw[position:]
        elif fault == "flip":
            raw[position] ^= data.draw(st.integers(1, 255), label="mask")
        else:
            junk = data.draw(st.binary(min_size=1, max_size=300), label="garbage")
            junk = bytes(b ^ 0x5A if i == 0 and b == raw[position] else b
                         for i, b in enumerate(junk))
            raw[position : position + len(junk)] = junk
    path.write_bytes(bytes(raw))
    # the damage point is "the first bad byte"; for a torn or appended tail it is the end
    kept = survivors(acked, segment, position)

    recovered = PartitionLog(crashed, SMALL, now_ms=NOW, recovery_point=0)
    expected_end = kept[-1].last + 1 if kept else 0
    assert recovered.log_end_offset == expected_end
    got = [(h.base_offset, h.last_offset) for h, _ in read_all(recovered)]
    assert got == [(a.first, a.last) for a in kept]
    for header, data_bytes in read_all(recovered):
        assert header.partition_leader_epoch == recovered.leader_epoch_cache.epoch_for(
            header.base_offset)
    # the log works on: indexes were rebuilt, and appends continue at the end
    assert recovered.append(batch(2), now_ms=NOW, leader_epoch=9).first_offset == expected_end
    recovered.close()


def test_recovery_logs_exactly_what_it_cut(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log, acked = build(tmp_path / "live", 24, 1)
    crashed = crash_copy(log, tmp_path / "crashed")
    log.close()
    first_segment = acked[0].segment
    cut = acked[2].end_position + 5
    path = segment_file(crashed, first_segment)
    path.write_bytes(path.read_bytes()[:cut])
    later = sorted({a.segment for a in acked if a.segment != first_segment})
    with caplog.at_level(logging.WARNING):
        recovered = PartitionLog(crashed, SMALL, now_ms=NOW)
    assert recovered.log_end_offset == acked[2].last + 1
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"Truncated 5 bytes at position {acked[2].end_position}" in m for m in messages)
    for base in later:
        assert any(f"Deleting segment {base:020d}.log after the truncation point" in m
                   for m in messages)
    assert not any(segment_file(crashed, base).exists() for base in later)


def test_clean_shutdown_skips_the_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log, _ = build(tmp_path, 24, 2)
    end = log.log_end_offset
    log.close()

    def no_recovery(self: LogSegment, epoch_for: object = None) -> None:
        raise AssertionError("a clean log must not be rescanned")

    monkeypatch.setattr(LogSegment, "recover", no_recovery)
    reopened = open_log(tmp_path, SMALL, recovery_point=end, had_clean_shutdown=True)
    assert reopened.log_end_offset == end


def test_segments_below_the_recovery_point_are_not_rescanned(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log, acked = build(tmp_path, 24, 3)
    log.close()
    scanned = []
    original = LogSegment.recover

    def spy(self: LogSegment, epoch_for: object = None, **kwargs: object) -> object:
        scanned.append(self.base_offset)
        return original(self, epoch_for, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(LogSegment, "recover", spy)
    last_base = acked[-1].segment
    open_log(tmp_path, SMALL, recovery_point=last_base, had_clean_shutdown=False)
    assert scanned == [last_base]


@pytest.mark.parametrize("damage", ["missing", "garbage", "partial"])
def test_damaged_index_is_rebuilt(tmp_path: Path, damage: str,
                                  caplog: pytest.LogCaptureFixture) -> None:
    log, acked = build(tmp_path, 24, 4)
    before = values(log)
    log.close()
    index = tmp_path / "topic-0" / f"{acked[0].segment:020d}.index"
    if damage == "missing":
        index.unlink()
    elif damage == "garbage":
        index.write_bytes(b"\xff" * 16)
    else:
        index.write_bytes(index.read_bytes() + b"\x00\x01")
    with caplog.at_level(logging.WARNING):
        reopened = open_log(tmp_path, SMALL, recovery_point=10**9, had_clean_shutdown=True)
    assert any("Rebuilding the indexes" in r.getMessage() for r in caplog.records)
    assert values(reopened) == before
    for offset in range(reopened.log_end_offset):
        assert reopened.read(offset, 1).length > 0


def test_leftover_files_are_removed(tmp_path: Path) -> None:
    log, _ = build(tmp_path, 8, 5)
    log.close()
    partition = tmp_path / "topic-0"
    for name in ("00000000000000000001.log.deleted", "leader-epoch-checkpoint.tmp",
                 f"{99:020d}.index"):
        (partition / name).write_bytes(b"x")
    open_log(tmp_path, SMALL, had_clean_shutdown=True)
    assert not (partition / "00000000000000000001.log.deleted").exists()
    assert not (partition / "leader-epoch-checkpoint.tmp").exists()
    assert not (partition / f"{99:020d}.index").exists()


def test_unclean_reopen_without_damage_keeps_everything(tmp_path: Path) -> None:
    log, acked = build(tmp_path / "live", 30, 6)
    crashed = crash_copy(log, tmp_path / "crashed")
    expected = values(log)
    log.close()
    recovered = PartitionLog(crashed, SMALL, now_ms=NOW)
    assert values(recovered) == expected
    assert recovered.recovery_point == recovered.log_end_offset == acked[-1].last + 1


def test_an_empty_log_after_a_crash_is_not_rescanned_and_drops_stale_index_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log, acked = build(tmp_path / "full", 24, 6)
    empty = open_log(tmp_path / "empty", SMALL)
    partition = empty.directory
    for suffix in (".index", ".timeindex", ".txnindex"):  # what a crash mid-truncation could leave
        (partition / f"{0:020d}{suffix}").write_bytes(b"\x00" * 24)
    crashed = crash_copy(log, tmp_path)  # a log with data: its tail segment is still rescanned
    scanned: list[int] = []
    original = LogSegment.recover

    def spy(self: LogSegment, epoch_for: object = None, **kwargs: object) -> object:
        scanned.append(self.base_offset)
        return original(self, epoch_for, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(LogSegment, "recover", spy)
    reopened = open_log(tmp_path / "empty", SMALL, had_clean_shutdown=False)
    assert scanned == [] and reopened.log_end_offset == 0
    assert sorted(p.name for p in partition.iterdir() if p.suffix != ".log") == []
    reopened.append(batch(2), now_ms=NOW, leader_epoch=0)
    assert [v for _, v in values(reopened)] == [b"v-0", b"v-1"]
    full = PartitionLog(crashed, SMALL, now_ms=NOW, had_clean_shutdown=False,
                        recovery_point=acked[-1].segment)
    assert scanned == [acked[-1].segment] and full.log_end_offset == acked[-1].last + 1
