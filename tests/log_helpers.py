"""Builders shared by the log tests: batches, logs, and reading a log back batch by batch."""

from __future__ import annotations

from pathlib import Path

from broker.log.partition_log import PartitionLog
from common.record_batch import RecordBatchHeader, iter_batches
from common.records import build_batch, decode_records
from common.log_config import LogConfig

NOW = 1_700_000_000_000


def batch(count: int = 1, *, ts: int = NOW, tag: str = "v", **options: object) -> bytes:
    """A producer batch of `count` records with values `tag-i` and timestamps ts, ts+1, ..."""
    records = [(f"k{i}".encode(), f"{tag}-{i}".encode()) for i in range(count)]
    return build_batch(records, timestamps=[ts + i for i in range(count)], **options)


def open_log(directory: Path, config: LogConfig | None = None, **kwargs: object) -> PartitionLog:
    """A PartitionLog in `directory/topic-0` (kwargs go to the constructor)."""
    kwargs.setdefault("now_ms", NOW)
    return PartitionLog(directory / "topic-0", config or LogConfig(), **kwargs)  # type: ignore[arg-type]


def read_all(log: PartitionLog, start: int | None = None,
             max_offset: int | None = None) -> list[tuple[RecordBatchHeader, bytes]]:
    """Every batch from `start` (default: log start) to the end, via repeated reads."""
    offset = log.log_start_offset if start is None else start
    out: list[tuple[RecordBatchHeader, bytes]] = []
    end = log.log_end_offset if max_offset is None else max_offset
    while offset < end:
        data = log.read(offset, 64 * 1024, max_offset=max_offset).read_bytes()
        if not data:
            break
        for pos, header in iter_batches(data, allow_partial_tail=True):
            out.append((header, data[pos : pos + header.size]))
            offset = header.next_offset
    return out


def values(log: PartitionLog, start: int | None = None) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record from `start` to the log end."""
    result = []
    for header, data in read_all(log, start):
        result.extend((r.offset, r.value) for r in decode_records(data, 0, header))
    return result
