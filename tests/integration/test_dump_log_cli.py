"""`tidelog dump-log` as an operator runs it: the real console entry point in a subprocess,
over segment and index files that a real PartitionLog wrote (several segments, every batch
indexed, every codec, record headers), then over the same files damaged by hand."""

from __future__ import annotations

import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker.log.partition_log import PartitionLog
from common.record_batch import CompressionType
from common.records import build_batch
from common.log_config import LogConfig

NOW = 1_700_000_000_000
CLI_TIMEOUT_S = 30
INDEX_ENTRY = struct.Struct(">ii")
# Small segments so the log rolls several times; index_interval_bytes=0 indexes every batch
# after a segment's first (Kafka indexes a batch once more than the interval was written).
CONFIG = LogConfig(segment_bytes=700, index_interval_bytes=0)
CODECS = [CompressionType.NONE, CompressionType.GZIP, CompressionType.NONE,
          CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD]
BATCHES = 14
RECORDS_PER_BATCH = 3
RECORDS = BATCHES * RECORDS_PER_BATCH


def payload(offset: int) -> str:
    return f"payload-{offset:04d}"


@dataclass(frozen=True)
class WrittenLog:
    directory: Path
    logs: list[Path]
    indexes: list[Path]
    time_indexes: list[Path]


def write_log(directory: Path) -> WrittenLog:
    """Append BATCHES batches (offsets 0..RECORDS-1) through PartitionLog, then close it."""
    partition_log = PartitionLog(directory / "orders-0", CONFIG, now_ms=NOW)
    for b in range(BATCHES):
        first = b * RECORDS_PER_BATCH
        offsets = range(first, first + RECORDS_PER_BATCH)
        records = [(f"key-{o}".encode(), payload(o).encode()) for o in offsets]
        headers = [[("trace-id", f"t{o}".encode()), ("empty", None)] for o in offsets]
        data = build_batch(records, headers=headers, timestamps=[NOW + o for o in offsets],
                           compression=CODECS[b % len(CODECS)])
        info = partition_log.append(data, now_ms=NOW, leader_epoch=3)
        assert info.first_offset == first
    partition_log.close()
    path = directory / "orders-0"
    return WrittenLog(path, sorted(path.glob("*.log")), sorted(path.glob("*.index")),
                      sorted(path.glob("*.timeindex")))


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> WrittenLog:
    return write_log(tmp_path_factory.mktemp("dump-log"))


@pytest.fixture
def fresh(tmp_path: Path) -> WrittenLog:
    """A log of its own, for tests that damage files."""
    return write_log(tmp_path)


def dump_log(*args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidelog", "dump-log", *map(str, args)],
        capture_output=True, text=True, timeout=CLI_TIMEOUT_S, cwd=cwd, check=False)


def index_entries(path: Path, base_offset: int) -> list[tuple[int, int]]:
    return [(base_offset + rel, pos) for rel, pos in INDEX_ENTRY.iter_unpack(path.read_bytes())]


def test_the_log_has_several_segments_with_index_entries(written: WrittenLog) -> None:
    assert len(written.logs) >= 3
    assert len(written.indexes) == len(written.time_indexes) == len(written.logs)
    assert all(len(index_entries(p, int(p.stem))) >= 1 for p in written.indexes[:-1])


def test_print_data_log_shows_every_offset_and_payload(written: WrittenLog) -> None:
    result = dump_log("--print-data-log", *written.logs, cwd=written.directory)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    records = [line for line in lines if line.startswith("| offset: ")]
    assert len(records) == RECORDS
    for offset, line in enumerate(records):
        assert line.startswith(f"| offset: {offset} ")
        assert f"key: key-{offset} payload: {payload(offset)}" in line
        assert "headerKeys: [trace-id,empty]" in line
    batches = [line for line in lines if line.startswith("baseOffset: ")]
    assert len(batches) == BATCHES
    for b, line in enumerate(batches):
        first = b * RECORDS_PER_BATCH
        assert line.startswith(f"baseOffset: {first} lastOffset: {first + 2} count: 3 ")
        assert "partitionLeaderEpoch: 3 " in line
        assert f"compresscodec: {CODECS[b % len(CODECS)].name} " in line
        assert line.endswith("isvalid: true")
    for path in written.logs:
        assert f"Dumping {path}" in lines
        assert f"Log starting offset: {int(path.stem)}" in lines


def test_dump_without_data_log_lists_batches_only(written: WrittenLog) -> None:
    result = dump_log(written.logs[0], cwd=written.directory)
    assert result.returncode == 0, result.stderr
    assert "| offset:" not in result.stdout
    assert result.stdout.count("baseOffset: ") >= 1


