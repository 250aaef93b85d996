"""Tests for broker/dump_log.py through `tidelog dump-log`: hand-written segment and index
files in tmp_path, checked line by line."""

from __future__ import annotations

import importlib
import struct
import sys
import types
from collections.abc import Callable
from pathlib import Path

import pytest

from common.record_batch import (
    CRC_POS,
    CompressionType,
    TimestampType,
    compute_crc,
    parse_header,
    set_base_offset,
)
from common.records import build_batch
from tidelog import cli

Dump = Callable[..., tuple[int, list[str], str]]

BASE = 100
B1 = build_batch([(b"k1", b"hello"), (None, b"world")], timestamps=[1_000, 1_001])
B2 = build_batch(
    [(b"key", b"\xffbad")],
    timestamps=[1_005],
    producer_id=7,
    producer_epoch=1,
    base_sequence=3,
    partition_leader_epoch=2,
    headers=[[("a", b"1"), ("b", None)]],
)
B3 = build_batch(
    [(b"z", b"gz")] * 3,
    timestamps=[1_010, 1_012, 1_011],
    compression=CompressionType.GZIP,
    partition_leader_epoch=4,
)
BATCHES = [B1, B2, B3]
POSITIONS = [0, len(B1), len(B1) + len(B2)]
LOG_NAME = f"{BASE:020d}.log"


@pytest.fixture
def dump(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Dump:
    """Run `tidelog dump-log ARGS`; return (exit status, stdout lines, stderr)."""
    try:
        importlib.import_module("tidelog.local_cluster")
    except ModuleNotFoundError as exc:
        # cli.build_parser imports every subcommand; `up` may not exist yet in this tree.
        if exc.name != "tidelog.local_cluster":
            raise
        stub = types.ModuleType("tidelog.local_cluster")
        stub.add_arguments = lambda parser: None  # type: ignore[attr-defined]
        stub.run = lambda args: 0  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "tidelog.local_cluster", stub)

    def run(*argv: object) -> tuple[int, list[str], str]:
        status = cli.main(["dump-log", *map(str, argv)])
        out, err = capsys.readouterr()
        return status, out.splitlines(), err

    return run


def segment(batches: list[bytes], base: int = BASE) -> bytes:
    """Batches concatenated as the log stores them: base offsets rewritten in sequence."""
    buf = bytearray()
    next_offset = base
    for batch in batches:
        pos = len(buf)
        buf += batch
        set_base_offset(buf, pos, next_offset)
        next_offset = parse_header(buf, pos).next_offset
    return bytes(buf)


def write(directory: Path, name: str, data: bytes) -> Path:
    path = directory / name
    path.write_bytes(data)
    return path


def batch_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("baseOffset:")]


def test_log_segment(tmp_path: Path, dump: Dump) -> None:
    data = segment(BATCHES)
    path = write(tmp_path, LOG_NAME, data)
    status, lines, err = dump(path)
    assert (status, err) == (0, "")
    first = parse_header(data)
    assert lines[:3] == [
        f"Dumping {path}",
        f"Log starting offset: {BASE}",
        "baseOffset: 100 lastOffset: 101 count: 2 baseSequence: -1 lastSequence: -1 "
        "producerId: -1 producerEpoch: -1 partitionLeaderEpoch: -1 isTransactional: false "
        f"isControl: false position: 0 CreateTime: 1001 size: {len(B1)} magic: 2 "
        f"compresscodec: NONE crc: {first.crc} isvalid: true",
    ]
    assert len(lines) == 5
    assert "baseOffset: 102 lastOffset: 102 count: 1 baseSequence: 3 lastSequence: 3 " in lines[3]
    assert "producerId: 7 producerEpoch: 1 partitionLeaderEpoch: 2 " in lines[3]
    assert f"position: {POSITIONS[2]} CreateTime: 1012 " in lines[4]
    assert "compresscodec: GZIP" in lines[4]


def test_print_data_log(tmp_path: Path, dump: Dump) -> None:
    path = write(tmp_path, LOG_NAME, segment(BATCHES))
    status, lines, _ = dump("--print-data-log", path)
    assert status == 0
    records = [line for line in lines if line.startswith("| ")]
    assert records[:3] == [
        "| offset: 100 position: 0 CreateTime: 1000 isvalid: true keysize: 2 valuesize: 5 "
        "magic: 2 compresscodec: NONE producerId: -1 producerEpoch: -1 sequence: -1 "
        "headerKeys: [] key: k1 payload: hello",
        "| offset: 101 position: 0 CreateTime: 1001 isvalid: true keysize: -1 valuesize: 5 "
        "magic: 2 compresscodec: NONE producerId: -1 producerEpoch: -1 sequence: -1 "
        "headerKeys: [] key: null payload: world",
        f"| offset: 102 position: {POSITIONS[1]} CreateTime: 1005 isvalid: true keysize: 3 "
        "valuesize: 4 magic: 2 compresscodec: NONE producerId: 7 producerEpoch: 1 "
        "sequence: 3 headerKeys: [a,b] key: key payload: \ufffdbad",
    ]
    assert [line.split(" CreateTime: ")[1].split()[0] for line in records[3:]] == [
        "1010",
        "1012",
        "1011",
    ]
    assert all("compresscodec: GZIP" in line for line in records[3:])
    assert lines.index(records[0]) == lines.index(batch_lines(lines)[0]) + 1


