"""Disk faults on a stopped broker's partition directory, before it restarts.

A crash mid-write leaves a torn tail; a bad disk leaves garbage or a broken index. Kafka's
recovery must cope: CRC-check batches from the recovery point, truncate at the first bad
one, rebuild a bad index. The edits here are deterministic given `seed` and touch only the
active (last) segment of one partition of a broker that is not running.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Final

TAIL_CUT_MAX: Final = 200   # bytes cut from the active segment's end: inside the last batch or two
GARBAGE_BYTES: Final = 512


class DiskFault(enum.Enum):
    TRUNCATE_TAIL = "truncate-tail"
    GARBAGE = "garbage"
    CORRUPT_INDEX = "corrupt-index"


@dataclass(frozen=True, slots=True)
class DiskEdit:
    path: Path
    description: str


def active_segment(partition_dir: Path) -> Path | None:
    logs = sorted(partition_dir.glob("*.log"))
    return logs[-1] if logs else None


def apply(partition_dir: Path, fault: DiskFault, seed: int) -> DiskEdit | None:
    """Edit the partition's active segment (or its index); None when there is nothing to edit."""
    segment = active_segment(partition_dir)
    if segment is None:
        return None
    rng = random.Random(seed)
    size = segment.stat().st_size
    if fault is DiskFault.TRUNCATE_TAIL:
        if size == 0:
            return None
        cut = rng.randint(1, min(TAIL_CUT_MAX, size))
        with segment.open("r+b") as f:
            f.truncate(size - cut)
        return DiskEdit(segment, f"cut the last {cut} of {size} bytes of {segment.name}")
    if fault is DiskFault.GARBAGE:
        with segment.open("ab") as f:
            f.write(rng.randbytes(GARBAGE_BYTES))
        return DiskEdit(segment, f"appended {GARBAGE_BYTES} random bytes to {segment.name} ({size} bytes)")
    index = segment.with_suffix(".index")
    if not index.exists() or index.stat().st_size == 0:
        index.write_bytes(rng.randbytes(64))
        return DiskEdit(index, f"wrote 64 random bytes into the empty {index.name}")
    data = bytearray(index.read_bytes())
    for _ in range(max(1, len(data) // 16)):
        data[rng.randrange(len(data))] = rng.randrange(256)
    index.write_bytes(bytes(data))
    return DiskEdit(index, f"flipped {max(1, len(data) // 16)} bytes of {index.name} ({len(data)} bytes)")