def test_verify_index_accepts_what_the_log_wrote(written: WrittenLog) -> None:
    result = dump_log("--verify-index", *written.indexes, *written.time_indexes,
                      cwd=written.directory)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for path in written.indexes:
        for offset, position in index_entries(path, int(path.stem)):
            assert f"offset: {offset} position: {position}" in lines
    assert any(line.startswith("timestamp: ") for line in lines)


def overwrite_entry(path: Path, number: int, *, offset: int | None = None,
                    position: int | None = None) -> tuple[int, int]:
    """Change entry `number` of an offset index in place; return its new (offset, position)."""
    base = int(path.stem)
    data = bytearray(path.read_bytes())
    old_rel, old_pos = INDEX_ENTRY.unpack_from(data, number * INDEX_ENTRY.size)
    rel = old_rel if offset is None else offset - base
    pos = old_pos if position is None else position
    INDEX_ENTRY.pack_into(data, number * INDEX_ENTRY.size, rel, pos)
    path.write_bytes(bytes(data))
    return base + rel, pos


def pick_index(written: WrittenLog) -> tuple[Path, list[tuple[int, int]]]:
    """An index with at least two entries, and its entries."""
    for path in written.indexes:
        entries = index_entries(path, int(path.stem))
        if len(entries) >= 2:
            return path, entries
    raise AssertionError("no segment has two index entries")


@pytest.mark.parametrize(("damage", "expected"), [
    pytest.param(lambda e: {"position": e[1][1] + 1}, "which is not the start of a batch",
                 id="position-inside-a-batch"),
    pytest.param(lambda e: {"position": 10**6}, "past the end of the log's",
                 id="position-past-the-log"),
    pytest.param(lambda e: {"offset": e[1][0] - 1}, "but the batch there is baseOffset",
                 id="offset-not-the-batch-last-offset"),
    pytest.param(lambda e: {"offset": e[0][0] - 1, "position": e[0][1]},
                 "entries must strictly increase", id="offsets-out-of-order"),
])
def test_verify_index_names_the_bad_entry(fresh: WrittenLog, damage, expected: str) -> None:
    path, entries = pick_index(fresh)
    offset, position = overwrite_entry(path, 1, **damage(entries))
    result = dump_log("--verify-index", path, cwd=fresh.directory)
    assert result.returncode != 0
    bad = [line for line in result.stdout.splitlines()
           if line.startswith(f"Index offset {offset} points to position {position}")]
    assert bad and expected in bad[0], result.stdout


def test_verify_index_fails_without_the_sibling_log(fresh: WrittenLog) -> None:
    path, _ = pick_index(fresh)
    path.with_suffix(".log").unlink()
    result = dump_log("--verify-index", path, cwd=fresh.directory)
    assert result.returncode != 0
    assert "Cannot verify" in result.stderr


def test_garbage_after_the_last_batch_is_reported(fresh: WrittenLog) -> None:
    path = fresh.logs[0]
    good_size = path.stat().st_size
    garbage = b"\x00\x00\x00\x00\x00\x00\x00\x2a\x00\x00\x00\x05not a record batch"
    with path.open("ab") as f:
        f.write(garbage)
    result = dump_log("--print-data-log", path, cwd=fresh.directory)
    assert result.returncode != 0
    lines = result.stdout.splitlines()
    assert f"Found {len(garbage)} invalid bytes at the end of {path.name}" in lines
    invalid = [line for line in lines if line.startswith("Invalid batch:")]
    assert len(invalid) == 1
    assert all("isvalid: true" in line for line in lines if line.startswith("baseOffset: "))
    assert good_size > 0 and "| offset: 0 " in result.stdout  # the good batches still print


def test_zero_filled_tail_is_called_out(fresh: WrittenLog) -> None:
    path = fresh.logs[0]
    with path.open("ab") as f:
        f.write(bytes(100))
    result = dump_log(path, cwd=fresh.directory)
    assert result.returncode != 0
    assert "all zero" in result.stdout
    assert f"Found 100 invalid bytes at the end of {path.name}" in result.stdout


def test_one_bad_file_fails_the_run_but_all_are_dumped(fresh: WrittenLog) -> None:
    with fresh.logs[0].open("ab") as f:
        f.write(b"\x01garbage")
    result = dump_log(*fresh.logs, cwd=fresh.directory)
    assert result.returncode != 0
    for path in fresh.logs:
        assert f"Dumping {path}" in result.stdout