def test_log_append_time_and_control_batch(tmp_path: Path, dump: Dump) -> None:
    appended = build_batch(
        [(b"k", b"v")], timestamps=[5], timestamp_type=TimestampType.LOG_APPEND_TIME
    )
    commit = build_batch(
        [(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 17))],
        producer_id=9,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
    )
    path = write(tmp_path, LOG_NAME, segment([appended, commit]))
    status, lines, _ = dump(path, "--print-data-log")
    assert status == 0
    assert " LogAppendTime: 5 " in lines[2]
    assert lines[3].startswith("| offset: 100 position: 0 LogAppendTime: 5 ")
    assert "isTransactional: true isControl: true" in lines[4]
    assert lines[5].endswith("headerKeys: [] endTxnMarker: COMMIT coordinatorEpoch: 17")


def test_partial_tail_is_reported(tmp_path: Path, dump: Dump) -> None:
    data = segment(BATCHES)
    path = write(tmp_path, "00000000000000000000.log", data + segment([B1])[:37])
    status, lines, err = dump(path)
    assert status == 1
    assert len(batch_lines(lines)) == 3
    assert lines[-2].startswith(f"Invalid batch: truncated record batch at position {len(data)}")
    assert lines[-1] == "Found 37 invalid bytes at the end of 00000000000000000000.log"


@pytest.mark.parametrize(
    ("tail", "reason"),
    [
        (bytes(200), "all zero"),
        (b"\x00" * 5, "all zero"),
        (b"garbage" * 20, "magic"),
        (B1[:16] + b"\x01" + B1[17:40], "magic 1"),
    ],
    ids=["zeros", "few zeros", "text", "old magic"],
)
def test_garbage_tail_is_reported(tmp_path: Path, dump: Dump, tail: bytes, reason: str) -> None:
    path = write(tmp_path, LOG_NAME, segment(BATCHES) + tail)
    status, lines, _ = dump(path, "--print-data-log")
    assert status == 1
    assert lines[-2].startswith("Invalid batch: ") and reason in lines[-2]
    assert lines[-1] == f"Found {len(tail)} invalid bytes at the end of {LOG_NAME}"


def test_corrupt_crc_stops_the_dump(tmp_path: Path, dump: Dump) -> None:
    data = bytearray(segment(BATCHES))
    data[POSITIONS[1] + 70] ^= 0xFF
    path = write(tmp_path, LOG_NAME, bytes(data))
    status, lines, _ = dump(path)
    assert status == 1
    found = batch_lines(lines)
    assert len(found) == 2 and found[1].endswith("isvalid: false")
    assert "stored CRC" in lines[-2]
    assert lines[-1] == f"Found {len(data) - POSITIONS[1]} invalid bytes at the end of {LOG_NAME}"


def test_corrupt_records_with_valid_crc(tmp_path: Path, dump: Dump) -> None:
    bad = bytearray(build_batch([(b"k", b"v")]))
    bad[61] = 0x7F  # record length varint -64; re-signed, so only the records are wrong
    struct.pack_into(">I", bad, CRC_POS, compute_crc(bad, 0, parse_header(bad)))
    path = write(tmp_path, LOG_NAME, segment([B1, bytes(bad), B3]))
    status, lines, _ = dump(path)
    assert status == 0  # framing and CRC are sound; records are only read with the flag
    status, lines, _ = dump(path, "--print-data-log")
    assert status == 1
    assert lines[-1].startswith(f"Cannot decode the records of the batch at position {len(B1)}")
    assert len(batch_lines(lines)) == 2


def test_max_bytes_stops_quietly(tmp_path: Path, dump: Dump) -> None:
    path = write(tmp_path, LOG_NAME, segment(BATCHES))
    status, lines, _ = dump(path, "--max-bytes", POSITIONS[1] + 10)
    assert status == 0
    assert len(batch_lines(lines)) == 1 and lines[-1].startswith("baseOffset: 100 ")


def test_empty_log(tmp_path: Path, dump: Dump) -> None:
    path = write(tmp_path, LOG_NAME, b"")
    assert dump(path) == (0, [f"Dumping {path}", f"Log starting offset: {BASE}"], "")


def offset_index(*entries: tuple[int, int]) -> bytes:
    return b"".join(struct.pack(">ii", relative, position) for relative, position in entries)


GOOD_INDEX = offset_index((1, 0), (2, POSITIONS[1]), (5, POSITIONS[2]))


def test_offset_index(tmp_path: Path, dump: Dump) -> None:
    path = write(tmp_path, f"{BASE:020d}.index", GOOD_INDEX + bytes(8 * 4))
    status, lines, _ = dump(path)
    assert status == 0
    assert lines == [
        f"Dumping {path}",
        "offset: 101 position: 0",
        f"offset: 102 position: {POSITIONS[1]}",
        f"offset: 105 position: {POSITIONS[2]}",
        f"Ignored 4 zero-filled entries at the end of {path.name} (preallocated)",
    ]


def test_offset_index_partial_entry(tmp_path: Path, dump: Dump) -> None:
    path = write(tmp_path, f"{BASE:020d}.index", GOOD_INDEX + b"\x00\x00\x01")
    status, lines, _ = dump(path)
    assert status == 1
    assert lines[-1].startswith(f"Found 3 invalid bytes at the end of {path.name}")


def test_verify_index_passes(tmp_path: Path, dump: Dump) -> None:
    write(tmp_path, LOG_NAME, segment(BATCHES))
    path = write(tmp_path, f"{BASE:020d}.index", GOOD_INDEX)
    status, lines, _ = dump("--verify-index", path)
    assert status == 0 and len(lines) == 4


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (
            [(1, 0), (3, POSITIONS[1])],
            f"Index offset 103 points to position {POSITIONS[1]}, but the batch there is "
            "baseOffset: 102 lastOffset: 102",
        ),
        ([(1, 0), (2, 5)], "Index offset 102 points to position 5, which is not the start"),
        ([(1, 0), (6, 10_000)], "Index offset 106 points to position 10000, past the end"),
        ([(2, POSITIONS[1]), (1, 0)], "Index offset 101 points to position 0, not above"),
        ([(-1, 0)], "Index offset 99 points to position 0, below the segment's base offset"),
    ],
)
def test_verify_index_catches(
    tmp_path: Path, dump: Dump, entries: list[tuple[int, int]], message: str
) -> None:
    write(tmp_path, LOG_NAME, segment(BATCHES))
    path = write(tmp_path, f"{BASE:020d}.index", offset_index(*entries))
    status, lines, _ = dump(path, "--verify-index")
    assert status == 1
    assert any(line.startswith(message) for line in lines), lines
    status, _, _ = dump(path)
    assert status == 0  # without --verify-index the entries are only printed


def test_verify_index_without_log(tmp_path: Path, dump: Dump) -> None:
    path = write(tmp_path, f"{BASE:020d}.index", GOOD_INDEX)
    status, _, err = dump(path, "--verify-index")
    assert status == 1 and "Cannot verify" in err


def time_index(*entries: tuple[int, int]) -> bytes:
    return b"".join(struct.pack(">qi", timestamp, relative) for timestamp, relative in entries)


def test_time_index(tmp_path: Path, dump: Dump) -> None:
    data = time_index((1_001, 1), (1_012, 4)) + bytes(24)
    path = write(tmp_path, f"{BASE:020d}.timeindex", data)
    status, lines, _ = dump(path, "--verify-index")
    assert status == 0
    assert lines == [
        f"Dumping {path}",
        "timestamp: 1001 offset: 101",
        "timestamp: 1012 offset: 104",
        f"Ignored 2 zero-filled entries at the end of {path.name} (preallocated)",
    ]


def test_time_index_out_of_order(tmp_path: Path, dump: Dump) -> None:
    path = write(tmp_path, f"{BASE:020d}.timeindex", time_index((1_012, 4), (1_001, 5)))
    assert dump(path)[0] == 0
    status, lines, _ = dump(path, "--verify-index")
    assert status == 1
    assert lines[-1].startswith("Time index entry timestamp: 1001 offset: 105 is out of order")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("00000000000000000000.snapshot", "unknown file type"),
        ("missing.log", "Cannot read"),
        ("notanoffset.index", "named after its base offset"),
    ],
)
def test_bad_files(tmp_path: Path, dump: Dump, name: str, message: str) -> None:
    if not name.startswith("missing"):
        write(tmp_path, name, b"")
    good = write(tmp_path, LOG_NAME, segment(BATCHES))
    status, lines, err = dump(tmp_path / name, good)
    assert status == 1
    assert message in err
    assert len(batch_lines(lines)) == 3  # the good file is still dumped
